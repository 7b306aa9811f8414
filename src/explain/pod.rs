//! Why a pod is where it is: bound, nominated to a NodeClaim in flight, or pending — and,
//! pending, each NodePool's verdict from a solve of that NodePool alone with the cluster's
//! other pending pods: the launch it would make, or its first refusal, told apart from a
//! refusal the unavailable-offerings cache alone causes by solving again without the cache.

use serde::{Deserialize, Serialize};

use super::controller::UnavailableOffering;
use super::{ExplainError, Live, Reach, fields};
use crate::cluster::readiness;
use crate::cluster::snapshot::pod_key;
use crate::plan::PlanReport;
use crate::pods::{self, PodLike};
use crate::report::table;
use crate::troubleshooting::{self, Entry};

/// The troubleshooting entry of offerings refused for insufficient capacity.
const ICE_ENTRY: &str = "spot-ice";

/// Cached offerings a table line names (the JSON has them all).
const NAMED_OFFERINGS: usize = 3;

/// Candidate types a verdict names, cheapest first.
const NAMED_TYPES: usize = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    pub state: PodState,
    /// Each NodePool's verdict, in weight order (pending pods only).
    pub node_pools: Vec<PoolVerdict>,
    /// The kube-scheduler's last word: its `PodScheduled=False` condition's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_message: Option<String>,
    /// The `docs/troubleshooting.md` entry whose message a verdict carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub troubleshooting: Option<Entry>,
    pub controller: Reach,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum PodState {
    /// `spec.nodeName` is set.
    Bound { node: String },
    /// Waiting for a node a NodeClaim was launched for (kerf's nomination, or the
    /// controller's record of what it created the NodeClaim for).
    #[serde(rename_all = "camelCase")]
    Nominated {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_claim: Option<String>,
        /// The NodeClaim's Node is not Ready yet.
        in_flight: bool,
    },
    /// Unbound; `plan` is what the controller's next round does with it.
    Pending { plan: String },
    /// Unbound, but no capacity is provisioned for it: `reason`.
    Ignored { reason: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolVerdict {
    pub node_pool: String,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Verdict {
    /// Would launch a NodeClaim for it.
    #[serde(rename_all = "camelCase")]
    Launch {
        instance_type: String,
        zone: String,
        capacity_type: String,
        /// US dollars per hour.
        price: f64,
        /// The NodeClaim's candidate types, cheapest first (the first few).
        instance_types: Vec<String>,
        candidates: usize,
        /// Offerings of its candidates the unavailable-offerings cache keeps it from.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        avoided: Vec<UnavailableOffering>,
    },
    /// Fits on capacity that exists or is in flight: no launch needed.
    Existing { node: String },
    /// Cannot launch for it: the first reason, and its kind.
    #[serde(rename_all = "camelCase")]
    Cannot {
        cause: Cause,
        reason: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unavailable: Vec<UnavailableOffering>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Cause {
    Taint,
    Requirements,
    Limits,
    Resources,
    NodeClassNotReady,
    Unavailable,
    Topology,
    Other,
}

impl Cause {
    /// How directly a refusal for this cause says why the pod waits (0: most): a pool the
    /// pod's taints or requirements rule out says nothing about the pool it meant.
    fn relevance(self) -> u8 {
        match self {
            Self::Taint | Self::Requirements => 2,
            Self::NodeClassNotReady => 1,
            Self::Limits | Self::Resources | Self::Unavailable | Self::Topology | Self::Other => 0,
        }
    }

    fn of(reason: &str) -> Self {
        if reason.contains("did not tolerate") {
            Self::Taint
        } else if reason.contains("limits") {
            Self::Limits
        } else if reason.contains("incompatible requirements") {
            Self::Requirements
        } else if reason.contains("topology") {
            Self::Topology
        } else if reason.contains("no instance type") {
            Self::Resources
        } else {
            Self::Other
        }
    }
}

/// Explains pod `key` (`namespace/name`); `scheduler_message` is the kube-scheduler's.
pub fn explain_pod(
    live: &Live,
    key: &str,
    scheduler_message: Option<String>,
) -> Result<PodExplanation, ExplainError> {
    let pod = live
        .inventory
        .pods
        .iter()
        .find(|p| pod_key(&***p) == key)
        .ok_or_else(|| ExplainError::NotFound {
            kind: "pod",
            name: key.to_owned(),
        })?;
    let mut explanation = PodExplanation {
        pod: key.to_owned(),
        state: PodState::Pending {
            plan: String::new(),
        },
        node_pools: Vec::new(),
        scheduler_message,
        troubleshooting: None,
        controller: live.controller.clone(),
    };
    if let Some(node) = pod.node_name().filter(|n| !n.is_empty()) {
        explanation.state = PodState::Bound {
            node: node.to_owned(),
        };
        return Ok(explanation);
    }
    if !pods::wants_capacity(&**pod) {
        let reason = if pods::is_owned_by(&**pod, "DaemonSet") {
            "a DaemonSet pod: it follows nodes, it does not ask for them"
        } else if pods::is_preempting(&**pod) {
            "the kube-scheduler nominated it to a node it is preempting pods on"
        } else {
            "it is finished or being deleted"
        };
        explanation.state = PodState::Ignored {
            reason: reason.to_owned(),
        };
        return Ok(explanation);
    }
    let whole = live.plan_of(live.inventory.clone(), &live.plan_controller(), false)?;
    explanation.state = match nominated(live, key, pods::kerf_nominated_node(&**pod)) {
        Some(state) => state,
        None => PodState::Pending {
            plan: placement(&whole, key).describe(),
        },
    };
    let mut pools: Vec<&crate::api::NodePool> = live.inventory.node_pools.iter().collect();
    pools.sort_by(|a, b| b.weight().cmp(&a.weight()).then(a.name().cmp(b.name())));
    for pool in pools {
        explanation.node_pools.push(PoolVerdict {
            node_pool: pool.name().to_owned(),
            verdict: pool_verdict(live, pool, key)?,
        });
    }
    // The entry follows the refusal that is the pod's own problem: a pool whose class is
    // not Ready matters less than one that would take the pod but for its constraints, and
    // a pool whose taints or requirements the pod does not match at all matters least.
    let mut refusals: Vec<(u8, String)> = explanation
        .node_pools
        .iter()
        .filter_map(|v| match &v.verdict {
            Verdict::Cannot { cause, reason, .. } => Some((cause.relevance(), reason.clone())),
            _ => None,
        })
        .collect();
    refusals.sort_by_key(|(relevance, _)| *relevance);
    let texts = refusals
        .into_iter()
        .map(|(_, reason)| reason)
        .chain(match &explanation.state {
            PodState::Pending { plan } => Some(plan.clone()),
            _ => None,
        })
        .chain(explanation.scheduler_message.clone());
    // Offerings the cache holds are the more specific cause: other reasons follow from them.
    let cached = explanation.node_pools.iter().any(|v| match &v.verdict {
        Verdict::Launch { avoided, .. } => !avoided.is_empty(),
        Verdict::Cannot { unavailable, .. } => !unavailable.is_empty(),
        Verdict::Existing { .. } => false,
    });
    explanation.troubleshooting = if cached {
        troubleshooting::entry(ICE_ENTRY)
    } else {
        texts
            .into_iter()
            .find_map(|t| troubleshooting::entry_for(&t))
    };
    Ok(explanation)
}

/// The pod's nomination: kerf's on the pod, or the controller's record of the NodeClaim it
/// created for the pod.
fn nominated(live: &Live, key: &str, node: Option<&str>) -> Option<PodState> {
    let by_controller = live
        .controller
        .state
        .as_ref()
        .and_then(|s| s.nomination_of(key))
        .filter(|n| !n.existing_node)
        .map(|n| n.name.clone());
    if node.is_none() && by_controller.is_none() {
        return None;
    }
    let claim = by_controller.or_else(|| {
        live.inventory
            .node_claims
            .iter()
            .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == node)
            .map(|c| c.name().to_owned())
    });
    let node = node.map(str::to_owned).or_else(|| {
        let claim = claim.as_deref()?;
        live.inventory
            .node_claims
            .iter()
            .find(|c| c.name() == claim)
            .and_then(|c| c.status.as_ref()?.node_name.clone())
    });
    let ready = node.as_deref().is_some_and(|name| {
        live.inventory.nodes.iter().any(|n| {
            n.metadata.name.as_deref() == Some(name)
                && n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    });
    Some(PodState::Nominated {
        node,
        node_claim: claim,
        in_flight: !ready,
    })
}

/// Where a plan puts pod `key`.
enum Placement<'a> {
    New(&'a crate::plan::report::PlannedNodeClaim),
    Existing(&'a str),
    Unschedulable(&'a str),
    Missing,
}

impl Placement<'_> {
    fn describe(&self) -> String {
        match self {
            Placement::New(claim) => format!(
                "the next provisioning round launches it a NodeClaim in nodepool {:?} ({} {} {})",
                claim.node_pool,
                claim.launch.instance_type,
                claim.launch.capacity_type,
                claim.launch.zone
            ),
            Placement::Existing(node) => format!(
                "fits on {node} (existing or in flight): the kube-scheduler should bind it there"
            ),
            Placement::Unschedulable(reason) => format!("unschedulable: {reason}"),
            Placement::Missing => "not planned".to_owned(),
        }
    }
}

fn placement<'a>(report: &'a PlanReport, key: &str) -> Placement<'a> {
    if let Some(claim) = report
        .node_claims
        .iter()
        .find(|c| c.pods.iter().any(|p| p == key))
    {
        return Placement::New(claim);
    }
    if let Some(node) = report
        .existing_nodes
        .iter()
        .find(|n| n.pods.iter().any(|p| p == key))
    {
        return Placement::Existing(&node.name);
    }
    report
        .unschedulable
        .iter()
        .find(|u| u.pod == key)
        .map_or(Placement::Missing, |u| Placement::Unschedulable(&u.reason))
}

/// What `pool` alone would do for pod `key`.
fn pool_verdict(
    live: &Live,
    pool: &crate::api::NodePool,
    key: &str,
) -> Result<Verdict, ExplainError> {
    let class_name = &pool.node_class_ref().name;
    let class = live
        .inventory
        .node_classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(class_name.as_str()));
    // kerf's controller resolves its classes: one not resolved yet holds its pool too.
    if let Some(skipped) = readiness::readiness(class_name, class).skip_reason(pool, true) {
        return Ok(Verdict::Cannot {
            cause: Cause::NodeClassNotReady,
            reason: skipped,
            unavailable: Vec::new(),
        });
    }
    let mut alone = live.inventory.clone();
    alone.node_pools.retain(|p| p.name() == pool.name());
    let controller = live.plan_controller();
    let report = live.plan_of(alone.clone(), &controller, false)?;
    let without_cache =
        if controller.unavailable.is_empty() && controller.unavailable_capacity_types.is_empty() {
            None
        } else {
            let mut free = controller.clone();
            free.unavailable.clear();
            free.unavailable_capacity_types.clear();
            Some(live.plan_of(alone, &free, false)?)
        };
    // Cache entries on the types the pool would launch were the cache empty.
    let cached_on = |report: Option<&PlanReport>| -> Vec<UnavailableOffering> {
        let (Some(report), Some(state)) = (report, live.controller.state.as_ref()) else {
            return Vec::new();
        };
        let Placement::New(claim) = placement(report, key) else {
            return Vec::new();
        };
        state
            .unavailable_offerings
            .iter()
            .filter(|o| claim.instance_types.contains(&o.instance_type))
            .cloned()
            .collect()
    };
    Ok(match placement(&report, key) {
        Placement::New(claim) => Verdict::Launch {
            instance_type: claim.launch.instance_type.clone(),
            zone: claim.launch.zone.clone(),
            capacity_type: claim.launch.capacity_type.clone(),
            price: claim.launch.price,
            instance_types: claim
                .instance_types
                .iter()
                .take(NAMED_TYPES)
                .cloned()
                .collect(),
            candidates: claim.instance_types.len(),
            avoided: cached_on(without_cache.as_ref()),
        },
        Placement::Existing(node) => Verdict::Existing {
            node: node.to_owned(),
        },
        Placement::Unschedulable(reason) => {
            let unavailable = cached_on(without_cache.as_ref());
            if unavailable.is_empty() {
                let reason = first_reason(reason);
                Verdict::Cannot {
                    cause: Cause::of(&reason),
                    reason,
                    unavailable,
                }
            } else {
                Verdict::Cannot {
                    cause: Cause::Unavailable,
                    reason: format!(
                        "every offering it would launch is unavailable (insufficient capacity, \
                         in the controller's unavailable-offerings cache): {}",
                        first_reason(reason)
                    ),
                    unavailable,
                }
            }
        }
        Placement::Missing => Verdict::Cannot {
            cause: Cause::Other,
            reason: "the solve did not consider it".to_owned(),
            unavailable: Vec::new(),
        },
    })
}

/// The scheduler's reason for one NodePool without its `incompatible with nodepool "P",
/// daemonset overhead={...}, ` prefix.
fn first_reason(reason: &str) -> String {
    let rest = reason
        .find("daemonset overhead=")
        .and_then(|at| reason[at..].find("}, ").map(|end| &reason[at + end + 3..]))
        .unwrap_or(reason);
    rest.to_owned()
}

impl PodExplanation {
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let state = match &self.state {
            PodState::Bound { node } => format!("bound to node {node}"),
            PodState::Nominated {
                node,
                node_claim,
                in_flight,
            } => format!(
                "nominated to {}{}{}",
                node_claim
                    .as_deref()
                    .map_or(String::new(), |c| format!("NodeClaim {c} ")),
                node.as_deref()
                    .map_or(String::new(), |n| format!("(node {n}) ")),
                if *in_flight {
                    "in flight: its node is not Ready yet"
                } else {
                    "whose node is Ready: the kube-scheduler should bind it"
                }
            ),
            PodState::Pending { plan } => format!("pending: {plan}"),
            PodState::Ignored { reason } => format!("pending, not provisioned for: {reason}"),
        };
        let mut rows = vec![("POD", self.pod.clone()), ("STATE", state)];
        if let Some(message) = &self.scheduler_message {
            rows.push(("SCHEDULER", message.clone()));
        }
        out.push_str(&fields(&rows));
        if !self.node_pools.is_empty() {
            out.push('\n');
            let rows = self
                .node_pools
                .iter()
                .map(|v| vec![v.node_pool.clone(), v.verdict.line()]);
            out.push_str(&table(&["NODEPOOL", "VERDICT"], rows));
        }
        out.push('\n');
        if let Some(entry) = &self.troubleshooting {
            out.push_str(&format!("see: {} ({})\n", entry.link, entry.title));
        }
        out.push_str(&self.controller.line());
        out.push('\n');
        out
    }
}

impl Verdict {
    /// One line for the table.
    pub fn line(&self) -> String {
        match self {
            Verdict::Launch {
                instance_type,
                zone,
                capacity_type,
                price,
                instance_types,
                candidates,
                avoided,
            } => {
                let mut line = format!(
                    "would launch {instance_type} {capacity_type} in {zone} at ${price}/h \
                     ({candidates} candidate types: {}{})",
                    instance_types.join(", "),
                    if *candidates > instance_types.len() {
                        ", …"
                    } else {
                        ""
                    }
                );
                if !avoided.is_empty() {
                    line.push_str(&format!("; avoiding {}", offerings(avoided)));
                }
                line
            }
            Verdict::Existing { node } => format!("fits on {node}: no launch needed"),
            Verdict::Cannot {
                reason,
                unavailable,
                ..
            } => {
                if unavailable.is_empty() {
                    format!("cannot: {reason}")
                } else {
                    format!("cannot: {reason} [{}]", offerings(unavailable))
                }
            }
        }
    }
}

/// `TYPE ZONE CAPACITY unavailable until TIME`, comma-separated, the first few (the JSON
/// has every one).
fn offerings(list: &[UnavailableOffering]) -> String {
    let mut text = list
        .iter()
        .take(NAMED_OFFERINGS)
        .map(|o| {
            format!(
                "{} {} {} unavailable until {}",
                o.instance_type, o.zone, o.capacity_type, o.expires
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > NAMED_OFFERINGS {
        text.push_str(&format!(" and {} more", list.len() - NAMED_OFFERINGS));
    }
    text
}
