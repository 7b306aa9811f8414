//! `kerf explain`'s core: why a pod is pending, why a node stays, what a NodePool allows,
//! answered on a snapshot of a live cluster by the decisions the controller runs — the
//! scheduler's solve and the disruption pass, through [`crate::plan::plan_live`] — with the
//! state only the running controller holds ([`controller`]: the unavailable-offerings cache,
//! nominations, the last disruption pass) when the command could read it. A pod's verdict per
//! NodePool is the solve of that NodePool alone, so each pool's first refusal is its own;
//! each answer names the `docs/troubleshooting.md` entry whose message it carries. Pure: the
//! command lists the objects and asks the controller.

pub mod controller;
mod node;
mod nodepool;
mod pod;

use crate::cluster::ControllerSettings;
use crate::cluster::inventory::Inventory;
use crate::plan::{PlanError, PlanOptions, PlanReport};

pub use controller::ControllerState;
pub use node::{Drain, NodeExplanation, NodeVerdict, explain_node};
pub use nodepool::{BudgetWindow, NodePoolExplanation, explain_nodepool};
pub use pod::{PodExplanation, PodState, PoolVerdict, Verdict, explain_pod};

/// A snapshot of a live cluster and what its controller said.
#[derive(Debug, Clone)]
pub struct Live {
    pub inventory: Inventory,
    /// The region whose catalog the controller plans with.
    pub region: String,
    pub settings: ControllerSettings,
    /// The moment every answer is given for, and the feature gates disruption decides with.
    pub disruption: crate::disruption::Options,
    /// The controller's `/explain` answer, or why it could not be read.
    pub controller: Reach,
    /// How long the disruption decision may search (`None`: to its end); on a cluster of
    /// thousands of nodes the whole decision takes minutes, so the command bounds it.
    pub disruption_limit: Option<std::time::Duration>,
}

/// Whether the controller's state could be read.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reach {
    /// The address asked.
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ControllerState>,
    /// Why it could not be read (then caches, nominations and the last pass are unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reach {
    /// One line for the tables.
    pub fn line(&self) -> String {
        match (&self.state, &self.error) {
            (Some(state), _) if !state.leader => format!(
                "controller at {}: reached, but this replica does not lead (its caches stay empty)",
                self.address
            ),
            (Some(_), _) => format!("controller at {}: reached (leader)", self.address),
            (None, error) => format!(
                "controller at {}: NOT reached ({}); the unavailable-offerings cache, nominations \
                 and the last disruption pass are unknown",
                self.address,
                error.as_deref().unwrap_or("no answer")
            ),
        }
    }
}

/// Why no explanation could be given.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("{kind} {name:?} not found in the cluster")]
    NotFound { kind: &'static str, name: String },
    #[error(transparent)]
    Plan(#[from] PlanError),
}

impl Live {
    fn plan_controller(&self) -> crate::plan::Controller {
        self.controller
            .state
            .as_ref()
            .map(ControllerState::for_plan)
            .unwrap_or_default()
    }

    fn options(&self, disruption: bool) -> PlanOptions {
        PlanOptions {
            region: self.region.clone(),
            controller: self.settings,
            disruption: disruption.then_some(self.disruption),
            disruption_limit: self.disruption_limit,
            rounds: 1,
            feature_gates: self.disruption.feature_gates,
        }
    }

    /// The plan of `inventory` (the cluster's, or a part of it) as the controller would
    /// make it, with `controller`'s state; with the disruption decision when asked.
    fn plan_of(
        &self,
        inventory: Inventory,
        controller: &crate::plan::Controller,
        disruption: bool,
    ) -> Result<PlanReport, ExplainError> {
        let outcome = crate::plan::plan_live(inventory, &self.options(disruption), controller)?;
        Ok(outcome.report)
    }

    /// The plan of the whole cluster, with the disruption decision.
    fn plan(&self) -> Result<PlanReport, ExplainError> {
        Ok(self.plan_with_warnings()?.0)
    }

    /// [`Live::plan`], and what `kerf plan` would warn about the cluster's objects.
    fn plan_with_warnings(&self) -> Result<(PlanReport, Vec<String>), ExplainError> {
        let outcome = crate::plan::plan_live(
            self.inventory.clone(),
            &self.options(true),
            &self.plan_controller(),
        )?;
        Ok((outcome.report, outcome.warnings))
    }

    fn now(&self) -> k8s_openapi::jiff::Timestamp {
        self.disruption.now
    }
}

/// Key-value lines, the values aligned.
fn fields(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:width$}  {v}\n"))
        .collect()
}

/// `1h2m3s` (Go's duration format, as the API's fields are written), whole seconds.
pub fn go_duration(seconds: i64) -> String {
    let sign = if seconds < 0 { "-" } else { "" };
    let s = seconds.unsigned_abs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{sign}{s}s"),
        (0, _) => format!("{sign}{m}m{s}s"),
        _ => format!("{sign}{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests;
