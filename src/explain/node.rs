//! Why a node stays, or how it would go: the disruption decision `kerf plan --disruption`
//! makes (played to its end, with the controller's nominations), the node's drift and the
//! fields of its NodeClaim that differ from its NodePool's template, its expiry, and, for a
//! node being deleted, the drain: the pods left, the PodDisruptionBudgets refusing their
//! eviction, and when `terminationGracePeriod` forces it.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{ExplainError, Live, Reach, fields};
use crate::api::condition::types;
use crate::api::{Conditions, NodeClaim, NodePool, Operator};
use crate::disruption::{CommandReport, Pdb, PdbIndex, is_reschedulable};
use crate::labels;
use crate::pods::PodLike;
use crate::troubleshooting::{self, Entry};

/// The troubleshooting entry of a drain PodDisruptionBudgets hold.
const PDB_ENTRY: &str = "pdb-eviction";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    /// The Node's name, or the NodeClaim's while it has no Node.
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    pub verdict: NodeVerdict,
    /// The NodeClaim's `Drifted` condition when true, with the fields that differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// When `expireAfter` ends its life (never when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,
    /// The NodeClaim's lifecycle conditions that are not True yet (`Launched`,
    /// `Registered`, `Initialized`): what its launch still waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<Waiting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub troubleshooting: Option<Entry>,
    pub controller: Reach,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum NodeVerdict {
    /// The disruption loop would take it: `order` is its command's place (1: the next).
    #[serde(rename_all = "camelCase")]
    Disrupt {
        method: crate::disruption::Method,
        reason: crate::disruption::Reason,
        order: usize,
        command: String,
    },
    /// It stays, for `reason` (the first that holds, as `kerf plan --disruption` says it).
    Blocked { reason: String },
    /// Being deleted: see the drain.
    Deleting,
    /// Not managed by a NodePool (no `karpenter.sh/nodepool` label).
    Unmanaged,
    /// A NodeClaim whose Node has not registered yet.
    InFlight,
}

/// A lifecycle condition not True yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    pub condition: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub reason: String,
    pub message: String,
    /// Fields of the NodeClaim that differ from its NodePool's template now.
    pub fields: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drain {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleting_since: Option<Timestamp>,
    /// `namespace/name` of the pods still to evict.
    pub pods_left: Vec<String>,
    /// Why evictions are refused: the PodDisruptionBudget of each held pod.
    pub blocked_by: Vec<String>,
    /// When `terminationGracePeriod` deletes the remaining pods regardless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_at: Option<Timestamp>,
}

/// Explains node `name`, a Node's or a NodeClaim's name.
pub fn explain_node(live: &Live, name: &str) -> Result<NodeExplanation, ExplainError> {
    let inventory = &live.inventory;
    let claim_by_name = inventory.node_claims.iter().find(|c| c.name() == name);
    let node_name = claim_by_name
        .and_then(|c| c.status.as_ref()?.node_name.clone())
        .unwrap_or_else(|| name.to_owned());
    let node = inventory
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node_name.as_str()));
    let claim = claim_by_name.or_else(|| {
        inventory
            .node_claims
            .iter()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node_name))
    });
    if node.is_none() && claim.is_none() {
        return Err(ExplainError::NotFound {
            kind: "node or NodeClaim",
            name: name.to_owned(),
        });
    }
    let pool_name = node
        .and_then(|n| n.metadata.labels.as_ref()?.get(labels::NODEPOOL).cloned())
        .or_else(|| claim.and_then(|c| c.metadata.labels.as_ref()?.get(labels::NODEPOOL).cloned()));
    let pool = pool_name
        .as_deref()
        .and_then(|p| inventory.node_pools.iter().find(|np| np.name() == p));
    let deleting = node.is_some_and(|n| n.metadata.deletion_timestamp.is_some())
        || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
    let verdict = if node.is_none() {
        NodeVerdict::InFlight
    } else if pool_name.is_none() {
        NodeVerdict::Unmanaged
    } else if deleting {
        NodeVerdict::Deleting
    } else {
        disruption_verdict(live, &node_name)?
    };
    let drift = claim.and_then(|c| drift(c, pool));
    let expires = claim.and_then(|c| {
        let lifetime = c.spec.expire_after.as_std()?;
        let created = c.metadata.creation_timestamp.as_ref()?.0;
        created
            .checked_add(SignedDuration::try_from(lifetime).ok()?)
            .ok()
    });
    let drain = deleting.then(|| drain(live, &node_name, claim.map(|c| &**c)));
    let waiting = claim.map(|c| waiting(c)).unwrap_or_default();
    let troubleshooting = match &verdict {
        NodeVerdict::Blocked { reason } => troubleshooting::entry_for(reason),
        _ => None,
    }
    .or_else(|| {
        waiting
            .iter()
            .find_map(|w| troubleshooting::entry_for(&format!("{}: {}", w.reason, w.message)))
    })
    .or_else(|| {
        drain
            .as_ref()
            .filter(|d| !d.blocked_by.is_empty())
            .and_then(|_| troubleshooting::entry(PDB_ENTRY))
    });
    Ok(NodeExplanation {
        node: if node.is_some() {
            node_name
        } else {
            name.to_owned()
        },
        node_claim: claim.map(|c| c.name().to_owned()),
        node_pool: pool_name,
        verdict,
        drift,
        expires,
        drain,
        waiting,
        troubleshooting,
        controller: live.controller.clone(),
    })
}

