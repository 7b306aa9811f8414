//! Leader election on a `coordination.k8s.io/v1` Lease, with controller-runtime's defaults
//! (lease 15 s, renew deadline 10 s, retry every 2 s), so kerf and upstream replicas would
//! even respect each other's Lease. A candidate takes the Lease when it is free or when its
//! record has not changed for a whole lease duration as timed by the candidate's own clock
//! (never by comparing the holder's timestamps with ours, which would trust clock sync).
//! The leader renews every retry period; when it cannot renew within the renew deadline it
//! steps down. On shutdown a leader releases the Lease so a standby takes over at once.
//! Every write is an optimistic update on the resourceVersion it read, so two candidates can
//! never both win.

mod fence;
mod record;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::LEADER;
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

impl Timing {
    /// How long one acquire-or-renew attempt may take: below the renew deadline by a retry
    /// period, so a leader whose requests stall learns it before it must step down.
    pub fn attempt_timeout(&self) -> Duration {
        self.renew_deadline
            .saturating_sub(self.retry_period)
            .max(self.retry_period)
    }
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
    #[error("lease {0}: no answer within the attempt timeout")]
    Timeout(String),
}

/// Runs the election until `shutdown` turns true, publishing leadership on the returned
/// receiver's channel. Releases the Lease on shutdown if it holds it.
pub fn spawn(
    client: Client,
    election: Election,
    shutdown: watch::Receiver<bool>,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (leader_tx, leader_rx) = watch::channel(false);
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let task = tokio::spawn(run(api, election, leader_tx, shutdown));
    (leader_rx, task)
}

async fn run(
    api: Api<Lease>,
    election: Election,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut observed = Observed::default();
    let mut last_renewal: Option<Instant> = None;
    loop {
        // Bounded below the renew deadline: a stalled API server cannot hold an attempt
        // past the moment this replica must step down.
        let attempt = tokio::time::timeout(
            election.timing.attempt_timeout(),
            try_acquire_or_renew(&api, &election, &mut observed),
        )
        .await
        .unwrap_or(Err(LeaseError::Timeout(election.name.clone())));
        let now = Instant::now();
        match attempt {
            Ok(true) => last_renewal = Some(now),
            Ok(false) => last_renewal = None,
            Err(err) => tracing::warn!(lease = %election.name, error = %err, "leader election"),
        }
        // A leader that could not renew stays leader until the renew deadline passes.
        let leading = last_renewal
            .is_some_and(|at| now.saturating_duration_since(at) < election.timing.renew_deadline);
        if !leading {
            last_renewal = None;
        }
        set_leader(&leader, leading, &election);
        tokio::select! {
            () = tokio::time::sleep(election.timing.retry_period) => {}
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
