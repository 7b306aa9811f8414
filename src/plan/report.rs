//! The plan report: what `kerf plan -o json` prints (a stable contract for tools) and its
//! table rendering for people. One entry per new NodeClaim with its candidate instance
//! types, requirements, requests and launch choice; the existing nodes that absorb pending
//! pods; each unschedulable pod with the scheduler's reason; and a summary.

use crate::pods::LeanPod;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::report::{Launch, RequirementReport, round_price, table};
use crate::scheduling::{self, PodRef, SchedulingResult};

/// Upstream Karpenter sends at most this many instance types to CreateFleet per NodeClaim.
pub const MAX_INSTANCE_TYPES: usize = 600;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    pub node_claims: Vec<PlannedNodeClaim>,
    pub existing_nodes: Vec<ExistingNodePlacement>,
    pub unschedulable: Vec<UnschedulablePod>,
    pub summary: Summary,
    /// What the disruption loop would do (`kerf plan --disruption` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<crate::disruption::DisruptionReport>,
}

/// A NodeClaim the scheduler would create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNodeClaim {
    pub node_pool: String,
    /// Candidate instance types, cheapest first, at most [`MAX_INSTANCE_TYPES`].
    pub instance_types: Vec<String>,
    /// Every constrained key of the NodeClaim.
    pub requirements: Vec<RequirementReport>,
    /// Requests of its pods plus the daemonset overhead, as canonical quantities.
    pub requests: BTreeMap<String, String>,
    /// `namespace/name` of each pod placed on it.
    pub pods: Vec<String>,
    pub launch: Launch,
    /// One of a static NodePool's replicas (`spec.replicas`): created for the pool's size,
    /// with or without pods.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replica: bool,
}

/// An existing node, or an in-flight NodeClaim by name, that receives pending pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingNodePlacement {
    pub name: String,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulablePod {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Pending pods considered.
    pub pods: usize,
    /// Pending pods placed, on new NodeClaims or existing capacity.
    pub scheduled: usize,
    pub node_claims: usize,
    /// Sum of the launch prices, US dollars per hour.
    pub hourly_cost: f64,
    /// Provisioning rounds the plan ran (`--rounds`).
    #[serde(default = "one_round")]
    pub rounds: usize,
}

fn one_round() -> usize {
    1
}

impl Summary {
    /// Derives the summary from the placements so the two can never disagree.
    pub fn of(
        node_claims: &[PlannedNodeClaim],
        existing_nodes: &[ExistingNodePlacement],
        unschedulable: &[UnschedulablePod],
    ) -> Self {
        let on_new: usize = node_claims.iter().map(|claim| claim.pods.len()).sum();
        let on_existing: usize = existing_nodes.iter().map(|node| node.pods.len()).sum();
        // `sum` of no floats is -0.0, which would print as a negative cost.
        let cost = node_claims
            .iter()
            .fold(0.0, |total, claim| total + claim.launch.price);
        Self {
            pods: on_new + on_existing + unschedulable.len(),
            scheduled: on_new + on_existing,
            node_claims: node_claims.len(),
            hourly_cost: round_price(cost),
            rounds: 1,
        }
    }
}

impl PlanReport {
    pub fn new(
        node_claims: Vec<PlannedNodeClaim>,
        existing_nodes: Vec<ExistingNodePlacement>,
        unschedulable: Vec<UnschedulablePod>,
    ) -> Self {
        let summary = Summary::of(&node_claims, &existing_nodes, &unschedulable);
        Self {
            node_claims,
            existing_nodes,
            unschedulable,
            summary,
            disruption: None,
        }
    }

    /// The report of a solve over `pending`. A pending pod the result does not mention is
    /// reported unschedulable rather than silently dropped.
    pub fn from_result(result: &SchedulingResult, pending: &[Arc<LeanPod>]) -> Self {
        let mut unschedulable: Vec<UnschedulablePod> = result
            .errors
            .iter()
            .map(|(pod, reason)| UnschedulablePod {
                pod: pod_name(pod),
                reason: reason.clone(),
            })
            .collect();
        let mut node_claims = Vec::new();
        for claim in &result.new_node_claims {
            match planned_node_claim(claim) {
                Some(planned) => node_claims.push(planned),
                None => unschedulable.extend(claim.pods.iter().map(|pod| UnschedulablePod {
                    pod: pod_name(pod),
                    reason: format!(
                        "no offering of the NodeClaim's instance types is available (nodepool {:?})",
                        claim.node_pool
                    ),
                })),
            }
        }
        let existing_nodes: Vec<ExistingNodePlacement> = result
            .existing_nodes
            .iter()
            .map(|node| ExistingNodePlacement {
                name: node.name.clone(),
                pods: node.pods.iter().map(pod_name).collect(),
            })
            .collect();
        let mut accounted: std::collections::HashSet<String> =
            unschedulable.iter().map(|u| u.pod.clone()).collect();
        accounted.extend(node_claims.iter().flat_map(|c| c.pods.iter().cloned()));
        accounted.extend(existing_nodes.iter().flat_map(|n| n.pods.iter().cloned()));
        for pod in pending.iter().map(crate::cluster::snapshot::pod_key) {
            if !accounted.contains(&pod) {
                unschedulable.push(UnschedulablePod {
                    pod,
                    reason: "the scheduler did not place this pod".into(),
                });
            }
        }
        Self::new(node_claims, existing_nodes, unschedulable)
    }

