//! Which resource a request is for, read from its path: the key of the rate-limit budget it
//! spends. controller-runtime's client (upstream Karpenter's) builds one REST client per
//! kind, each with a token bucket of its own, so a kind's requests (its lists, writes and
//! subresources such as `status` or `eviction`) share one budget and no other kind's.

/// The budget key of a request path: `group/resource` (`/resource` for the core group), or
/// the empty string for a path that names no resource (`/version`, discovery).
pub fn budget_key(path: &str) -> String {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return String::new(),
    };
    let resource = match rest {
        // A namespaced resource; `namespaces/{name}/status` and `/finalize` are the
        // namespace's own subresources.
        ["namespaces", _, resource, ..] if !matches!(*resource, "status" | "finalize") => *resource,
        [resource, ..] => *resource,
        [] => return String::new(),
    };
    format!("{group}/{resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinds_objects_lists_and_subresources_share_one_key() {
        for path in [
            "/apis/karpenter.sh/v1/nodeclaims",
            "/apis/karpenter.sh/v1/nodeclaims/a",
            "/apis/karpenter.sh/v1/nodeclaims/a/status",
        ] {
            assert_eq!(budget_key(path), "karpenter.sh/nodeclaims", "{path}");
        }
        for path in [
            "/api/v1/pods",
            "/api/v1/namespaces/default/pods",
            "/api/v1/namespaces/default/pods/web-1",
            "/api/v1/namespaces/default/pods/web-1/eviction",
        ] {
            assert_eq!(budget_key(path), "/pods", "{path}");
        }
    }

    #[test]
    fn kinds_with_one_name_in_different_groups_have_different_keys() {
        assert_eq!(budget_key("/api/v1/nodes/n"), "/nodes");
        assert_eq!(
            budget_key("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n"),
            "coordination.k8s.io/leases"
        );
        assert_eq!(
            budget_key("/apis/events.k8s.io/v1/namespaces/default/events"),
            "events.k8s.io/events"
        );
        assert_eq!(budget_key("/api/v1/namespaces/default/events"), "/events");
    }

    #[test]
    fn namespaces_themselves_are_a_kind() {
        assert_eq!(budget_key("/api/v1/namespaces"), "/namespaces");
        assert_eq!(budget_key("/api/v1/namespaces/kube-system"), "/namespaces");
        assert_eq!(
            budget_key("/api/v1/namespaces/gone/finalize"),
            "/namespaces"
        );
        assert_eq!(budget_key("/api/v1/namespaces/gone/status"), "/namespaces");
    }

    #[test]
    fn paths_naming_no_resource_share_the_empty_key() {
        for path in [
            "/version",
            "/api",
            "/apis",
            "/api/v1",
            "/apis/karpenter.sh/v1",
            "/",
        ] {
            assert_eq!(budget_key(path), "", "{path}");
        }
    }
}
