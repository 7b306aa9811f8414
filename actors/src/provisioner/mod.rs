//! The Provisioner: takes each closed batch and turns it into one provisioning round over a
//! consistent snapshot of cluster state — every provisionable pod at that moment, not only
//! the pods that triggered the batch. Only the leader provisions, and only once cluster
//! state has synced; a batch arriving otherwise is skipped (the periodic re-trigger,
//! [`crate::batcher::triggers`], brings the pods again). The Provisioner runs on its own
//! thread under a supervisor, so a round's snapshot and solve hold up no other actor, and a
//! panic in plan code restarts only the Provisioner. With a cloud provider configured, a round builds the scheduler's input
//! from the snapshot (the code `kerf plan` uses) with instance types whose recently refused
//! offerings are unavailable (the OfferingCache), prepares the solve once and fans its
//! independent parts out to the NodePoolSchedulers — one thread per NodePool — then hands
//! each planned NodeClaim to the NodeClaimCreator — at most the NodeClaimCreator's mailbox capacity at once —
//! waiting until every one is created before the next round starts, so no round plans for
//! pods an earlier round already covered. Each round is
//! published on a watch channel for observers (`kerf simulate`'s report, tests).

mod advice;
mod heap;
pub(crate) mod inventory;
mod metered;
mod nominated;
mod settling;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodePool;
use kerf::catalog::Catalog;
use kerf::cluster::ControllerSettings;
use kerf::cluster::snapshot;
use kerf::pods::{PodLike, PodRef};
use kerf::scheduling::{
    Batch, NodeForms, PlannedNodeClaim, PodForms, SchedulingResult, SolvePolicies,
};
use tokio::sync::watch;

use crate::batcher::BatchReady;
use crate::created_claims::CreatedClaims;
use crate::events::{EventRecorder, upstream as events};
pub use crate::instance_types::InstanceTypeCache;
use crate::mailbox::{MailboxDepth, Outbox};
use crate::metrics::SCHEDULING_DURATION;
use crate::node_pool_scheduler::Schedulers;
use crate::nodeclaim_creator::CreateNodeClaim;
use crate::offering_cache::OfferingCacheHandle;
use crate::state::ClusterState;
use crate::supervisor::{self, Supervised};
use heap::{RoundHeap, Step};

/// One solve runs at a time and each reads the latest cluster state, so a single queued
/// batch is enough: the Batcher hands over one batch at a time (`deliver`, waiting) and
/// merges the windows that close meanwhile.
pub const PROVISIONER_MAILBOX_CAPACITY: usize = 1;

/// Instance types written on one NodeClaim, cheapest first. Diverges from upstream on
/// purpose: upstream's core writes up to 600 (`MaxInstanceTypes`) and its AWS provider then
/// launches with the 60 cheapest still available (`maxInstanceTypes`); kerf cuts at the
/// provider's 60 when planning, keeping NodeClaims and solves ten times smaller. The cost: a
/// NodeClaim whose 60 types are all refused is deleted and planned again (its offerings
/// marked unavailable) instead of falling back to a 61st type within the same launch.
/// Raising it to 600 is blocked on the API emulator's validation of long requirement lists.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// How often the NodePoolSchedulers are matched to the NodePools in cluster state between
/// rounds (each round also matches them before it solves), so a scheduler starts and stops
/// with its NodePool even while no pods are pending. Comparing names is cheap.
pub const SCHEDULER_RECONCILE_PERIOD: Duration = Duration::from_secs(1);

/// The `controller` label of the scheduling duration, as upstream's provisioner reports it.
const SCHEDULING_CONTROLLER: &str = "provisioner";

