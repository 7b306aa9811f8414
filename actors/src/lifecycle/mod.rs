//! The NodeClaim lifecycle, as upstream Karpenter's `nodeclaim.lifecycle` controller runs
//! it: launch (every NodeClaim not `Launched` is launched, idempotently, see [`launch`]),
//! registration (the Node with the NodeClaim's providerID is synced and its
//! `karpenter.sh/unregistered` taint lifted, so pods can bind), initialization (Ready,
//! startup and ephemeral taints gone, requested resources registered → `Initialized`, then
//! `Ready`) and liveness (deleting NodeClaims that do not launch or register in time). Once
//! a NodeClaim or Node is deleting, it is the [`crate::termination`] drainer's.
//!
//! One actor, [`NodeClaimLifecycle`], drives small reconcile functions. The PodWatcher's
//! Node and NodeClaim hooks tell it what changed ([`Changed`], sent with `try_deliver`: a
//! drop is repaired by the periodic resync); it keeps a deduplicated queue of targets and
//! runs at most [`MAX_CONCURRENT_RECONCILES`] at once, never two for the same target, each
//! reading cluster state afresh ([`crate::workqueue`]). A reconcile that asks to be run
//! again (a TTL) or fails (with exponential backoff) is scheduled on tokio time. Only the
//! leader reconciles, and only once cluster state has synced; gaining leadership resyncs.

pub(crate) mod conditions;
pub(crate) mod initialization;
mod launch;
mod launch_memory;
mod launching;
mod liveness;
mod nominate;
mod nomination_slots;
pub(crate) mod patch;
mod reconcile;
mod reconciler;
pub(crate) mod registration;
mod superseded;
mod unlisted;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use kerf::cloudprovider::CloudProvider;
use kube::Client;
use tokio::sync::watch;

use crate::mailbox::MailboxDepth;
use crate::shutdown::InFlight;
use crate::state::ClusterState;
use crate::workqueue::{Outcome, Reconciling, Reruns, WorkQueue, pump};
use reconciler::{ReconcileError, Reconciler};

pub use conditions::ConditionSet;
pub use launch::INSUFFICIENT_CAPACITY_REASON;
pub use launch_memory::LAUNCHED_MEMORY;
pub use launching::Launching;
pub use liveness::{LAUNCH_TIMEOUT_REASON, REGISTRATION_TIMEOUT_REASON};
pub use nominate::{
    FUTILITY_CHECK_PERIOD, LEFT_UNNOMINATED, PODS_NOMINATED, REGISTERED_BEFORE_NOMINATED,
};
pub use reconcile::is_managed;
pub use reconciler::LaunchDeps;

/// Each message only names an object and is handled in microseconds (queued, deduplicated),
/// so the mailbox fills only in bursts such as a relist of every Node; 1024 absorbs a large
/// cluster's burst, and anything dropped beyond it is picked up by the next resync.
pub const LIFECYCLE_MAILBOX_CAPACITY: usize = 1024;

/// Reconciles in flight at once. Each is a handful of API calls, or one launch (a CreateFleet
/// answers in one or two seconds): a round's hundreds of NodeClaims must launch together,
/// not 32 at a time, so this is upstream's lifecycle concurrency (1000). The API load stays
/// bounded by the client's own rate limit.
pub const MAX_CONCURRENT_RECONCILES: usize = 1000;

/// Timings of the lifecycle. The defaults are upstream's; tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// A NodeClaim not launched this long after creation (or after its last failed launch)
    /// is deleted.
    pub launch_ttl: Duration,
    /// A launched NodeClaim whose Node has not registered this long is deleted.
    pub registration_ttl: Duration,
    /// Every NodeClaim is reconciled again this often.
    pub resync_period: Duration,
    /// First retry delay after a failed reconcile; doubled per failure up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            launch_ttl: Duration::from_secs(5 * 60),
            registration_ttl: Duration::from_secs(15 * 60),
            resync_period: Duration::from_secs(60),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl LifecycleConfig {
    fn ttls(&self) -> liveness::Ttls {
        liveness::Ttls {
            launch: self.launch_ttl,
            registration: self.registration_ttl,
        }
    }
}

/// An object the lifecycle may have to act on changed.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "()")]
pub enum Changed {
    NodeClaim(String),
    /// The providerID ties the Node to its NodeClaim even once the Node is gone.
    Node {
        name: String,
        provider_id: Option<String>,
    },
}

/// What one reconcile works on: a NodeClaim, by name.
pub type Target = String;

/// The actor.
pub struct NodeClaimLifecycle {
    reconciler: Arc<Reconciler>,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    depth: MailboxDepth,
    queue: WorkQueue<Target>,
    reruns: Reruns<Target>,
}

/// What the actor needs from the daemon.
pub struct LifecycleDeps {
    pub state: Arc<ClusterState>,
    pub client: Client,
    pub cloud: Arc<dyn CloudProvider>,
    pub leader: watch::Receiver<bool>,
    pub shutdown: watch::Receiver<bool>,
    pub depth: MailboxDepth,
    pub launch: LaunchDeps,
}

impl NodeClaimLifecycle {
    pub fn new(deps: LifecycleDeps, config: LifecycleConfig) -> Self {
        let reconciler = Reconciler::new(deps.state, deps.client, deps.cloud, config, deps.launch);
        Self {
            reconciler: Arc::new(reconciler),
            leader: deps.leader,
            shutdown: deps.shutdown,
            depth: deps.depth,
            queue: WorkQueue::named(crate::metrics::controller::NODECLAIM_LIFECYCLE),
            reruns: Reruns::new(config.backoff, config.max_backoff),
        }
    }

