//! The reconciling actors' work queue (the NodeClaim lifecycle's, the TerminationDrainer's),
//! with controller-runtime's workqueue guarantees: a target is queued at most once however
//! often it changes, never runs twice at once, and one that changes while running runs
//! again once it finishes (it may have read the state from before the change). Its length
//! is bounded by the number of distinct targets — the NodeClaims and Nodes of the cluster —
//! not by the number of changes. [`Reruns`] schedules a target again on the actor's own
//! timers: after a delay the reconcile asked for, or after a failure with exponential
//! backoff, keeping only the earliest rerun of each target. A reconcile in flight when this
//! replica steps down is cancelled at once (dropped mid-way, counted, not rerun): whatever
//! it was about to write is the new leader's, which resyncs every target.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use actix::{Actor, ActorFutureExt, AsyncContext, Context, SpawnHandle, WrapFuture};
use futures::future::LocalBoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

/// What a reconcile asks of the actor besides being run again on the next change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Run again after this long even if nothing changes (a TTL).
    pub requeue_after: Option<Duration>,
}

impl Outcome {
    pub const DONE: Outcome = Outcome {
        requeue_after: None,
    };

    pub fn after(delay: Duration) -> Self {
        Self {
            requeue_after: Some(delay),
        }
    }
}

#[derive(Debug)]
pub struct WorkQueue<T> {
    /// The controller name its `workqueue_queue_duration_seconds` is labelled with.
    name: &'static str,
    /// Targets in arrival order, with when each was queued.
    waiting: VecDeque<(T, Instant)>,
    queued: HashSet<T>,
    running: HashSet<T>,
    /// Running targets that changed meanwhile.
    dirty: HashSet<T>,
}

impl<T: Clone + Eq + Hash> WorkQueue<T> {
    /// An empty queue of controller `name`.
    pub fn named(name: &'static str) -> Self {
        Self {
            name,
            waiting: VecDeque::new(),
            queued: HashSet::new(),
            running: HashSet::new(),
            dirty: HashSet::new(),
        }
    }

    /// `target` changed: queue it, or mark it to run again if it is running.
    pub fn add(&mut self, target: T) {
        if self.running.contains(&target) {
            self.dirty.insert(target);
        } else if self.queued.insert(target.clone()) {
            self.waiting.push_back((target, Instant::now()));
        }
    }

    /// The next target to run, if fewer than `limit` are running; it counts as running.
    pub fn start_next(&mut self, limit: usize) -> Option<T> {
        if self.running.len() >= limit {
            return None;
        }
        let (target, queued_at) = self.waiting.pop_front()?;
        crate::metrics::workqueue_queue_duration(self.name, queued_at.elapsed());
        self.queued.remove(&target);
        self.running.insert(target.clone());
        Some(target)
    }

    /// `target` finished running; it is queued again if it changed meanwhile.
    pub fn finish(&mut self, target: &T) {
        self.running.remove(target);
        if self.dirty.remove(target) {
            self.add(target.clone());
        }
    }

    /// Drops every waiting target (running ones finish normally).
    pub fn clear_waiting(&mut self) {
        self.waiting.clear();
        self.queued.clear();
    }

    /// Targets waiting to run (client-go's workqueue depth).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    #[cfg(test)]
    fn running(&self) -> usize {
        self.running.len()
    }
}

/// Failure counts and scheduled reruns of a reconciling actor's targets.
#[derive(Debug)]
pub struct Reruns<T> {
    /// First retry delay after a failure; doubled per failure up to `max_backoff`.
    backoff: Duration,
    max_backoff: Duration,
    failures: HashMap<T, u32>,
    /// The earliest scheduled rerun of each target.
    timers: HashMap<T, (Instant, SpawnHandle)>,
}

