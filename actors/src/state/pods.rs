//! Which pods the controller provisions for, as upstream decides it: the kube-scheduler has
//! marked the pod `PodScheduled=False` with reason `Unschedulable`, it is not bound, not
//! nominated to a node by preemption, not finished or terminating, and not a daemonset or
//! mirror pod (those follow nodes rather than asking for them).

use k8s_openapi::api::core::v1::Pod;
use kerf::pods;

/// Whether `pod` is waiting for capacity the controller should provide.
pub fn is_provisionable(pod: &Pod) -> bool {
    pods::is_marked_unschedulable(pod) && !pods::is_bound(pod) && pods::wants_capacity(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
