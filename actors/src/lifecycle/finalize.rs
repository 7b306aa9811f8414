//! The termination finalizers, as upstream's NodeClaim lifecycle and Node termination
//! controllers release them. A deleting NodeClaim deletes its registered Node and waits until
//! it is gone, then terminates its instance (`CloudProvider::delete` until it answers
//! `NodeClaimNotFound`; without a recorded providerID, whatever `find_launched` finds tagged
//! with it, so a NodeClaim deleted while its launch was in flight leaks nothing) and releases
//! its finalizer. A deleting Node deletes its NodeClaim,
//! takes the `karpenter.sh/disrupted:NoSchedule` taint, is drained through the eviction
//! subresource (so PodDisruptionBudgets hold it back; a refused eviction is retried on the
//! next reconcile), has its instance terminated, and then releases its finalizer; a Node that
//! is not Ready and whose instance is already gone is released at once.
//!
//! This is the minimal termination that keeps deletions from hanging. The full
//! TerminationDrainer — `terminationGracePeriod` and forced deletion past it,
//! `karpenter.sh/do-not-disrupt`, daemonset pods drained last, waiting for volume
//! detachment, the `Drained`/`VolumesDetached` conditions and drain events — comes later.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::labels;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::conditions::ConditionSet;
use super::initialization::is_ready;
use super::patch;
use super::reconcile::{Outcome, ReconcileError, Reconciler, is_status, label};
use super::registration::node_provider_id;
use super::termination::{
    self, Evicted, disrupting, eviction_answer, has_termination_finalizer,
    without_termination_finalizer,
};
use crate::metrics::{NODECLAIMS_TERMINATED, NODES_TERMINATED, PODS_EVICTION_REQUESTS};

/// Evictions sent at once while draining one Node.
const EVICTION_CONCURRENCY: usize = 16;

/// Releases a deleting NodeClaim once its Node and instance are gone.
pub async fn nodeclaim(r: &Reconciler, claim: &NodeClaim) -> Result<Outcome, ReconcileError> {
    if !has_termination_finalizer(claim.metadata.finalizers.as_ref()) {
        return Ok(Outcome::DONE);
    }
    // Only a registered NodeClaim owns its Node: before registration the Node is not yet
    // ours to delete, and the garbage collector removes it through its ownerReference.
    if claim.is_condition_true(types::REGISTERED) {
        let nodes = r.nodes_of(claim);
        for node in nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
        {
            delete_node(r, node).await?;
        }
        if !nodes.is_empty() {
            return Ok(Outcome::after(r.config.drain_requeue));
        }
    }
    // Without a recorded providerID a launch may still have started a machine (its status
    // write lost, or not yet in cluster state): it is found by its NodeClaim tag.
    let launched = match claim.provider_id() {
        Some(_) => Some(claim.clone()),
        None => r
            .cloud
            .find_launched(claim.name())
            .await
            .map_err(|source| ReconcileError::FindInstance {
                nodeclaim: claim.name().to_owned(),
                source,
            })?,
    };
    if let Some(launched) = &launched {
        match r.cloud.delete(launched).await {
            Ok(()) => {
                mark_instance_terminating(r, claim).await;
                return Ok(Outcome::after(r.config.instance_requeue));
            }
            Err(error) if error.is_not_found() => {}
            Err(source) => {
                return Err(ReconcileError::TerminateInstance {
                    nodeclaim: claim.name().to_owned(),
                    source,
                });
            }
        }
    }
    release_nodeclaim(r, claim).await?;
    Ok(Outcome::DONE)
}

async fn delete_node(r: &Reconciler, node: &Node) -> Result<(), ReconcileError> {
    let name = node.name_any();
    match r.nodes.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(node = %name, "deleting node of deleted nodeclaim");
            Ok(())
        }
        Err(error) if is_status(&error, 404) => Ok(()),
        Err(source) => Err(ReconcileError::DeleteNode { node: name, source }),
    }
}

