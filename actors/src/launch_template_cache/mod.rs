//! The LaunchTemplateCache: owns the resolution of every EC2NodeClass against the cloud —
//! subnets, security groups, AMIs (SSM / DescribeImages) and the instance profile, which the
//! provider caches and builds its launch templates from — and writes what came out, as
//! upstream's node class status, hash and termination controllers do: the `status` with its
//! conditions, the `karpenter.k8s.aws/ec2nodeclass-hash` annotations, and the
//! `karpenter.k8s.aws/termination` finalizer, which holds a deleted node class until no
//! NodeClaim uses it and its launch templates (and managed instance profile) are deleted.
//!
//! It talks to the provider only through [`NodeClassReconciler`]. Requests arrive from the
//! PodWatcher (each node class change, dropped when the mailbox is full) and from a sweep
//! every [`RECONCILE_PERIOD`], which repairs drops and picks up cloud-side changes such as a
//! newer AMI. Resolution is single-flight per node class: a request for a class already in
//! flight is remembered and run once after it; at most [`MAX_CONCURRENT_RESOLUTIONS`] run
//! at once. Only the leader resolves and writes.

mod patches;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use kerf::api::{EC2NodeClass, NodeClaim};
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use crate::mailbox::{DeliverError, MailboxDepth, Outbox};
use crate::state::{ClusterState, ObjectKey};
pub use patches::{
    add_finalizer_patch, annotations_patch, carry_transition_times, has_finalizer,
    remove_finalizer_patch, status_patch,
};

/// Requests are tiny and handled in microseconds (resolution runs off the handler); the
/// capacity absorbs a burst of node class changes, and a dropped request is repaired by the
/// next sweep.
pub const LAUNCH_TEMPLATE_CACHE_MAILBOX_CAPACITY: usize = 64;

/// How often every node class is resolved again, whether it changed or not (upstream
/// re-resolves subnets every minute, AMIs and security groups every five).
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(60);

/// Node classes resolved at once (upstream's controller runs ten reconciles concurrently).
pub const MAX_CONCURRENT_RESOLUTIONS: usize = 10;

/// Resolve the node class `name` and write what changed.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct ReconcileNodeClass {
    pub name: String,
    /// The generation the change was seen at; `None` forces a resolution (the sweep).
    /// A change at a generation already resolved (a write of status or annotations, often
    /// this actor's own) needs none.
    pub generation: Option<i64>,
}