impl<T: Clone + Eq + Hash + Unpin + 'static> Reruns<T> {
    pub fn new(backoff: Duration, max_backoff: Duration) -> Self {
        Self {
            backoff,
            max_backoff,
            failures: HashMap::new(),
            timers: HashMap::new(),
        }
    }

    /// `target` reconciled: its failures are forgotten.
    pub fn succeeded(&mut self, target: &T) {
        self.failures.remove(target);
    }

    /// `target` failed once more: the delay before its retry.
    pub fn failed(&mut self, target: &T) -> Duration {
        let failures = self.failures.entry(target.clone()).or_insert(0);
        *failures = failures.saturating_add(1);
        let failures = *failures;
        self.backoff_after(failures)
    }

    /// Delay before the `failures`-th retry.
    fn backoff_after(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1));
        self.backoff.saturating_mul(factor).min(self.max_backoff)
    }

    /// Calls `rerun` with `target` after `delay`, unless an earlier rerun is already
    /// scheduled; `rerun` must call [`Reruns::due`] first.
    pub fn schedule<A>(
        &mut self,
        target: T,
        delay: Duration,
        ctx: &mut Context<A>,
        rerun: fn(&mut A, T, &mut Context<A>),
    ) where
        A: Actor<Context = Context<A>>,
    {
        let due = Instant::now() + delay;
        if let Some((scheduled, handle)) = self.timers.get(&target) {
            if *scheduled <= due {
                return;
            }
            ctx.cancel_future(*handle);
        }
        let fired = target.clone();
        let handle = ctx.run_later(delay, move |act, ctx| rerun(act, fired, ctx));
        self.timers.insert(target, (due, handle));
    }

    /// `target`'s scheduled rerun fired.
    pub fn due(&mut self, target: &T) {
        self.timers.remove(target);
    }
}

/// A reconcile error the runner can tell a routine optimistic-concurrency conflict from.
pub(crate) trait Conflict: std::error::Error + Sized + 'static {
    /// A write refused because the object changed since it was read: retried quietly.
    fn is_conflict(&self) -> bool;

    /// A write a fence refused because this replica does not lead: left to the leader.
    fn is_fenced(&self) -> bool {
        crate::leader::is_fenced(self)
    }
}

/// An actor whose reconciles run off a [`WorkQueue`], rerun by [`Reruns`]: the NodeClaim
/// lifecycle and the TerminationDrainer. [`pump`] is their one loop: it starts queued targets
/// up to [`Reconciling::MAX_CONCURRENT`] while the actor may mutate (dropping what waits
/// otherwise, as a new leader resyncs everything), reruns a target when its reconcile asks
/// to, and after a failure with exponential backoff.
pub(crate) trait Reconciling: Actor<Context = Context<Self>> {
    type Target: Clone + Eq + Hash + std::fmt::Debug + Unpin + 'static;
    type Error: Conflict + 'static;
    /// The controller its `workqueue_depth` is labelled with.
    const CONTROLLER: &'static str;
    /// Its name in logs (`lifecycle reconcile failed`).
    const NAME: &'static str;
    const MAX_CONCURRENT: usize;

    fn queue(&mut self) -> &mut WorkQueue<Self::Target>;
    fn reruns(&mut self) -> &mut Reruns<Self::Target>;
    /// Whether it may mutate now (leading, synced, not shutting down).
    fn can_reconcile(&self) -> bool;
    /// This replica's leadership: reconciles in flight are cancelled when it is lost.
    fn leader(&self) -> watch::Receiver<bool>;
    /// One reconcile of `target`, with its metrics.
    fn reconcile(
        &self,
        target: Self::Target,
    ) -> LocalBoxFuture<'static, Result<Outcome, Self::Error>>;
}

/// Starts queued reconciles up to the concurrency limit.
pub(crate) fn pump<A: Reconciling>(act: &mut A, ctx: &mut Context<A>) {
    crate::metrics::declare_max_concurrent_reconciles(A::CONTROLLER, A::MAX_CONCURRENT);
    if !act.can_reconcile() {
        // A new leader resyncs everything; nothing queued now is worth keeping.
        act.queue().clear_waiting();
        return;
    }
    while let Some(target) = act.queue().start_next(A::MAX_CONCURRENT) {
        let work = act.reconcile(target.clone());
        let stepped_down = crate::leader::stepped_down(act.leader());
        let cancellable = async move {
            tokio::select! {
                result = work => Some(result),
                () = stepped_down => None,
            }
        };
        ctx.spawn(
            cancellable
                .into_actor(act)
                .map(move |result, act, ctx| match result {
                    Some(result) => finished(act, target, result, ctx),
                    None => cancelled(act, target, ctx),
                }),
        );
    }
    let waiting = act.queue().waiting();
    crate::metrics::workqueue_depth(A::CONTROLLER, waiting);
}

