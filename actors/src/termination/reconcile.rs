//! What every termination reconcile works with, and the writes the NodeClaim and Node
//! finalizers share: reading cluster state, terminating an instance, releasing a
//! finalizer, recording a condition. Every write that replaces a list (finalizers,
//! conditions, taints) is locked to the version read, so a reconcile working from a stale
//! copy fails with 409 and simply runs again.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::cloudprovider::CloudProvider;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::backoff::Backoffs;
use super::error::TerminationError;
use super::{TerminationConfig, TerminationStats};
use crate::events::EventRecorder;
use crate::lifecycle::conditions::ConditionSet;
use crate::state::ClusterState;

pub(crate) use crate::workqueue::Outcome;

pub struct Terminator {
    pub state: Arc<ClusterState>,
    pub client: Client,
    pub nodes: Api<Node>,
    pub nodeclaims: Api<NodeClaim>,
    pub attachments: Api<VolumeAttachment>,
    pub cloud: Arc<dyn CloudProvider>,
    pub config: TerminationConfig,
    pub stats: Arc<TerminationStats>,
    pub events: EventRecorder,
    pub launching: crate::lifecycle::Launching,
    pub backoffs: Mutex<Backoffs>,
    /// When this replica first asked the provider to terminate each NodeClaim's instance (by
    /// NodeClaim name), until the instance is gone: the instance termination duration's
    /// start when the `InstanceTerminating` condition's write lost a race or has not reached
    /// cluster state yet. One entry per NodeClaim whose instance is shutting down.
    pub terminating_since: Mutex<std::collections::HashMap<String, Timestamp>>,
}

impl Terminator {
    pub fn backoffs(&self) -> std::sync::MutexGuard<'_, Backoffs> {
        // Plain bookkeeping: a panic elsewhere cannot leave it torn.
        self.backoffs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Asks the cloud provider to terminate `claim`'s instance: `true` once it is gone. On the
/// first call the NodeClaim is marked `InstanceTerminating`.
pub async fn terminate_instance(
    t: &Terminator,
    claim: &NodeClaim,
) -> Result<bool, TerminationError> {
    match t.cloud.delete(claim).await {
        Ok(()) => {
            t.terminating_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(claim.name().to_owned())
                .or_insert_with(Timestamp::now);
            // Best effort: the condition only informs, and the next call asks again anyway.
            let marked = set_conditions(t, claim, |set| set.set_true(types::INSTANCE_TERMINATING));
            if let Err(error) = marked.await {
                tracing::debug!(nodeclaim = claim.name(), %error, "marking instance terminating");
            }
            Ok(false)
        }
        Err(error) if error.is_not_found() => Ok(true),
        Err(source) => Err(TerminationError::TerminateInstance {
            nodeclaim: claim.name().to_owned(),
            source,
        }),
    }
}

/// Applies `change` to `claim`'s conditions and writes them if anything changed.
pub async fn set_conditions(
    t: &Terminator,
    claim: &NodeClaim,
    change: impl FnOnce(&mut ConditionSet),
) -> Result<bool, TerminationError> {
    let before = claim.conditions().to_vec();
    let mut set = ConditionSet::new(&before, claim.metadata.generation, Timestamp::now());
    change(&mut set);
    let after = set.into_vec();
    if after == before {
        return Ok(false);
    }
    let body = json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": {"conditions": after},
    });
    match t
        .nodeclaims
        .patch_status(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => Ok(true),
        Err(error) if super::error::is_status(&error, 404) => Ok(false),
        Err(source) => Err(TerminationError::PatchNodeClaimStatus {
            nodeclaim: claim.name().to_owned(),
            source,
        }),
    }
}

/// Seconds since `deleted` (a deletion timestamp), for the termination durations.
pub fn seconds_since(
    deleted: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> f64 {
    deleted.map_or(0.0, |t| {
        Timestamp::now().duration_since(t.0).as_secs_f64().max(0.0)
    })
}

/// A label of `labels` or the empty string, as upstream's metric labels read them.
pub fn label_of(labels: Option<&std::collections::BTreeMap<String, String>>, key: &str) -> String {
    labels.and_then(|l| l.get(key)).cloned().unwrap_or_default()
}
