//! Leader election on a `coordination.k8s.io/v1` Lease, with controller-runtime's defaults
//! (lease 15 s, renew deadline 10 s, retry every 2 s), so kerf and upstream replicas would
//! even respect each other's Lease. A candidate takes the Lease when it is free or when its
//! record has not changed for a whole lease duration as timed by the candidate's own clock
//! (never by comparing the holder's timestamps with ours, which would trust clock sync).
//! The leader renews every retry period. A renewal counts from when it was sent, and the
//! leader steps down at the send time of its last renewal plus the renew deadline, whatever
//! its requests are doing then: a standby, timing the lease from the record's change, cannot
//! take over before. Step-down is what every writer obeys: the [`fenced`] Kubernetes client
//! and the [`FencedCloudProvider`] refuse and abandon writes. An election that dies is a
//! step-down and is restarted ([`supervise`]). On shutdown a leader releases the Lease so a
//! standby takes over at once. Every Lease write is an optimistic update on the
//! resourceVersion it read, so two candidates can never both win.

mod cloud;
mod fence;
mod record;
#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::LEADER;
use crate::supervisor::{Supervision, panic_message};
pub use cloud::FencedCloudProvider;
pub use fence::{Fenced, fenced, is_fenced};
use record::Observed;

/// Timing of the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease stays valid after its last renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// Interval between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Which Lease, who we are, and how fast to move.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
}

