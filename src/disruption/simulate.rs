//! The rescheduling simulation every non-empty disruption rests on: where would the
//! candidates' reschedulable pods (and the pending pods) go if the candidates were gone?
//! One [`crate::scheduling::solve`] over the current state without the candidates, their pods
//! added as pending. Nodes a pod may not be moved to — uninitialized, not Ready, deleting,
//! or still inside their own `consolidateAfter` window — keep their pods (so topology still
//! counts them) but take no new ones: their pod allocatable is zeroed for the solve.
//!
//! The state is edited in place and restored afterwards rather than copied, so a simulation
//! costs one solve plus a copy of the moved pods, not a copy of every pod in the cluster.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;

use super::candidate::{self, Candidate};
use super::pods;
use super::run::State;
use crate::resources::Quantity;
use crate::scheduling::{self, ExistingNode, PlannedNodeClaim, SchedulingError};

/// What the simulation found.
#[derive(Debug)]
pub struct Simulation {
    /// The first moved pod that found no place, with the scheduler's reason.
    pub unplaced: Option<String>,
    /// Existing nodes receiving moved pods: node name and pods (`namespace/name`).
    pub placements: Vec<(String, Vec<String>)>,
    /// New NodeClaims holding at least one moved pod (claims for pending pods alone are the
    /// provisioner's business, not the disruption's).
    pub new_claims: Vec<PlannedNodeClaim>,
    /// The moved pods, unbound.
    pub moved: Vec<Pod>,
}

/// Simulates removing `candidates` from `state`.
pub fn simulate(
    state: &mut State,
    candidates: &[&Candidate],
) -> Result<Simulation, SchedulingError> {
    let names: HashSet<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
    let mut removed: Vec<(usize, ExistingNode)> = Vec::new();
    let mut i = 0;
    while i < state.input.existing_nodes.len() {
        if names.contains(state.input.existing_nodes[i].name.as_str()) {
            let node = state.input.existing_nodes.remove(i);
            removed.push((i + removed.len(), node));
        } else {
            i += 1;
        }
    }
    let moved: Vec<Pod> = removed
        .iter()
        .flat_map(|(_, n)| n.pods.iter())
        .filter(|p| pods::is_reschedulable(p))
        .map(unbound)
        .collect();
    let pending = state.input.pods.len();
    state.input.pods.extend(moved.iter().cloned());
    let closed = close_destinations(state);
    let result = scheduling::solve(&state.input);
    // Restore before looking at the result, whatever it is.
    for (index, allocatable) in closed {
        state.input.existing_nodes[index].allocatable = allocatable;
    }
    state.input.pods.truncate(pending);
    for (index, node) in removed {
        state.input.existing_nodes.insert(index, node);
    }
    let result = result?;
    let moved_keys: HashSet<String> = moved.iter().map(pods::key).collect();
    let key = |p: &scheduling::PodRef| format!("{}/{}", p.namespace, p.name);
    let unplaced = result
        .errors
        .iter()
        .find(|(p, _)| moved_keys.contains(&key(p)))
        .map(|(p, reason)| format!("pod {} would not schedule: {reason}", key(p)));
    let placements = result
        .existing_nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                n.pods
                    .iter()
                    .map(key)
                    .filter(|k| moved_keys.contains(k))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, pods)| !pods.is_empty())
        .collect();
    let new_claims = result
        .new_node_claims
        .into_iter()
        .filter(|c| c.pods.iter().any(|p| moved_keys.contains(&key(p))))
        .collect();
    Ok(Simulation {
        unplaced,
        placements,
        new_claims,
        moved,
    })
}

/// The pod as it would be recreated: no node, no start.
fn unbound(pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
    }
    pod.status = None;
    pod
}

/// Zeroes the pod allocatable of every node pods may not move to; returns what to restore.
fn close_destinations(state: &mut State) -> Vec<(usize, crate::resources::Resources)> {
    let mut closed = Vec::new();
    for index in 0..state.input.existing_nodes.len() {
        if open(state, &state.input.existing_nodes[index]) {
            continue;
        }
        let node = &mut state.input.existing_nodes[index];
        let mut allocatable = node.allocatable.clone();
        allocatable.insert("pods", Quantity::ZERO);
        closed.push((index, std::mem::replace(&mut node.allocatable, allocatable)));
    }
    closed
}

fn open(state: &State, node: &ExistingNode) -> bool {
    if !node.initialized {
        return false;
    }
    let Some(managed) = state.managed_node(&node.name) else {
        return true;
    };
    if !managed.initialized || !managed.ready || managed.deleting {
        return false;
    }
    match state.pool(&managed.node_pool) {
        Some(pool) => {
            // `Never` has no window to wait out.
            pool.pool.disruption().consolidate_after.is_never()
                || candidate::consolidatable(managed, pool.pool, state.options.now).is_ok()
        }
        None => true,
    }
}