fn finished<A: Reconciling>(
    act: &mut A,
    target: A::Target,
    result: Result<Outcome, A::Error>,
    ctx: &mut Context<A>,
) {
    match result {
        Ok(outcome) => {
            act.reruns().succeeded(&target);
            if let Some(delay) = outcome.requeue_after {
                act.reruns()
                    .schedule(target.clone(), delay, ctx, rerun::<A>);
            }
        }
        Err(error) => {
            let delay = act.reruns().failed(&target);
            if error.is_conflict() {
                tracing::debug!(?target, %error, "conflict; retrying");
            } else if error.is_fenced() {
                tracing::info!(?target, %error, "{} reconcile fenced: not leading", A::NAME);
            } else {
                tracing::warn!(?target, %error, retry_in = ?delay, "{} reconcile failed", A::NAME);
            }
            act.reruns()
                .schedule(target.clone(), delay, ctx, rerun::<A>);
        }
    }
    act.queue().finish(&target);
    pump(act, ctx);
}

/// `target`'s reconcile was dropped mid-way because this replica stepped down: counted and
/// logged, not rerun (the next leader, or this replica when it leads again, resyncs).
fn cancelled<A: Reconciling>(act: &mut A, target: A::Target, ctx: &mut Context<A>) {
    metrics::counter!(crate::metrics::RECONCILES_CANCELLED, "controller" => A::CONTROLLER)
        .increment(1);
    tracing::info!(
        ?target,
        "{} reconcile cancelled: this replica stepped down",
        A::NAME
    );
    act.queue().finish(&target);
    pump(act, ctx);
}

fn rerun<A: Reconciling>(act: &mut A, target: A::Target, ctx: &mut Context<A>) {
    act.reruns().due(&target);
    act.queue().add(target);
    pump(act, ctx);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let mut reruns = Reruns::new(Duration::from_secs(1), Duration::from_secs(60));
        let delays: Vec<u64> = (0..8).map(|_| reruns.failed(&"a").as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(reruns.backoff_after(u32::MAX), Duration::from_secs(60));
        reruns.succeeded(&"a");
        assert_eq!(reruns.failed(&"a"), Duration::from_secs(1), "forgotten");
    }

    #[test]
    fn a_target_is_queued_once_however_often_it_changes() {
        let mut queue = WorkQueue::named("test");
        queue.add("a");
        queue.add("b");
        queue.add("a");
        assert_eq!(queue.waiting(), 2);
        assert_eq!(queue.start_next(10), Some("a"));
        assert_eq!(queue.start_next(10), Some("b"));
        assert_eq!(queue.start_next(10), None);
    }

    #[test]
    fn a_running_target_that_changes_runs_again_after_it_finishes() {
        let mut queue = WorkQueue::named("test");
        queue.add("a");
        assert_eq!(queue.start_next(10), Some("a"));
        queue.add("a");
        queue.add("a");
        assert_eq!(queue.start_next(10), None, "never twice at once");
        queue.finish(&"a");
        assert_eq!(queue.start_next(10), Some("a"), "once more");
        queue.finish(&"a");
        assert_eq!(queue.start_next(10), None);
        assert_eq!(queue.running(), 0);
    }

    #[test]
    fn no_more_than_the_limit_run_at_once() {
        let mut queue = WorkQueue::named("test");
        for target in ["a", "b", "c"] {
            queue.add(target);
        }
        assert_eq!(queue.start_next(2), Some("a"));
        assert_eq!(queue.start_next(2), Some("b"));
        assert_eq!(queue.start_next(2), None);
        queue.finish(&"a");
        assert_eq!(queue.start_next(2), Some("c"));
    }

    #[test]
    fn clearing_drops_waiting_targets_only() {
        let mut queue = WorkQueue::named("test");
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.start_next(10), Some("a"));
        queue.clear_waiting();
        assert_eq!(queue.start_next(10), None);
        assert_eq!(queue.running(), 1);
        queue.add("b");
        assert_eq!(
            queue.start_next(10),
            Some("b"),
            "queued again after clearing"
        );
    }
}
