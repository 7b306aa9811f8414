//! What a NodePool allows now: its disruption budgets per reason (the disruption decision's
//! own count) with each scheduled budget's window — open until when, or when it next opens —
//! its nodes against `spec.limits`, its node class's readiness, and where each of its nodes
//! stands with disruption (a consolidation candidate in a command, or why it stays).

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{ExplainError, Live, Reach, fields};
use crate::api::{DisruptionReason, NodePool};
use crate::cluster::readiness;
use crate::disruption::controller::reason_name;
use crate::disruption::cron::Schedule;
use crate::labels;
use crate::report::table;
use crate::resources::Quantity;

/// How far ahead the next opening of a budget's window is looked for: a monthly schedule's
/// next opening is within it.
const WINDOW_HORIZON_SECS: i64 = 32 * 86_400;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolExplanation {
    pub node_pool: String,
    pub node_class: NodeClassStatus,
    /// Its NodeClaims, and what their capacity adds up to.
    pub nodes: usize,
    pub resources: BTreeMap<String, String>,
    /// `spec.limits`, and what is left of each.
    pub limits: BTreeMap<String, String>,
    pub remaining: BTreeMap<String, String>,
    /// Nodes each reason may disrupt now (2147483647: unlimited).
    pub allowed: Vec<Allowed>,
    pub windows: Vec<BudgetWindow>,
    /// Each of its nodes and its disruption verdict.
    pub disruption: Vec<NodeStanding>,
    /// What `kerf plan` warns about this NodePool or its EC2NodeClass (the running controller
    /// publishes the same as Warning events on the NodePool, e.g. `MaxPodsAboveENILimit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub controller: Reach,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassStatus {
    pub name: String,
    /// `True`, `False` or `Unknown`, as the NodePool's `NodeClassReady` condition.
    pub ready: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Allowed {
    pub reason: DisruptionReason,
    pub nodes: usize,
}

/// A budget with a schedule: whether its window is open, and until or from when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetWindow {
    /// Its place in `spec.disruption.budgets`.
    pub index: usize,
    pub nodes: String,
    /// Empty: every reason.
    pub reasons: Vec<DisruptionReason>,
    pub schedule: String,
    pub duration: String,
    pub open: bool,
    /// Open: when it closes; closed: when it next opens (none within 32 days: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStanding {
    pub node: String,
    /// A candidate in a command the pass would issue.
    pub candidate: bool,
    /// The command's method, or why it stays.
    pub verdict: String,
}

/// Explains NodePool `name`.
pub fn explain_nodepool(live: &Live, name: &str) -> Result<NodePoolExplanation, ExplainError> {
    let inventory = &live.inventory;
    let pool = inventory
        .node_pools
        .iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| ExplainError::NotFound {
            kind: "NodePool",
            name: name.to_owned(),
        })?;
    let class_name = &pool.node_class_ref().name;
    let class = inventory
        .node_classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(class_name.as_str()));
    let readiness = readiness::readiness(class_name, class);
    let claims: Vec<_> = inventory
        .node_claims
        .iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODEPOOL))
                .is_some_and(|p| p == name)
        })
        .collect();
    let mut used: BTreeMap<String, Quantity> = BTreeMap::new();
    for claim in &claims {
        for (resource, quantity) in claim.status.iter().flat_map(|s| s.capacity.iter()) {
            if let Ok(q) = quantity.0.parse::<Quantity>() {
                *used.entry(resource.clone()).or_insert(Quantity::ZERO) += q;
            }
        }
    }
    let mut limits = BTreeMap::new();
    let mut remaining = BTreeMap::new();
    for (resource, limit) in pool.limits().into_iter().flatten() {
        limits.insert(resource.clone(), limit.0.clone());
        if let Ok(limit) = limit.0.parse::<Quantity>() {
            let left = limit.saturating_sub(used.get(resource).copied().unwrap_or(Quantity::ZERO));
            remaining.insert(resource.clone(), left.to_string());
        }
    }
    let (report, warnings) = live.plan_with_warnings()?;
    let warnings = warnings
        .into_iter()
        .filter(|w| names(w, "NodePool", name) || names(w, "EC2NodeClass", class_name))
        .collect();
    let disruption = report
        .disruption
        .unwrap_or_else(|| crate::disruption::DisruptionReport {
            commands: Vec::new(),
            blocked: Vec::new(),
            budgets: Vec::new(),
            stopped: None,
            summary: crate::disruption::DisruptionSummary {
                nodes: 0,
                nodes_after: 0,
                hourly_cost: 0.0,
                hourly_cost_after: 0.0,
            },
        });
    let allowed = disruption
        .budgets
        .iter()
        .filter(|b| b.node_pool == name)
        .map(|b| Allowed {
            reason: b.reason,
            nodes: b.allowed,
        })
        .collect();
    let pool_nodes: Vec<String> = inventory
        .nodes
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODEPOOL))
                .is_some_and(|p| p == name)
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let standing = pool_nodes
        .iter()
        .map(|node| {
            let command = disruption
                .commands
                .iter()
                .enumerate()
                .find(|(_, c)| c.nodes.contains(node));
            match command {
                Some((i, c)) => NodeStanding {
                    node: node.clone(),
                    candidate: true,
                    verdict: format!(
                        "command #{} of the pass: {}",
                        i + 1,
                        serde_json::to_value(c.method)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ),
                },
                None => NodeStanding {
                    node: node.clone(),
                    candidate: false,
                    verdict: disruption
                        .blocked
                        .iter()
                        .find(|b| &b.node == node)
                        .map_or_else(|| "being deleted".to_owned(), |b| b.reason.clone()),
                },
            }
        })
        .collect();
    Ok(NodePoolExplanation {
        node_pool: name.to_owned(),
        node_class: NodeClassStatus {
            name: class_name.clone(),
            ready: format!("{:?}", readiness.status),
            reason: readiness.reason.to_owned(),
            message: readiness.message,
        },
        nodes: claims.len(),
        resources: used.into_iter().map(|(k, v)| (k, v.to_string())).collect(),
        limits,
        remaining,
        allowed,
        windows: windows(pool, live.now()),
        disruption: standing,
        warnings,
        controller: live.controller.clone(),
    })
}