/// Records `InstanceTerminating=True`; best effort, as it only informs.
async fn mark_instance_terminating(r: &Reconciler, claim: &NodeClaim) {
    if claim.is_condition_true(types::INSTANCE_TERMINATING) {
        return;
    }
    let mut set = ConditionSet::new(
        claim.conditions(),
        claim.metadata.generation,
        Timestamp::now(),
    );
    set.set_true(types::INSTANCE_TERMINATING);
    let body = json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": {"conditions": set.into_vec()},
    });
    if let Err(error) = r
        .nodeclaims
        .patch_status(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        tracing::debug!(nodeclaim = claim.name(), %error, "marking instance terminating");
    }
}

async fn release_nodeclaim(r: &Reconciler, claim: &NodeClaim) -> Result<(), ReconcileError> {
    let mut released = claim.clone();
    released.metadata.finalizers = Some(without_termination_finalizer(
        claim.metadata.finalizers.as_ref(),
    ));
    let Some(body) = patch::locked(claim, &released, claim.metadata.resource_version.as_deref())
    else {
        return Ok(());
    };
    match r
        .nodeclaims
        .patch(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => {}
        Err(error) if is_status(&error, 404) => return Ok(()),
        Err(source) => {
            return Err(ReconcileError::PatchNodeClaim {
                nodeclaim: claim.name().to_owned(),
                source,
            });
        }
    }
    metrics::counter!(
        NODECLAIMS_TERMINATED,
        "nodepool" => claim.nodepool_name().unwrap_or_default().to_owned(),
        "capacity_type" => label(claim, labels::CAPACITY_TYPE),
        "zone" => label(claim, labels::ZONE)
    )
    .increment(1);
    tracing::info!(nodeclaim = claim.name(), "deleted nodeclaim");
    Ok(())
}

/// Drains and releases a deleting Node holding the termination finalizer.
pub async fn node(r: &Reconciler, name: &str) -> Result<Outcome, ReconcileError> {
    let Some(node) = r.node(name) else {
        return Ok(Outcome::DONE);
    };
    if node.metadata.deletion_timestamp.is_none()
        || !has_termination_finalizer(node.metadata.finalizers.as_ref())
    {
        return Ok(Outcome::DONE);
    }
    let provider_id = node_provider_id(&node).map(str::to_owned);
    // Several NodeClaims for one providerID break the one source of truth: act as if none.
    let claim = provider_id.as_deref().and_then(|id| {
        let mut claims = r.nodeclaims_of(id);
        (claims.len() == 1).then(|| claims.remove(0))
    });
    if let Some(claim) = claim
        .as_ref()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        delete_nodeclaim(r, claim).await?;
    }
    // A Node whose kubelet stopped reporting and whose instance is gone has nothing left to
    // drain: its pods died with it.
    if !is_ready(&node)
        && let Some(id) = provider_id.as_deref()
    {
        match r.cloud.get(id).await {
            Err(error) if error.is_not_found() => {
                release_node(r, &node).await?;
                return Ok(Outcome::DONE);
            }
            Err(source) => {
                return Err(ReconcileError::GetInstance {
                    node: name.to_owned(),
                    source,
                });
            }
            Ok(_) => {}
        }
    }
    taint(r, &node).await?;
    if !drain(r, name).await {
        return Ok(Outcome::after(r.config.drain_requeue));
    }
    if let Some(claim) = &claim {
        match r.cloud.delete(claim).await {
            Ok(()) => return Ok(Outcome::after(r.config.instance_requeue)),
            Err(error) if error.is_not_found() => {}
            Err(source) => {
                return Err(ReconcileError::TerminateInstance {
                    nodeclaim: claim.name().to_owned(),
                    source,
                });
            }
        }
    }
    release_node(r, &node).await?;
    Ok(Outcome::DONE)
}

async fn delete_nodeclaim(r: &Reconciler, claim: &NodeClaim) -> Result<(), ReconcileError> {
    match r
        .nodeclaims
        .delete(claim.name(), &DeleteParams::default())
        .await
    {
        Ok(_) => {
            tracing::info!(
                nodeclaim = claim.name(),
                "deleting nodeclaim of deleted node"
            );
            Ok(())
        }
        Err(error) if is_status(&error, 404) => Ok(()),
        Err(source) => Err(ReconcileError::DeleteNodeClaim {
            nodeclaim: claim.name().to_owned(),
            source,
        }),
    }
}

