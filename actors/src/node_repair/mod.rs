//! Node repair (the `NodeRepair` feature gate), as upstream's node health controller with
//! the AWS provider's repair policies ([`policy`]): a Node whose `Ready` condition (or one
//! of the node monitoring agent's conditions) has been False or Unknown past its toleration
//! has its NodeClaim deleted forcefully — the NodeClaim is annotated with
//! `karpenter.sh/nodeclaim-termination-timestamp` = now before the delete, so the
//! termination flow does not wait out a drain that an unhealthy Node cannot finish — and
//! the provisioner replaces its pods' capacity. A NodePool with more than a fifth of its
//! Nodes unhealthy is not repaired (logged, and a `NodeRepairBlocked` event on each of its
//! unhealthy Nodes, their NodeClaims and the NodePool, as upstream), since replacing that many at once would more
//! likely take the workload down than heal it.
//!
//! A loop every [`PERIOD`] over cluster state, acting only while this replica leads and
//! after cluster state synced; each pass is idempotent (a NodeClaim already deleting is
//! left alone), so a lost write is retried by the next pass.

mod events;
pub mod policy;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::labels;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::watch;

use crate::events::EventRecorder;
use crate::metrics::{NODECLAIMS_UNHEALTHY_DISRUPTED, nodeclaim_disrupted};
use crate::state::ObjectKey;
use crate::state::{ClusterState, instance_id};
use policy::{AWS_REPAIR_POLICIES, RepairPolicy};

/// Upstream's controller name.
pub const CONTROLLER: &str = "node.health";

/// How often Nodes are checked. Tolerations are tens of minutes, so a few seconds of
/// lateness does not matter; a pass reads only cluster state.
pub const PERIOD: Duration = Duration::from_secs(10);

/// The `karpenter_nodeclaims_disrupted_total` reason of a repair (upstream's).
pub const UNHEALTHY_REASON: &str = "unhealthy";

/// Why one repair failed (the next pass tries again).
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("annotating nodeclaim {name} with its termination timestamp: {source}")]
    Annotate {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting unhealthy nodeclaim {name}: {source}")]
    Delete {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Runs node repair until `shutdown`.
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    events: EventRecorder,
    leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let nodeclaims: Api<NodeClaim> = Api::all(client);
    let mut tick = tokio::time::interval(PERIOD);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if !*leader.borrow() || !state.synced() {
            continue;
        }
        for (name, error) in repair(&nodeclaims, &state, &events, &AWS_REPAIR_POLICIES).await {
            tracing::error!(nodeclaim = %name, %error, "repairing unhealthy node");
        }
    }
}

/// One pass: deletes the NodeClaims of the Nodes to repair now, and publishes
/// `NodeRepairBlocked` for the unhealthy Nodes of the NodePools held back; returns the
/// failures.
pub async fn repair(
    nodeclaims: &Api<NodeClaim>,
    state: &ClusterState,
    events: &EventRecorder,
    policies: &[RepairPolicy],
) -> Vec<(String, RepairError)> {
    let nodes = state.nodes.snapshot();
    let claimed: Vec<(&Node, Arc<NodeClaim>)> = nodes
        .iter()
        .filter_map(|n| {
            let id = instance_id(n.spec.as_ref()?.provider_id.as_deref()?)?;
            Some((n.as_ref(), state.nodeclaim_by_instance_id(&id)?))
        })
        .collect();
    let refs: Vec<&Node> = claimed.iter().map(|(n, _)| *n).collect();
    let (to_repair, blocked) = policy::repairable(&refs, policies, Timestamp::now());
    for (pool, nodes) in blocked {
        tracing::warn!(nodepool = %pool, unhealthy = nodes.len(), "more than 20% of the nodepool's nodes are unhealthy; not repairing them");
        for node in nodes {
            let claim = claimed.iter().find(|(n, _)| std::ptr::eq(*n, node));
            let nodepool = state.nodepools.get(&ObjectKey::new(None, &pool));
            events::repair_blocked(
                events,
                node,
                claim.map(|(_, c)| c.as_ref()),
                nodepool.as_deref(),
            );
        }
    }
    let mut failures = Vec::new();
    for (node, violated) in to_repair {
        let Some((_, claim)) = claimed.iter().find(|(n, _)| std::ptr::eq(*n, node)) else {
            continue;
        };
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Err(error) = delete_forcefully(nodeclaims, claim, node, violated).await {
            failures.push((claim.name().to_owned(), error));
        }
    }
    failures
}

async fn delete_forcefully(
    nodeclaims: &Api<NodeClaim>,
    claim: &NodeClaim,
    node: &Node,
    violated: RepairPolicy,
) -> Result<(), RepairError> {
    if !terminate_now(nodeclaims, claim).await? {
        return Ok(());
    }
    let name = claim.name();
    let label = |key: &str| {
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let (pool, capacity_type) = (label(labels::NODEPOOL), label(labels::CAPACITY_TYPE));
    tracing::info!(
        nodeclaim = %name,
        node = node.metadata.name.as_deref().unwrap_or_default(),
        condition = violated.condition,
        status = violated.status,
        toleration_s = violated.toleration.as_secs(),
        "deleting unhealthy node"
    );
    nodeclaim_disrupted(UNHEALTHY_REASON, &pool, &capacity_type);
    metrics::counter!(
        NODECLAIMS_UNHEALTHY_DISRUPTED,
        "condition" => snake_case(violated.condition),
        "nodepool" => pool,
        "capacity_type" => capacity_type,
        "image_id" => claim.status.as_ref().and_then(|s| s.image_id.clone()).unwrap_or_default()
    )
    .increment(1);
    Ok(())
}

/// Deletes `claim` without waiting for its drain: annotates it with
/// `karpenter.sh/nodeclaim-termination-timestamp` = now (unless it is already), then deletes
/// it (uid precondition). Returns whether this call deleted it; gone or replaced already is
/// not an error.
pub async fn terminate_now(
    nodeclaims: &Api<NodeClaim>,
    claim: &NodeClaim,
) -> Result<bool, RepairError> {
    let name = claim.name().to_owned();
    let annotated = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP));
    if !annotated {
        let patch = json!({"metadata": {"annotations": {
            labels::NODECLAIM_TERMINATION_TIMESTAMP: Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }}});
        nodeclaims
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| RepairError::Annotate {
                name: name.clone(),
                source,
            })?;
    }
    delete_same(nodeclaims, claim)
        .await
        .map_err(|source| RepairError::Delete { name, source })
}

/// Deletes `claim` if it is still the same object (uid precondition); `false` when it is
/// gone or was replaced by a NodeClaim of the same name — nothing of it is left to delete.
pub async fn delete_same(
    nodeclaims: &Api<NodeClaim>,
    claim: &NodeClaim,
) -> Result<bool, kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: claim.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match nodeclaims.delete(claim.name(), &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

/// `AcceleratedHardwareReady` → `accelerated_hardware_ready`, as upstream labels conditions.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn conditions_are_labelled_in_snake_case() {
        assert_eq!(super::snake_case("Ready"), "ready");
        assert_eq!(
            super::snake_case("AcceleratedHardwareReady"),
            "accelerated_hardware_ready"
        );
    }
}