/// What one round saw and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// Rounds run since start, this one included.
    pub number: u64,
    /// How many pods triggered the batch (a scale-up's names are megabytes, kept for
    /// nothing until the next round).
    pub triggered: usize,
    /// Every provisionable pod in the snapshot, sorted: shared references, not names, as the
    /// latest round is kept until the next and a scale-up's pending pods are tens of
    /// thousands.
    pub pending: Vec<PodRef>,
    /// How many of them the round solved: those not held on the NodeClaim in flight
    /// planned for them (see [`nominated`]); none solved, the round skips the solve.
    pub placing: usize,
    /// How many were left to the kube-scheduler, not tried since a Node opened (see
    /// [`settling`]).
    pub withheld: usize,
    /// How many pods held on an initialized Node did not fit there beside the pods bound
    /// to it, and were released from their nominations and solved (see [`nominated`]).
    pub released: usize,
    /// How many of the pods it solved had their prepared forms from an earlier round (see
    /// [`kerf::scheduling::PodForms`]).
    pub forms_reused: usize,
    /// How many of the existing nodes it solved around had their prepared forms from an
    /// earlier round (see [`kerf::scheduling::NodeForms`]).
    pub nodes_reused: usize,
    /// How long the batching window was open.
    pub window: Duration,
    /// Names of the NodeClaims created, in creation order (none without a cloud provider).
    pub nodeclaims: Vec<String>,
    /// Pods planned into the NodeClaims created (a CapacityBuffer's virtual pods among
    /// them): over rounds, a pod counts again each time a later round plans it anew (its
    /// planned room taken by another pod, or its nomination released), so the sum beside
    /// the pods bound tells how much was planned twice.
    pub planned_pods: usize,
    /// Problems of the round: snapshot warnings, pods left unschedulable, failed creates.
    pub problems: Vec<String>,
    /// Where the round's time went.
    pub timing: RoundTiming,
}

/// Latencies of one round, for logs and `kerf simulate`'s report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundTiming {
    /// From the batch window closing to the round starting (waiting for the previous round).
    pub queued: Duration,
    /// Snapshot of cluster state and scheduling.
    pub solve: Duration,
    /// From the batch window closing to the last of the round's NodeClaims being created.
    pub closed_to_created: Duration,
}

/// Why a batch did not become a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    NotLeader,
    NotSynced,
}

/// What the Provisioner solves with when it launches capacity.
#[derive(Clone)]
pub struct Provisioning {
    pub creator: Outbox<CreateNodeClaim>,
    /// The NodeClaims the NodeClaimCreator created, counted as in-flight until the watch has them.
    pub created: CreatedClaims,
    /// Offerings that recently failed to launch; without it every offering is available.
    pub offerings: Option<OfferingCacheHandle>,
    /// The embedded catalog of the cluster's region: what rounds plan with until the cloud
    /// provider's first refresh (see [`InstanceTypeCache`]).
    pub catalog: Catalog,
    pub controller: ControllerSettings,
    /// `PREFERENCE_POLICY` and `MIN_VALUES_POLICY`, applied to every round's solve.
    pub policies: SolvePolicies,
    /// Where pods the solve could not place are reported (`FailedScheduling`).
    pub events: EventRecorder,
    /// Each EC2NodeClass's resolved instance types, shared with the disruption snapshots.
    pub instance_types: InstanceTypeCache,
    /// This controller resolves node classes (its provider has a reconciler): a pool whose
    /// class has not resolved yet waits for it instead of launching into a refusal.
    pub resolves_node_classes: bool,
}

/// The actor.
pub struct Provisioner {
    state: Arc<ClusterState>,
    leader: watch::Receiver<bool>,
    rounds: Arc<watch::Sender<Option<Round>>>,
    number: u64,
    depth: MailboxDepth,
    provisioning: Option<Provisioning>,
    schedulers: Schedulers,
    settling: settling::Settling,
    /// The pending pods' prepared forms, from round to round.
    pod_forms: PodForms,
    /// The existing nodes' prepared forms, from round to round: kept through rounds that
    /// skip the solve, as the nodes stay while pods come and go.
    node_forms: NodeForms,
    /// Every zone a round's unplaced pods were counted under, zeroed when a round has none.
    pending_zones: std::collections::HashSet<String>,
}

/// A started Provisioner and what it publishes.
pub struct Started {
    pub addr: Supervised<Provisioner>,
    /// The latest round.
    pub rounds: watch::Receiver<Option<Round>>,
    /// NodePools with a running NodePoolScheduler.
    pub node_pool_schedulers: watch::Receiver<Vec<String>>,
}

/// A round's prepared solve and the NodePools its NodeClaims belong to.
struct Planned {
    batch: Batch,
    pools: HashMap<String, Arc<NodePool>>,
    /// Why each NodePool left out of the solve was left out (its node class is not Ready).
    skipped: Vec<String>,
    /// The NodeClaim of each node in the solve whose NodeClaim still holds pods (see
    /// [`nominated`]), by the node's name in the solve.
    holding: HashMap<String, String>,
}