async fn taint(r: &Reconciler, node: &Node) -> Result<(), ReconcileError> {
    let wanted = disrupting(node);
    let Some(body) = patch::locked(node, &wanted, node.metadata.resource_version.as_deref()) else {
        return Ok(());
    };
    let name = node.name_any();
    r.nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|source| ReconcileError::PatchNode {
            node: name.clone(),
            source,
        })?;
    tracing::info!(node = %name, taint = labels::DISRUPTED_TAINT, "tainted node");
    Ok(())
}

/// One drain step: evicts what may go now; true once nothing is left to wait for.
async fn drain(r: &Reconciler, node_name: &str) -> bool {
    let pods = r.state.pods.snapshot();
    let step = termination::plan(node_name, &pods, Timestamp::now());
    if step.is_done() {
        return true;
    }
    let answers: Vec<Evicted> = futures::stream::iter(step.evict)
        .map(|pod| evict(r, pod))
        .buffer_unordered(EVICTION_CONCURRENCY)
        .collect()
        .await;
    let blocked = answers.iter().filter(|a| **a == Evicted::Blocked).count();
    tracing::debug!(
        node = node_name,
        waiting = step.waiting,
        evicted = answers.iter().filter(|a| **a == Evicted::Accepted).count(),
        blocked,
        "draining node"
    );
    false
}

/// Evicts one pod through the eviction subresource, which honours its disruption budget.
async fn evict(r: &Reconciler, pod: std::sync::Arc<Pod>) -> Evicted {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(r.client.clone(), &namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            // Only this pod: a replacement under the same name is not ours to evict.
            preconditions: Some(Preconditions {
                uid: pod.meta().uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    // kube's client retries 429 by itself with exponential backoff for minutes; a budget
    // that keeps refusing must not hold the drain that long, so the attempt is bounded and
    // an unfinished one counts as refused — the next drain step asks again.
    let answer =
        match tokio::time::timeout(r.config.eviction_timeout, api.evict(&name, &params)).await {
            Err(_elapsed) => Evicted::Blocked,
            Ok(Ok(_)) => {
                metrics::counter!(PODS_EVICTION_REQUESTS, "code" => "200").increment(1);
                Evicted::Accepted
            }
            Ok(Err(kube::Error::Api(status))) => {
                metrics::counter!(PODS_EVICTION_REQUESTS, "code" => status.code.to_string())
                    .increment(1);
                eviction_answer(status.code, &status.message)
            }
            Ok(Err(error)) => {
                tracing::warn!(pod = %name, namespace = %namespace, %error, "evicting pod");
                Evicted::Failed
            }
        };
    match answer {
        Evicted::Blocked => {
            r.stats.record_blocked_eviction();
            tracing::debug!(pod = %name, namespace = %namespace, "eviction refused by a disruption budget");
        }
        Evicted::Failed => tracing::warn!(pod = %name, namespace = %namespace, "eviction failed"),
        Evicted::Accepted | Evicted::Gone => {}
    }
    answer
}

async fn release_node(r: &Reconciler, node: &Node) -> Result<(), ReconcileError> {
    let mut released = node.clone();
    released.metadata.finalizers = Some(without_termination_finalizer(
        node.metadata.finalizers.as_ref(),
    ));
    let Some(body) = patch::locked(node, &released, node.metadata.resource_version.as_deref())
    else {
        return Ok(());
    };
    let name = node.name_any();
    match r
        .nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => {}
        Err(error) if is_status(&error, 404) => return Ok(()),
        Err(source) => return Err(ReconcileError::PatchNode { node: name, source }),
    }
    let node_label = |key: &str| node.labels().get(key).cloned().unwrap_or_default();
    metrics::counter!(
        NODES_TERMINATED,
        "nodepool" => node_label(labels::NODEPOOL),
        "zone" => node_label(labels::ZONE)
    )
    .increment(1);
    tracing::info!(node = %name, "deleted node");
    Ok(())
}