/// Why one node class reconcile failed (logged; the next sweep retries).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("resolving EC2NodeClass {name}: {source}")]
    Resolve {
        name: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("deleting the cloud resources of EC2NodeClass {name}: {source}")]
    Forget {
        name: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("writing {what} of EC2NodeClass {name}: {source}")]
    Write {
        name: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// The actor.
pub struct LaunchTemplateCache {
    state: Arc<ClusterState>,
    api: Api<EC2NodeClass>,
    cloud: Arc<dyn CloudProvider>,
    leader: watch::Receiver<bool>,
    depth: MailboxDepth,
    /// Node classes being resolved, with the generation each run started from.
    in_flight: HashMap<String, Option<i64>>,
    /// Requested while in flight: resolved once more when the running one ends.
    again: BTreeSet<String>,
    /// Requested while [`MAX_CONCURRENT_RESOLUTIONS`] were running.
    waiting: BTreeSet<String>,
    /// The generation each node class was last resolved and written at.
    resolved: HashMap<String, i64>,
}

impl LaunchTemplateCache {
    pub fn new(
        client: Client,
        state: Arc<ClusterState>,
        cloud: Arc<dyn CloudProvider>,
        leader: watch::Receiver<bool>,
        depth: MailboxDepth,
    ) -> Self {
        Self {
            state,
            api: Api::all(client),
            cloud,
            leader,
            depth,
            in_flight: HashMap::new(),
            again: BTreeSet::new(),
            waiting: BTreeSet::new(),
            resolved: HashMap::new(),
        }
    }

    fn is_deleting(&self, name: &str) -> bool {
        self.state
            .nodeclasses
            .get(&ObjectKey::new(None, name))
            .is_some_and(|nc| nc.metadata.deletion_timestamp.is_some())
    }

    fn start(&mut self, name: String, ctx: &mut Context<Self>) {
        let generation = self
            .state
            .nodeclasses
            .get(&ObjectKey::new(None, &name))
            .and_then(|nc| nc.metadata.generation);
        self.in_flight.insert(name.clone(), generation);
        crate::metrics::workqueue_depth(crate::metrics::controller::NODECLASS, self.waiting.len());
        crate::metrics::declare_max_concurrent_reconciles(
            crate::metrics::controller::NODECLASS,
            MAX_CONCURRENT_RESOLUTIONS,
        );
        let work = crate::metrics::reconcile(
            crate::metrics::controller::NODECLASS,
            reconcile(
                self.api.clone(),
                Arc::clone(&self.state),
                Arc::clone(&self.cloud),
                name.clone(),
            ),
        );
        ctx.spawn(work.into_actor(self).map(move |outcome, actor, ctx| {
            actor.in_flight.remove(&name);
            match outcome {
                Ok(Some(generation)) => {
                    actor.resolved.insert(name.clone(), generation);
                }
                Ok(None) => {
                    actor.resolved.remove(&name);
                }
                // Stepped down: the leader resolves and deletes.
                Err(error) if crate::leader::is_fenced(&error) => {
                    tracing::info!(%error, "reconciling EC2NodeClass fenced: not leading");
                }
                Err(error) => tracing::warn!(%error, "reconciling EC2NodeClass"),
            }
            let next = if actor.again.remove(&name) {
                Some(name)
            } else {
                actor.waiting.pop_first()
            };
            if let Some(next) = next {
                actor.start(next, ctx);
            }
        }));
    }
}

impl Actor for LaunchTemplateCache {
    type Context = Context<Self>;
}

impl Handler<ReconcileNodeClass> for LaunchTemplateCache {
    type Result = ();

    fn handle(&mut self, request: ReconcileNodeClass, ctx: &mut Context<Self>) {
        self.depth.taken();
        if !*self.leader.borrow() {
            return;
        }
        let ReconcileNodeClass { name, generation } = request;
        // A change at a generation resolved or being resolved is a write of status,
        // annotations or finalizers (mostly this actor's own): no new resolution needed.
        let covered = generation.is_some()
            && (self.resolved.get(&name) == generation.as_ref()
                || self.in_flight.get(&name) == Some(&generation));
        if covered && !self.is_deleting(&name) {
            return;
        }
        if self.in_flight.contains_key(&name) {
            self.again.insert(name);
        } else if self.in_flight.len() >= MAX_CONCURRENT_RESOLUTIONS {
            self.waiting.insert(name);
        } else {
            self.start(name, ctx);
        }
    }
}

/// Reconciles one node class; the generation it was resolved at, `None` when it is gone.
async fn reconcile(
    api: Api<EC2NodeClass>,
    state: Arc<ClusterState>,
    cloud: Arc<dyn CloudProvider>,
    name: String,
) -> Result<Option<i64>, ReconcileError> {
    let Some(reconciler) = cloud.node_class_reconciler() else {
        return Ok(None);
    };
    let Some(node_class) = state.nodeclasses.get(&ObjectKey::new(None, &name)) else {
        return Ok(None);
    };
    let write_error = |what| {
        let name = name.clone();
        move |source| ReconcileError::Write { name, what, source }
    };
    if node_class.metadata.deletion_timestamp.is_some() {
        finalize(&api, &state, &*cloud, &node_class).await?;
        return Ok(None);
    }
    if let Some(patch) = add_finalizer_patch(&node_class) {
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(write_error("the termination finalizer"))?;
    }
    let mut resolution =
        reconciler
            .resolve(&node_class)
            .await
            .map_err(|source| ReconcileError::Resolve {
                name: name.clone(),
                source,
            })?;
    if let Some(patch) = annotations_patch(&node_class, &resolution.annotations) {
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(write_error("the hash annotations"))?;
    }
    carry_transition_times(&mut resolution.status, node_class.status.as_ref());
    if let Some(patch) = status_patch(&resolution.status, node_class.status.as_ref()) {
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(write_error("the status"))?;
        log_readiness(&name, &resolution.status);
    }
    Ok(node_class.metadata.generation)
}

fn log_readiness(name: &str, status: &kerf::api::EC2NodeClassStatus) {
    use kerf::api::Conditions;
    match status
        .conditions
        .condition(kerf::api::condition::types::READY)
    {
        Some(ready) if ready.is_true() => {
            tracing::info!(ec2nodeclass = name, "EC2NodeClass is ready")
        }
        Some(ready) => tracing::warn!(
            ec2nodeclass = name,
            reason = %ready.reason,
            detail = %ready.message,
            "EC2NodeClass is not ready"
        ),
        None => {}
    }
}

/// A deleted node class: once no NodeClaim uses it, its cloud resources are deleted and the
/// finalizer released; until then it waits (the sweep checks again).
async fn finalize(
    api: &Api<EC2NodeClass>,
    state: &ClusterState,
    cloud: &dyn CloudProvider,
    node_class: &EC2NodeClass,
) -> Result<(), ReconcileError> {
    if !has_finalizer(node_class) {
        return Ok(());
    }
    let name = node_class.name();
    let users: Vec<String> = state
        .nodeclaims
        .snapshot()
        .iter()
        .filter(|claim| uses(claim, name))
        .map(|claim| claim.name().to_owned())
        .collect();
    if !users.is_empty() {
        tracing::info!(
            ec2nodeclass = name,
            nodeclaims = users.join(", "),
            "waiting on NodeClaim termination before deleting the EC2NodeClass"
        );
        return Ok(());
    }
    if let Some(reconciler) = cloud.node_class_reconciler() {
        reconciler
            .forget(name)
            .await
            .map_err(|source| ReconcileError::Forget {
                name: name.to_owned(),
                source,
            })?;
    }
    if let Some(patch) = remove_finalizer_patch(node_class) {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => tracing::info!(ec2nodeclass = name, "deleted EC2NodeClass resources"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(ReconcileError::Write {
                    name: name.to_owned(),
                    what: "the termination finalizer",
                    source,
                });
            }
        }
    }
    Ok(())
}

