//! The TerminationDrainer: everything that happens to a NodeClaim or Node once it has a
//! deletion timestamp, as upstream Karpenter's `nodeclaim.lifecycle` finalizer and
//! `node.termination` controller do it. Whoever decides a disruption (the orchestrator,
//! expiration, interruption, repair, a user) only deletes the NodeClaim; this actor writes
//! its termination timestamp ([`nodeclaim`]), deletes its Node, drains the Node in
//! upstream's order with per-pod backoff and forced deletion at the termination timestamp
//! ([`node`], [`drain`], [`evict`]), waits for volume detachment ([`volumes`]), terminates
//! the instance and releases both finalizers. Nobody else evicts pods.
//!
//! The actor mirrors the lifecycle's: the PodWatcher's Node and NodeClaim hooks tell it
//! what changed ([`Changed`], sent with `try_deliver`: a drop is repaired by the periodic
//! resync); a deduplicated work queue runs at most [`MAX_CONCURRENT_RECONCILES`] targets at
//! once, never two for the same target, each reading cluster state afresh; a reconcile
//! that asks to run again (a drain in progress) or fails (with exponential backoff) is
//! scheduled on tokio time. Only the leader reconciles, and only once cluster state has
//! synced; its writes go through the leader-fenced client.

mod backoff;
mod drain;
mod error;
mod events;
mod evict;
mod node;
mod nodeclaim;
mod reconcile;
#[cfg(test)]
mod testing;
mod volumes;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use kerf::cloudprovider::CloudProvider;
use kerf::finalizers::has_termination_finalizer;
use kerf::pods::PodLike;
use kube::{Api, Client};
use tokio::sync::watch;

use crate::events::EventRecorder;
pub use crate::lifecycle::Changed;
use crate::lifecycle::Launching;
use crate::mailbox::MailboxDepth;
use crate::state::{ClusterState, ObjectKey};
use crate::workqueue::{Reconciling, Reruns, WorkQueue, pump};
pub use error::TerminationError;
use reconcile::{Outcome, Terminator};

/// Each message only names an object and is handled in microseconds (queued,
/// deduplicated), so the mailbox fills only in bursts such as a relist of every Node; 1024
/// absorbs a large cluster's burst, and anything dropped beyond it is picked up by the next
/// resync.
pub const TERMINATION_MAILBOX_CAPACITY: usize = 1024;

/// Terminations in flight at once. Each step is a few API calls plus at most
/// [`evict::EVICTION_CONCURRENCY`] evictions; a consolidation or a drift rollout deletes
/// tens to hundreds of nodes together, and they must drain together, as upstream's 100
/// concurrent eviction workers allow. The API load stays bounded by the client's rate limit.
pub const MAX_CONCURRENT_RECONCILES: usize = 100;

