//! `kerf plan --disruption`: the plan's inventory and scheduling snapshot turned into the
//! disruption decision's [`Cluster`]. A Node labelled `karpenter.sh/nodepool` is managed; its
//! NodeClaim is the one whose `status.nodeName` names it. Without one in the input, the Node
//! stands for a NodeClaim created with it, initialized when labelled
//! `karpenter.sh/initialized: "true"`, with its NodePool's lifetime settings. A node's last
//! pod event is its NodeClaim's `status.lastPodEventTime`, else the newest creation among the
//! Node and its pods; a missing timestamp counts as long ago.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use super::inventory::Inventory;
use super::snapshot::Snapshot;
use crate::api::condition::types;
use crate::api::{Conditions, NodeClaim, NodePool};
use crate::disruption::{Cluster, ManagedNode, Pdb};
use crate::labels;
use crate::pods::{LeanPod, PodLike};

/// The decision's input from a plan's inventory and snapshot.
pub fn cluster(inventory: &Inventory, snapshot: Snapshot) -> Cluster {
    let pods_by_node: HashMap<&str, Vec<&LeanPod>> =
        snapshot
            .input
            .existing_nodes
            .iter()
            .fold(HashMap::new(), |mut map, node| {
                map.insert(node.name.as_str(), node.pods.iter().map(|p| &**p).collect());
                map
            });
    let nodes = inventory
        .nodes
        .iter()
        .filter_map(|node| {
            let name = node.metadata.name.as_deref()?;
            let pool_name = node.metadata.labels.as_ref()?.get(labels::NODEPOOL)?;
            let claim = inventory
                .node_claims
                .iter()
                .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name));
            let pool = inventory.node_pools.iter().find(|p| p.name() == pool_name);
            let pods = pods_by_node
                .get(name)
                .map(Vec::as_slice)
                .unwrap_or_default();
            Some(managed(node, pool_name, claim.map(Arc::as_ref), pool, pods))
        })
        .collect();
    let all_pods = inventory.pods.iter();
    let pdbs = inventory
        .disruption_budgets
        .iter()
        .map(|pdb| {
            Pdb::from_api(
                pdb,
                all_pods.clone().map(|p| &**p).filter(crate::pods::is_bound),
            )
        })
        .collect();
    Cluster {
        scheduling: snapshot.input,
        nodes,
        node_pools: inventory.node_pools.clone(),
        pdbs,
    }
}

fn managed(
    node: &Node,
    pool_name: &str,
    claim: Option<&NodeClaim>,
    pool: Option<&NodePool>,
    pods: &[&LeanPod],
) -> ManagedNode {
    let name = node.metadata.name.clone().unwrap_or_default();
    let annotation = |key: &str| {
        claim
            .and_then(|c| c.metadata.annotations.as_ref())
            .or(node.metadata.annotations.as_ref())
            .and_then(|a| a.get(key))
            .cloned()
    };
    let created = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.creation_timestamp.as_ref().map(|t| t.0)
    };
    let newest_creation = pods
        .iter()
        .filter_map(|p| p.meta().creation_timestamp.map(|t| t.0))
        .chain(created(&node.metadata))
        .max();
    let last_pod_event = claim
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(|t| t.0)
        .or(newest_creation);
    let drifted = claim
        .and_then(|c| c.conditions().condition(types::DRIFTED))
        .filter(|c| c.is_true())
        .map(|c| (c.reason.clone(), Some(c.last_transition_time.0)));
    let (expire_after, termination_grace_period) = match claim {
        Some(c) => (
            c.spec.expire_after.as_std(),
            c.spec.termination_grace_period.as_ref().map(|d| d.as_std()),
        ),
        None => (
            pool.and_then(|p| p.expire_after().as_std()),
            pool.and_then(|p| p.termination_grace_period())
                .map(|d| d.as_std()),
        ),
    };
    ManagedNode {
        node_claim: claim.map_or_else(|| name.clone(), |c| c.name().to_string()),
        node_pool: pool_name.to_string(),
        created: claim
            .and_then(|c| created(&c.metadata))
            .or_else(|| created(&node.metadata)),
        last_pod_event,
        initialized: is_initialized(node, claim),
        ready: is_ready(node),
        deleting: node.metadata.deletion_timestamp.is_some()
            || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
        nominated: false,
        do_not_disrupt: node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
            .is_some_and(|v| v == "true"),
        drifted,
        nodepool_hash: annotation(labels::NODEPOOL_HASH)
            .zip(annotation(labels::NODEPOOL_HASH_VERSION)),
        expire_after,
        termination_grace_period,
        name,
    }
}

/// A Node without a `Ready` condition (as manifests often are) counts as Ready.
/// Whether a managed node counts as initialized for disruption: its Node labelled
/// `karpenter.sh/initialized`, or its NodeClaim `Initialized`.
pub fn is_initialized(node: &Node, claim: Option<&NodeClaim>) -> bool {
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INITIALIZED))
        .is_some_and(|v| v == "true");
    labelled || claim.is_some_and(|c| c.is_condition_true(types::INITIALIZED))
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_none_or(|c| c.status == "True")
}

/// Parses `--now`: an RFC 3339 timestamp.
pub fn parse_now(text: &str) -> Result<Timestamp, String> {
    text.parse::<Timestamp>()
        .map_err(|e| format!("--now: {text:?} is not an RFC 3339 timestamp: {e}"))
}
