//! What upstream's NodePool controllers keep on every NodePool, in one pass over the pools:
//! - `nodepool.hash`: the `karpenter.sh/nodepool-hash` and `-hash-version` annotations
//!   ([`kerf::nodepool_hash`]); when the pool's hash version is not the current one, its
//!   NodeClaims of another version are re-stamped first (version, and the hash unless the
//!   NodeClaim is already drifted), so a new hash algorithm never reads as drift;
//! - `nodepool.counter`: `status.resources` (cpu, memory, pods, ephemeral-storage and `nodes`
//!   start at zero, plus the capacity of the pool's machines, a registered node replacing its
//!   NodeClaim, the same accounting as `karpenter_nodepools_usage`) and `status.nodes`;
//! - `nodepool.readiness` and `nodepool.validation`: `NodeClassReady` (the node class's
//!   `Ready`, with its message), `ValidationSucceeded` (the controller-side checks of
//!   [`kerf::validation::runtime`]) and the root `Ready`, `True` when both are.
//!
//! Writes are merge patches: annotations merge key by key, the status is locked to the
//! resourceVersion read. The pass is woken by NodePool, NodeClaim, Node and node class
//! changes and repeats every [`PERIOD`] (upstream's counter requeues every 5 s).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::types;
use kerf::api::{Condition, ConditionStatus, Conditions, NodeClaim, NodePool, ResourceList};
use kerf::labels;
use kerf::nodepool_hash::{NODEPOOL_HASH_VERSION, hash_annotations, nodepool_hash};
use kerf::resources::Quantity;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::lifecycle::patch::locked;
use crate::requeue::{self, Trigger};
use crate::state::ClusterState;

/// Upstream's controller name (reconcile metrics).
pub const CONTROLLER: &str = "nodepool.status";
/// How often the status is recomputed without a change announcing it.
pub const PERIOD: Duration = Duration::from_secs(5);
/// Resources `status.resources` always lists, as upstream's counter.
pub const BASE_RESOURCES: [&str; 5] = ["cpu", "ephemeral-storage", "memory", "nodes", "pods"];

pub const VALIDATION_FAILED: &str = "NodePoolValidationFailed";
pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";

/// `status.resources` and `status.nodes` of every pool with machines.
pub fn usage(state: &ClusterState) -> HashMap<String, (ResourceList, i64)> {
    crate::cluster_metrics::machines_by_pool(state)
        .into_iter()
        .map(|(pool, machines)| {
            let mut totals: BTreeMap<String, Quantity> = BTreeMap::new();
            for list in &machines {
                for (resource, quantity) in list {
                    if let Ok(q) = Quantity::parse(&quantity.0) {
                        let t = totals.entry(resource.clone()).or_insert(Quantity::ZERO);
                        *t = t.saturating_add(q);
                    }
                }
            }
            let count = i64::try_from(machines.len()).unwrap_or(i64::MAX);
            let mut list: ResourceList = totals
                .into_iter()
                .map(|(r, q)| (r, ApiQuantity(q.to_string())))
                .collect();
            list.insert("nodes".to_owned(), ApiQuantity(count.to_string()));
            (pool, (list, count))
        })
        .collect()
}