/// Whether `warning` names object `KIND/NAME` (not merely one whose name starts alike): the
/// name ends at a `:`, `,`, `)`, a space or the end.
fn names(warning: &str, kind: &str, name: &str) -> bool {
    let object = format!("{kind}/{name}");
    warning.match_indices(&object).any(|(at, _)| {
        let starts = warning[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || c == '(' || c == ',');
        let ends = warning[at + object.len()..]
            .chars()
            .next()
            .is_none_or(|c| c.is_whitespace() || matches!(c, ':' | ',' | ')'));
        starts && ends
    })
}

/// Each scheduled budget's window at `now`.
fn windows(pool: &NodePool, now: Timestamp) -> Vec<BudgetWindow> {
    let mut out = Vec::new();
    for (index, budget) in pool.disruption().budgets.iter().enumerate() {
        let (Some(text), Some(duration)) = (&budget.schedule, &budget.duration) else {
            continue;
        };
        // An unreadable schedule fails the disruption decision, which says so.
        let Ok(schedule) = Schedule::parse(text) else {
            continue;
        };
        let window = duration.as_std();
        let secs = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
        let last = schedule.last_fire_within(now, secs);
        let until = match last {
            Some(fired) => SignedDuration::try_from(window)
                .ok()
                .and_then(|d| fired.checked_add(d).ok()),
            None => schedule.next_fire_after(now, WINDOW_HORIZON_SECS),
        };
        out.push(BudgetWindow {
            index,
            nodes: budget.nodes.clone(),
            reasons: budget.reasons.clone(),
            schedule: text.clone(),
            duration: super::go_duration(secs),
            open: last.is_some(),
            until,
        });
    }
    out
}

impl NodePoolExplanation {
    pub fn to_table(&self) -> String {
        let class = if self.node_class.ready == "True" {
            format!("{}: Ready", self.node_class.name)
        } else {
            format!(
                "{}: NodeClassReady={}, {}: {}",
                self.node_class.name,
                self.node_class.ready,
                self.node_class.reason,
                self.node_class.message
            )
        };
        let resources = |map: &BTreeMap<String, String>| {
            map.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let limits = if self.limits.is_empty() {
            "none".to_owned()
        } else {
            format!(
                "{} (left: {})",
                resources(&self.limits),
                resources(&self.remaining)
            )
        };
        let allowed = self
            .allowed
            .iter()
            .map(|a| {
                let n = if a.nodes >= crate::disruption::UNLIMITED {
                    "unlimited".to_owned()
                } else {
                    a.nodes.to_string()
                };
                format!("{}={n}", reason_name(a.reason))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let mut rows = vec![
            ("NODEPOOL", self.node_pool.clone()),
            ("NODECLASS", class),
            (
                "NODES",
                format!("{} using {}", self.nodes, resources(&self.resources)),
            ),
            ("LIMITS", limits),
            ("ALLOWED NOW", allowed),
        ];
        for w in &self.windows {
            let reasons = if w.reasons.is_empty() {
                "all reasons".to_owned()
            } else {
                w.reasons
                    .iter()
                    .map(|r| reason_name(*r))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let when = match (w.open, w.until) {
                (true, Some(t)) => format!("open until {t}"),
                (true, None) => "open".to_owned(),
                (false, Some(t)) => format!("closed, opens at {t}"),
                (false, None) => "closed, does not open within 32 days".to_owned(),
            };
            rows.push((
                "BUDGET WINDOW",
                format!(
                    "#{} nodes={} ({reasons}) schedule {:?} for {}: {when}",
                    w.index, w.nodes, w.schedule, w.duration
                ),
            ));
        }
        for warning in &self.warnings {
            rows.push(("WARNING", warning.clone()));
        }
        rows.push(("CONTROLLER", self.controller.line()));
        let mut out = fields(&rows);
        if !self.disruption.is_empty() {
            out.push('\n');
            let rows = self.disruption.iter().map(|s| {
                vec![
                    s.node.clone(),
                    if s.candidate { "yes" } else { "no" }.to_owned(),
                    s.verdict.clone(),
                ]
            });
            out.push_str(&table(&["NODE", "CANDIDATE", "VERDICT"], rows));
        }
        out
    }
}
