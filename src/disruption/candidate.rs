//! Disruption candidates: the managed nodes a method may act on, with what every method
//! needs to know about them. As upstream, a candidate is initialized, not being deleted,
//! without `karpenter.sh/do-not-disrupt` on its Node, with a known NodePool and instance
//! type. Pods that block graceful disruption (do-not-disrupt, a PDB allowing nothing, a pod
//! under several PDBs) are recorded on the candidate rather than excluding it, because
//! eventual disruption (drift with a `terminationGracePeriod`) may pass them. Candidates are
//! ordered as upstream v1.14 orders consolidation: price per unit of disruption cost,
//! highest first, where the disruption cost is the pods' eviction costs scaled by the
//! lifetime the node has left.

use std::collections::HashMap;

use k8s_openapi::jiff::Timestamp;

use super::cluster::ManagedNode;
use super::pods;
use super::state::{State, offering_price};
use crate::api::ConsolidationPolicy;
use crate::catalog::InstanceType;
use crate::labels;
use crate::requirements::{AllowUndefined, Requirements};
use crate::scheduling::ExistingNode;

/// Why a node not initialized yet is left alone.
pub const NOT_INITIALIZED: &str = "not initialized yet";

/// Why a node a provisioning round just planned pods onto is left alone: upstream's
/// `DisruptionBlocked` message.
pub const NOMINATED: &str = "Node is nominated for a pending pod";

/// Why each node was not disrupted, first reason wins.
#[derive(Debug, Default)]
pub struct Blocks(pub HashMap<String, String>);

impl Blocks {
    pub fn note(&mut self, node: &str, reason: impl FnOnce() -> String) {
        self.0.entry(node.to_string()).or_insert_with(reason);
    }
}

/// A node some method may disrupt.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub name: String,
    pub pool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// Hourly price of its offering (zone and capacity type); `None` when no offering of its
    /// type matches any more.
    pub price: Option<f64>,
    /// Eviction costs of its reschedulable pods (their count is the emptiness test).
    pub reschedulable_costs: Vec<f64>,
    /// Eviction costs of all its pods, scaled by the lifetime left.
    pub disruption_cost: f64,
    /// Why graceful methods may not touch it (do-not-disrupt pod, PDB).
    pub graceful_block: Option<String>,
    /// `Drifted` reason and since when.
    pub drift: Option<(String, Option<Timestamp>)>,
    /// Whether `consolidateAfter` has elapsed since the last pod event, or why not.
    pub consolidatable: Result<(), String>,
    pub termination_grace_period: bool,
}

impl Candidate {
    pub fn is_empty(&self) -> bool {
        self.reschedulable_costs.is_empty()
    }

    pub fn is_spot(&self) -> bool {
        self.capacity_type == labels::CAPACITY_TYPE_SPOT
    }
}

/// The candidates of the current state, in upstream's order; every managed node that is
/// not one gets its reason in `blocks`.
pub fn candidates(state: &State, blocks: &mut Blocks) -> Vec<Candidate> {
    let by_name: HashMap<&str, &ExistingNode> = state
        .input
        .existing_nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    let mut out = Vec::new();
    for managed in state.managed.iter().filter(|m| !m.deleting) {
        let Some(node) = by_name.get(managed.name.as_str()) else {
            continue;
        };
        match candidate(state, managed, node) {
            Ok(c) => out.push(c),
            Err(reason) => blocks.note(&managed.name, || reason),
        }
    }
    sort(&mut out);
    out
}

/// Whether a voluntary method (emptiness, drift, consolidation) may take any node of `state`:
/// every one of them takes only drifted or consolidatable candidates.
pub fn any_voluntary(state: &State) -> bool {
    candidates(state, &mut Blocks::default())
        .iter()
        .any(|c| c.drift.is_some() || c.consolidatable.is_ok())
}

/// Price per unit of disruption cost, highest first; a node that costs nothing to disrupt
/// comes first, ties by name.
pub fn sort(candidates: &mut [Candidate]) {
    let key = |c: &Candidate| {
        let price = c.price.unwrap_or(0.0);
        if c.disruption_cost <= 0.0 {
            f64::INFINITY
        } else {
            price / c.disruption_cost
        }
    };
    candidates.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
}

