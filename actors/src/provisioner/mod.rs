//! The Provisioner: takes each closed batch and turns it into one provisioning round over a
//! consistent snapshot of cluster state — every provisionable pod at that moment, not only
//! the pods that triggered the batch. Only the leader provisions, and only once cluster
//! state has synced; a batch arriving otherwise is skipped (the PodWatcher's resync triggers
//! the pods again). Each round is published on a watch channel for observers (`kerf
//! simulate`'s report, tests).
//!
//! The solve itself (snapshot → scheduler input → NodeClaims handed to the Launcher) lands
//! with the scheduler; this actor owns the gatekeeping and the snapshot it will solve on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::watch;

use crate::batcher::BatchReady;
use crate::mailbox::MailboxDepth;
use crate::metrics::SCHEDULING_DURATION;
use crate::state::ClusterState;

/// One solve runs at a time and each reads the latest cluster state, so a single queued
/// batch behind the running one is enough: the Batcher waits (`deliver`) rather than drops,
/// and keeps collecting the next window meanwhile.
pub const PROVISIONER_MAILBOX_CAPACITY: usize = 1;

/// What one round saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// Rounds run since start, this one included.
    pub number: u64,
    /// Pods that triggered the batch.
    pub triggered: Vec<String>,
    /// `namespace/name` of every provisionable pod in the snapshot, sorted.
    pub pending: Vec<String>,
    /// How long the batching window was open.
    pub window: Duration,
}

/// Why a batch did not become a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    NotLeader,
    NotSynced,
}

/// The actor.
pub struct Provisioner {
    state: Arc<ClusterState>,
    leader: watch::Receiver<bool>,
    rounds: watch::Sender<Option<Round>>,
    number: u64,
    depth: MailboxDepth,
}

impl Provisioner {
    pub fn new(
        state: Arc<ClusterState>,
        leader: watch::Receiver<bool>,
        depth: MailboxDepth,
    ) -> (Self, watch::Receiver<Option<Round>>) {
        let (rounds, observer) = watch::channel(None);
        let actor = Self {
            state,
            leader,
            rounds,
            number: 0,
            depth,
        };
        (actor, observer)
    }

    /// Starts the actor with its bounded mailbox.
    pub fn start_bounded(self) -> Addr<Self> {
        Self::create(|ctx| {
            ctx.set_mailbox_capacity(PROVISIONER_MAILBOX_CAPACITY);
            self
        })
    }

    fn round(&mut self, batch: BatchReady) -> Result<Round, Skipped> {
        if !*self.leader.borrow() {
            return Err(Skipped::NotLeader);
        }
        if !self.state.synced() {
            return Err(Skipped::NotSynced);
        }
        let mut pending: Vec<String> = self
            .state
            .provisionable_pods()
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        pending.sort();
        self.number += 1;
        Ok(Round {
            number: self.number,
            triggered: batch.pods,
            pending,
            window: batch.window,
        })
    }
}

impl Actor for Provisioner {
    type Context = Context<Self>;
}

impl Handler<BatchReady> for Provisioner {
    type Result = ();

    fn handle(&mut self, batch: BatchReady, _ctx: &mut Context<Self>) {
        self.depth.taken();
        let started = Instant::now();
        match self.round(batch) {
            Ok(round) => {
                tracing::info!(
                    round = round.number,
                    pending = round.pending.len(),
                    triggered = round.triggered.len(),
                    "provisioning round"
                );
                self.rounds.send_replace(Some(round));
                metrics::histogram!(SCHEDULING_DURATION).record(started.elapsed().as_secs_f64());
            }
            Err(reason) => tracing::debug!(?reason, "batch skipped"),
        }
    }
}