/// The NodePool's conditions as upstream's readiness and validation controllers set them.
fn conditions(state: &ClusterState, pool: &NodePool, now: Timestamp) -> Vec<Condition> {
    let readiness = state.node_class_readiness(pool);
    let class_ready = (readiness.status, readiness.reason, readiness.message);
    let problems = serde_json::to_value(pool)
        .map(|v| kerf::validation::runtime::validate_nodepool(&v))
        .unwrap_or_default();
    let validation = if problems.is_empty() {
        (
            ConditionStatus::True,
            types::VALIDATION_SUCCEEDED,
            String::new(),
        )
    } else {
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        (ConditionStatus::False, VALIDATION_FAILED, text.join("; "))
    };
    let dependents = [
        (types::NODE_CLASS_READY, class_ready.0),
        (types::VALIDATION_SUCCEEDED, validation.0),
    ];
    let failing: Vec<&str> = dependents
        .iter()
        .filter(|(_, s)| *s != ConditionStatus::True)
        .map(|(t, _)| *t)
        .collect();
    let ready = if failing.is_empty() {
        (ConditionStatus::True, types::READY, String::new())
    } else if dependents.iter().any(|(_, s)| *s == ConditionStatus::False) {
        let message = format!("{} not True", failing.join(", "));
        (ConditionStatus::False, UNHEALTHY_DEPENDENTS, message)
    } else {
        let message = format!("{} not True", failing.join(", "));
        (ConditionStatus::Unknown, UNHEALTHY_DEPENDENTS, message)
    };
    let old = pool.conditions();
    let mut out: Vec<Condition> = [
        (types::NODE_CLASS_READY, class_ready),
        (types::READY, ready),
        (types::VALIDATION_SUCCEEDED, validation),
    ]
    .into_iter()
    .map(|(type_, (status, reason, message))| {
        condition(
            old,
            pool.metadata.generation,
            type_,
            status,
            reason,
            &message,
            now,
        )
    })
    .collect();
    // Conditions other controllers own (e.g. `NodeRegistrationHealthy`) are kept.
    out.extend(
        old.iter()
            .filter(|c| {
                ![
                    types::NODE_CLASS_READY,
                    types::READY,
                    types::VALIDATION_SUCCEEDED,
                ]
                .contains(&c.type_.as_str())
            })
            .cloned(),
    );
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// One condition, keeping its transition time while its status holds.
fn condition(
    old: &[Condition],
    generation: Option<i64>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Condition {
    let since = old
        .condition(type_)
        .filter(|c| c.status == status)
        .map_or(Time(now), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status,
        observed_generation: generation,
        last_transition_time: since,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// The status `pool` should have.
pub fn wanted_status(
    state: &ClusterState,
    pool: &NodePool,
    usage: Option<&(ResourceList, i64)>,
    now: Timestamp,
) -> kerf::api::nodepool::NodePoolStatus {
    let mut status = pool.status.clone().unwrap_or_default();
    let mut resources: ResourceList = BASE_RESOURCES
        .iter()
        .map(|r| ((*r).to_owned(), ApiQuantity("0".to_owned())))
        .collect();
    if let Some((list, _)) = usage {
        resources.extend(list.clone());
    }
    status.resources = resources;
    status.nodes = usage.map_or(0, |(_, n)| *n);
    status.conditions = conditions(state, pool, now);
    status
}

/// One pass over every NodePool; returns the names of the pools written.
pub async fn reconcile(client: &Client, state: &ClusterState) -> Result<Vec<String>, kube::Error> {
    let usage = usage(state);
    let pools: Api<NodePool> = Api::all(client.clone());
    let mut written = Vec::new();
    for pool in state.nodepools.snapshot() {
        if pool.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pool.name().to_owned();
        if pool
            .annotations()
            .get(labels::NODEPOOL_HASH_VERSION)
            .map(String::as_str)
            != Some(NODEPOOL_HASH_VERSION)
        {
            restamp_claims(client, state, &pool).await?;
        }
        let stamps = hash_annotations(&pool);
        let mut changed = false;
        if stamps
            .iter()
            .any(|(k, v)| pool.annotations().get(k) != Some(v))
        {
            let patch = serde_json::json!({"metadata": {"annotations": stamps}});
            let params = PatchParams::default();
            if !ignore_gone(pools.patch(&name, &params, &Patch::Merge(patch)).await)? {
                continue;
            }
            changed = true;
        }
        let mut wanted = (*pool).clone();
        wanted.status = Some(wanted_status(
            state,
            &pool,
            usage.get(&name),
            Timestamp::now(),
        ));
        if let Some(patch) = locked(&*pool, &wanted, pool.metadata.resource_version.as_deref()) {
            let params = PatchParams::default();
            changed |= ignore_gone(
                pools
                    .patch_status(&name, &params, &Patch::Merge(patch))
                    .await,
            )?;
        }
        if changed {
            written.push(name);
        }
    }
    Ok(written)
}

/// Puts the current hash version (and, unless drifted, the current hash) on the pool's
/// NodeClaims of another version, as upstream's hash controller does before it bumps the
/// pool's version.
async fn restamp_claims(
    client: &Client,
    state: &ClusterState,
    pool: &NodePool,
) -> Result<(), kube::Error> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let hash = nodepool_hash(pool);
    for claim in state
        .nodeclaims
        .snapshot()
        .into_iter()
        .filter(|c| c.nodepool_name() == Some(pool.name()))
        .filter(|c| {
            c.annotations()
                .get(labels::NODEPOOL_HASH_VERSION)
                .map(String::as_str)
                != Some(NODEPOOL_HASH_VERSION)
        })
    {
        let mut annotations = BTreeMap::from([(
            labels::NODEPOOL_HASH_VERSION,
            NODEPOOL_HASH_VERSION.to_owned(),
        )]);
        if claim.conditions().condition(types::DRIFTED).is_none() {
            annotations.insert(labels::NODEPOOL_HASH, hash.clone());
        }
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        ignore_gone(
            api.patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await,
        )?;
    }
    Ok(())
}

/// `Ok(false)` when the object is gone or changed meanwhile.
fn ignore_gone<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        // Gone, or changed since it was read: the next pass starts from the newer object.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Runs passes until `shutdown`.
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    trigger: Trigger,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let pass_state = Arc::clone(&state);
    requeue::run(state, trigger, leader, shutdown, move || {
        let (client, state) = (client.clone(), Arc::clone(&pass_state));
        async move {
            if let Err(error) =
                crate::metrics::reconcile(CONTROLLER, reconcile(&client, &state)).await
            {
                tracing::warn!(%error, "nodepool status");
            }
            PERIOD
        }
    })
    .await;
}
