//! What `kerf plan --disruption` prints under `"disruption"` — a fixed contract for tools —
//! and its table for people: the commands in the order the loop issues them, every managed
//! node that stays with the reason, the budgets before the first command, and the fleet
//! before and after.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::api::DisruptionReason;
use crate::report::{Launch, RequirementReport, round_price, table};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    #[serde(rename = "emptiness")]
    Emptiness,
    #[serde(rename = "drift")]
    Drift,
    #[serde(rename = "expiration")]
    Expiration,
    #[serde(rename = "multi-node-consolidation")]
    MultiNodeConsolidation,
    #[serde(rename = "single-node-consolidation")]
    SingleNodeConsolidation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    Empty,
    Drifted,
    Expired,
    Underutilized,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Delete,
    Replace,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionReport {
    pub commands: Vec<CommandReport>,
    pub blocked: Vec<BlockedNode>,
    pub budgets: Vec<BudgetReport>,
    pub summary: DisruptionSummary,
    /// Why the decision ended before a pass found nothing to do: its time limit
    /// ([`super::decide_within`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandReport {
    pub method: Method,
    pub reason: Reason,
    pub decision: Decision,
    pub nodes: Vec<String>,
    pub replacements: Vec<ReplacementReport>,
    /// US dollars per hour: the nodes' prices less the replacements' launch prices.
    pub hourly_savings: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplacementReport {
    pub node_pool: String,
    /// Cheapest first.
    pub instance_types: Vec<String>,
    pub requirements: Vec<RequirementReport>,
    pub launch: Launch,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedNode {
    pub node: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub node_pool: String,
    pub reason: DisruptionReason,
    /// Nodes the reason may disrupt now; 2147483647 when no budget limits it.
    pub allowed: usize,
    /// The pool's nodes disrupting now (deleting or not ready), which the budget counts
    /// against; for the controller's metrics, not the report.
    #[serde(skip)]
    pub disrupting: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionSummary {
    /// Managed nodes before and after every command.
    pub nodes: usize,
    pub nodes_after: usize,
    /// Their summed offering prices, US dollars per hour.
    pub hourly_cost: f64,
    pub hourly_cost_after: f64,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Emptiness => "emptiness",
            Method::Drift => "drift",
            Method::Expiration => "expiration",
            Method::MultiNodeConsolidation => "multi-node-consolidation",
            Method::SingleNodeConsolidation => "single-node-consolidation",
        }
    }
}

impl DisruptionReport {
    /// Commands, blocked nodes and budgets as tables (each only when not empty), then the
    /// summary line.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        if !self.commands.is_empty() {
            let rows = self.commands.iter().enumerate().map(|(i, c)| {
                let replacements = if c.replacements.is_empty() {
                    "-".to_string()
                } else {
                    c.replacements
                        .iter()
                        .map(|r| {
                            format!(
                                "{} {} {}",
                                r.launch.instance_type, r.launch.capacity_type, r.launch.zone
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                vec![
                    (i + 1).to_string(),
                    c.method.as_str().to_string(),
                    format!("{:?}", c.reason),
                    format!("{:?}", c.decision).to_lowercase(),
                    format!("{:.4}", c.hourly_savings),
                    replacements,
                    c.nodes.join(", "),
                ]
            });
            out.push_str(&table(
                &[
                    "#",
                    "METHOD",
                    "REASON",
                    "DECISION",
                    "$/HOUR SAVED",
                    "REPLACEMENTS",
                    "NODES",
                ],
                rows,
            ));
            out.push('\n');
        }
        if !self.blocked.is_empty() {
            let rows = kept_by_reason(&self.blocked)
                .into_iter()
                .map(|(reason, nodes)| vec![reason.to_owned(), nodes.join(", ")]);
            out.push_str(&table(&["KEPT FOR", "NODES"], rows));
            out.push('\n');
        }
        if !self.budgets.is_empty() {
            let rows = self.budgets.iter().map(|b| {
                vec![
                    b.node_pool.clone(),
                    format!("{:?}", b.reason),
                    if b.allowed >= super::budget::UNLIMITED {
                        "unlimited".to_string()
                    } else {
                        b.allowed.to_string()
                    },
                ]
            });
            out.push_str(&table(&["NODEPOOL", "BUDGET REASON", "ALLOWED"], rows));
            out.push('\n');
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "disruption: {} commands; managed nodes {} -> {}; ${:.4}/hour -> ${:.4}/hour",
            self.commands.len(),
            s.nodes,
            s.nodes_after,
            s.hourly_cost,
            s.hourly_cost_after
        );
        if let Some(stopped) = &self.stopped {
            let _ = writeln!(out, "note: the decision {stopped}");
        }
        if !self.commands.is_empty() {
            out.push_str(CONTROLLER_STATE_NOTE);
            out.push('\n');
        }
        out
    }
}

/// What the plan cannot see that the running controller weighs: where it applies, the
/// controller may decide otherwise.
pub const CONTROLLER_STATE_NOTE: &str = "note: decided on the input alone; the running controller also weighs offerings EC2 refused in the last 3 minutes, pods nominated to NodeClaims in flight and a command it is validating (15 s), and may differ where those apply";

/// The kept nodes grouped by their reason, reasons in the order they first appear: a pass
/// that keeps a hundred nodes for one reason prints one row, not a hundred.
fn kept_by_reason(blocked: &[BlockedNode]) -> Vec<(&str, Vec<&str>)> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for b in blocked {
        match groups.iter_mut().find(|(reason, _)| *reason == b.reason) {
            Some((_, nodes)) => nodes.push(&b.node),
            None => groups.push((&b.reason, vec![&b.node])),
        }
    }
    groups
}

pub(super) fn round(price: f64) -> f64 {
    // `round_price` of -0.0 stays -0.0; add 0.0 so it prints as 0.
    round_price(price) + 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(node: &str, reason: &str) -> BlockedNode {
        BlockedNode {
            node: node.to_owned(),
            reason: reason.to_owned(),
        }
    }

    #[test]
    fn kept_nodes_print_one_row_per_reason_in_first_seen_order() {
        let report = DisruptionReport {
            blocked: vec![
                kept("a", "pods would not schedule"),
                kept("b", "pdb default/web allows no disruption"),
                kept("c", "pods would not schedule"),
            ],
            commands: Vec::new(),
            budgets: Vec::new(),
            stopped: None,
            summary: DisruptionSummary {
                nodes: 3,
                nodes_after: 3,
                hourly_cost: 1.0,
                hourly_cost_after: 1.0,
            },
        };
        let table = report.to_table();
        let rows: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("KEPT FOR"))
            .take(3)
            .collect();
        assert_eq!(
            rows,
            [
                "KEPT FOR                              NODES",
                "pods would not schedule               a, c",
                "pdb default/web allows no disruption  b",
            ]
        );
    }
}
