//! The launch step, as upstream's NodeClaim lifecycle `launch` sub-reconciler: a NodeClaim
//! not `Launched` is launched whoever created it and whenever it is seen (after a failed
//! attempt, a lost status write, a restart or a failover). The provider's Create is
//! idempotent per NodeClaim (it adopts an instance tagged with it, under a client token from
//! its uid); a launch whose status write failed is remembered for [`LAUNCHED_MEMORY`] so the
//! retry writes it without asking the cloud again, and once written a reconcile that still
//! reads the NodeClaim as not `Launched` writes nothing.
//!
//! Outcomes: launched → labels, annotations and `Launched=True`; insufficient capacity → the
//! refused offerings (all it allowed when the provider named none) marked in the
//! OfferingCache, an event, and the NodeClaim deleted so its pods are planned again; any
//! other failure → `Launched=False` with the reason, an event when its text changes, and a
//! retry with backoff. Beyond upstream, when every refused offering is spot and on-demand is
//! allowed, the same NodeClaim is launched again at once on-demand only ([`OnDemandFallback`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::{Condition, types};
use kerf::api::{NodeClaim, ResourceList};
use kerf::cloudprovider::{
    CloudProviderError, OfferingRef, SPOT_SLR_REASON, expected_node_name, offerings_allowed,
};
use kerf::labels;
use kerf::requirements::Requirements;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde::Serialize;
use serde_json::json;

use super::conditions::ConditionSet;
use super::initialization::Awaiting;
use super::launch_memory::Memory;
use super::reconciler::{ReconcileError, Reconciler, is_status, label};
use crate::events::upstream as events;
use crate::metrics::NODECLAIMS_LAUNCHED;
use crate::state::ObjectKey;
use crate::workqueue::Outcome;

/// The longest `Launched=False` message, as upstream truncates it.
const MAX_CONDITION_MESSAGE: usize = 300;

/// The reason recorded with offerings a launch was refused for (the provider's error does
/// not carry EC2's code).
pub const INSUFFICIENT_CAPACITY_REASON: &str = "InsufficientCapacity";

/// Whether `claim` may fall back to on-demand after `error`: it allows both capacity types,
/// and EC2 refused only spot (every named offering), or refused spot for want of its
/// service-linked role.
fn may_fall_back(claim: &NodeClaim, error: &CloudProviderError) -> bool {
    let spot_only_refused = match error {
        CloudProviderError::InsufficientCapacity { offerings, .. } => {
            !offerings.is_empty()
                && offerings
                    .iter()
                    .all(|o| o.capacity_type == labels::CAPACITY_TYPE_SPOT)
        }
        CloudProviderError::LaunchFailed { reason, .. } => reason == SPOT_SLR_REASON,
        _ => false,
    };
    spot_only_refused
        && Requirements::from_requirements_with_min_values(claim.requirements()).is_ok_and(|reqs| {
            // No capacity-type requirement allows both.
            let allows = |value| reqs.get(labels::CAPACITY_TYPE).is_none_or(|r| r.has(value));
            allows(labels::CAPACITY_TYPE_SPOT) && allows(labels::CAPACITY_TYPE_ON_DEMAND)
        })
}

/// How a launch attempt ended.
pub struct Launched {
    pub outcome: Outcome,
    /// The name the launched machine's Node is expected to register under, when the
    /// provider knew it ([`expected_node_name`]).
    pub node: Option<String>,
}

impl From<Outcome> for Launched {
    fn from(outcome: Outcome) -> Self {
        Self {
            outcome,
            node: None,
        }
    }
}

