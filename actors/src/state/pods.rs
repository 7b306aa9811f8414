//! Which pods the controller provisions for, as upstream decides it: the kube-scheduler has
//! marked the pod `PodScheduled=False` with reason `Unschedulable`, it is not bound, not
//! nominated to a node by preemption, not finished or terminating, and not a daemonset or
//! mirror pod (those follow nodes rather than asking for them). Also, as upstream's
//! provisioner, the pods of a terminating Node (deleting, or tainted
//! `karpenter.sh/disrupted:NoSchedule`) that will need a place once drained: counting them
//! as pending launches their replacement capacity while the drain runs, instead of after it.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Node;
use kerf::pods::{self, PodLike};
use kerf::taints::{disrupted_taint, taints_match};

/// Whether `pod` is waiting for capacity the controller should provide.
pub fn is_provisionable(pod: &impl PodLike) -> bool {
    pods::is_marked_unschedulable(pod) && !pods::is_bound(pod) && pods::wants_capacity(pod)
}

/// Whether `node` is going away: deleting, or tainted for disruption.
pub fn is_terminating_node(node: &Node) -> bool {
    let taint = disrupted_taint();
    node.metadata.deletion_timestamp.is_some()
        || node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .any(|t| taints_match(t, &taint))
}

/// Whether `pod` runs on one of the `terminating` Nodes and will need a place elsewhere
/// (upstream's reschedulable pods of deleting nodes: not a daemonset or mirror pod, not
/// finished, and not terminating unless it is a StatefulSet's, whose replacement under
/// the same name needs the place as soon as it is gone).
pub fn is_rescheduled(pod: &impl PodLike, terminating: &HashSet<String>) -> bool {
    pod.node_name().is_some_and(|n| terminating.contains(n))
        && (pods::wants_capacity(pod) || pods::is_terminating_stateful(pod))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]}
        });
        merge(&mut base, extra);
        serde_json::from_value(base).expect("valid pod")
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    #[test]
    fn unschedulable_pending_pod_is_provisionable() {
        assert!(is_provisionable(&pod(json!({}))));
    }

    #[test]
    fn pods_the_scheduler_has_not_judged_are_not() {
        let p = pod(json!({"status": {"conditions": []}}));
        assert!(!is_provisionable(&p));
        let p = pod(json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
        ]}}));
        assert!(!is_provisionable(&p));
    }

    #[test]
    fn bound_nominated_terminal_terminating_and_daemon_pods_are_not() {
        let owner = |kind: &str| {
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u"}
            ]}})
        };
        for extra in [
            json!({"spec": {"nodeName": "n"}}),
            json!({"status": {"nominatedNodeName": "n"}}),
            json!({"status": {"phase": "Succeeded"}}),
            json!({"status": {"phase": "Failed"}}),
            json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}),
            owner("DaemonSet"),
            owner("Node"),
        ] {
            assert!(!is_provisionable(&pod(extra.clone())), "{extra}");
        }
        assert!(is_provisionable(&pod(owner("ReplicaSet"))));
    }

    #[test]
    fn pods_of_terminating_nodes_are_rescheduled_unless_they_follow_the_node() {
        let terminating: HashSet<String> = ["old".to_owned()].into();
        let on = |node: &str, extra: serde_json::Value| {
            let mut value = json!({"spec": {"nodeName": node}, "status": {"phase": "Running"}});
            merge(&mut value, extra);
            pod(value)
        };
        assert!(is_rescheduled(&on("old", json!({})), &terminating));
        assert!(!is_rescheduled(&on("new", json!({})), &terminating));
        let daemon = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "o", "uid": "u"}]}});
        assert!(!is_rescheduled(&on("old", daemon), &terminating));
        let leaving = json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}});
        assert!(!is_rescheduled(&on("old", leaving), &terminating));
        let stateful = json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u"}]}});
        assert!(
            is_rescheduled(&on("old", stateful.clone()), &terminating),
            "a terminating StatefulSet pod counts as pending"
        );
        assert!(!is_rescheduled(&on("new", stateful), &terminating));
    }

    #[test]
    fn deleting_and_disrupted_nodes_are_terminating() {
        let node = |extra: serde_json::Value| -> Node {
            let mut value = json!({"metadata": {"name": "n"}});
            merge(&mut value, extra);
            serde_json::from_value(value).expect("valid node")
        };
        assert!(!is_terminating_node(&node(json!({}))));
        assert!(is_terminating_node(&node(
            json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
        )));
        assert!(is_terminating_node(&node(json!({"spec": {"taints": [
            {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}))));
    }
}
