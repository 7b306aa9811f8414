//! Which pods ask Karpenter for capacity, as upstream decides it. Shared by `kerf plan`,
//! which has no kube-scheduler and so takes every unbound pod as unschedulable so far, and
//! the controller, which also waits for the kube-scheduler's `Unschedulable` verdict.

mod host_peers;
mod id;
mod intern;
mod lean;
mod node_affinity;
mod selector;
mod spec;
mod status;

pub use host_peers::{fit_settled_by_host, repel_on_host};
pub use id::{PodId, PodRef};
pub use intern::Interner;
pub use lean::{LeanPod, PodInterner, PodLike, PodMeta, SharedMeta};
pub use node_affinity::admits_node;
pub use selector::selects;
pub use spec::keep_what_placement_reads;
pub use status::{ConditionView, LeanStatus, PodStatusView};

use k8s_openapi::api::core::v1::{
    Affinity, NodeSelectorTerm, PodAffinityTerm, PodSpec, TopologySpreadConstraint,
};

/// The pod condition kerf writes beside `status.nominatedNodeName` when it nominates a pod
/// to the Node of a NodeClaim it launched for it (KEP-5278's "expected placement"). It tells
/// kerf's nomination apart from a preemption's, also after a restart: upstream provisions
/// for no pod with a nominated node, and kerf must not stop provisioning for its own.
pub const NOMINATION_CONDITION: &str = "kerf.dev/Nominated";

/// The reason of [`NOMINATION_CONDITION`].
pub const NOMINATION_REASON: &str = "NodeClaimRegistered";

/// The message of [`NOMINATION_CONDITION`], which names the node (read back by
/// [`kerf_nominated_node`]).
pub fn nomination_message(node: &str, nodeclaim: &str) -> String {
    format!("expected on node {node} of NodeClaim {nodeclaim}")
}

/// The node kerf nominated `pod` to, when the pod's `status.nominatedNodeName` is still
/// kerf's nomination (a preemption since then names another node).
pub fn kerf_nominated_node(pod: &impl PodLike) -> Option<&str> {
    let status = pod.status()?;
    let nominated = status.nominated_node_name?;
    let condition = status
        .condition(NOMINATION_CONDITION)
        .filter(|c| c.status == "True")?;
    let node = condition
        .message?
        .strip_prefix("expected on node ")?
        .split(' ')
        .next()?;
    (node == nominated).then_some(nominated)
}

/// Whether the kube-scheduler nominated `pod` to a node it is preempting pods on.
pub fn is_preempting(pod: &impl PodLike) -> bool {
    let nominated = pod
        .status()
        .and_then(|s| s.nominated_node_name)
        .is_some_and(|n| !n.is_empty());
    nominated && kerf_nominated_node(pod).is_none()
}

/// Whether where `pod` fits depends on other pods: required pod (anti-)affinity or a
/// `DoNotSchedule` topology spread. A refusal of such a pod may last only until its peers
/// bind elsewhere.
pub fn fit_depends_on_other_pods(pod: &impl PodLike) -> bool {
    let Some(spec) = pod.spec() else {
        return false;
    };
    let affinity = spec.affinity.as_ref();
    let required_pod_terms = !required_affinity_terms(affinity).is_empty()
        || !required_anti_affinity_terms(affinity).is_empty();
    required_pod_terms || hard_spread_constraints(spec).next().is_some()
}

/// Whether the kube-scheduler can place `pod` on fewer nodes than any with room and taints
/// it tolerates: a node selector, required node affinity, required pod (anti-)affinity, a
/// `DoNotSchedule` topology spread, a claimed volume (zonal) or a host port. Room planned
/// for such a pod cannot be made up elsewhere once another pod takes it; room planned for
/// an unconstrained pod can be, on any node with room left.
pub fn is_placement_constrained(pod: &impl PodLike) -> bool {
    let Some(spec) = pod.spec() else {
        return false;
    };
    let required_node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .is_some_and(|n| {
            n.required_during_scheduling_ignored_during_execution
                .is_some()
        });
    let claims_volume = spec
        .volumes
        .iter()
        .flatten()
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
    spec.node_selector.as_ref().is_some_and(|s| !s.is_empty())
        || required_node_affinity
        || fit_depends_on_other_pods(pod)
        || claims_volume
        || uses_host_port(spec)
}

