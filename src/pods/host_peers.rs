//! Whether pods may share one node as far as their required pod anti-affinity over the
//! hostname decides it. The controller asks before it keeps holding a pod's nomination to a
//! Node the kube-scheduler has bound other pods to: for such a pod, the pods on the node and
//! its room settle the question, and a refusal reported elsewhere may be stale.

use k8s_openapi::api::core::v1::PodAffinityTerm;

use super::{PodLike, required_affinity_terms, required_anti_affinity_terms, selects};
use crate::labels::HOSTNAME;

/// Whether the pods bound to a node and its free room alone decide if `pod` fits there:
/// it has no required pod affinity, no `DoNotSchedule` topology spread and no host port,
/// and each of its required anti-affinity terms is over the hostname with its namespaces
/// named (not selected). Other pods' fit depends on pods elsewhere (a zone's count, a peer
/// on another node).
pub fn fit_settled_by_host(pod: &impl PodLike) -> bool {
    let Some(spec) = pod.spec() else {
        return true;
    };
    let affinity = spec.affinity.as_ref();
    let hard_spread = super::hard_spread_constraints(spec).next().is_some();
    let host_terms_only = required_anti_affinity_terms(affinity)
        .iter()
        .all(|t| t.topology_key == HOSTNAME && t.namespace_selector.is_none());
    required_affinity_terms(affinity).is_empty()
        && !hard_spread
        && !super::uses_host_port(spec)
        && host_terms_only
}

/// Whether `a` and `b` may not share a node: a required anti-affinity term over the
/// hostname of either selects the other. A term with a namespace selector counts for every
/// namespace (the namespaces' labels are not at hand): it may repel a pod it would not.
pub fn repel_on_host(a: &impl PodLike, b: &impl PodLike) -> bool {
    repels(a, b) || repels(b, a)
}

/// Whether a required anti-affinity term of `owner` over the hostname selects `other`.
fn repels(owner: &impl PodLike, other: &impl PodLike) -> bool {
    let affinity = owner.spec().and_then(|s| s.affinity.as_ref());
    required_anti_affinity_terms(affinity)
        .iter()
        .filter(|term| term.topology_key == HOSTNAME)
        .any(|term| term_selects(term, owner, other))
}

/// Whether `term`, of `owner`, selects `other`: its label selector (none selects nothing)
/// and its namespaces (the owner's own when it names none).
fn term_selects(term: &PodAffinityTerm, owner: &impl PodLike, other: &impl PodLike) -> bool {
    let Some(selector) = &term.label_selector else {
        return false;
    };
    let other_ns = other.meta().namespace.unwrap_or("default");
    let in_namespace = match term.namespaces.as_deref() {
        _ if term.namespace_selector.is_some() => true,
        Some(names) if !names.is_empty() => names.iter().any(|n| n == other_ns),
        _ => owner.meta().namespace.unwrap_or("default") == other_ns,
    };
    in_namespace && selects(selector, other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::pod;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn cache(name: &str) -> crate::scheduling::testing::PodBuilder {
        pod(name)
            .labels(&[("app", "cache")])
            .anti_affinity_to(HOSTNAME, &[("app", "cache")])
    }

    #[test]
    fn a_host_anti_affine_pod_is_settled_by_its_node_and_a_zone_bound_one_is_not() {
        assert!(fit_settled_by_host(&pod("plain").cpu("1").build()));
        assert!(fit_settled_by_host(&cache("cache").build()));
        let zone_anti = pod("z").anti_affinity_to(ZONE, &[("app", "z")]).build();
        assert!(!fit_settled_by_host(&zone_anti), "a zone's pods decide");
        let spread = pod("w").spread(ZONE, 1, "DoNotSchedule", &[("app", "w")]);
        assert!(!fit_settled_by_host(&spread.build()));
        let soft = pod("s").spread(ZONE, 1, "ScheduleAnyway", &[("app", "s")]);
        assert!(
            fit_settled_by_host(&soft.build()),
            "a soft spread refuses nothing"
        );
        let follows = pod("f").affinity_to(HOSTNAME, &[("app", "db")]).build();
        assert!(
            !fit_settled_by_host(&follows),
            "its peer may be bound elsewhere"
        );
    }

    #[test]
    fn pods_repel_on_a_host_when_either_ones_term_selects_the_other() {
        let (a, b) = (cache("a").build(), cache("b").build());
        assert!(repel_on_host(&a, &b));
        let web = pod("web").labels(&[("app", "web")]).build();
        assert!(!repel_on_host(&a, &web), "the term selects caches only");
        let shy = pod("shy")
            .anti_affinity_to(HOSTNAME, &[("app", "web")])
            .build();
        assert!(repel_on_host(&web, &shy), "the other's term counts too");
        let elsewhere = cache("c").namespace("other").build();
        assert!(
            !repel_on_host(&a, &elsewhere),
            "a term selects its own namespace"
        );
        let zone_only = pod("z").anti_affinity_to(ZONE, &[("app", "cache")]).build();
        assert!(
            !repel_on_host(&zone_only, &a),
            "a zone term is no host's to judge"
        );
    }
}
