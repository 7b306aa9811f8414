//! Metrics computed from cluster state when `/metrics` is scraped, under upstream's names
//! and labels so its capacity dashboard charts kerf: pod states and latencies, NodePool
//! limits and usage, node allocatable, requests and limits, objects' status conditions, and
//! cluster state's own size and sync. Computing them at scrape time (as a Prometheus
//! collector does) keeps them exact — no writer to fall behind, and a deleted pod, node or
//! NodePool simply has no series in the next scrape. What needs to see objects change
//! (startup and binding durations, condition transitions) is recorded by trackers the
//! PodWatcher feeds ([`StartupTracker`], [`ConditionTracker`]). `DISABLE_CLUSTER_STATE_
//! OBSERVABILITY` turns off all but cluster state's own gauges, as upstream's flag turns off
//! its pod, node, NodePool and status-condition metrics controllers.

pub mod conditions;
mod exposition;
mod nodepools;
mod nodes;
mod offerings;
mod pods;

pub use conditions::ConditionTracker;
pub use exposition::{CHUNK_BYTES, Exposition, Family};
pub use nodepools::machines_by_pool;
pub use pods::StartupTracker;

use crate::metrics::{
    CLUSTER_STATE_NODE_COUNT, CLUSTER_STATE_UNSYNCED_TIME, SCHEDULER_UNFINISHED_WORK,
};
use std::sync::Arc;

use kerf::catalog::InstanceType;

use crate::state::ClusterState;

/// Every family computed from `state` (and the resolved instance types, when the controller
/// launches), in the Prometheus text format; with `observability` off, only cluster state's
/// own and the instance types'.
pub fn render(
    state: &ClusterState,
    instance_types: &[(String, Arc<[InstanceType]>)],
    observability: bool,
) -> String {
    exposition::collect(|out| write(out, state, instance_types, observability))
}

/// [`render`], written into `out`: `/metrics` streams it after the process's own metrics, so
/// the text, which grows with every pod and Node, is never held whole.
pub fn write(
    out: &mut Exposition,
    state: &ClusterState,
    instance_types: &[(String, Arc<[InstanceType]>)],
    observability: bool,
) {
    for family in state_families(state) {
        family.write(out);
    }
    if !instance_types.is_empty() {
        let [cpu, memory, available, price, cost] = offerings::families(state, instance_types);
        for family in [cpu, memory, available, price] {
            family.write(out);
        }
        // The NodePool's cost is upstream's NodePool metrics controller's, which the flag
        // turns off; the instance types are the provider's.
        if observability {
            cost.write(out);
        }
    }
    if !observability {
        return;
    }
    let pods = pods::sorted(state);
    pods::write_state(out, state, &pods);
    pods::write_latencies(out, state, &pods);
    drop(pods);
    for family in nodepools::families(state) {
        family.write(out);
    }
    nodes::write(out, state);
    conditions::write(out, state);
}

/// Cluster state's node count and how long it has been unsynced, and the provisioning solve
/// running now.
fn state_families(state: &ClusterState) -> [Family; 3] {
    let mut solving = Family::new(
        SCHEDULER_UNFINISHED_WORK,
        "How many seconds of work has been done that is in progress and hasn't been observed by scheduling_duration_seconds.",
    );
    if let Some((round, running)) = state.scheduling.solving() {
        solving.push(
            vec![
                ("controller", "provisioner".to_owned()),
                ("scheduling_id", round.to_string()),
            ],
            running.as_secs_f64(),
        );
    }
    let mut count = Family::new(
        CLUSTER_STATE_NODE_COUNT,
        "Current count of nodes in cluster state",
    );
    #[allow(clippy::cast_precision_loss, reason = "node counts are far below 2^52")]
    count.push(Vec::new(), state.nodes.len() as f64);
    let mut unsynced = Family::new(
        CLUSTER_STATE_UNSYNCED_TIME,
        "The time for which cluster state is not synced",
    );
    unsynced.push(Vec::new(), state.unsynced_for().as_secs_f64());
    [count, unsynced, solving]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_observability_only_cluster_states_own_gauges_render() {
        let (state, mut writers) = ClusterState::new();
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-a", "labels": {"karpenter.sh/nodepool": "default"}},
            "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready",
                "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .expect("valid node");
        writers
            .nodes
            .apply(crate::state::ObjectKey::new(None, "node-a"), node);
        let on = render(&state, &[], true);
        let off = render(&state, &[], false);
        for name in [
            "karpenter_nodes_allocatable",
            "karpenter_cluster_utilization_percent",
            "operator_node_status_condition_count",
        ] {
            assert!(
                on.contains(&format!("\n{name}{{")),
                "{name} missing from\n{on}"
            );
            assert!(
                !off.contains(name),
                "{name} rendered without observability:\n{off}"
            );
        }
        assert!(
            off.contains("karpenter_cluster_state_node_count 1\n"),
            "{off}"
        );
        assert!(
            off.contains("karpenter_cluster_state_unsynced_time_seconds "),
            "{off}"
        );
    }
}