/// Why one attempt on the Lease failed (the loop retries).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("reading lease {0}: {1}")]
    Read(String, #[source] kube::Error),
    #[error("writing lease {0}: {1}")]
    Write(String, #[source] kube::Error),
    #[error("lease {0}: no answer before the renew deadline")]
    Timeout(String),
}

/// Resolves once this replica does not lead: `leader` reads `false`, or the election that
/// published it is gone (a dead election is a step-down, see [`supervise`]). What the fences
/// and the reconcilers select on to abandon work in flight.
pub async fn stepped_down(mut leader: watch::Receiver<bool>) {
    let _closed_is_stepped_down = leader.wait_for(|leading| !*leading).await;
}

/// Each change of leadership `leader` has not seen yet, once, with the new value: what an
/// actor that resyncs on a change watches; the stream ends with the election. It owns its
/// receiver, so what it yielded is seen. (A fresh clone per wait would inherit the unseen
/// version of a receiver nobody marks, and answer at once, every time: a loop that never
/// gives its thread back.)
pub fn changes(leader: watch::Receiver<bool>) -> impl futures::Stream<Item = bool> {
    futures::stream::unfold(leader, |mut leader| async move {
        leader.changed().await.ok()?;
        let leading = *leader.borrow_and_update();
        Some((leading, leader))
    })
}

/// The name election's deaths are counted under in `kerf_actor_restarts_total{actor}`.
pub const TASK_NAME: &str = "leader_election";

/// Runs the election until `shutdown` turns true, publishing leadership on the returned
/// receiver's channel. Releases the Lease on shutdown if it holds it. Supervised: an
/// election that dies steps this replica down at once, and starts again ([`supervise`]).
pub fn spawn(
    client: Client,
    election: Election,
    shutdown: watch::Receiver<bool>,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (leader_tx, leader_rx) = watch::channel(false);
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let watched = shutdown.clone();
    // The task carries the caller's supervision scope, which holds the election's panics
    // against this replica's restart budget.
    let scope = Supervision::current();
    let supervised = supervise(TASK_NAME, leader_tx, watched, move |leader| {
        run(api.clone(), election.clone(), leader, shutdown.clone())
    });
    let task = tokio::spawn(async move { scope.scope(supervised).await });
    (leader_rx, task)
}

/// Publishes `false` when dropped: whatever ends an election (a panic unwinding through it,
/// an abort), its replica no longer leads.
struct StepDownOnDrop(Arc<watch::Sender<bool>>);

impl Drop for StepDownOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// Runs the election `make` builds until `shutdown`, as task `name`. An election that panics,
/// or returns before the shutdown signal, is a step-down — its replica's watch reads `false`
/// at once, never a stale `true` — and is built again. Either is reported to the current
/// supervision scope, which logs it once (a panic with its message), counts it in
/// `kerf_actor_restarts_total{actor}`, holds it against the restart budget and answers the
/// backoff: an election that keeps returning at once is crash-looping as surely as one that
/// keeps panicking, and must fail `/healthz` alike. When this task itself ends (or is
/// aborted) the watch reads `false` as well.
pub async fn supervise<F, Fut>(
    name: &'static str,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
    mut make: F,
) where
    F: FnMut(Arc<watch::Sender<bool>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let leader = Arc::new(leader);
    let _step_down = StepDownOnDrop(Arc::clone(&leader));
    let supervision = Supervision::current();
    loop {
        // A panic building the election is a panic of the election.
        let made = std::panic::catch_unwind(AssertUnwindSafe(|| make(Arc::clone(&leader))));
        let outcome = match made {
            Ok(election) => {
                let running = tokio::spawn(election);
                let ended = AbortOnDrop(running.abort_handle());
                let outcome = running.await;
                drop(ended);
                outcome.map_err(|error| error.try_into_panic().ok())
            }
            Err(panic) => Err(Some(panic)),
        };
        if *shutdown.borrow() && outcome.is_ok() {
            return;
        }
        leader.send_replace(false);
        let delay = match outcome {
            // The scope logs either once, the panic with its message.
            Err(Some(panic)) => supervision.panicked(name, "task", &panic_message(&*panic)),
            _ => supervision.returned(name, "task"),
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Aborts the running election when its supervisor is aborted.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The election loop. Timing rule: a renewal counts from when its first request was sent,
/// never from when its answer came, so the leader's deadline — the send time of its last
/// successful renewal plus the renew deadline — falls before any standby can see the Lease
/// lapse (a standby times the lease duration from when it saw the record change, after the
/// write). Each attempt is cut off at that deadline, and the loop wakes at it even between
/// attempts, so the leader steps down at the deadline whatever its requests are doing.
async fn run(
    api: Api<Lease>,
    election: Election,
    leader: Arc<watch::Sender<bool>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let _step_down = StepDownOnDrop(Arc::clone(&leader));
    let timing = election.timing;
    let mut observed = Observed::default();
    // When the renewal (or acquisition) that keeps this replica leading was sent.
    let mut renewed_at: Option<Instant> = None;
    loop {
        if renewed_at.is_some_and(|at| Instant::now() >= at + timing.renew_deadline) {
            renewed_at = None;
            set_leader(&leader, false, &election);
        }
        let sent = Instant::now();
        // Leading: what is left before the deadline. Not: an acquisition sent now would
        // lead until `sent + renew_deadline`, so it may take no longer than that.
        let deadline = renewed_at.unwrap_or(sent) + timing.renew_deadline;
        let attempt = tokio::time::timeout_at(
            deadline,
            try_acquire_or_renew(&api, &election, &mut observed),
        )
        .await
        .unwrap_or(Err(LeaseError::Timeout(election.name.clone())));
        match attempt {
            Ok(true) => renewed_at = Some(sent),
            Ok(false) => renewed_at = None,
            Err(err) => tracing::warn!(lease = %election.name, error = %err, "leader election"),
        }
        let now = Instant::now();
        if renewed_at.is_some_and(|at| now >= at + timing.renew_deadline) {
            renewed_at = None;
        }
        set_leader(&leader, renewed_at.is_some(), &election);
        // The next attempt after a retry period; a leader wakes at its deadline if sooner.
        let next = renewed_at.map_or(now + timing.retry_period, |at| {
            (now + timing.retry_period).min(at + timing.renew_deadline)
        });
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    if *leader.borrow() {
        if let Err(err) = record::release(&api, &election).await {
            tracing::warn!(lease = %election.name, error = %err, "releasing leader lease");
        }
        set_leader(&leader, false, &election);
    }
}

fn set_leader(leader: &watch::Sender<bool>, leading: bool, election: &Election) {
    let was = leader.send_replace(leading);
    if was != leading {
        metrics::gauge!(LEADER, "name" => election.name.clone()).set(if leading {
            1.0
        } else {
            0.0
        });
        if leading {
            tracing::info!(lease = %election.name, identity = %election.identity, "acquired leader lease");
        } else {
            tracing::warn!(lease = %election.name, identity = %election.identity, "lost leader lease");
        }
    }
}

/// One attempt: `Ok(true)` when we hold the Lease after it.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    election: &Election,
    observed: &mut Observed,
) -> Result<bool, LeaseError> {
    let name = &election.name;
    let Some(current) = api
        .get_opt(name)
        .await
        .map_err(|e| LeaseError::Read(name.clone(), e))?
    else {
        let fresh = record::fresh(election, 0);
        return match api.create(&PostParams::default(), &fresh).await {
            Ok(_) => Ok(true),
            // Another candidate created it first.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(LeaseError::Write(name.clone(), e)),
        };
    };
    let holder = record::holder(&current);
    let ours = holder == Some(election.identity.as_str());
    observed.see(&current, Instant::now());
    if !ours
        && holder.is_some()
        && !observed.expired(election.timing.lease_duration, Instant::now())
    {
        return Ok(false);
    }
    let next = if ours {
        record::renewed(current)
    } else {
        record::taken_over(current, election)
    };
    match api.replace(name, &PostParams::default(), &next).await {
        Ok(_) => Ok(true),
        // Someone else wrote the Lease since we read it: they won this round.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(LeaseError::Write(name.clone(), e)),
    }
}