impl Provisioner {
    /// Starts the Provisioner on its own thread, supervised: after a panic it is built
    /// again from the same parts (publishing on the same channels) with fresh
    /// NodePoolSchedulers.
    pub fn start(
        state: Arc<ClusterState>,
        leader: watch::Receiver<bool>,
        depth: MailboxDepth,
        provisioning: Option<Provisioning>,
    ) -> Started {
        let (rounds, rounds_rx) = watch::channel(None);
        let (names, names_rx) = watch::channel(Vec::new());
        let (rounds, names) = (Arc::new(rounds), Arc::new(names));
        let mailbox = depth.clone();
        let addr = supervisor::start("provisioner", depth.clone(), move || {
            Some(Self::new(
                Arc::clone(&state),
                leader.clone(),
                Arc::clone(&rounds),
                Arc::clone(&names),
                mailbox.clone(),
                provisioning.clone(),
            ))
        });
        Started {
            addr,
            rounds: rounds_rx,
            node_pool_schedulers: names_rx,
        }
    }

    /// One incarnation, publishing its rounds on `rounds` (numbered on from the last one
    /// published there) and its NodePoolSchedulers on `names`.
    fn new(
        state: Arc<ClusterState>,
        leader: watch::Receiver<bool>,
        rounds: Arc<watch::Sender<Option<Round>>>,
        names: Arc<watch::Sender<Vec<String>>>,
        depth: MailboxDepth,
        provisioning: Option<Provisioning>,
    ) -> Self {
        let number = rounds.borrow().as_ref().map_or(0, |r| r.number);
        Self {
            state,
            leader,
            number,
            rounds,
            depth,
            provisioning,
            schedulers: Schedulers::new(names),
            settling: settling::Settling::default(),
            pod_forms: PodForms::default(),
            node_forms: NodeForms::default(),
            pending_zones: std::collections::HashSet::new(),
        }
    }

    fn round(
        &mut self,
        batch: BatchReady,
        heap: &mut RoundHeap,
    ) -> Result<(Round, Option<Planned>), Skipped> {
        if !*self.leader.borrow() {
            return Err(Skipped::NotLeader);
        }
        if !self.state.synced() {
            return Err(Skipped::NotSynced);
        }
        let queued = batch.closed.elapsed();
        let mut pending: Vec<PodRef> = self
            .state
            .provisionable_pods()
            .iter()
            .map(|p| p.pod_ref())
            .collect();
        pending.sort();
        self.number += 1;
        let mut round = Round {
            number: self.number,
            triggered: batch.pods.len(),
            pending,
            placing: 0,
            withheld: 0,
            released: 0,
            forms_reused: 0,
            nodes_reused: 0,
            window: batch.window,
            nodeclaims: Vec::new(),
            planned_pods: 0,
            problems: Vec::new(),
            timing: RoundTiming {
                queued,
                ..RoundTiming::default()
            },
        };
        let planned = self.plan(&mut round, heap);
        Ok((round, planned))
    }

    /// The prepared solve of the current snapshot, if it has pods to place; problems go to
    /// the round's.
    fn plan(&mut self, round: &mut Round, heap: &mut RoundHeap) -> Option<Planned> {
        let provisioning = self.provisioning.as_ref()?;
        let problems = &mut round.problems;
        let mut inventory = inventory::of(&self.state, provisioning.created.unseen(&self.state));
        heap.mark(Step::Inventory);
        problems.extend(inventory.warnings.iter().cloned());
        let skipped = inventory::skip_unready_pools(
            &mut inventory,
            &self.state,
            provisioning.resolves_node_classes,
        );
        problems.extend(skipped.iter().cloned());
        let pools: HashMap<String, Arc<NodePool>> = inventory
            .node_pools
            .iter()
            .map(|p| (p.name().to_owned(), Arc::new(p.clone())))
            .collect();
        self.schedulers
            .reconcile(inventory.node_pools.iter().map(NodePool::name));
        let mut source = provisioning
            .instance_types
            .round(&provisioning.catalog, provisioning.offerings.as_ref());
        let snapshot = snapshot::build_with(&inventory, provisioning.controller, &mut source);
        provisioning.instance_types.finish_round();
        let nominations = provisioning.created.nominations(&self.state);
        let past_window = provisioning.created.past_window();
        let claims = &inventory.node_claims;
        let settling = &mut self.settling;
        let forms = &mut self.pod_forms;
        let node_forms = &mut self.node_forms;
        let batch = snapshot.map_err(|e| e.to_string()).and_then(|snapshot| {
            heap.mark(Step::Snapshot);
            problems.extend(snapshot.warnings);
            let reserved_enis = provisioning.controller.reserved_enis;
            for event in advice::max_pods(
                &snapshot.input.node_pools,
                &inventory,
                &provisioning.catalog,
                reserved_enis,
            ) {
                provisioning.events.publish(event);
            }
            let mut input = snapshot.input;
            input.options.max_instance_types = MAX_INSTANCE_TYPES;
            provisioning.policies.apply(&mut input.options);
            let held = nominated::hold(&mut input, &nominations, &past_window);
            round.released = held.released.values().map(Vec::len).sum();
            for (claim, pods) in &held.released {
                provisioning
                    .created
                    .release(claim, pods.iter().map(String::as_str));
            }
            let holding = held.holding;
            let opened = settling::last_opening(claims.iter().map(|c| &**c), &input.pods);
            round.withheld =
                settling.withhold(&mut input, opened, Timestamp::now(), Instant::now());
            round.placing = input.pods.len();
            if input.pods.is_empty() {
                // Every pending pod is held where a NodeClaim in flight has room planned
                // for it: through a large scale-up, most rounds. The solve would only
                // confirm it, at the cost of preparing every held pod and node again.
                forms.keep_none();
                return Ok(None);
            }
            let (reused, nodes_reused) = (forms.reused(), node_forms.reused());
            let batch = Batch::prepare_with(&input, forms, node_forms)
                .map(|batch| Some((batch, holding)))
                .map_err(|e| e.to_string());
            round.forms_reused = usize::try_from(forms.reused() - reused).unwrap_or(usize::MAX);
            round.nodes_reused =
                usize::try_from(node_forms.reused() - nodes_reused).unwrap_or(usize::MAX);
            heap.mark(Step::Prepared);
            batch
        });
        match batch {
            Ok(Some((batch, holding))) => Some(Planned {
                batch,
                pools,
                skipped,
                holding,
            }),
            Ok(None) => None,
            Err(error) => {
                problems.push(error);
                None
            }
        }
    }