    /// The report for people: a table of new NodeClaims, one of existing nodes receiving
    /// pods, one of unschedulable pods (each only when not empty), then the summary line.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        if !self.node_claims.is_empty() {
            out.push_str(&node_claim_table(&self.node_claims));
            out.push('\n');
        }
        if !self.existing_nodes.is_empty() {
            let rows = self.existing_nodes.iter().map(|node| {
                vec![
                    node.name.clone(),
                    node.pods.len().to_string(),
                    pod_list(&node.pods),
                ]
            });
            out.push_str(&table(&["EXISTING NODE", "PODS", "POD NAMES"], rows));
            out.push('\n');
        }
        if !self.unschedulable.is_empty() {
            let rows = self
                .unschedulable
                .iter()
                .map(|pod| vec![pod.pod.clone(), pod.reason.clone()]);
            out.push_str(&table(&["UNSCHEDULABLE POD", "REASON"], rows));
            out.push('\n');
        }
        out.push_str(&self.summary_line());
        out.push('\n');
        if let Some(disruption) = &self.disruption {
            out.push('\n');
            out.push_str(&disruption.to_table());
        }
        out
    }

    fn summary_line(&self) -> String {
        let summary = &self.summary;
        let on_existing: usize = self.existing_nodes.iter().map(|node| node.pods.len()).sum();
        let mut line = format!(
            "{} pending pods, {} scheduled ({} on {} new NodeClaims, {} on existing capacity), {} unschedulable",
            summary.pods,
            summary.scheduled,
            summary.scheduled - on_existing,
            summary.node_claims,
            on_existing,
            summary.pods - summary.scheduled,
        );
        let _ = write!(line, "; new capacity ${:.4}/hour", summary.hourly_cost);
        match summary.rounds {
            1 => line.push_str(
                "; one provisioning round (NodePool limits charged at each new NodeClaim's largest instance type, as upstream; --rounds N plans the controller's later rounds)",
            ),
            n => {
                let _ = write!(line, "; {n} provisioning rounds");
            }
        }
        line
    }
}

fn pod_name(pod: &PodRef) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

fn planned_node_claim(claim: &scheduling::PlannedNodeClaim) -> Option<PlannedNodeClaim> {
    let launch = claim.launch.as_ref()?;
    Some(PlannedNodeClaim {
        node_pool: claim.node_pool.clone(),
        instance_types: claim
            .instance_types
            .iter()
            .take(MAX_INSTANCE_TYPES)
            .map(|it| it.name.clone())
            .collect(),
        requirements: claim
            .node_claim_requirements()
            .iter()
            .map(|r| RequirementReport {
                key: r.key.clone(),
                operator: r.operator.as_str().to_string(),
                values: r.values.clone(),
                min_values: r.min_values,
            })
            .collect(),
        requests: claim
            .requests
            .iter()
            .map(|(name, quantity)| (name.to_string(), quantity.to_string()))
            .collect(),
        pods: claim.pods.iter().map(pod_name).collect(),
        launch: Launch {
            instance_type: launch.instance_type.clone(),
            zone: launch.zone.clone(),
            capacity_type: launch.capacity_type.clone(),
            price: launch.price,
        },
        replica: false,
    })
}

fn node_claim_table(claims: &[PlannedNodeClaim]) -> String {
    let rows = claims.iter().map(|claim| {
        let request = |name: &str| {
            claim
                .requests
                .get(name)
                .cloned()
                .unwrap_or_else(|| "-".into())
        };
        vec![
            claim.node_pool.clone(),
            claim.launch.instance_type.clone(),
            claim.launch.zone.clone(),
            claim.launch.capacity_type.clone(),
            format!("{:.4}", claim.launch.price),
            request("cpu"),
            request("memory"),
            claim.pods.len().to_string(),
            claim.instance_types.len().to_string(),
            pod_list(&claim.pods),
        ]
    });
    table(
        &[
            "NODEPOOL",
            "INSTANCE TYPE",
            "ZONE",
            "CAPACITY",
            "$/HOUR",
            "CPU",
            "MEMORY",
            "PODS",
            "TYPES",
            "POD NAMES",
        ],
        rows,
    )
}

