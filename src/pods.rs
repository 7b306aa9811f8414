//! Which pods ask Karpenter for capacity, as upstream decides it. Shared by `kerf plan`,
//! which has no kube-scheduler and so takes every unbound pod as unschedulable so far, and
//! the controller, which also waits for the kube-scheduler's `Unschedulable` verdict.

use k8s_openapi::api::core::v1::Pod;

/// Whether an unbound `pod` is one Karpenter provisions for, leaving aside the
/// kube-scheduler's verdict: not a daemonset or mirror pod (those follow nodes rather than
/// ask for them), not finished or terminating, not nominated to a node by preemption.
pub fn wants_capacity(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    !is_owned_by(pod, "DaemonSet")
        && !is_owned_by(pod, "Node")
        && !matches!(phase, Some("Succeeded" | "Failed"))
        && pod.metadata.deletion_timestamp.is_none()
        && !nominated
}

/// Whether `pod` is a StatefulSet pod being deleted. Upstream counts such a pod on a
/// disrupted or terminating node as needing a place: its controller recreates it under the
/// same name only once it is gone, so capacity for it must not wait for the drain.
pub fn is_terminating_stateful(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && is_owned_by(pod, "StatefulSet")
}

/// Whether one of `pod`'s owner references is of `kind` (`DaemonSet`; `Node` for mirror pods).
pub fn is_owned_by(pod: &Pod, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind)
}

/// Whether the kube-scheduler has marked `pod` `PodScheduled=False`, reason `Unschedulable`.
pub fn is_marked_unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
}

/// `pod` bound to `node`, as a simulated placement records it.
pub fn bound_to(mut pod: Pod, node: &str) -> Pod {
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    pod
}

/// Whether `pod` has a node (`spec.nodeName` set).
pub fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}