    /// Starts and stops NodePoolSchedulers to match the NodePools in cluster state.
    fn reconcile_schedulers(&mut self) {
        if self.provisioning.is_none() {
            return;
        }
        let pools = self.state.nodepools.snapshot();
        self.schedulers.reconcile(pools.iter().map(|p| p.name()));
    }
}

/// Where a round reports the pods it could not place.
struct Unplaced<'a> {
    /// Why NodePools were left out of the solve; each pod's reason carries them.
    skipped: &'a [String],
    problems: &'a mut Vec<String>,
    recorder: Option<&'a EventRecorder>,
}

/// The launches of a solve's NodeClaims; pods it could not place go to `unplaced`.
fn launches(
    result: SchedulingResult,
    pools: &HashMap<String, Arc<NodePool>>,
    unplaced: Unplaced<'_>,
) -> Vec<CreateNodeClaim> {
    // A CapacityBuffer's virtual pods that find no room are the buffer's matter, not an
    // event on a pod that does not exist; they are counted with the round's problems.
    for (pod, reason) in &result.errors {
        if kerf::buffer::is_virtual_uid(&pod.uid) {
            unplaced.problems.push(format!(
                "{}/{} (capacity buffer): {reason}",
                pod.namespace, pod.name
            ));
            continue;
        }
        let reason = std::iter::once(reason.as_str())
            .chain(unplaced.skipped.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("; ");
        unplaced
            .problems
            .push(format!("{}/{}: {reason}", pod.namespace, pod.name));
        if let Some(recorder) = unplaced.recorder {
            recorder.publish(events::pod_failed_to_schedule(pod, &reason));
        }
    }
    result
        .new_node_claims
        .into_iter()
        .filter_map(|claim: PlannedNodeClaim| {
            let pool = pools.get(&claim.node_pool)?.clone();
            Some(CreateNodeClaim {
                claim,
                pool,
                reason: crate::nodeclaim_creator::CREATED_REASON_PROVISIONING,
            })
        })
        .collect()
}

impl Actor for Provisioner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.provisioning.is_some() {
            ctx.run_interval(SCHEDULER_RECONCILE_PERIOD, |act, ctx| {
                act.reconcile_schedulers();
                // Without senders no round can come; the tick alone would keep the actor
                // (and its schedulers' threads) alive for good.
                if !ctx.connected() {
                    ctx.stop();
                }
            });
        }
    }
}