    /// The launches this lifecycle has running, which a stopping daemon waits for.
    pub fn launches(&self) -> InFlight {
        self.reconciler.launches.clone()
    }

    /// The NodeClaims whose launch is running, which their termination waits for.
    pub fn launching(&self) -> Launching {
        self.reconciler.launching.clone()
    }

    /// The incarnation its supervisor starts after a panic: the same reconciler (its launch
    /// memory, so a launch whose status was not written is recorded rather than made again;
    /// its launches in flight; its on-demand fallbacks) and a fresh work queue, which the
    /// start's resync refills from the stores. Reconciles cut short by the panic run again.
    pub fn restarted(&self) -> Self {
        let config = self.reconciler.config;
        Self {
            reconciler: Arc::clone(&self.reconciler),
            leader: self.leader.clone(),
            shutdown: self.shutdown.clone(),
            depth: self.depth.clone(),
            queue: WorkQueue::named(crate::metrics::controller::NODECLAIM_LIFECYCLE),
            reruns: Reruns::new(config.backoff, config.max_backoff),
        }
    }

    /// Starts the actor with its bounded mailbox.
    pub fn start_bounded(self) -> Addr<Self> {
        Self::create(|ctx| {
            ctx.set_mailbox_capacity(LIFECYCLE_MAILBOX_CAPACITY);
            self
        })
    }

    fn can_reconcile(&self) -> bool {
        *self.leader.borrow() && self.reconciler.state.synced() && !*self.shutdown.borrow()
    }

    fn enqueue(&mut self, target: Target) {
        self.queue.add(target);
    }

    /// Every live NodeClaim.
    fn resync(&mut self, ctx: &mut Context<Self>) {
        if !self.can_reconcile() {
            return;
        }
        let state = Arc::clone(&self.reconciler.state);
        for claim in state.nodeclaims.snapshot() {
            if is_managed(&claim) && claim.metadata.deletion_timestamp.is_none() {
                self.enqueue(claim.name().to_owned());
            }
        }
        pump(self, ctx);
    }

    /// The targets a change concerns.
    fn targets(&self, change: Changed) -> Vec<Target> {
        match change {
            Changed::NodeClaim(name) => vec![name],
            Changed::Node { name, provider_id } => {
                let mut targets = Vec::new();
                let node = self.reconciler.state.node(&name);
                let claims = provider_id
                    .as_deref()
                    .map(|id| self.reconciler.state.nodeclaims_launched_as(id))
                    .unwrap_or_default();
                if claims.is_empty()
                    && node
                        .as_deref()
                        .is_some_and(registration::has_unregistered_taint)
                {
                    // As upstream: a Node no NodeClaim launched is not ours to register.
                    tracing::debug!(node = %name, "unregistered node without a nodeclaim");
                }
                targets.extend(claims.iter().map(|c| c.name().to_owned()));
                targets
            }
        }
    }

    /// Resyncs once per change of leadership (the stream ends with the election).
    fn watch_leadership(&self, ctx: &mut Context<Self>) {
        let changes = crate::leader::changes(self.leader.clone());
        ctx.spawn(
            changes
                .into_actor(self)
                .map(|_leading, act, ctx| act.resync(ctx))
                .finish(),
        );
    }
}

impl Reconciling for NodeClaimLifecycle {
    type Target = Target;
    type Error = ReconcileError;
    const CONTROLLER: &'static str = crate::metrics::controller::NODECLAIM_LIFECYCLE;
    const NAME: &'static str = "lifecycle";
    const MAX_CONCURRENT: usize = MAX_CONCURRENT_RECONCILES;

    fn queue(&mut self) -> &mut WorkQueue<Target> {
        &mut self.queue
    }

    fn reruns(&mut self) -> &mut Reruns<Target> {
        &mut self.reruns
    }

    fn can_reconcile(&self) -> bool {
        NodeClaimLifecycle::can_reconcile(self)
    }

    fn leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    fn reconcile(
        &self,
        target: Target,
    ) -> LocalBoxFuture<'static, Result<Outcome, ReconcileError>> {
        let reconciler = Arc::clone(&self.reconciler);
        Box::pin(async move {
            let run = reconcile::run(&reconciler, &target);
            crate::metrics::reconcile(Self::CONTROLLER, run).await
        })
    }
}

impl Actor for NodeClaimLifecycle {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let state = Arc::clone(&self.reconciler.state);
        ctx.spawn(
            async move { state.wait_synced().await }
                .into_actor(self)
                .map(|(), act, ctx| act.resync(ctx)),
        );
        ctx.run_interval(self.reconciler.config.resync_period, |act, ctx| {
            act.resync(ctx);
        });
        self.watch_leadership(ctx);
        let mut shutdown = self.shutdown.clone();
        ctx.spawn(
            async move {
                let _ = shutdown.wait_for(|s| *s).await;
            }
            .into_actor(self)
            .map(|(), _act, ctx| ctx.stop()),
        );
    }
}

impl Handler<Changed> for NodeClaimLifecycle {
    type Result = ();

    fn handle(&mut self, change: Changed, ctx: &mut Context<Self>) {
        self.depth.taken();
        if !self.can_reconcile() {
            return;
        }
        for target in self.targets(change) {
            self.enqueue(target);
        }
        pump(self, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams() {
        let config = LifecycleConfig::default();
        assert_eq!(config.launch_ttl, Duration::from_secs(300));
        assert_eq!(config.registration_ttl, Duration::from_secs(900));
    }
}
