//! Disruption decisions: which Karpenter-managed nodes to remove or replace, and with what —
//! expiration, emptiness, drift, multi-node and single-node consolidation (spot-to-spot
//! included), within NodePool disruption budgets, never past a `karpenter.sh/do-not-disrupt`
//! pod or a PodDisruptionBudget that allows nothing (unless eventual disruption may). Upstream
//! Karpenter v1's controller is the spec; this module is its decision half only, pure and
//! synchronous like [`crate::scheduling`], whose solver it reuses for every rescheduling
//! simulation. The controller acts on the commands; `kerf plan --disruption` prints them.
//!
//! [`decide`] plays the disruption loop to its end on a copy of the cluster: commands in the
//! order the loop would issue them, each assumed complete before the next pass (see `run`).

mod blockers;
mod budget;
mod candidate;
mod cluster;
mod consolidation;
pub mod controller;
pub mod cron;
mod methods;
mod pods;
pub mod report;
mod run;
mod simulate;
mod state;

#[cfg(any(test, feature = "fixtures"))]
pub mod testing;

use std::time::{Duration, Instant};

pub use budget::{BudgetError, UNLIMITED};
pub use candidate::{NOMINATED, NOT_INITIALIZED};
pub use cluster::{Cluster, ManagedNode, Options};
pub use consolidation::MIN_SPOT_TO_SPOT_TYPES;
pub use methods::MAX_MULTI_NODE_CANDIDATES;
pub use pods::{Pdb, PdbIndex, blocks_disruption, eviction_cost, is_reschedulable};
pub use report::{
    BlockedNode, BudgetReport, CommandReport, Decision, DisruptionReport, DisruptionSummary,
    Method, Reason, ReplacementReport,
};
pub use state::{Deadline, Forms, Timeouts};

use candidate::Blocks;
use report::round;
use state::State;

/// Input the decision cannot work with.
#[derive(Debug, thiserror::Error)]
pub enum DisruptionError {
    #[error(transparent)]
    Budget(#[from] BudgetError),
    #[error("NodePool {pool}: spec.template.spec.requirements: {error}")]
    Requirements { pool: String, error: String },
}

/// The command `method` alone would issue first on `cluster` as given — one decision of one
/// method, as the benchmark times it and a controller running methods apart would ask.
pub fn first_command(
    cluster: &Cluster,
    options: Options,
    method: Method,
) -> Result<Option<CommandReport>, DisruptionError> {
    let mut state = State::new(cluster, options)?;
    let command = state.first_of(&[method], &mut Blocks::default())?;
    Ok(command.as_ref().map(report_command))
}

/// The first command of a full pass (every method in upstream's order) on `cluster`.
pub fn first_pass(
    cluster: &Cluster,
    options: Options,
) -> Result<Option<CommandReport>, DisruptionError> {
    let mut state = State::new(cluster, options)?;
    let command = state.next_command(&mut Blocks::default())?;
    Ok(command.as_ref().map(report_command))
}

fn report_command(command: &methods::Command) -> CommandReport {
    CommandReport {
        method: command.method,
        reason: command.reason,
        decision: if command.replacements.is_empty() {
            Decision::Delete
        } else {
            Decision::Replace
        },
        nodes: command.nodes.clone(),
        replacements: command
            .replacements
            .iter()
            .map(ReplacementReport::from)
            .collect(),
        hourly_savings: round(command.savings),
    }
}

/// Plays the disruption loop on `cluster` until a pass finds nothing to do.
pub fn decide(cluster: &Cluster, options: Options) -> Result<DisruptionReport, DisruptionError> {
    play(cluster, options, None)
}

/// [`decide`] within `limit`: each pass's search stops when the limit is over (multi-node
/// with the best command found so far, as at its own timeout), no pass starts after it, the
/// commands found stand and the nodes no pass reached say so. A bounded answer where playing
/// every command out takes minutes: `kerf explain` on a cluster of thousands of nodes.
pub fn decide_within(
    cluster: &Cluster,
    options: Options,
    limit: Duration,
) -> Result<DisruptionReport, DisruptionError> {
    play(
        cluster,
        options,
        Some(Limit {
            limit,
            clock: Instant::now,
        }),
    )
}

/// How long a decision may take, and the clock it is measured on (tests move it).
#[derive(Clone, Copy)]
struct Limit {
    limit: Duration,
    clock: fn() -> Instant,
}

fn play(
    cluster: &Cluster,
    options: Options,
    limit: Option<Limit>,
) -> Result<DisruptionReport, DisruptionError> {
    let started = limit.map(|l| (l, (l.clock)()));
    let mut state = State::new(cluster, options)?;
    let budgets = state.budget_report()?;
    let (nodes, hourly_cost) = state.fleet();
    let mut commands = Vec::new();
    // Every command removes at least one node or replaces nodes with cheaper ones, so the
    // loop ends; the bound only guards against a mistake turning that into a hang.
    let max_commands = 2 * cluster.nodes.len() + 10;
    let mut blocks = Blocks::default();
    // The limit the decision stopped at, if it did: only a limit makes a search time out.
    let stopped_at = loop {
        if let Some((l, started)) = started {
            let left = l.limit.saturating_sub((l.clock)().duration_since(started));
            if left.is_zero() {
                break Some(l.limit);
            }
            state.timeouts = Timeouts::within(left, l.clock);
        }
        blocks = Blocks::default();
        let Some(command) = state.next_command(&mut blocks)? else {
            break limit
                .filter(|_| !state.timed_out.is_empty())
                .map(|l| l.limit);
        };
        state.apply(&command);
        commands.push(report_command(&command));
        if commands.len() >= max_commands {
            break None;
        }
    };
    let unreached = match stopped_at {
        Some(limit) => format!(
            "not reached: the decision stopped at its {} s limit",
            limit.as_secs_f64()
        ),
        None => "no disruption method applies to it".to_owned(),
    };
    let blocked = state
        .managed
        .iter()
        .filter(|m| !m.deleting)
        .map(|m| BlockedNode {
            node: m.name.clone(),
            reason: blocks
                .0
                .get(&m.name)
                .cloned()
                .unwrap_or_else(|| unreached.clone()),
        })
        .collect();
    let (nodes_after, hourly_cost_after) = state.fleet();
    Ok(DisruptionReport {
        stopped: stopped_at.map(|limit| {
            format!(
                "stopped at its {} s limit after {} command(s); the nodes it did not reach say so",
                limit.as_secs_f64(),
                commands.len()
            )
        }),
        commands,
        blocked,
        budgets,
        summary: DisruptionSummary {
            nodes,
            nodes_after,
            hourly_cost: round(hourly_cost),
            hourly_cost_after: round(hourly_cost_after),
        },
    })
}

#[cfg(test)]
mod tests;
