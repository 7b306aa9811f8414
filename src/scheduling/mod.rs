//! The scheduler: decides which new NodeClaims to create for a batch of pending pods, and
//! which pods fit on existing nodes, with upstream Karpenter v1's semantics (queue order,
//! existing then planned then new capacity, preference relaxation, topology spread and pod
//! (anti-)affinity, daemonset overhead, NodePool limits, minValues, volume topology). It is
//! pure: [`solve`] maps a [`SchedulingInput`] snapshot to a [`SchedulingResult`].
//!
//! Internally the input is interned and densified once ([`prepare`]), pods with identical
//! constraints share one class, and NodePools that no pod class, node or topology group links
//! form independent parts solved on separate threads; the result is identical to a sequential
//! solve. [`Batch`] exposes those steps so the controller can solve each part on the thread
//! of its NodePool's scheduler; [`PodForms`] and [`NodeForms`] keep what a round prepares of
//! the pending pods and existing nodes for the next round ([`solve_with`]).

mod batch;
mod class;
mod finalize;
mod forms;
mod intern;
mod launched;
mod node_forms;
mod node_labels;
mod pod;
mod pool;
mod prepare;
mod req;
mod reservations;
mod resvec;
mod shortfall;
mod solve;
mod topology;
mod types;
mod volumes;

#[cfg(any(test, feature = "fixtures"))]
pub mod testing;

pub use batch::{Batch, Part, PartOutcome, UNSOLVED_PART};
pub use forms::{PodForm, PodForms};
pub use node_forms::NodeForms;
pub use node_labels::NodeLabels;
pub use pod::resource_requests;
pub use types::*;

/// Input the scheduler cannot work with, naming the object and field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchedulingError {
    #[error("nodepool {node_pool:?}: {field}: {reason}")]
    InvalidNodePool {
        node_pool: String,
        field: String,
        reason: String,
    },
    #[error("node {node:?}: {field}: {reason}")]
    InvalidNode {
        node: String,
        field: String,
        reason: String,
    },
    #[error("daemonset {daemonset:?}: {reason}")]
    InvalidDaemonSet { daemonset: String, reason: String },
}

/// Solves one scheduling batch: [`Batch::prepare`], every part solved (on scoped threads
/// when `input.options.parallel` is on), [`Batch::assemble`].
pub fn solve(input: &SchedulingInput) -> Result<SchedulingResult, SchedulingError> {
    let batch = Batch::prepare(input)?;
    let outcomes = solve_parts(&batch, input.options.parallel);
    Ok(batch.assemble(outcomes))
}

/// [`solve`] for one round of many: the pending pods' and existing nodes' prepared forms come
/// from `pods` and `nodes`, which keep them for the next round ([`Batch::prepare_with`]).
/// The result is exactly [`solve`]'s.
pub fn solve_with(
    input: &SchedulingInput,
    pods: &mut PodForms,
    nodes: &mut NodeForms,
) -> Result<SchedulingResult, SchedulingError> {
    let batch = Batch::prepare_with(input, pods, nodes)?;
    let outcomes = solve_parts(&batch, input.options.parallel);
    Ok(batch.assemble(outcomes))
}

/// Solves every part of `batch`, spreading them over the machine's cores when `parallel`.
fn solve_parts(batch: &Batch, parallel: bool) -> Vec<PartOutcome> {
    let parts = batch.parts();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(parts.len());
    if !parallel || threads <= 1 {
        return parts.iter().map(|p| batch.solve_part(p)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new(Vec::with_capacity(parts.len()));
    // The solving threads allocate for the caller's owner (the controller's, in `kerf simulate`).
    let owner = kerf_heap::current();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                kerf_heap::set_current(owner);
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(part) = parts.get(i) else { break };
                    let outcome = batch.solve_part(part);
                    if let Ok(mut outcomes) = outcomes.lock() {
                        outcomes.push(outcome);
                    }
                }
            });
        }
    });
    outcomes.into_inner().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