/// The lifecycle conditions of `claim` that are not True, in the order a launch passes them.
fn waiting(claim: &NodeClaim) -> Vec<Waiting> {
    if claim.is_condition_true(types::INITIALIZED) {
        return Vec::new();
    }
    [types::LAUNCHED, types::REGISTERED, types::INITIALIZED]
        .into_iter()
        .filter_map(|kind| {
            let condition = claim.conditions().condition(kind);
            if condition.is_some_and(|c| c.is_true()) {
                return None;
            }
            Some(Waiting {
                condition: kind.to_owned(),
                status: condition
                    .map_or_else(|| "Unknown".to_owned(), |c| format!("{:?}", c.status)),
                reason: condition.map(|c| c.reason.clone()).unwrap_or_default(),
                message: condition.map(|c| c.message.clone()).unwrap_or_default(),
            })
        })
        .collect()
}

/// The disruption decision about `node`: its command, else why it stays.
fn disruption_verdict(live: &Live, node: &str) -> Result<NodeVerdict, ExplainError> {
    let report = live.plan()?;
    let Some(disruption) = report.disruption else {
        return Ok(NodeVerdict::Blocked {
            reason: "no disruption decision was made".to_owned(),
        });
    };
    if let Some((i, command)) = disruption
        .commands
        .iter()
        .enumerate()
        .find(|(_, c)| c.nodes.iter().any(|n| n == node))
    {
        return Ok(NodeVerdict::Disrupt {
            method: command.method,
            reason: command.reason,
            order: i + 1,
            command: describe(command),
        });
    }
    let reason = disruption
        .blocked
        .iter()
        .find(|b| b.node == node)
        .map_or_else(
            || "not a disruption candidate".to_owned(),
            |b| b.reason.clone(),
        );
    Ok(NodeVerdict::Blocked { reason })
}

/// `replace a, b with m5.large on-demand us-east-1a (saves $0.1/h)`.
fn describe(command: &CommandReport) -> String {
    let verb = match command.decision {
        crate::disruption::Decision::Delete => "delete",
        crate::disruption::Decision::Replace => "replace",
    };
    let mut text = format!("{verb} {}", command.nodes.join(", "));
    if !command.replacements.is_empty() {
        let with: Vec<String> = command
            .replacements
            .iter()
            .map(|r| {
                format!(
                    "{} {} {} in nodepool {:?}",
                    r.launch.instance_type, r.launch.capacity_type, r.launch.zone, r.node_pool
                )
            })
            .collect();
        text.push_str(&format!(" with {}", with.join(", ")));
    }
    text.push_str(&format!(" (saves ${}/h)", command.hourly_savings));
    text
}

/// The NodeClaim's drift, with the template fields it no longer matches.
fn drift(claim: &NodeClaim, pool: Option<&NodePool>) -> Option<Drift> {
    let condition = claim
        .conditions()
        .condition(types::DRIFTED)
        .filter(|c| c.is_true())?;
    Some(Drift {
        reason: condition.reason.clone(),
        message: condition.message.clone(),
        fields: pool.map(|p| differing_fields(claim, p)).unwrap_or_default(),
    })
}

/// The fields NodePool drift compares (the template's static fields, its labels, and its
/// requirements against the NodeClaim's labels) that differ between `claim` and `pool`.
fn differing_fields(claim: &NodeClaim, pool: &NodePool) -> Vec<String> {
    let template = &pool.spec.template.spec;
    let mut out = Vec::new();
    if !same(&claim.spec.taints, &template.taints) {
        out.push("spec.taints".to_owned());
    }
    if !same(&claim.spec.startup_taints, &template.startup_taints) {
        out.push("spec.startupTaints".to_owned());
    }
    if claim.spec.node_class_ref != template.node_class_ref {
        out.push("spec.nodeClassRef".to_owned());
    }
    if !same(&claim.spec.expire_after, &template.expire_after) {
        out.push("spec.expireAfter".to_owned());
    }
    if !same(
        &claim.spec.termination_grace_period,
        &template.termination_grace_period,
    ) {
        out.push("spec.terminationGracePeriod".to_owned());
    }
    let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
    for (key, value) in pool.template_labels() {
        if claim_labels.get(key) != Some(value) {
            out.push(format!("metadata.labels[{key}]"));
        }
    }
    for requirement in pool.requirements() {
        let Some(value) = claim_labels.get(&requirement.key) else {
            continue;
        };
        let values = &requirement.values;
        let fails = match requirement.operator {
            Operator::In => !values.contains(value),
            Operator::NotIn => values.contains(value),
            Operator::DoesNotExist => true,
            _ => false,
        };
        if fails {
            out.push(format!("spec.requirements[{}]", requirement.key));
        }
    }
    out
}

