//! The Provisioner: takes each closed batch and turns it into one provisioning round over a
//! consistent snapshot of cluster state — every provisionable pod at that moment, not only
//! the pods that triggered the batch. Only the leader provisions, and only once cluster
//! state has synced; a batch arriving otherwise is skipped (the PodWatcher's resync triggers
//! the pods again). With a cloud provider configured, a round builds the scheduler's input
//! from the snapshot (the code `kerf plan` uses), solves it, and hands each planned NodeClaim
//! to the Launcher, waiting until every one is created before the next round starts, so no
//! round plans for pods an earlier round already covered. Each round is published on a watch
//! channel for observers (`kerf simulate`'s report, tests).

mod inventory;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use kerf::api::{NodeClaim, NodePool};
use kerf::catalog::Catalog;
use kerf::plan::ControllerSettings;
use kerf::plan::snapshot;
use kerf::scheduling::{self, PlannedNodeClaim};
use tokio::sync::watch;

use crate::batcher::BatchReady;
use crate::launcher::Launch;
use crate::mailbox::{MailboxDepth, Outbox};
use crate::metrics::SCHEDULING_DURATION;
use crate::state::{ClusterState, ObjectKey};

/// One solve runs at a time and each reads the latest cluster state, so a single queued
/// batch behind the running one is enough: the Batcher waits (`deliver`) rather than drops,
/// and keeps collecting the next window meanwhile.
pub const PROVISIONER_MAILBOX_CAPACITY: usize = 1;

/// Instance types written on one NodeClaim, cheapest first: upstream's limit, which keeps
/// `spec.requirements` within the NodeClaim CRD's validation.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// How long a NodeClaim this controller created counts as in-flight capacity before its
/// watch event arrives. Events normally arrive within milliseconds; the bound only matters
/// for a NodeClaim deleted again (insufficient capacity) before the watch ever saw it, whose
/// pods must not stay covered by it for good.
pub const UNSEEN_NODECLAIM_GRACE: Duration = Duration::from_secs(30);

/// What one round saw and did.
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
    /// Names of the NodeClaims created, in creation order (none without a cloud provider).
    pub nodeclaims: Vec<String>,
    /// Problems of the round: snapshot warnings, pods left unschedulable, failed creates.
    pub problems: Vec<String>,
}

/// Why a batch did not become a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    NotLeader,
    NotSynced,
}

/// What the Provisioner solves with when it launches capacity.
pub struct Provisioning {
    pub launcher: Outbox<Launch>,
    /// Instance types offered in the cluster's region.
    pub catalog: Catalog,
    pub controller: ControllerSettings,
}

/// The actor.
pub struct Provisioner {
    state: Arc<ClusterState>,
    leader: watch::Receiver<bool>,
    rounds: watch::Sender<Option<Round>>,
    number: u64,
    depth: MailboxDepth,
    provisioning: Option<Provisioning>,
    /// NodeClaims created whose watch event may not have arrived, with their creation time.
    unseen: HashMap<String, (NodeClaim, Instant)>,
}

