//! The Node's termination finalizer, as upstream's `node.termination` controller releases
//! it. A deleting Node deletes its NodeClaim; a Node that is not Ready and whose instance
//! is already gone is released at once (its pods died with it). Otherwise it takes the
//! `karpenter.sh/disrupted:NoSchedule` taint and the label that takes it out of load
//! balancers, is drained ([`super::drain`]: evictions through the eviction subresource in
//! upstream's groups, per-pod backoff on refusals, deletion with the time left once the
//! NodeClaim's termination timestamp is near), waits for its drained pods'
//! VolumeAttachments (not past the termination timestamp), has its instance terminated,
//! and only then releases its finalizer. Progress is recorded on the NodeClaim as the
//! `Drained` and `VolumesDetached` conditions.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::finalizers::{has_termination_finalizer, without_termination_finalizer};
use kerf::labels;
use kerf::pods::{LeanPod, PodLike};
use kerf::taints::disrupted_taint;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};

use super::drain::{self, Step};
use super::error::{TerminationError, is_status};
use super::events;
use super::evict::{self, EVICTION_CONCURRENCY};
use super::reconcile::{
    Outcome, Terminator, label_of, seconds_since, set_conditions, terminate_instance,
};
use super::volumes;
use crate::lifecycle::initialization::is_ready;
use crate::lifecycle::patch;
use crate::lifecycle::registration::node_provider_id;
use crate::metrics::{
    NODES_DRAINED, NODES_LIFETIME_DURATION, NODES_TERMINATED, NODES_TERMINATION_DURATION,
};

/// Drains and releases a deleting Node holding the termination finalizer.
pub async fn reconcile(t: &Terminator, name: &str) -> Result<Outcome, TerminationError> {
    let Some(node) = t.state.node(name) else {
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
        let mut claims = t.state.nodeclaims_launched_as(id);
        (claims.len() == 1).then(|| claims.remove(0))
    });
    if let Some(claim) = claim
        .as_ref()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        delete_nodeclaim(t, claim).await?;
    }
    if !is_ready(&node)
        && let Some(id) = provider_id.as_deref()
    {
        match t.cloud.get(id).await {
            Err(error) if error.is_not_found() => {
                tracing::info!(node = name, "instance already gone; skipping the drain");
                release(t, &node).await?;
                return Ok(Outcome::DONE);
            }
            Err(source) => {
                return Err(TerminationError::GetInstance {
                    node: name.to_owned(),
                    source,
                });
            }
            Ok(_) => {}
        }
    }
    let deadline = claim
        .as_deref()
        .map(termination_time)
        .transpose()?
        .flatten();
    taint(t, &node).await?;
    // The node's pods alone: the step's evictions are awaited with them held, and a
    // consolidation drains a hundred nodes at once over a store of 100,000 pods.
    let pods = t.state.pods.filtered(|p| drain::bound_to(p, name));
    let step = drain::plan(name, &pods, Timestamp::now(), deadline);
    if !step.is_done() {
        t.events
            .publish(events::failed_draining(&node, step.waiting));
        run_step(t, name, claim.as_deref(), step, deadline).await?;
        if let Some(claim) = &claim {
            set_conditions(t, claim, |set| {
                set.set_unknown(types::DRAINED, "Draining", "Draining");
            })
            .await?;
        }
        return Ok(Outcome::after(t.config.drain_requeue));
    }
    if let Some(claim) = &claim
        && set_conditions(t, claim, |set| set.set_true(types::DRAINED)).await?
    {
        metrics::counter!(NODES_DRAINED, "nodepool" => label_of(node.metadata.labels.as_ref(), labels::NODEPOOL))
            .increment(1);
        tracing::info!(node = name, "drained node");
    }
    if !volumes_detached(t, &node, claim.as_deref(), &pods, deadline).await? {
        return Ok(Outcome::after(t.config.drain_requeue));
    }
    if let Some(claim) = &claim
        && !terminate_instance(t, claim).await?
    {
        return Ok(Outcome::after(t.config.instance_requeue));
    }
    release(t, &node).await?;
    Ok(Outcome::DONE)
}