/// Timings of termination. The defaults are upstream's; tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminationConfig {
    /// Every deleting NodeClaim and Node is reconciled again this often.
    pub resync_period: Duration,
    /// A drain (or a NodeClaim waiting for its Node to go) is looked at again this often.
    pub drain_requeue: Duration,
    /// An instance being terminated is checked again this often.
    pub instance_requeue: Duration,
    /// The longest one eviction request may take; an unanswered one is retried later.
    pub eviction_timeout: Duration,
    /// First retry delay after a failed reconcile; doubled per failure up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for TerminationConfig {
    fn default() -> Self {
        Self {
            resync_period: Duration::from_secs(60),
            drain_requeue: Duration::from_secs(1),
            instance_requeue: Duration::from_secs(5),
            eviction_timeout: Duration::from_secs(5),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// Running totals, for reports and tests.
#[derive(Debug, Default)]
pub struct TerminationStats {
    evictions_blocked: AtomicU64,
    pods_evicted: AtomicU64,
}

impl TerminationStats {
    /// Evictions a disruption budget refused.
    pub fn evictions_blocked(&self) -> u64 {
        self.evictions_blocked.load(Ordering::Relaxed)
    }

    /// Pods whose eviction the API server accepted.
    pub fn pods_evicted(&self) -> u64 {
        self.pods_evicted.load(Ordering::Relaxed)
    }

    fn record_blocked(&self) {
        self.evictions_blocked.fetch_add(1, Ordering::Relaxed);
    }

    fn record_evicted(&self) {
        self.pods_evicted.fetch_add(1, Ordering::Relaxed);
    }
}

/// What one reconcile works on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// A deleting NodeClaim holding the termination finalizer.
    NodeClaim(String),
    /// A deleting Node holding the termination finalizer.
    Node(String),
}

/// What the actor needs from the daemon.
pub struct TerminationDeps {
    pub state: Arc<ClusterState>,
    pub client: Client,
    pub cloud: Arc<dyn CloudProvider>,
    pub events: EventRecorder,
    /// The lifecycle's launches in flight, which a NodeClaim's termination waits for.
    pub launching: Launching,
    pub leader: watch::Receiver<bool>,
    pub shutdown: watch::Receiver<bool>,
    pub depth: MailboxDepth,
}

/// The actor.
pub struct TerminationDrainer {
    terminator: Arc<Terminator>,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    depth: MailboxDepth,
    queue: WorkQueue<Target>,
    reruns: Reruns<Target>,
}

impl TerminationDrainer {
    pub fn new(deps: TerminationDeps, config: TerminationConfig) -> (Self, Arc<TerminationStats>) {
        let stats = Arc::new(TerminationStats::default());
        let terminator = Terminator {
            nodes: Api::all(deps.client.clone()),
            nodeclaims: Api::all(deps.client.clone()),
            attachments: Api::all(deps.client.clone()),
            state: deps.state,
            client: deps.client,
            cloud: deps.cloud,
            config,
            stats: Arc::clone(&stats),
            events: deps.events,
            launching: deps.launching,
            backoffs: Default::default(),
            terminating_since: Default::default(),
        };
        let actor = Self {
            terminator: Arc::new(terminator),
            leader: deps.leader,
            shutdown: deps.shutdown,
            depth: deps.depth,
            queue: WorkQueue::named(crate::metrics::controller::NODE_TERMINATION),
            reruns: Reruns::new(config.backoff, config.max_backoff),
        };
        (actor, stats)
    }

    /// The incarnation its supervisor starts after a panic: the same terminator (its
    /// eviction backoffs and totals) and a fresh work queue, which the start's resync refills
    /// from the stores (every deleting NodeClaim and Node). Drains cut short run again.
    pub fn restarted(&self) -> Self {
        let config = self.terminator.config;
        Self {
            terminator: Arc::clone(&self.terminator),
            leader: self.leader.clone(),
            shutdown: self.shutdown.clone(),
            depth: self.depth.clone(),
            queue: WorkQueue::named(crate::metrics::controller::NODE_TERMINATION),
            reruns: Reruns::new(config.backoff, config.max_backoff),
        }
    }

    fn can_reconcile(&self) -> bool {
        *self.leader.borrow() && self.terminator.state.synced() && !*self.shutdown.borrow()
    }

    /// Every deleting NodeClaim and Node holding the finalizer; drops the eviction backoff
    /// of pods that are gone.
    fn resync(&mut self, ctx: &mut Context<Self>) {
        if !self.can_reconcile() {
            return;
        }
        let state = Arc::clone(&self.terminator.state);
        for claim in state.nodeclaims.snapshot() {
            if claim.metadata.deletion_timestamp.is_some() {
                self.queue.add(Target::NodeClaim(claim.name().to_owned()));
            }
        }
        for node in state.nodes.snapshot() {
            if is_terminating(&node) {
                let name = node.metadata.name.clone().unwrap_or_default();
                self.queue.add(Target::Node(name));
            }
        }
        self.terminator.backoffs().retain(|pod| {
            state
                .pods
                .get(&ObjectKey::new(Some(&pod.namespace), &pod.name))
                .is_some_and(|p| p.meta().uid == Some(pod.uid.as_str()))
        });
        pump(self, ctx);
    }

    /// The targets a change concerns: a deleting NodeClaim, a terminating Node, and the
    /// deleting NodeClaims waiting for that Node to go.
    fn targets(&self, change: Changed) -> Vec<Target> {
        match change {
            Changed::NodeClaim(name) => vec![Target::NodeClaim(name)],
            Changed::Node { name, provider_id } => {
                let mut targets = Vec::new();
                if self
                    .terminator
                    .state
                    .node(&name)
                    .as_deref()
                    .is_some_and(is_terminating)
                {
                    targets.push(Target::Node(name));
                }
                let claims = provider_id
                    .as_deref()
                    .map(|id| self.terminator.state.nodeclaims_launched_as(id))
                    .unwrap_or_default();
                targets.extend(
                    claims
                        .iter()
                        .filter(|c| c.metadata.deletion_timestamp.is_some())
                        .map(|c| Target::NodeClaim(c.name().to_owned())),
                );
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

/// A deleting Node still holding the termination finalizer.
fn is_terminating(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.metadata.deletion_timestamp.is_some()
        && has_termination_finalizer(node.metadata.finalizers.as_ref())
}

impl Reconciling for TerminationDrainer {
    type Target = Target;
    type Error = TerminationError;
    const CONTROLLER: &'static str = crate::metrics::controller::NODE_TERMINATION;
    const NAME: &'static str = "termination";
    const MAX_CONCURRENT: usize = MAX_CONCURRENT_RECONCILES;

    fn queue(&mut self) -> &mut WorkQueue<Target> {
        &mut self.queue
    }

    fn reruns(&mut self) -> &mut Reruns<Target> {
        &mut self.reruns
    }

    fn can_reconcile(&self) -> bool {
        TerminationDrainer::can_reconcile(self)
    }

    fn leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// A NodeClaim's reconcile counts as the lifecycle controller's (upstream's
    /// `nodeclaim.lifecycle` finalizer), a Node's as `node.termination`.
    fn reconcile(
        &self,
        target: Target,
    ) -> LocalBoxFuture<'static, Result<Outcome, TerminationError>> {
        let terminator = Arc::clone(&self.terminator);
        Box::pin(async move {
            match &target {
                Target::NodeClaim(name) => {
                    let run = nodeclaim::reconcile(&terminator, name);
                    crate::metrics::reconcile(crate::metrics::controller::NODECLAIM_LIFECYCLE, run)
                        .await
                }
                Target::Node(name) => {
                    let run = node::reconcile(&terminator, name);
                    crate::metrics::reconcile(Self::CONTROLLER, run).await
                }
            }
        })
    }
}

impl Actor for TerminationDrainer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let state = Arc::clone(&self.terminator.state);
        ctx.spawn(
            async move { state.wait_synced().await }
                .into_actor(self)
                .map(|(), act, ctx| act.resync(ctx)),
        );
        ctx.run_interval(self.terminator.config.resync_period, |act, ctx| {
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

impl Handler<Changed> for TerminationDrainer {
    type Result = ();

    fn handle(&mut self, change: Changed, ctx: &mut Context<Self>) {
        self.depth.taken();
        if !self.can_reconcile() {
            return;
        }
        for target in self.targets(change) {
            self.queue.add(target);
        }
        pump(self, ctx);
    }
}