impl Provisioner {
    pub fn new(
        state: Arc<ClusterState>,
        leader: watch::Receiver<bool>,
        depth: MailboxDepth,
        provisioning: Option<Provisioning>,
    ) -> (Self, watch::Receiver<Option<Round>>) {
        let (rounds, observer) = watch::channel(None);
        let actor = Self {
            state,
            leader,
            rounds,
            number: 0,
            depth,
            provisioning,
            unseen: HashMap::new(),
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

    fn round(&mut self, batch: BatchReady) -> Result<(Round, Vec<Launch>), Skipped> {
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
        let mut round = Round {
            number: self.number,
            triggered: batch.pods,
            pending,
            window: batch.window,
            nodeclaims: Vec::new(),
            problems: Vec::new(),
        };
        let launches = self.solve(&mut round.problems);
        Ok((round, launches))
    }

    /// The NodeClaims to launch for the current snapshot; problems go to `problems`.
    fn solve(&mut self, problems: &mut Vec<String>) -> Vec<Launch> {
        let Some(provisioning) = &self.provisioning else {
            return Vec::new();
        };
        let state = &self.state;
        self.unseen.retain(|name, (_, created)| {
            let key = ObjectKey::new(None, name);
            // Gone already counts as seen: a NodeClaim deleted (and released) within
            // milliseconds, as after insufficient capacity, must not cover its pods.
            state.nodeclaims.get(&key).is_none()
                && !state.nodeclaims.recently_deleted(&key)
                && created.elapsed() < UNSEEN_NODECLAIM_GRACE
        });
        let inventory = inventory::of(state, self.unseen.values().map(|(c, _)| c.clone()));
        problems.extend(inventory.warnings.iter().cloned());
        let pools: HashMap<String, Arc<NodePool>> = inventory
            .node_pools
            .iter()
            .map(|p| (p.name().to_owned(), Arc::new(p.clone())))
            .collect();
        let result = snapshot::build(&inventory, &provisioning.catalog, provisioning.controller)
            .map_err(|e| e.to_string())
            .and_then(|snapshot| {
                problems.extend(snapshot.warnings);
                let mut input = snapshot.input;
                input.options.max_instance_types = MAX_INSTANCE_TYPES;
                scheduling::solve(&input).map_err(|e| e.to_string())
            });
        let result = match result {
            Ok(result) => result,
            Err(error) => {
                problems.push(error);
                return Vec::new();
            }
        };
        problems.extend(
            result
                .errors
                .iter()
                .map(|(pod, reason)| format!("{}/{}: {reason}", pod.namespace, pod.name)),
        );
        result
            .new_node_claims
            .into_iter()
            .filter_map(|claim: PlannedNodeClaim| {
                let pool = pools.get(&claim.node_pool)?.clone();
                Some(Launch { claim, pool })
            })
            .collect()
    }
}

impl Actor for Provisioner {
    type Context = Context<Self>;
}

impl Handler<BatchReady> for Provisioner {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, batch: BatchReady, _ctx: &mut Context<Self>) -> Self::Result {
        self.depth.taken();
        let started = Instant::now();
        let (round, launches) = match self.round(batch) {
            Ok(planned) => {
                metrics::histogram!(SCHEDULING_DURATION).record(started.elapsed().as_secs_f64());
                planned
            }
            Err(reason) => {
                tracing::debug!(?reason, "batch skipped");
                return AtomicResponse::new(Box::pin(fut::ready(())));
            }
        };
        let launcher = self.provisioning.as_ref().map(|p| p.launcher.clone());
        let created = async move {
            let mut outcomes = Vec::new();
            if let Some(launcher) = launcher {
                for launch in launches {
                    outcomes.push(launcher.deliver(launch).await);
                }
            }
            outcomes
        };
        // Atomic: the next batch waits until this round's NodeClaims exist and are
        // remembered, so its snapshot counts them.
        AtomicResponse::new(Box::pin(created.into_actor(self).map(
            move |outcomes, act, _ctx| {
                let mut round = round;
                for outcome in outcomes {
                    match outcome {
                        Ok(Ok(claim)) => {
                            let name = claim.metadata.name.clone().unwrap_or_default();
                            round.nodeclaims.push(name.clone());
                            act.unseen.insert(name, (claim, Instant::now()));
                        }
                        Ok(Err(error)) => round.problems.push(error.to_string()),
                        Err(error) => round.problems.push(error.to_string()),
                    }
                }
                tracing::info!(
                    round = round.number,
                    pending = round.pending.len(),
                    triggered = round.triggered.len(),
                    nodeclaims = round.nodeclaims.len(),
                    problems = ?round.problems,
                    "provisioning round"
                );
                act.rounds.send_replace(Some(round));
            },
        )))
    }
}