/// Launches `claim` (not `Launched`, not deleting, holding its finalizer).
pub async fn launch(r: &Reconciler, claim: &NodeClaim) -> Result<Launched, ReconcileError> {
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let launched = match r.launched.get(&uid) {
        // Written already: this reconcile read the NodeClaim before the write's watch event,
        // which runs it again. Writing once more would double the launch's API writes (and
        // its count in `karpenter_nodeclaims_launched_total`) and nominate its pods again.
        Some(Memory::Recorded) => return Ok(Outcome::DONE.into()),
        Some(Memory::Unrecorded(launched)) => launched,
        None => {
            let attempt = r.fallback.attempt(claim);
            match r.cloud.create(&attempt).await {
                // Shared with the memory: a thousand launches wait for their status writes
                // at once, and a copy each was ten kilobytes apiece.
                Ok(launched) => r.launched.remember(&uid, launched),
                Err(error) if may_fall_back(&attempt, &error) => {
                    Box::pin(fall_back(r, claim, &uid, error)).await;
                    return Ok(Outcome::after(Duration::ZERO).into());
                }
                Err(error) if error.is_insufficient_capacity() => {
                    Box::pin(refused(r, claim, &error)).await?;
                    return Ok(Outcome::DONE.into());
                }
                // Fenced: this replica does not lead. No launch failed: nothing is marked
                // unavailable or recorded; the leader launches the NodeClaim.
                Err(error) if error.is_not_leader() => {
                    return Err(ReconcileError::Launch {
                        nodeclaim: claim.name().to_owned(),
                        source: error,
                    });
                }
                Err(error) => return Err(Box::pin(failed(r, claim, error)).await),
            }
        }
    };
    // Boxed, as every step: the launch's own future is as large as its largest step, and a
    // large round's launches wait for the client budget together.
    Box::pin(record(r, claim, &launched)).await?;
    r.launched.recorded(&uid);
    let pool = claim.nodepool_name().unwrap_or_default().to_owned();
    metrics::counter!(NODECLAIMS_LAUNCHED, "nodepool" => pool).increment(1);
    tracing::info!(
        nodeclaim = claim.name(),
        provider_id = launched.provider_id().unwrap_or_default(),
        instance_type = label(&launched, labels::INSTANCE_TYPE),
        zone = label(&launched, labels::ZONE),
        capacity_type = label(&launched, labels::CAPACITY_TYPE),
        allocatable = ?launched.status.as_ref().map(|s| &s.allocatable),
        "launched nodeclaim"
    );
    Ok(Launched {
        outcome: Outcome::DONE,
        node: expected_node_name(&launched).map(str::to_owned),
    })
}

/// Writes what was launched: the labels it resolved (under the NodeClaim's own) and the
/// annotations it added, then the status with `Launched=True`.
async fn record(
    r: &Reconciler,
    claim: &NodeClaim,
    launched: &NodeClaim,
) -> Result<(), ReconcileError> {
    let name = claim.name().to_owned();
    let body = MetadataPatch {
        metadata: LaunchedMetadata {
            labels: merged_labels(claim, launched),
            annotations: added_annotations(claim, launched),
        },
    };
    let params = PatchParams::default();
    Box::pin(r.nodeclaims.patch(&name, &params, &Patch::Merge(body)))
        .await
        .map_err(|source| ReconcileError::PatchNodeClaim {
            nodeclaim: name.clone(),
            source,
        })?;
    let mut set = ConditionSet::new(claim.conditions(), claim.metadata.generation, now());
    set.set_true(types::LAUNCHED);
    // What the registration step writes next while no Node exists, in this write as
    // upstream's one status write per reconcile has it, rather than in a write of its own.
    if !set.is_true(types::REGISTERED) {
        let awaiting = Awaiting::node_not_found();
        set.set_unknown(types::REGISTERED, awaiting.reason, &awaiting.message);
    }
    let reported = launched.status.as_ref();
    let body = StatusPatch {
        status: LaunchedStatus {
            provider_id: reported.and_then(|s| s.provider_id.as_deref()),
            image_id: reported.and_then(|s| s.image_id.as_deref()),
            capacity: reported.map(|s| &s.capacity),
            allocatable: reported.map(|s| &s.allocatable),
            conditions: set.into_vec(),
        },
    };
    Box::pin(
        r.nodeclaims
            .patch_status(&name, &params, &Patch::Merge(body)),
    )
    .await
    .map_err(|source| ReconcileError::PatchNodeClaimStatus {
        nodeclaim: name,
        source,
    })?;
    Ok(())
}

/// A launch's metadata patch. It and [`StatusPatch`] are serialized from their fields when
/// the request is built, not through a JSON tree first: a large round's launches wait for the
/// client budget together, each holding its patch, and a tree of thirty labels is several
/// times the size of its text.
#[derive(Debug, Serialize)]
struct MetadataPatch {
    metadata: LaunchedMetadata,
}

