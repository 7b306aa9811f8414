//! The rescheduling simulation every non-empty disruption rests on: where would the
//! candidates' reschedulable pods (and the pending pods) go if the candidates were gone?
//! One [`crate::scheduling::solve`] over the current state without the candidates, their pods
//! added as pending. Nodes a pod may not be moved to — not Ready or deleting — keep the pods
//! that stay with them (so topology still counts them) but take no new ones: their pod
//! allocatable is zeroed for the solve. Uninitialized nodes (in-flight NodeClaims included) stay open, as
//! upstream's: a moved pod the solve puts on one makes the move fail ("would schedule
//! against uninitialized node"), so disruption waits for that node rather than launching a
//! second one beside it (a replacement still booting after a failover, say).
//!
//! Pods already waiting for a place (pending, or on nodes on their way out) are placed
//! once, first, when the state is built ([`place_waiting`]): they take the room they will
//! take before any candidate's pods look for some, and only those that found none are
//! still pending in each simulation.
//!
//! The state is edited in place and restored afterwards rather than copied, so a simulation
//! costs one solve plus a copy of the moved pods, not a copy of every pod in the cluster; and
//! the solve takes the existing nodes' prepared forms from the simulation before
//! ([`crate::scheduling::NodeForms`]), rebuilding only those of the nodes it changed.

use crate::pods::LeanPod;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::candidate::Candidate;
use super::pods;
use super::state::State;
use crate::api::nodepool::NODES_LIMIT;
use crate::resources::Quantity;
use crate::scheduling::{self, ExistingNode, PlannedNodeClaim, SchedulingError, SchedulingResult};

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
    pub moved: Vec<Arc<LeanPod>>,
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
    let moved: Vec<Arc<LeanPod>> = removed
        .iter()
        .flat_map(|(_, n)| n.pods.iter())
        .filter(pods::is_reschedulable)
        .map(|p| unbound(p))
        .collect();
    let limits = hold_node_limits(state, removed.iter().map(|(_, n)| n));
    let (result, uninitialized) = solve_with(state, &moved);
    restore_node_limits(state, limits);
    for (index, node) in removed {
        state.input.existing_nodes.insert(index, node);
    }
    let result = result?;
    let moved_keys: HashSet<String> = moved.iter().map(pods::key).collect();
    let unplaced = result
        .errors
        .iter()
        .find(|(p, _)| moved_keys.contains(&key(p)))
        .map(|(p, reason)| format!("pod {} would not schedule: {reason}", key(p)));
    let unplaced = unplaced.or_else(|| {
        result
            .existing_nodes
            .iter()
            .filter(|n| uninitialized.contains(n.name.as_str()))
            .find_map(|n| {
                let pod = n.pods.iter().map(key).find(|k| moved_keys.contains(k))?;
                Some(format!(
                    "pod {pod} would schedule against uninitialized node {}",
                    n.name
                ))
            })
    });
    let placements = placements(&result, &moved_keys);
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

/// Lowers the `limits.nodes` of each pool by its nodes among `removed`, and returns what to
/// restore: a candidate still exists until its replacements are up, so the solve may plan
/// replacements only in the room the pool has beside it (no surge past the limit, upstream's
/// hard node limit), not in the room its leaving would make.
fn hold_node_limits<'n>(
    state: &mut State,
    removed: impl Iterator<Item = &'n ExistingNode>,
) -> Vec<(usize, Quantity)> {
    let mut held = Vec::new();
    for node in removed {
        let Some(pool) = node.node_pool.as_deref() else {
            continue;
        };
        let Some(index) = state.input.node_pools.iter().position(|p| p.name == pool) else {
            continue;
        };
        let Some(limits) = state.input.node_pools[index].limits.as_mut() else {
            continue;
        };
        let Some(limit) = limits.get(NODES_LIMIT) else {
            continue;
        };
        if !held.iter().any(|(i, _)| *i == index) {
            held.push((index, limit));
        }
        let lower = Quantity::new(limit.value() - 1, limit.format());
        limits.insert(NODES_LIMIT, lower);
    }
    held
}

fn restore_node_limits(state: &mut State, held: Vec<(usize, Quantity)>) {
    for (index, limit) in held {
        if let Some(limits) = state.input.node_pools[index].limits.as_mut() {
            limits.insert(NODES_LIMIT, limit);
        }
    }
}