fn candidate(
    state: &State,
    managed: &ManagedNode,
    node: &ExistingNode,
) -> Result<Candidate, String> {
    if !managed.initialized {
        return Err(NOT_INITIALIZED.into());
    }
    if managed.nominated {
        return Err(NOMINATED.into());
    }
    if managed.do_not_disrupt {
        return Err(format!(
            "Node has the {} annotation",
            labels::DO_NOT_DISRUPT
        ));
    }
    let pool = state
        .pool(&managed.node_pool)
        .ok_or_else(|| format!("NodePool {:?} not found", managed.node_pool))?;
    let type_name = node
        .labels
        .get(labels::INSTANCE_TYPE)
        .cloned()
        .unwrap_or_default();
    let instance_type = pool
        .types
        .get(type_name.as_str())
        .copied()
        .ok_or_else(|| format!("instance type {type_name:?} not found"))?;
    let zone = node.labels.get(labels::ZONE).cloned().unwrap_or_default();
    let capacity_type = node
        .labels
        .get(labels::CAPACITY_TYPE)
        .cloned()
        .unwrap_or_else(|| labels::CAPACITY_TYPE_ON_DEMAND.to_string());
    let now = state.options.now;
    let price = offering_price(instance_type, &zone, &capacity_type);
    let mut graceful_block = None;
    let mut all_costs = 0.0;
    let mut reschedulable_costs = Vec::new();
    for pod in &node.pods {
        if graceful_block.is_none() {
            if pods::blocks_disruption(pod, now) {
                graceful_block = Some(format!(
                    "pod {} has the {} annotation",
                    pods::key(pod),
                    labels::DO_NOT_DISRUPT
                ));
            } else {
                graceful_block = state.pdbs.block(pod);
            }
        }
        let cost = pods::eviction_cost(pod);
        all_costs += cost;
        if pods::is_reschedulable(pod) {
            reschedulable_costs.push(cost);
        }
    }
    let drift = drift(managed, node, instance_type, &zone, &capacity_type, pool);
    Ok(Candidate {
        name: managed.name.clone(),
        pool: managed.node_pool.clone(),
        instance_type: type_name,
        zone,
        capacity_type,
        price,
        reschedulable_costs,
        disruption_cost: all_costs * lifetime_remaining(managed, now),
        graceful_block,
        drift,
        consolidatable: if pool.pool.is_static() {
            Err(static_block(pool.pool.name()))
        } else {
            consolidatable(managed, pool.pool, now)
        },
        termination_grace_period: managed.termination_grace_period.is_some(),
    })
}

/// Share of `expireAfter` still ahead, in [0, 1]; 1 without expiry.
fn lifetime_remaining(managed: &ManagedNode, now: Timestamp) -> f64 {
    match (managed.expire_after, managed.created) {
        (Some(total), Some(created)) if !total.is_zero() => {
            let age = (now.as_second() - created.as_second()) as f64;
            let total = total.as_secs_f64();
            ((total - age) / total).clamp(0.0, 1.0)
        }
        _ => 1.0,
    }
}

/// Whether `consolidateAfter` has elapsed since the node's last pod event.
pub fn consolidatable(
    managed: &ManagedNode,
    pool: &crate::api::NodePool,
    now: Timestamp,
) -> Result<(), String> {
    let disruption = pool.disruption();
    let Some(after) = disruption.consolidate_after.as_std() else {
        return Err(format!(
            "NodePool {} has consolidation disabled (consolidateAfter: Never)",
            pool.name()
        ));
    };
    if let Some(last) = managed.last_pod_event {
        let since = now.as_second() - last.as_second();
        if since < after.as_secs() as i64 {
            return Err(format!(
                "consolidateAfter {} has not elapsed since the last pod event ({}s ago)",
                disruption.consolidate_after.as_str(),
                since.max(0)
            ));
        }
    }
    Ok(())
}

/// Why emptiness and consolidation leave a static pool's node alone.
pub fn static_block(pool: &str) -> String {
    format!("NodePool {pool} is static (spec.replicas): its nodes are never consolidated")
}

/// Whether the pool's policy lets consolidation remove a node that still runs pods.
pub fn consolidates_underutilized(pool: &crate::api::NodePool) -> Result<(), String> {
    match pool.disruption().consolidation_policy {
        ConsolidationPolicy::WhenEmpty => Err(format!(
            "NodePool {} consolidates only empty nodes (consolidationPolicy: WhenEmpty)",
            pool.name()
        )),
        _ => Ok(()),
    }
}

/// Drift as upstream detects it, first match wins: the NodePool's hash changed, the node no
/// longer satisfies the NodePool's requirements, its instance type is no longer offered
/// where it runs, or the provider reported drift on the NodeClaim's `Drifted` condition.
fn drift(
    managed: &ManagedNode,
    node: &ExistingNode,
    instance_type: &InstanceType,
    zone: &str,
    capacity_type: &str,
    pool: &super::state::PoolInfo,
) -> Option<(String, Option<Timestamp>)> {
    let since = managed.drifted.as_ref().and_then(|(_, t)| *t);
    let pool_hash = pool.pool.metadata.annotations.as_ref().and_then(|a| {
        Some((
            a.get(labels::NODEPOOL_HASH)?.clone(),
            a.get(labels::NODEPOOL_HASH_VERSION)?.clone(),
        ))
    });
    if let (Some((pool_hash, pool_version)), Some((hash, version))) =
        (pool_hash, managed.nodepool_hash.as_ref())
        && pool_version == *version
        && pool_hash != *hash
    {
        return Some(("NodePoolDrifted".into(), since));
    }
    let labels = Requirements::from_labels(node.labels.iter());
    if labels
        .compatible(&pool.requirements, AllowUndefined::WellKnownLabels)
        .is_err()
    {
        return Some(("RequirementsDrifted".into(), since));
    }
    // A reservation is full with this node in it: its offering stays the node's own.
    let offered = instance_type.offerings.iter().any(|o| {
        (o.available || o.reservation.is_some())
            && (zone.is_empty() || o.zone == zone)
            && o.capacity_type.as_str() == capacity_type
    });
    if !offered {
        return Some(("InstanceTypeNotFound".into(), since));
    }
    managed.drifted.clone()
}