#[derive(Debug, Serialize)]
struct LaunchedMetadata {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// A launch's status patch: what the launch reported, borrowed from it, and the conditions.
/// Absent fields are written as `null`, which a merge patch reads as "remove".
#[derive(Debug, Serialize)]
struct StatusPatch<'a> {
    status: LaunchedStatus<'a>,
}

#[derive(Debug, Serialize)]
struct LaunchedStatus<'a> {
    #[serde(rename = "providerID")]
    provider_id: Option<&'a str>,
    #[serde(rename = "imageID")]
    image_id: Option<&'a str>,
    capacity: Option<&'a ResourceList>,
    allocatable: Option<&'a ResourceList>,
    conditions: Vec<Condition>,
}

/// The labels the launch resolved (instance type, zone, capacity type, …) under the
/// NodeClaim's own, which win.
fn merged_labels(claim: &NodeClaim, launched: &NodeClaim) -> BTreeMap<String, String> {
    let mut labels = launched.metadata.labels.clone().unwrap_or_default();
    labels.extend(claim.metadata.labels.clone().unwrap_or_default());
    labels
}

/// Annotations the launch added (the EC2NodeClass hash drift compares later); the
/// NodeClaim's own win.
fn added_annotations(claim: &NodeClaim, launched: &NodeClaim) -> BTreeMap<String, String> {
    let own = claim.metadata.annotations.clone().unwrap_or_default();
    launched
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !own.contains_key(k))
        .collect()
}

/// Spot was refused for a NodeClaim that allows on-demand: the refused offerings are marked,
/// the refusal recorded (condition, event and log, as any failed launch), and the next
/// attempt, at once, is on-demand.
async fn fall_back(r: &Reconciler, claim: &NodeClaim, uid: &str, error: CloudProviderError) {
    if let (Some(cache), CloudProviderError::InsufficientCapacity { offerings, .. }) =
        (&r.launch.offerings, &error)
    {
        cache.mark_offerings(offerings, INSUFFICIENT_CAPACITY_REASON);
    }
    r.fallback.insert(uid);
    tracing::info!(
        nodeclaim = claim.name(),
        "spot refused; launching the same nodeclaim on-demand"
    );
    // Retried at once rather than with backoff: the error is only recorded.
    let _recorded = failed(r, claim, error).await;
}

/// Marks what was refused, then deletes the NodeClaim so its pods are planned again.
async fn refused(
    r: &Reconciler,
    claim: &NodeClaim,
    error: &CloudProviderError,
) -> Result<(), ReconcileError> {
    let name = claim.name();
    r.launch
        .events
        .publish(events::insufficient_capacity(claim, error));
    tracing::warn!(nodeclaim = name, %error, "no capacity; deleting nodeclaim");
    if let Some(cache) = &r.launch.offerings {
        let offerings = refused_offerings(r, claim, error).await;
        cache.mark_offerings(&offerings, INSUFFICIENT_CAPACITY_REASON);
    }
    r.launch.created.withdraw(name);
    match r.nodeclaims.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(error) if is_status(&error, 404) => Ok(()),
        Err(source) => Err(ReconcileError::DeleteNodeClaim {
            nodeclaim: name.to_owned(),
            source,
        }),
    }
}

/// The offerings the error names, or, when it names none (the provider found nothing it
/// could try), every offering of the NodePool's instance types the NodeClaim allowed.
async fn refused_offerings(
    r: &Reconciler,
    claim: &NodeClaim,
    error: &CloudProviderError,
) -> Vec<OfferingRef> {
    if let CloudProviderError::InsufficientCapacity { offerings, .. } = error
        && !offerings.is_empty()
    {
        return offerings.clone();
    }
    let pool_name = claim.nodepool_name().unwrap_or_default();
    let Some(pool) = r.state.nodepools.get(&ObjectKey::new(None, pool_name)) else {
        return Vec::new();
    };
    let requirements = match Requirements::from_requirements_with_min_values(claim.requirements()) {
        Ok(requirements) => requirements,
        Err(error) => {
            tracing::warn!(nodeclaim = claim.name(), %error, "reading the requirements of a refused nodeclaim");
            return Vec::new();
        }
    };
    match r.cloud.get_instance_types(&pool).await {
        Ok(types) => offerings_allowed(&types, &requirements),
        Err(error) => {
            tracing::warn!(nodepool = pool_name, %error, "listing the instance types a refused nodeclaim allowed");
            Vec::new()
        }
    }
}