/// Whether `pod` takes a node no peer may share: a required pod anti-affinity term over the
/// hostname, or a host port. Room planned for such a pod is the one thing another pod's
/// misplacement costs a whole node for: the pod that took its node leaves it nowhere to go
/// but a new one.
pub fn is_one_per_node(pod: &impl PodLike) -> bool {
    let Some(spec) = pod.spec() else {
        return false;
    };
    let hostname_anti_affinity = required_anti_affinity_terms(spec.affinity.as_ref())
        .iter()
        .any(|t| t.topology_key == crate::labels::HOSTNAME);
    hostname_anti_affinity || uses_host_port(spec)
}

/// The topology spread constraints of `spec` the kube-scheduler filters by
/// (`whenUnsatisfiable: DoNotSchedule`).
pub fn hard_spread_constraints(spec: &PodSpec) -> impl Iterator<Item = &TopologySpreadConstraint> {
    spec.topology_spread_constraints
        .iter()
        .flatten()
        .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
}

/// The required node affinity terms of `affinity` (none without any): alternatives, one
/// of which a node must pass.
pub fn required_node_terms(affinity: Option<&Affinity>) -> &[NodeSelectorTerm] {
    affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default()
}

/// The required pod affinity terms of `affinity` (none without any).
pub fn required_affinity_terms(affinity: Option<&Affinity>) -> &[PodAffinityTerm] {
    affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

/// The required pod anti-affinity terms of `affinity` (none without any).
pub fn required_anti_affinity_terms(affinity: Option<&Affinity>) -> &[PodAffinityTerm] {
    affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

fn uses_host_port(spec: &PodSpec) -> bool {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| p.host_port.is_some())
}

/// Whether an unbound `pod` is one Karpenter provisions for, leaving aside the
/// kube-scheduler's verdict: not a daemonset or mirror pod (those follow nodes rather than
/// ask for them), not finished or terminating, not nominated to a node by preemption.
pub fn wants_capacity(pod: &impl PodLike) -> bool {
    !is_owned_by(pod, "DaemonSet")
        && !is_owned_by(pod, "Node")
        && is_active(pod)
        && !is_preempting(pod)
}

/// Not finished and not being deleted: the pod takes room where it runs.
pub fn is_active(pod: &impl PodLike) -> bool {
    let phase = pod.status().and_then(|s| s.phase);
    pod.meta().deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether `pod` is a StatefulSet pod being deleted. Upstream counts such a pod on a
/// disrupted or terminating node as needing a place: its controller recreates it under the
/// same name only once it is gone, so capacity for it must not wait for the drain.
pub fn is_terminating_stateful(pod: &impl PodLike) -> bool {
    pod.meta().deletion_timestamp.is_some() && is_owned_by(pod, "StatefulSet")
}

/// Whether one of `pod`'s owner references is of `kind` (`DaemonSet`; `Node` for mirror pods).
pub fn is_owned_by(pod: &impl PodLike, kind: &str) -> bool {
    pod.meta().owner_references.iter().any(|o| o.kind == kind)
}

/// Whether the kube-scheduler has marked `pod` `PodScheduled=False`, reason `Unschedulable`.
pub fn is_marked_unschedulable(pod: &impl PodLike) -> bool {
    unschedulable_condition(pod).is_some()
}

/// `pod`'s `PodScheduled=False` condition of reason `Unschedulable`: the kube-scheduler's
/// report that it found no node for the pod.
pub fn unschedulable_condition(pod: &impl PodLike) -> Option<ConditionView<'_>> {
    pod.status()?
        .condition("PodScheduled")
        .filter(|c| c.status == "False" && c.reason == Some("Unschedulable"))
}

/// The field manager the kube-scheduler writes pod statuses under.
pub const SCHEDULER_FIELD_MANAGER: &str = "kube-scheduler";

/// Whether a `managedFields` entry records the kube-scheduler's status writes.
pub fn is_scheduler_status_write(
    entry: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
) -> bool {
    entry.manager.as_deref() == Some(SCHEDULER_FIELD_MANAGER)
        && entry.subresource.as_deref() == Some("status")
}

/// `pod` bound to `node`, as a simulated placement records it: its own parts copied, its
/// spec still shared.
pub fn bound_to(pod: &LeanPod, node: &str) -> std::sync::Arc<LeanPod> {
    std::sync::Arc::new(pod.with_node_name(Some(node)))
}

/// Whether `pod` has a node (`spec.nodeName` set).
pub fn is_bound(pod: &impl PodLike) -> bool {
    pod.node_name().is_some_and(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": status,
        }))
        .expect("valid pod")
    }

    fn nominated_by_kerf(nominated: &str, message_node: &str) -> Pod {
        pod(json!({
            "nominatedNodeName": nominated,
            "conditions": [{
                "type": NOMINATION_CONDITION, "status": "True", "reason": NOMINATION_REASON,
                "message": nomination_message(message_node, "default-abc"),
            }],
        }))
    }

    fn with_spec(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "i"}]);
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("valid pod")
    }

    /// A pod whose container serves port 80 on the host's `port`.
    fn with_host_port(port: i32) -> Pod {
        let mut pod = with_spec(json!({}));
        pod.spec.as_mut().expect("spec").containers[0].ports =
            Some(vec![k8s_openapi::api::core::v1::ContainerPort {
                container_port: 80,
                host_port: Some(port),
                ..Default::default()
            }]);
        pod
    }

    #[test]
    fn a_pod_that_fits_anywhere_with_room_is_not_placement_constrained() {
        let soft = with_spec(json!({
            "tolerations": [{"operator": "Exists"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        }));
        assert!(!is_placement_constrained(&soft));
        assert!(!is_placement_constrained(&with_spec(
            json!({"nodeSelector": {}})
        )));
    }

    #[test]
    fn each_hard_placement_rule_constrains_a_pod() {
        let term = json!([{"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}]);
        let specs = [
            json!({"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}]}}}}),
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}),
            json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}),
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}]}),
            json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}),
        ];
        for spec in specs {
            assert!(is_placement_constrained(&with_spec(spec.clone())), "{spec}");
        }
        assert!(is_placement_constrained(&with_host_port(80)));
    }

    #[test]
    fn only_a_hostname_anti_affinity_or_a_host_port_takes_a_node_of_its_own() {
        let anti = |key: &str| {
            with_spec(
                json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                [{"topologyKey": key, "labelSelector": {"matchLabels": {"app": "cache"}}}]}}}),
            )
        };
        assert!(is_one_per_node(&anti("kubernetes.io/hostname")));
        assert!(!is_one_per_node(&anti("topology.kubernetes.io/zone")));
        let preferred = with_spec(json!({"affinity": {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}}));
        assert!(!is_one_per_node(&preferred));
        assert!(is_one_per_node(&with_host_port(8080)));
        let zonal =
            with_spec(json!({"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}));
        assert!(is_placement_constrained(&zonal) && !is_one_per_node(&zonal));
    }

    #[test]
    fn kerfs_own_nomination_still_wants_capacity_a_preemptions_does_not() {
        let ours = nominated_by_kerf("ip-1", "ip-1");
        assert_eq!(kerf_nominated_node(&ours), Some("ip-1"));
        assert!(wants_capacity(&ours));

        let preempted_since = nominated_by_kerf("ip-2", "ip-1");
        assert_eq!(kerf_nominated_node(&preempted_since), None);
        assert!(!wants_capacity(&preempted_since));

        let preempting = pod(json!({"nominatedNodeName": "ip-2"}));
        assert!(is_preempting(&preempting));
        assert!(!wants_capacity(&preempting));
        assert!(wants_capacity(&pod(json!({}))));
    }
}