/// The NodeClaim's termination timestamp, if it has one.
fn termination_time(claim: &NodeClaim) -> Result<Option<Timestamp>, TerminationError> {
    let Some(value) = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::NODECLAIM_TERMINATION_TIMESTAMP))
    else {
        return Ok(None);
    };
    value
        .parse::<Timestamp>()
        .map(Some)
        .map_err(|_| TerminationError::TerminationTimestamp {
            nodeclaim: claim.name().to_owned(),
            annotation: labels::NODECLAIM_TERMINATION_TIMESTAMP,
            value: value.clone(),
        })
}

/// Deletes the pods the termination timestamp forces out, then evicts the step's group.
async fn run_step(
    t: &Terminator,
    node: &str,
    claim: Option<&NodeClaim>,
    step: Step,
    deadline: Option<Timestamp>,
) -> Result<(), TerminationError> {
    let deadline = deadline.map(|d| d.to_string()).unwrap_or_default();
    for (pod, grace) in &step.delete {
        delete_pod(t, pod, *grace, &deadline).await?;
    }
    let reason = claim.map_or_else(|| FORCEFUL.to_owned(), drain_reason);
    let answers: Vec<evict::Answer> = futures::stream::iter(step.evict)
        .map(|pod| evict::evict(t, pod, &reason))
        .buffer_unordered(EVICTION_CONCURRENCY)
        .collect()
        .await;
    tracing::debug!(
        node,
        waiting = step.waiting,
        deleted = step.delete.len(),
        evicted = answers
            .iter()
            .filter(|a| **a == evict::Answer::Accepted)
            .count(),
        blocked = answers
            .iter()
            .filter(|a| **a == evict::Answer::Blocked)
            .count(),
        "draining node"
    );
    Ok(())
}

/// The `reason` of `karpenter_pods_drained_total`: the NodeClaim's disruption reason, or
/// upstream's label for a termination no disruption decided.
const FORCEFUL: &str = "Forceful Termination";

fn drain_reason(claim: &NodeClaim) -> String {
    claim
        .conditions()
        .iter()
        .find(|c| {
            c.type_ == types::DISRUPTION_REASON
                && c.status == kerf::api::condition::ConditionStatus::True
        })
        .map_or_else(|| FORCEFUL.to_owned(), |c| c.reason.clone())
}

