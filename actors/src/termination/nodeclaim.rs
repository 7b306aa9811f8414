//! The NodeClaim's termination finalizer, as upstream's NodeClaim lifecycle releases it. A
//! deleting NodeClaim with `spec.terminationGracePeriod` first gets its
//! `karpenter.sh/nodeclaim-termination-timestamp` (deletion time plus the grace period: the
//! moment its Node's remaining pods are deleted regardless of budgets); then its registered
//! Node is deleted and awaited (the Node's own finalizer drains it); then its instance is
//! terminated (`CloudProvider::delete` until it answers `NodeClaimNotFound`; without a
//! recorded providerID, whatever `find_launched` finds tagged with it, so a NodeClaim
//! deleted while its launch was in flight leaks nothing) and the finalizer released.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::finalizers::{has_termination_finalizer, without_termination_finalizer};
use kerf::labels;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::error::{TerminationError, is_status};
use super::events;
use super::reconcile::{Outcome, Terminator, label_of, seconds_since, terminate_instance};
use crate::lifecycle::is_managed;
use crate::lifecycle::patch;
use crate::metrics::{
    NODECLAIMS_INSTANCE_TERMINATION_DURATION, NODECLAIMS_TERMINATED,
    NODECLAIMS_TERMINATION_DURATION,
};

/// Releases a deleting NodeClaim once its Node and instance are gone.
pub async fn reconcile(t: &Terminator, name: &str) -> Result<Outcome, TerminationError> {
    let Some(claim) = t.state.nodeclaim(name) else {
        return Ok(Outcome::DONE);
    };
    if !is_managed(&claim)
        || claim.metadata.deletion_timestamp.is_none()
        || !has_termination_finalizer(claim.metadata.finalizers.as_ref())
    {
        return Ok(Outcome::DONE);
    }
    if t.launching.contains(name) {
        // Its instance may be about to appear: finish only once the launch has returned.
        return Ok(Outcome::after(t.config.instance_requeue));
    }
    if annotate_termination_timestamp(t, &claim).await? {
        // The write's watch event runs the rest on the annotated copy.
        return Ok(Outcome::DONE);
    }
    // Only a registered NodeClaim owns its Node: before registration the Node is not yet
    // ours to delete, and the garbage collector removes it through its ownerReference.
    if claim.is_condition_true(types::REGISTERED) {
        let nodes = t.state.nodes_of(&claim);
        for node in nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
        {
            delete_node(t, node).await?;
        }
        if !nodes.is_empty() {
            return Ok(Outcome::after(t.config.drain_requeue));
        }
    }
    // Without a recorded providerID a launch may still have started a machine (its status
    // write lost, or not yet in cluster state): it is found by its NodeClaim tag.
    let launched = match claim.provider_id() {
        Some(_) => Some((*claim).clone()),
        None => t
            .cloud
            .find_launched(claim.name())
            .await
            .map_err(|source| TerminationError::FindInstance {
                nodeclaim: claim.name().to_owned(),
                source,
            })?,
    };
    if let Some(launched) = &launched {
        if !terminate_instance(t, launched).await? {
            return Ok(Outcome::after(t.config.instance_requeue));
        }
        let asked = t
            .terminating_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(claim.name());
        let since = claim
            .conditions()
            .iter()
            .find(|c| c.type_ == types::INSTANCE_TERMINATING)
            .map(|c| c.last_transition_time.clone())
            .or_else(|| asked.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time));
        if let Some(since) = since {
            metrics::histogram!(
                NODECLAIMS_INSTANCE_TERMINATION_DURATION,
                "nodepool" => claim.nodepool_name().unwrap_or_default().to_owned()
            )
            .record(seconds_since(Some(&since)));
        }
    }
    release(t, &claim).await?;
    Ok(Outcome::DONE)
}

/// Writes the termination timestamp of a NodeClaim with a termination grace period, once;
/// true when it wrote it.
async fn annotate_termination_timestamp(
    t: &Terminator,
    claim: &NodeClaim,
) -> Result<bool, TerminationError> {
    let annotated = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP));
    let (Some(grace), Some(deleted)) = (
        claim.spec.termination_grace_period.as_ref(),
        claim.metadata.deletion_timestamp.as_ref(),
    ) else {
        return Ok(false);
    };
    if annotated {
        return Ok(false);
    }
    let deadline = termination_timestamp(deleted.0, grace.as_std());
    let body = json!({"metadata": {
        "resourceVersion": claim.metadata.resource_version,
        "annotations": {labels::NODECLAIM_TERMINATION_TIMESTAMP: deadline},
    }});
    match t
        .nodeclaims
        .patch(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => {}
        Err(error) if is_status(&error, 404) => return Ok(false),
        Err(source) => {
            return Err(TerminationError::PatchNodeClaim {
                nodeclaim: claim.name().to_owned(),
                source,
            });
        }
    }
    tracing::info!(
        nodeclaim = claim.name(),
        termination_timestamp = %deadline,
        "annotated nodeclaim"
    );
    t.events
        .publish(events::termination_grace_period_expiring(claim, &deadline));
    Ok(true)
}

/// `deleted` plus `grace`, in RFC 3339 truncated to the second, as upstream writes it.
pub fn termination_timestamp(deleted: Timestamp, grace: std::time::Duration) -> String {
    let seconds = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    deleted
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(Timestamp::MAX)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn delete_node(t: &Terminator, node: &Node) -> Result<(), TerminationError> {
    let name = node.name_any();
    match t.nodes.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(node = %name, "deleting node of deleted nodeclaim");
            Ok(())
        }
        Err(error) if is_status(&error, 404) => Ok(()),
        Err(source) => Err(TerminationError::DeleteNode { node: name, source }),
    }
}

async fn release(t: &Terminator, claim: &NodeClaim) -> Result<(), TerminationError> {
    let mut released = claim.clone();
    released.metadata.finalizers = Some(without_termination_finalizer(
        claim.metadata.finalizers.as_ref(),
    ));
    let Some(body) = patch::locked(claim, &released, claim.metadata.resource_version.as_deref())
    else {
        return Ok(());
    };
    match t
        .nodeclaims
        .patch(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => {}
        Err(error) if is_status(&error, 404) => return Ok(()),
        Err(source) => {
            return Err(TerminationError::PatchNodeClaim {
                nodeclaim: claim.name().to_owned(),
                source,
            });
        }
    }
    let labels = claim.metadata.labels.as_ref();
    let nodepool = claim.nodepool_name().unwrap_or_default().to_owned();
    metrics::histogram!(NODECLAIMS_TERMINATION_DURATION, "nodepool" => nodepool.clone())
        .record(seconds_since(claim.metadata.deletion_timestamp.as_ref()));
    metrics::counter!(
        NODECLAIMS_TERMINATED,
        "nodepool" => nodepool,
        "capacity_type" => label_of(labels, labels::CAPACITY_TYPE),
        "zone" => label_of(labels, labels::ZONE)
    )
    .increment(1);
    tracing::info!(nodeclaim = claim.name(), "deleted nodeclaim");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::termination::testing::at;
    use std::time::Duration;

    #[test]
    fn the_termination_timestamp_is_the_deletion_plus_the_grace_period_to_the_second() {
        assert_eq!(
            termination_timestamp(at(0), Duration::from_secs(90)),
            "2023-11-14T22:14:50Z"
        );
        let fraction = at(0)
            .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(900))
            .expect("in range");
        assert_eq!(
            termination_timestamp(fraction, Duration::from_secs(90)),
            "2023-11-14T22:14:50Z",
            "truncated, not rounded"
        );
    }
}