/// Equal as the API writes them (their JSON).
fn same<T: Serialize>(a: &T, b: &T) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

/// The drain of `node`, being deleted.
fn drain(live: &Live, node: &str, claim: Option<&NodeClaim>) -> Drain {
    let inventory = &live.inventory;
    let on_node: Vec<_> = inventory
        .pods
        .iter()
        .filter(|p| p.node_name() == Some(node) && is_reschedulable(&***p))
        .collect();
    let pdbs: Vec<Pdb> = inventory
        .disruption_budgets
        .iter()
        .map(|pdb| {
            Pdb::from_api(
                pdb,
                inventory
                    .pods
                    .iter()
                    .map(|p| &**p)
                    .filter(|p| crate::pods::is_bound(*p)),
            )
        })
        .collect();
    let index = PdbIndex::new(&pdbs);
    let mut blocked_by: Vec<String> = on_node.iter().filter_map(|p| index.block(&***p)).collect();
    blocked_by.sort();
    blocked_by.dedup();
    let node_object = inventory
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node));
    let deleting_since = claim
        .and_then(|c| c.metadata.deletion_timestamp.as_ref())
        .or_else(|| node_object.and_then(|n| n.metadata.deletion_timestamp.as_ref()))
        .map(|t| t.0);
    let forced_at = claim
        .and_then(|c| c.spec.termination_grace_period.as_ref())
        .zip(deleting_since)
        .and_then(|(grace, since)| {
            since
                .checked_add(SignedDuration::try_from(grace.as_std()).ok()?)
                .ok()
        });
    Drain {
        deleting_since,
        pods_left: on_node
            .iter()
            .map(|p| crate::cluster::snapshot::pod_key(&***p))
            .collect(),
        blocked_by,
        forced_at,
    }
}

impl NodeExplanation {
    pub fn to_table(&self) -> String {
        let verdict = match &self.verdict {
            NodeVerdict::Disrupt {
                method,
                reason,
                order,
                command,
            } => format!(
                "would be disrupted by {} ({:?}), command #{order} of the pass: {command}",
                serde_json::to_value(method)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                reason
            ),
            NodeVerdict::Blocked { reason } => format!("stays: {reason}"),
            NodeVerdict::Deleting => "being deleted (see DRAIN)".to_owned(),
            NodeVerdict::Unmanaged => "not managed by a NodePool".to_owned(),
            NodeVerdict::InFlight => "in flight: its Node has not registered yet".to_owned(),
        };
        let mut rows = vec![("NODE", self.node.clone())];
        if let Some(claim) = &self.node_claim {
            rows.push(("NODECLAIM", claim.clone()));
        }
        if let Some(pool) = &self.node_pool {
            rows.push(("NODEPOOL", pool.clone()));
        }
        rows.push(("DISRUPTION", verdict));
        rows.push((
            "DRIFT",
            match &self.drift {
                None => "not drifted".to_owned(),
                Some(d) => {
                    let fields = if d.fields.is_empty() {
                        String::new()
                    } else {
                        format!("; differs in {}", d.fields.join(", "))
                    };
                    format!("drifted ({}: {}){fields}", d.reason, d.message)
                }
            },
        ));
        rows.push((
            "EXPIRES",
            self.expires
                .map_or_else(|| "never".to_owned(), |t| t.to_string()),
        ));
        for w in &self.waiting {
            rows.push((
                "WAITING",
                format!("{}={} {}: {}", w.condition, w.status, w.reason, w.message),
            ));
        }
        if let Some(drain) = &self.drain {
            let mut text = format!("{} pods left", drain.pods_left.len());
            if !drain.pods_left.is_empty() {
                text.push_str(&format!(" ({})", drain.pods_left.join(", ")));
            }
            if !drain.blocked_by.is_empty() {
                text.push_str(&format!("; held by: {}", drain.blocked_by.join("; ")));
            }
            match drain.forced_at {
                Some(at) => text.push_str(&format!("; terminationGracePeriod forces it at {at}")),
                None => text.push_str("; no terminationGracePeriod: waits for the evictions"),
            }
            rows.push(("DRAIN", text));
        }
        if let Some(entry) = &self.troubleshooting {
            rows.push(("SEE", format!("{} ({})", entry.link, entry.title)));
        }
        rows.push(("CONTROLLER", self.controller.line()));
        fields(&rows)
    }
}
