//! Static NodePools under the `StaticCapacity` gate (upstream's `provisioning.static` and
//! `static.deprovisioning` controllers): each pass holds every static pool at its
//! `spec.replicas` NodeClaims. Short, it creates the missing ones (within `limits.nodes`)
//! through the NodeClaimCreator, stamped from the pool's template ([`kerf::static_pools`]),
//! so a deleted or terminated node is replaced once its NodeClaim is gone; over, it deletes
//! the ones [`kerf::static_pools::scale_down`] picks (unlaunched, then empty, then cheapest
//! to disrupt). Deletions bypass disruption budgets, as upstream documents; the termination
//! drain still honours PodDisruptionBudgets. A pool whose node class is not ready, or that is
//! being deleted, is left alone. The loop is state-driven ([`crate::requeue`]): woken by
//! NodePool and NodeClaim changes, no mailbox; the Provisioner never plans a static pool's
//! NodeClaims (see [`crate::provisioner::inventory::skip_unready_pools`]). With the gate
//! off the loop does not run, and each static pool is named in a warning ([`warn_gate_off`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::types;
use kerf::api::{ConditionStatus, NodeClaim, NodePool};
use kerf::catalog::Catalog;
use kerf::cluster::ControllerSettings;
use kerf::cluster::inventory::Inventory;
use kerf::cluster::snapshot;
use kerf::labels;
use kerf::pods::{LeanPod, PodLike};
use kerf::static_pools::{self, Member};
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::created_claims::CreatedClaims;
use crate::instance_types::InstanceTypeCache;
use crate::mailbox::Outbox;
use crate::nodeclaim_creator::{CREATED_REASON_PROVISIONING, CreateNodeClaim};
use crate::offering_cache::OfferingCacheHandle;
use crate::pod_watcher::Subscriber;
use crate::provisioner::MAX_INSTANCE_TYPES;
use crate::requeue::{self, MAX_SLEEP, Trigger};
use crate::state::{Change, ClusterState};

/// Upstream's controller name (reconcile metrics).
pub const CONTROLLER: &str = "provisioning.static";

/// The name the loop is supervised, and its panics counted, under.
pub const TASK_NAME: &str = "static_capacity";
/// How soon a pool held back by `limits.nodes` is looked at again (upstream's requeue).
pub const NODE_LIMIT_RECHECK: Duration = Duration::from_secs(30);

/// What a pass works with.
#[derive(Clone)]
pub struct StaticCapacityDeps {
    pub client: Client,
    pub state: Arc<ClusterState>,
    pub creator: Outbox<CreateNodeClaim>,
    /// NodeClaims created but not in the store yet: counted, so none is created twice.
    pub created: CreatedClaims,
    pub catalog: Catalog,
    pub offerings: Option<OfferingCacheHandle>,
    pub instance_types: InstanceTypeCache,
    pub controller: ControllerSettings,
    /// NodeClaims this loop deleted that the store does not show deleting yet.
    pub deleted: Deleted,
}

/// NodeClaims deleted by the loop whose deletion the watch has not delivered: counted as
/// deleting, so a pass right after a scale-down does not pick more of them.
#[derive(Clone, Debug, Default)]
pub struct Deleted(Arc<Mutex<HashSet<String>>>);

impl Deleted {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Its deletions the stores do not show yet: a name is dropped once `claims` shows that
    /// NodeClaim deleting or gone.
    fn unseen(&self, claims: &[Arc<NodeClaim>]) -> HashSet<String> {
        let mut names = self.lock();
        names.retain(|name| {
            claims
                .iter()
                .any(|c| c.name_any() == *name && c.metadata.deletion_timestamp.is_none())
        });
        names.clone()
    }

    fn insert(&self, name: &str) {
        self.lock().insert(name.to_owned());
    }
}