impl Handler<BatchReady> for Provisioner {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, batch: BatchReady, _ctx: &mut Context<Self>) -> Self::Result {
        self.depth.taken();
        let started = Instant::now();
        let closed = batch.closed;
        let mut heap = RoundHeap::start();
        let (round, planned) = match self.round(batch, &mut heap) {
            Ok(round) => round,
            Err(reason) => {
                tracing::debug!(?reason, "batch skipped");
                return AtomicResponse::new(Box::pin(fut::ready(())));
            }
        };
        metered::taken_up(&self.state, &round.pending, round.withheld);
        let state = Arc::clone(&self.state);
        let solving = planned.map(|p| {
            state.scheduling.solve_started(round.number);
            let solved = self.schedulers.solve(&p.batch);
            (solved, p.pools, p.skipped, p.holding)
        });
        let creator = self.provisioning.as_ref().map(|p| p.creator.clone());
        let created_claims = self.provisioning.as_ref().map(|p| p.created.clone());
        let recorder = self.provisioning.as_ref().map(|p| p.events.clone());
        let state = Arc::clone(&self.state);
        let created = async move {
            let mut round = round;
            let Some((result, pools, skipped, holding)) = solving else {
                round.timing.solve = started.elapsed();
                metrics::histogram!(SCHEDULING_DURATION, "controller" => SCHEDULING_CONTROLLER)
                    .record(started.elapsed().as_secs_f64());
                return (round, Vec::new(), heap, None);
            };
            let result = result.await;
            heap.mark(Step::Solved);
            state.record_buffer_placements(kerf::buffer::placements(&result));
            state.scheduling.solve_ended();
            let by_zone = metered::solved(&state, &result);
            if let Some(created) = &created_claims {
                nominated::assign(created, &holding, &result.existing_nodes);
            }
            round.timing.solve = started.elapsed();
            metrics::histogram!(SCHEDULING_DURATION, "controller" => SCHEDULING_CONTROLLER)
                .record(started.elapsed().as_secs_f64());
            let unplaced = Unplaced {
                skipped: &skipped,
                problems: &mut round.problems,
                recorder: recorder.as_ref(),
            };
            let launches = launches(result, &pools, unplaced);
            // Overlapped, at most a NodeClaimCreator mailbox's worth at a time: each answer is one
            // API create, so a large round's creates overlap instead of paying one round
            // trip after another, yet never queue more than the NodeClaimCreator's bound. Answers
            // keep the planned order. Only each one's name is kept: the created objects of a
            // thousand-NodeClaim round are megabytes, and the store has them anyway.
            let outcomes = match creator {
                Some(creator) => {
                    let concurrency = creator.capacity().max(1);
                    futures::stream::iter(launches)
                        .map(|l| {
                            let pods = l.claim.pods.len();
                            creator.deliver(l).map(move |outcome| (outcome, pods))
                        })
                        .buffered(concurrency)
                        .map(|(outcome, pods)| match outcome {
                            Ok(Ok(claim)) => Ok((claim.metadata.name.unwrap_or_default(), pods)),
                            Ok(Err(error)) => Err(error.to_string()),
                            Err(error) => Err(error.to_string()),
                        })
                        .collect()
                        .await
                }
                None => Vec::new(),
            };
            heap.mark(Step::Created);
            (round, outcomes, heap, Some(by_zone))
        };
        // Atomic: the next batch waits until this round's NodeClaims exist (the NodeClaimCreator
        // records each before answering), so its snapshot counts them.
        AtomicResponse::new(Box::pin(created.into_actor(self).map(
            move |(mut round, outcomes, heap, by_zone), act, _ctx| {
                if let Some(by_zone) = by_zone {
                    metered::pending_by_zone(&by_zone, &mut act.pending_zones);
                }
                for outcome in outcomes {
                    match outcome {
                        Ok((name, pods)) => {
                            round.nodeclaims.push(name);
                            round.planned_pods += pods;
                        }
                        Err(problem) => round.problems.push(problem),
                    }
                }
                round.timing.closed_to_created = closed.elapsed();
                tracing::info!(
                    round = round.number,
                    pending = round.pending.len(),
                    triggered = round.triggered,
                    placing = round.placing,
                    withheld = round.withheld,
                    released = round.released,
                    forms_reused = round.forms_reused,
                    nodes_reused = round.nodes_reused,
                    nodeclaims = round.nodeclaims.len(),
                    planned_pods = round.planned_pods,
                    problems = ?round.problems,
                    queued_ms = round.timing.queued.as_millis() as u64,
                    solve_ms = round.timing.solve.as_millis() as u64,
                    closed_to_created_ms = round.timing.closed_to_created.as_millis() as u64,
                    heap_live_mib = %heap.live_mib(),
                    heap_peak_mib = heap.peak_mib(),
                    heap_peak_raised_by = heap.raised_peak().map(|s| format!("{s:?}")),
                    "provisioning round"
                );
                act.rounds.send_replace(Some(round));
            },
        )))
    }
}

#[cfg(test)]
mod tests;