/// Deletes `pod` with `grace` seconds, past its budget and do-not-disrupt: its node's
/// termination timestamp leaves no more time.
async fn delete_pod(
    t: &Terminator,
    pod: &Arc<LeanPod>,
    grace: i64,
    deadline: &str,
) -> Result<(), TerminationError> {
    let namespace = pod.meta().namespace.unwrap_or_default().to_owned();
    let name = pod.meta().name.unwrap_or_default().to_owned();
    let api: Api<Pod> = Api::namespaced(t.client.clone(), &namespace);
    let params = DeleteParams {
        grace_period_seconds: Some(u32::try_from(grace).unwrap_or(0)),
        preconditions: Some(Preconditions {
            uid: pod.meta().uid.map(str::to_owned),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {}
        Err(error) if is_status(&error, 404) || is_status(&error, 409) => return Ok(()),
        Err(source) => {
            return Err(TerminationError::DeletePod {
                namespace,
                pod: name,
                source,
            });
        }
    }
    t.events.publish(events::disrupted(pod, grace, deadline));
    tracing::info!(
        pod = %name,
        namespace = %namespace,
        grace_period_seconds = grace,
        termination_timestamp = deadline,
        "deleting pod"
    );
    Ok(())
}

/// Whether the Node's drained pods' volumes are detached (or the termination timestamp
/// passed, when they are no longer waited for); records `VolumesDetached`.
async fn volumes_detached(
    t: &Terminator,
    node: &Node,
    claim: Option<&NodeClaim>,
    pods: &[Arc<LeanPod>],
    deadline: Option<Timestamp>,
) -> Result<bool, TerminationError> {
    let name = node.name_any();
    let attachments = t
        .attachments
        .list(&ListParams::default())
        .await
        .map_err(|source| TerminationError::ListVolumeAttachments {
            node: name.clone(),
            source,
        })?
        .items;
    let claims = t.state.persistent_volume_claims.snapshot();
    let now = Timestamp::now();
    let pending = volumes::pending(&name, &attachments, pods, &claims, now).len();
    let past_deadline = deadline.is_some_and(|d| now >= d);
    let Some(claim) = claim else {
        return Ok(pending == 0 || past_deadline);
    };
    if pending == 0 {
        set_conditions(t, claim, |set| set.set_true(types::VOLUMES_DETACHED)).await?;
        return Ok(true);
    }
    if past_deadline {
        set_conditions(t, claim, |set| {
            set.set_false(
                types::VOLUMES_DETACHED,
                "TerminationGracePeriodElapsed",
                "TerminationGracePeriodElapsed",
            );
        })
        .await?;
        return Ok(true);
    }
    t.events
        .publish(events::awaiting_volume_detachment(node, pending));
    set_conditions(t, claim, |set| {
        set.set_unknown(
            types::VOLUMES_DETACHED,
            "AwaitingVolumeDetachment",
            "AwaitingVolumeDetachment",
        );
    })
    .await?;
    Ok(false)
}

async fn delete_nodeclaim(t: &Terminator, claim: &NodeClaim) -> Result<(), TerminationError> {
    match t
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
        Err(source) => Err(TerminationError::DeleteNodeClaim {
            nodeclaim: claim.name().to_owned(),
            source,
        }),
    }
}

/// `node` with the disrupted taint (replacing a same-key taint of another effect) and the
/// label that takes it out of external load balancers.
pub fn disrupting(node: &Node) -> Node {
    let mut tainted = node.clone();
    let wanted = disrupted_taint();
    let spec = tainted.spec.get_or_insert_with(Default::default);
    let taints = spec.taints.get_or_insert_with(Vec::new);
    if !taints
        .iter()
        .any(|t| t.key == wanted.key && t.effect == wanted.effect)
    {
        taints.retain(|t| t.key != wanted.key);
        taints.push(wanted);
    }
    tainted
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(
            labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS.to_owned(),
            "karpenter".to_owned(),
        );
    tainted
}

async fn taint(t: &Terminator, node: &Node) -> Result<(), TerminationError> {
    let wanted = disrupting(node);
    let Some(body) = patch::locked(node, &wanted, node.metadata.resource_version.as_deref()) else {
        return Ok(());
    };
    let name = node.name_any();
    t.nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|source| TerminationError::PatchNode {
            node: name.clone(),
            source,
        })?;
    tracing::info!(node = %name, taint = labels::DISRUPTED_TAINT, "tainted node");
    Ok(())
}

async fn release(t: &Terminator, node: &Node) -> Result<(), TerminationError> {
    let mut released = node.clone();
    released.metadata.finalizers = Some(without_termination_finalizer(
        node.metadata.finalizers.as_ref(),
    ));
    let Some(body) = patch::locked(node, &released, node.metadata.resource_version.as_deref())
    else {
        return Ok(());
    };
    let name = node.name_any();
    match t
        .nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => {}
        Err(error) if is_status(&error, 404) => return Ok(()),
        Err(source) => return Err(TerminationError::PatchNode { node: name, source }),
    }
    let labels = node.metadata.labels.as_ref();
    let nodepool = label_of(labels, labels::NODEPOOL);
    metrics::histogram!(NODES_TERMINATION_DURATION, "nodepool" => nodepool.clone())
        .record(seconds_since(node.metadata.deletion_timestamp.as_ref()));
    metrics::histogram!(NODES_LIFETIME_DURATION, "nodepool" => nodepool.clone())
        .record(seconds_since(node.metadata.creation_timestamp.as_ref()));
    metrics::counter!(
        NODES_TERMINATED,
        "nodepool" => nodepool,
        "zone" => label_of(labels, labels::ZONE)
    )
    .increment(1);
    tracing::info!(node = %name, "deleted node");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tainting_is_idempotent_and_replaces_another_effect() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                                {"key": "other", "effect": "NoSchedule"}]}
        }))
        .expect("valid node");
        let tainted = disrupting(&node);
        let taints = tainted
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .expect("taints");
        let listed: Vec<String> = taints.iter().map(kerf::taints::format_taint).collect();
        assert_eq!(
            listed,
            ["other:NoSchedule", "karpenter.sh/disrupted:NoSchedule"]
        );
        assert_eq!(
            tainted.metadata.labels.as_ref().expect("labels")
                [labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS],
            "karpenter"
        );
        assert_eq!(disrupting(&tainted), tainted);
    }
}