/// Why a pass stopped short.
#[derive(Debug, thiserror::Error)]
pub enum StaticCapacityError {
    #[error("building NodePool {pool}'s NodeClaim template: {reason}")]
    Template { pool: String, reason: String },
    #[error("creating a NodeClaim for static NodePool {pool}: {reason}")]
    Create { pool: String, reason: String },
    #[error("deleting NodeClaim {name} of static NodePool {pool}: {source}")]
    Delete {
        pool: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What one pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// NodeClaims created, by pool.
    pub created: Vec<(String, u64)>,
    /// NodeClaims deleted to come down to the replicas.
    pub deleted: Vec<String>,
    /// Pools `limits.nodes` kept short of their replicas.
    pub at_limit: Vec<String>,
}

/// One pass over every static pool.
pub async fn reconcile(deps: &StaticCapacityDeps) -> Result<Pass, StaticCapacityError> {
    let state = &deps.state;
    let mut claims = state.nodeclaims.snapshot();
    claims.extend(deps.created.unseen(state).into_iter().map(Arc::new));
    let deleted = deps.deleted.unseen(&claims);
    let deleting_now =
        |c: &NodeClaim| c.metadata.deletion_timestamp.is_some() || deleted.contains(&c.name_any());
    let mut pass = Pass::default();
    for pool in state.nodepools.snapshot() {
        let Some(replicas) = pool.replicas() else {
            continue;
        };
        // As upstream's: only a Ready pool (its class resolved) that is not being deleted.
        if pool.metadata.deletion_timestamp.is_some()
            || state.node_class_readiness(&pool).status != ConditionStatus::True
        {
            continue;
        }
        let own: Vec<&Arc<NodeClaim>> = claims
            .iter()
            .filter(|c| c.labels().get(labels::NODEPOOL).map(String::as_str) == Some(pool.name()))
            .collect();
        let deleting = own.iter().filter(|c| deleting_now(c)).count() as u64;
        // A disruption candidate (its replacement staged beside it) counts as present, so
        // nothing is created in its place, but scale-down never picks it, nor counts it: as
        // upstream's, which scales down on running NodeClaims alone.
        let (disrupted, live): (Vec<&Arc<NodeClaim>>, Vec<&Arc<NodeClaim>>) = own
            .iter()
            .copied()
            .filter(|c| !deleting_now(c))
            .partition(|c| {
                c.conditions()
                    .iter()
                    .any(|x| x.type_ == types::DISRUPTION_REASON && x.is_true())
            });
        let present = (live.len() + disrupted.len()) as u64;
        let count = static_pools::to_create(replicas, present, deleting, pool.node_limit());
        if count > 0 {
            create(deps, &pool, count).await?;
            pass.created.push((pool.name().to_owned(), count));
        } else if replicas > present + deleting {
            tracing::info!(nodepool = pool.name(), "nodepool node limit reached");
            pass.at_limit.push(pool.name().to_owned());
        }
        if live.len() as u64 > replicas {
            let members = members(state, &pool, &live);
            for name in static_pools::scale_down(replicas, &members) {
                delete(deps, &pool, &name).await?;
                pass.deleted.push(name);
            }
        }
    }
    Ok(pass)
}

/// Creates `count` NodeClaims of `pool`'s template.
async fn create(
    deps: &StaticCapacityDeps,
    pool: &Arc<NodePool>,
    count: u64,
) -> Result<(), StaticCapacityError> {
    let template = template(deps, pool).await?;
    for _ in 0..count {
        let created = deps
            .creator
            .deliver(CreateNodeClaim {
                claim: template.clone(),
                pool: Arc::clone(pool),
                reason: CREATED_REASON_PROVISIONING,
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(|reason| StaticCapacityError::Create {
                pool: pool.name().to_owned(),
                reason,
            })?;
        tracing::info!(
            nodepool = pool.name(),
            nodeclaim = created.name_any(),
            "created nodeclaim for static nodepool"
        );
    }
    Ok(())
}

/// The pool's NodeClaim template from the instance types the Provisioner would use now and
/// the DaemonSets that would run on the node.
async fn template(
    deps: &StaticCapacityDeps,
    pool: &Arc<NodePool>,
) -> Result<kerf::scheduling::PlannedNodeClaim, StaticCapacityError> {
    let (state, catalog, offerings, types, controller) = (
        Arc::clone(&deps.state),
        deps.catalog,
        deps.offerings.clone(),
        deps.instance_types.clone(),
        deps.controller,
    );
    let wanted = NodePool::clone(pool);
    let name = pool.name().to_owned();
    let built = tokio::task::spawn_blocking(move || {
        let full = crate::provisioner::inventory::of(&state, Vec::new());
        let inventory = Inventory {
            node_pools: vec![wanted],
            node_classes: full.node_classes,
            daemon_pods: full.daemon_pods,
            ..Inventory::default()
        };
        let mut source = types.round(&catalog, offerings.as_ref());
        let built = snapshot::build_with(&inventory, controller, &mut source);
        types.finish_round();
        let mut snapshot = built.map_err(|e| e.to_string())?;
        let mut input = snapshot
            .input
            .node_pools
            .pop()
            .ok_or_else(|| "the NodePool has no scheduling input".to_owned())?;
        input.limits = None;
        static_pools::template_claim(&input, &snapshot.input.daemonsets, MAX_INSTANCE_TYPES)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no instance type of the NodePool can launch".to_owned())
    })
    .await
    .map_err(|e| crate::supervisor::report_join_error(TASK_NAME, e))
    .and_then(|r| r);
    built.map_err(|reason| StaticCapacityError::Template { pool: name, reason })
}

/// `live` NodeClaims of `pool` as scale-down weighs them.
fn members(state: &ClusterState, pool: &NodePool, live: &[&Arc<NodeClaim>]) -> Vec<Member> {
    let now = Timestamp::now();
    let mut pods_by_node: HashMap<String, Vec<Arc<LeanPod>>> = HashMap::new();
    for pod in state.pods.snapshot() {
        if let Some(node) = pod.node_name() {
            pods_by_node
                .entry(node.to_owned())
                .or_default()
                .push(pod.clone());
        }
    }
    live.iter()
        .map(|claim| {
            let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
            let pods = node
                .as_ref()
                .and_then(|n| pods_by_node.get(n))
                .map_or(&[][..], Vec::as_slice);
            let do_not_disrupt = pods
                .iter()
                .any(|p| kerf::disruption::blocks_disruption(&**p, now));
            let reschedulable = pods
                .iter()
                .any(|p| kerf::disruption::is_reschedulable(&**p));
            let cost: f64 = pods
                .iter()
                .map(|p| kerf::disruption::eviction_cost(&**p))
                .sum();
            Member {
                node_claim: claim.name_any(),
                launched: claim.provider_id().is_some_and(|p| !p.is_empty()),
                empty: !reschedulable && !do_not_disrupt,
                do_not_disrupt,
                priority: static_pools::priority(claim.metadata.annotations.as_ref()),
                disruption_cost: cost * lifetime_remaining(claim, pool, now),
            }
        })
        .collect()
}

/// Share of the NodeClaim's `expireAfter` still ahead, in [0, 1]; 1 without expiry.
fn lifetime_remaining(claim: &NodeClaim, pool: &NodePool, now: Timestamp) -> f64 {
    let (Some(after), Some(created)) = (
        pool.expire_after().as_std(),
        claim.metadata.creation_timestamp.as_ref(),
    ) else {
        return 1.0;
    };
    if after.is_zero() {
        return 1.0;
    }
    let age = (now.as_second() - created.0.as_second()) as f64;
    let total = after.as_secs_f64();
    ((total - age) / total).clamp(0.0, 1.0)
}

/// Deletes `name`; gone already is done.
async fn delete(
    deps: &StaticCapacityDeps,
    pool: &NodePool,
    name: &str,
) -> Result<(), StaticCapacityError> {
    let api: Api<NodeClaim> = Api::all(deps.client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            deps.deleted.insert(name);
            tracing::info!(
                nodepool = pool.name(),
                nodeclaim = name,
                replicas = pool.replicas(),
                "deleting nodeclaim to satisfy replica count"
            );
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(StaticCapacityError::Delete {
            pool: pool.name().to_owned(),
            name: name.to_owned(),
            source,
        }),
    }
}

/// With the gate off: a NodePool watch subscriber that warns once per static pool that its
/// `spec.replicas` is ignored, as upstream ignores it then (no NodeClaim is created for it,
/// and the Provisioner leaves it out all the same).
pub fn warn_gate_off() -> Subscriber<NodePool> {
    let mut warned = HashSet::new();
    Box::new(move |pool: &NodePool, change| {
        if change == Change::Applied && pool.is_static() && warned.insert(pool.name().to_owned()) {
            tracing::warn!(
                nodepool = pool.name(),
                "spec.replicas is ignored: the StaticCapacity feature gate is off"
            );
        }
    })
}

/// Runs passes until `shutdown`, while this replica leads.
pub async fn run(
    deps: StaticCapacityDeps,
    trigger: Trigger,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let state = Arc::clone(&deps.state);
    requeue::run(state, trigger, leader, shutdown, move || {
        let deps = deps.clone();
        async move {
            match crate::metrics::reconcile(CONTROLLER, reconcile(&deps)).await {
                Ok(pass) if !pass.at_limit.is_empty() => NODE_LIMIT_RECHECK,
                Ok(_) => MAX_SLEEP,
                Err(error) => {
                    tracing::warn!(%error, "holding static nodepools at their replicas");
                    requeue::MIN_GAP
                }
            }
        }
    })
    .await;
}