fn uses(claim: &NodeClaim, node_class: &str) -> bool {
    let reference = claim.node_class_ref();
    reference.kind == "EC2NodeClass" && reference.name == node_class
}

/// Asks for every node class once cluster state has synced, then every [`RECONCILE_PERIOD`]
/// and whenever this replica becomes leader, until `shutdown`.
pub async fn sweep(
    state: Arc<ClusterState>,
    out: Outbox<ReconcileNodeClass>,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        () = state.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    loop {
        for node_class in state.nodeclasses.snapshot() {
            let request = ReconcileNodeClass {
                name: node_class.name().to_owned(),
                generation: None,
            };
            if let Err(DeliverError::Closed(_)) = out.deliver(request).await {
                return;
            }
        }
        let is_leader = *leader.borrow();
        tokio::select! {
            () = tokio::time::sleep(RECONCILE_PERIOD) => {}
            Ok(_) = leader.wait_for(|l| *l), if !is_leader => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// The PodWatcher's hook: a changed node class is reconciled (dropped on a full mailbox,
/// which the sweep repairs); nothing is sent before cluster state has synced, since the
/// deletion path needs every NodeClaim known.
pub fn on_change(
    state: Arc<ClusterState>,
    out: Outbox<ReconcileNodeClass>,
) -> impl FnMut(&EC2NodeClass, crate::state::Change) + Send + 'static {
    move |node_class, change| {
        if change != crate::state::Change::Applied || !state.synced() {
            return;
        }
        let request = ReconcileNodeClass {
            name: node_class.name().to_owned(),
            generation: node_class.metadata.generation,
        };
        if let Err(err @ DeliverError::Closed(_)) = out.try_deliver(request) {
            tracing::warn!(error = %err, "requesting EC2NodeClass reconcile");
        }
    }
}
