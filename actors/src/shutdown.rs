//! Graceful shutdown of provisioning. On SIGTERM a leader must not strand work: it stops
//! taking new rounds (the Provisioner sees itself as no longer leading), lets the round in
//! progress create its NodeClaims, and waits — for at most [`SHUTDOWN_TIMEOUT`] — for the
//! launches it has started to finish, so each NodeClaim ends launched rather than half
//! done. Only then does the daemon release its leader Lease. A launch still running at the
//! deadline is abandoned: its NodeClaim stays, for the next leader's NodeClaim lifecycle to
//! take over.
//!
//! (Named for what it is: node drain — evicting pods before termination — is
//! `lifecycle/finalize.rs`.)

use std::future::Future;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::created_claims::CreatedClaims;
use crate::provisioner::Provisioner;
use crate::state::ClusterState;
use crate::supervisor::Supervised;
use std::sync::Arc;

/// How long a stopping leader waits for its round and launches. Launches take seconds
/// (CreateFleet answers in one or two); Kubernetes' default termination grace period is
/// 30 s, after which the pod is killed anyway.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Counts tasks in flight; [`InFlight::idle`] completes when none are left.
#[derive(Clone, Debug)]
pub struct InFlight {
    count: watch::Sender<usize>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            count: watch::channel(0).0,
        }
    }
}

impl InFlight {
    /// Counts `task` as in flight from now until it completes (or is dropped).
    pub fn track<F: Future>(&self, task: F) -> impl Future<Output = F::Output> + use<F> {
        self.count.send_modify(|n| *n += 1);
        let guard = Guard(self.count.clone());
        async move {
            let _guard = guard;
            task.await
        }
    }

    /// Tasks in flight now.
    pub fn current(&self) -> usize {
        *self.count.borrow()
    }

    /// Completes once no task is in flight.
    pub async fn idle(&self) {
        let mut rx = self.count.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// Uncounts a tracked task when it ends, however it ends.
struct Guard(watch::Sender<usize>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Whether the Provisioner may run rounds: while this replica leads and is not stopping.
/// The returned channel follows both inputs until `shutdown`.
pub fn gate(
    leader: watch::Receiver<bool>,
    draining: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) -> (watch::Receiver<bool>, JoinHandle<()>) {
    let open = |leader: &watch::Receiver<bool>, draining: &watch::Receiver<bool>| {
        *leader.borrow() && !*draining.borrow()
    };
    let (tx, rx) = watch::channel(open(&leader, &draining));
    let task = crate::supervisor::task("shutdown_gate", move || {
        follow(
            leader.clone(),
            draining.clone(),
            shutdown.clone(),
            tx.clone(),
        )
    });
    (rx, task)
}

async fn follow(
    mut leader: watch::Receiver<bool>,
    mut draining: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
    tx: watch::Sender<bool>,
) {
    // A closed input keeps its last value: a lone replica's leadership never changes.
    let mut leader_open = true;
    let mut draining_open = true;
    loop {
        tokio::select! {
            changed = leader.changed(), if leader_open => leader_open = changed.is_ok(),
            changed = draining.changed(), if draining_open => draining_open = changed.is_ok(),
            _ = shutdown.wait_for(|s| *s) => return,
            () = tx.closed() => return,
        }
        tx.send_replace(*leader.borrow() && !*draining.borrow());
    }
}

/// Answered once the Provisioner has finished the round it was running (rounds are atomic,
/// so this message is handled only after it).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Quiesce;

impl Handler<Quiesce> for Provisioner {
    type Result = ();

    fn handle(&mut self, _: Quiesce, _: &mut Context<Self>) {}
}

/// How often a stopping leader looks again for NodeClaims it created that have not
/// started launching (the lifecycle picks one up within a watch event or two).
const UNLAUNCHED_POLL: Duration = Duration::from_millis(50);

/// The NodeClaims this replica created and the store that shows whether they launched.
#[derive(Debug)]
pub struct Created {
    pub claims: CreatedClaims,
    pub state: Arc<ClusterState>,
}

/// The stopping half of the daemon's provisioning.
#[derive(Debug)]
pub struct GracefulShutdown {
    draining: watch::Sender<bool>,
    launches: InFlight,
    created: Option<Created>,
}

impl GracefulShutdown {
    /// A shutdown waiting for `launches` and for the `created` NodeClaims to launch; the
    /// receiver tells whether it has begun.
    pub fn new(launches: InFlight, created: Option<Created>) -> (Self, watch::Receiver<bool>) {
        let (draining, rx) = watch::channel(false);
        let shutdown = Self {
            draining,
            launches,
            created,
        };
        (shutdown, rx)
    }

    /// Created NodeClaims whose launch has not ended.
    fn unlaunched(&self) -> usize {
        self.created
            .as_ref()
            .map_or(0, |c| c.claims.awaiting_launch(&c.state))
    }

    /// Stops new rounds, then waits (bounded) for the current round and its launches.
    /// Returns the launches left running.
    pub async fn run(&self, provisioner: &Supervised<Provisioner>, timeout: Duration) -> usize {
        self.draining.send_replace(true);
        let finished = async {
            // A stopped Provisioner has no round to finish. Sent past the mailbox's permit:
            // it carries no work, and the stop must not wait behind the Batcher.
            let _ = provisioner.addr().send(Quiesce).await;
            // A NodeClaim the round created is not a running launch until the lifecycle has
            // seen it; both must be done.
            loop {
                self.launches.idle().await;
                if self.unlaunched() == 0 {
                    break;
                }
                tokio::time::sleep(UNLAUNCHED_POLL).await;
            }
        };
        if tokio::time::timeout(timeout, finished).await.is_err() {
            let left = self.launches.current().max(self.unlaunched());
            tracing::warn!(
                launches = left,
                "stopping with launches in flight; the next leader's lifecycle takes them over"
            );
            return left;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_every_tracked_task() {
        let in_flight = InFlight::default();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(in_flight.track(async move {
            let _ = released.await;
        }));
        assert_eq!(
            in_flight.current(),
            1,
            "counted from the moment it is tracked"
        );
        let waiting = tokio::time::timeout(Duration::from_secs(1), in_flight.idle()).await;
        assert!(waiting.is_err(), "a task is still in flight");
        let _ = release.send(());
        task.await.expect("task ran");
        tokio::time::timeout(Duration::from_secs(1), in_flight.idle())
            .await
            .expect("idle once the task ended");
        assert_eq!(in_flight.current(), 0);
    }

    #[tokio::test]
    async fn a_dropped_task_is_no_longer_in_flight() {
        let in_flight = InFlight::default();
        let tracked = in_flight.track(std::future::pending::<()>());
        assert_eq!(in_flight.current(), 1);
        drop(tracked);
        assert_eq!(in_flight.current(), 0);
    }

    #[tokio::test]
    async fn the_gate_closes_when_leadership_ends_or_draining_starts() {
        let (leader_tx, leader) = watch::channel(true);
        let (draining_tx, draining) = watch::channel(false);
        let (_shutdown_tx, shutdown) = watch::channel(false);
        let (mut gate, _task) = gate(leader, draining, shutdown);
        assert!(*gate.borrow());
        leader_tx.send_replace(false);
        gate.wait_for(|open| !*open).await.expect("gate alive");
        leader_tx.send_replace(true);
        gate.wait_for(|open| *open).await.expect("gate alive");
        // A lone replica's leadership sender is gone; draining still closes the gate.
        drop(leader_tx);
        draining_tx.send_replace(true);
        gate.wait_for(|open| !*open).await.expect("gate alive");
    }
}