/// Places the pods already waiting for a place — pending pods, which in the controller
/// include the pods of nodes being disrupted or drained, and the pods still bound to nodes
/// on their way out (held by a command whose taint the store does not show yet) — where
/// they will go, once, before any candidate is simulated. Upstream adds those pods to every
/// simulation and lets them, unlike a candidate's, land on a node still initializing (the
/// replacement their own command launched, the NodeClaim the Provisioner launched for
/// them); placing them first keeps that room theirs whatever the solver's pod order, so a
/// second drifted node's pods never count on the first one's booting replacement (drift
/// would wait for each replacement in turn, then put two nodes' pods on one), and a node
/// they will fill is not empty. Pods that find no existing node, or a solve that fails,
/// stay pending for every simulation to count.
pub fn place_waiting(state: &mut State) {
    let deleting: HashSet<&str> = state
        .managed
        .iter()
        .filter(|m| m.deleting)
        .map(|m| m.name.as_str())
        .collect();
    let mut waiting = std::mem::take(&mut state.input.pods);
    for node in &mut state.input.existing_nodes {
        if !deleting.contains(node.name.as_str()) {
            continue;
        }
        let (going, staying): (Vec<Arc<LeanPod>>, Vec<Arc<LeanPod>>) =
            std::mem::take(&mut node.pods)
                .into_iter()
                .partition(pods::is_reschedulable);
        node.pods = staying;
        waiting.extend(going.iter().map(|p| unbound(p)));
    }
    if waiting.is_empty() {
        return;
    }
    let (result, _) = solve_with(state, &waiting);
    let keys: HashSet<String> = waiting.iter().map(pods::key).collect();
    let placements = result.map(|r| placements(&r, &keys)).unwrap_or_default();
    let mut placed: HashMap<String, Arc<LeanPod>> = waiting
        .iter()
        .map(|p| (pods::key(p), Arc::clone(p)))
        .collect();
    state.bind(&placements, &mut placed);
    waiting.retain(|p| placed.contains_key(&pods::key(p)));
    state.input.pods = waiting;
}

/// One solve of `state` with `extra` pods added as pending and the nodes pods may not move
/// to closed, and the names of the open nodes still initializing; `state` is as it was
/// when this returns.
fn solve_with(
    state: &mut State,
    extra: &[Arc<LeanPod>],
) -> (Result<SchedulingResult, SchedulingError>, HashSet<String>) {
    let pending = state.input.pods.len();
    state.input.pods.extend(extra.iter().cloned());
    let (closed, uninitialized) = close_destinations(state);
    let forms = &mut state.forms;
    let result = scheduling::solve_with(&state.input, &mut forms.pods, &mut forms.nodes);
    for (index, allocatable) in closed {
        state.input.existing_nodes[index].allocatable = allocatable;
    }
    state.input.pods.truncate(pending);
    (result, uninitialized)
}

fn key(p: &scheduling::PodRef) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// The existing nodes the solve put any of `keys` on, with those pods.
fn placements(result: &SchedulingResult, keys: &HashSet<String>) -> Vec<(String, Vec<String>)> {
    result
        .existing_nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                n.pods
                    .iter()
                    .map(key)
                    .filter(|k| keys.contains(k))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, pods)| !pods.is_empty())
        .collect()
}

/// The pod as it would be recreated: no node, no start.
fn unbound(pod: &LeanPod) -> Arc<LeanPod> {
    let mut pod = pod.unbound();
    // A terminating StatefulSet pod moves as the replacement its controller recreates.
    pod.clear_deletion();
    Arc::new(pod)
}

/// Closed destinations with what to restore, and the names of the uninitialized ones.
type Destinations = (Vec<(usize, crate::resources::Resources)>, HashSet<String>);

/// Zeroes the pod allocatable of every node pods may not move to; returns what to restore
/// and which open nodes are uninitialized.
fn close_destinations(state: &mut State) -> Destinations {
    let mut closed = Vec::new();
    let mut uninitialized = HashSet::new();
    for index in 0..state.input.existing_nodes.len() {
        match destination(state, &state.input.existing_nodes[index]) {
            Destination::Open => continue,
            Destination::Uninitialized => {
                uninitialized.insert(state.input.existing_nodes[index].name.clone());
                continue;
            }
            Destination::Closed => {}
        }
        let node = &mut state.input.existing_nodes[index];
        let mut allocatable = node.allocatable.clone();
        allocatable.insert("pods", Quantity::ZERO);
        closed.push((index, std::mem::replace(&mut node.allocatable, allocatable)));
    }
    (closed, uninitialized)
}

enum Destination {
    Open,
    /// Open to the solve, but a move onto it fails.
    Uninitialized,
    Closed,
}

fn destination(state: &State, node: &ExistingNode) -> Destination {
    let managed = state.managed_node(&node.name);
    if managed.is_some_and(|m| m.deleting) {
        return Destination::Closed;
    }
    if !node.initialized || managed.is_some_and(|m| !m.initialized) {
        return Destination::Uninitialized;
    }
    if managed.is_some_and(|m| !m.ready) {
        return Destination::Closed;
    }
    Destination::Open
}