/// Records a failed launch on `Launched=False`, with an event and a log line naming the
/// provider's error, only when the reason or message changed (so repeating the same failure
/// neither floods events and logs nor restarts the launch TTL or re-triggers the reconcile
/// ahead of its backoff), and returns the error to retry on.
async fn failed(r: &Reconciler, claim: &NodeClaim, error: CloudProviderError) -> ReconcileError {
    let message = events::truncate(&error.to_string(), MAX_CONDITION_MESSAGE);
    let mut set = ConditionSet::new(claim.conditions(), claim.metadata.generation, now());
    if set.set(
        types::LAUNCHED,
        kerf::api::ConditionStatus::False,
        error.condition_reason(),
        &message,
    ) {
        let event = match error {
            CloudProviderError::NodeClassNotReady { .. } => {
                events::node_class_not_ready(claim, &error)
            }
            CloudProviderError::InsufficientCapacity { .. } => {
                events::insufficient_capacity(claim, &error)
            }
            _ => events::launch_failed(claim, &error),
        };
        r.launch.events.publish(event);
        tracing::warn!(
            nodeclaim = claim.name(),
            reason = error.condition_reason(),
            %error,
            "launching nodeclaim failed"
        );
        let body = json!({"status": {"conditions": set.into_vec()}});
        if let Err(write) = r
            .nodeclaims
            .patch_status(claim.name(), &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            tracing::debug!(nodeclaim = claim.name(), error = %write, "recording a failed launch");
        }
    }
    ReconcileError::Launch {
        nodeclaim: claim.name().to_owned(),
        source: error,
    }
}

fn now() -> Timestamp {
    Timestamp::now()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn the_patches_write_what_the_launch_reported_and_null_for_what_it_did_not() {
        let capacity = ResourceList::from([("cpu".to_owned(), Quantity("4".to_owned()))]);
        let status = StatusPatch {
            status: LaunchedStatus {
                provider_id: Some("aws:///us-east-1a/i-0abc"),
                image_id: None,
                capacity: Some(&capacity),
                allocatable: None,
                conditions: Vec::new(),
            },
        };
        assert_eq!(
            serde_json::to_value(&status).expect("serializes"),
            json!({"status": {
                "providerID": "aws:///us-east-1a/i-0abc",
                "imageID": null,
                "capacity": {"cpu": "4"},
                "allocatable": null,
                "conditions": [],
            }})
        );
        let metadata = MetadataPatch {
            metadata: LaunchedMetadata {
                labels: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
                annotations: BTreeMap::new(),
            },
        };
        assert_eq!(
            serde_json::to_value(&metadata).expect("serializes"),
            json!({"metadata": {"labels": {"a": "b"}, "annotations": {}}})
        );
    }

    /// A large round's launches wait for the client budget together, each future alive:
    /// every step is boxed so that none reserves room for the largest (a NodeClaim's own
    /// struct is a kilobyte and a half, a pending patch most of one).
    #[tokio::test]
    async fn a_waiting_launchs_futures_stay_small() {
        let r = std::sync::Arc::new(super::super::nominate::tests::reconciler());
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "a", "uid": "u"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                      "name": "default"}, "requirements": []},
        }))
        .expect("a NodeClaim");
        let reconcile = super::super::reconcile::run(&r, "a");
        let launch = launch(&r, &claim);
        let record = record(&r, &claim, &claim);
        let sizes = [
            std::mem::size_of_val(&reconcile),
            std::mem::size_of_val(&launch),
            std::mem::size_of_val(&record),
        ];
        assert!(
            sizes[0] <= 256 && sizes[1] <= 1280 && sizes[2] <= 512,
            "reconcile, launch and record futures: {sizes:?} bytes"
        );
    }
}
