//! NodePool disruption budgets: how many of a pool's nodes one reason (`Empty`, `Drifted`,
//! `Underutilized`) may disrupt now. As upstream: the minimum over the budgets that name the
//! reason (or name none) and are active now (no schedule, or the schedule fired within
//! `duration`); percentages of the pool's initialized nodes rounded up; no active budget
//! means unlimited; nodes already deleting or not Ready are subtracted.

use k8s_openapi::jiff::Timestamp;

use super::cron::{CronError, Schedule};
use crate::api::{Budget, BudgetNodes, DisruptionReason, NodePool};

/// The allowance upstream reports when no budget is active (`math.MaxInt32`).
pub const UNLIMITED: usize = i32::MAX as usize;

/// A budget that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("NodePool {pool}: spec.disruption.budgets[{index}].schedule: {error}")]
    Schedule {
        pool: String,
        index: usize,
        error: CronError,
    },
    #[error("NodePool {pool}: spec.disruption.budgets[{index}]: {message}")]
    Invalid {
        pool: String,
        index: usize,
        message: String,
    },
}

/// Disruptions `reason` may start in `pool` now, with `nodes` initialized nodes of which
/// `disrupting` are deleting or not Ready.
pub fn allowed(
    pool: &NodePool,
    reason: DisruptionReason,
    nodes: usize,
    disrupting: usize,
    now: Timestamp,
) -> Result<usize, BudgetError> {
    let mut limit = UNLIMITED;
    for (index, budget) in pool.disruption().budgets.iter().enumerate() {
        if !budget.applies_to(reason) || !is_active(pool, index, budget, now)? {
            continue;
        }
        let value = match budget.parsed_nodes() {
            Some(BudgetNodes::Count(n)) => n as usize,
            Some(BudgetNodes::Percent(p)) => (usize::from(p) * nodes).div_ceil(100),
            None => {
                return Err(BudgetError::Invalid {
                    pool: pool.name().to_string(),
                    index,
                    message: format!("nodes {:?} is not a count or a percentage", budget.nodes),
                });
            }
        };
        limit = limit.min(value);
    }
    Ok(limit.saturating_sub(disrupting))
}

fn is_active(
    pool: &NodePool,
    index: usize,
    budget: &Budget,
    now: Timestamp,
) -> Result<bool, BudgetError> {
    match (&budget.schedule, &budget.duration) {
        (None, None) => Ok(true),
        (Some(text), Some(duration)) => {
            let schedule = Schedule::parse(text).map_err(|error| BudgetError::Schedule {
                pool: pool.name().to_string(),
                index,
                error,
            })?;
            Ok(schedule.fired_within(now, duration.as_std().as_secs() as i64))
        }
        _ => Err(BudgetError::Invalid {
            pool: pool.name().to_string(),
            index,
            message: "schedule and duration must be set together".into(),
        }),
    }
}