/// A few pod names then a count, so a row stays readable with hundreds of pods.
fn pod_list(pods: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut list = pods
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if pods.len() > SHOWN {
        let _ = write!(list, ", +{} more", pods.len() - SHOWN);
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(pods: &[&str], price: f64) -> PlannedNodeClaim {
        PlannedNodeClaim {
            node_pool: "default".into(),
            instance_types: vec!["c7g.large".into(), "m7g.large".into()],
            requirements: vec![RequirementReport {
                key: "topology.kubernetes.io/zone".into(),
                operator: "In".into(),
                values: vec!["us-east-1a".into()],
                min_values: None,
            }],
            requests: BTreeMap::from([
                ("cpu".into(), "1150m".into()),
                ("memory".into(), "1536Mi".into()),
                ("pods".into(), pods.len().to_string()),
            ]),
            pods: pods.iter().map(|p| p.to_string()).collect(),
            launch: Launch {
                instance_type: "c7g.large".into(),
                zone: "us-east-1a".into(),
                capacity_type: "spot".into(),
                price,
            },
            replica: false,
        }
    }

    fn report() -> PlanReport {
        PlanReport::new(
            vec![
                claim(&["default/a-0", "default/a-1"], 0.0289),
                claim(&["default/b-0"], 0.0289),
            ],
            vec![ExistingNodePlacement {
                name: "node-a".into(),
                pods: vec!["default/web-1".into()],
            }],
            vec![UnschedulablePod {
                pod: "default/big-0".into(),
                reason: "too big".into(),
            }],
        )
    }

    #[test]
    fn json_shape_matches_the_contract() {
        let value = serde_json::to_value(report()).expect("serializes");
        let keys: Vec<_> = value.as_object().expect("object").keys().cloned().collect();
        assert_eq!(
            keys,
            ["nodeClaims", "existingNodes", "unschedulable", "summary"]
        );
        let claim = &value["nodeClaims"][0];
        assert_eq!(claim["nodePool"], "default");
        assert_eq!(claim["instanceTypes"][0], "c7g.large");
        assert_eq!(claim["requirements"][0]["operator"], "In");
        assert!(claim["requirements"][0].get("minValues").is_none());
        assert_eq!(claim["requests"]["cpu"], "1150m");
        assert_eq!(claim["launch"]["capacityType"], "spot");
        assert_eq!(value["existingNodes"][0]["name"], "node-a");
        assert_eq!(value["unschedulable"][0]["reason"], "too big");
        assert_eq!(value["summary"]["nodeClaims"], 2);
    }

    #[test]
    fn summary_counts_every_pending_pod_once_and_rounds_cost() {
        let summary = report().summary;
        assert_eq!(summary.pods, 5);
        assert_eq!(summary.scheduled, 4);
        assert_eq!(summary.node_claims, 2);
        assert_eq!(summary.hourly_cost, 0.0578);
        assert_eq!(
            serde_json::to_string(&summary.hourly_cost).expect("number"),
            "0.0578"
        );
    }

    #[test]
    fn table_has_a_row_per_claim_node_and_unschedulable_pod() {
        let table = report().to_table();
        let lines: Vec<_> = table.lines().collect();
        assert!(lines[0].starts_with("NODEPOOL"), "{table}");
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("default ")).count(),
            2,
            "{table}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("node-a") && l.contains("default/web-1")),
            "{table}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("default/big-0") && l.ends_with("too big")),
            "{table}"
        );
        let last = lines.last().expect("summary");
        assert!(last.starts_with("5 pending pods, 4 scheduled"), "{last}");
        assert!(last.contains("$0.0578/hour"), "{last}");
    }

    #[test]
    fn columns_line_up() {
        let table = report().to_table();
        let lines: Vec<_> = table.lines().take(3).collect();
        let column = |line: &str| {
            line.find("c7g.large")
                .or_else(|| line.find("INSTANCE TYPE"))
        };
        assert_eq!(column(lines[0]), column(lines[1]));
        assert_eq!(column(lines[1]), column(lines[2]));
    }

    #[test]
    fn long_pod_lists_are_shortened() {
        let pods: Vec<String> = (0..5).map(|i| format!("default/p-{i}")).collect();
        assert_eq!(
            pod_list(&pods),
            "default/p-0, default/p-1, default/p-2, +2 more"
        );
    }

    #[test]
    fn an_empty_plan_still_has_a_summary() {
        let table = PlanReport::new(vec![], vec![], vec![]).to_table();
        assert_eq!(
            table.trim(),
            "0 pending pods, 0 scheduled (0 on 0 new NodeClaims, 0 on existing capacity), 0 unschedulable; new capacity $0.0000/hour; one provisioning round (NodePool limits charged at each new NodeClaim's largest instance type, as upstream; --rounds N plans the controller's later rounds)"
        );
    }
}
