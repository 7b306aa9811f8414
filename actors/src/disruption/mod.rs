//! The Disruption loop (upstream's disruption controller): gives capacity back. Each pass,
//! while this replica leads and cluster state has synced:
//!
//! 1. removes marks no command holds ([`stale`]);
//! 2. skips the pass when nothing changed since a pass that found nothing (the watched
//!    objects' [`Generation`], no `consolidateAfter` elapsed, within [`NO_OP_MEMO_TTL`]):
//!    upstream's "consolidated" memo: an idle large cluster is not re-simulated each poll;
//! 3. ends it when no managed node may be a candidate ([`screen`]), without copying the
//!    cluster;
//! 4. asks the pure core ([`kerf::disruption::controller::pass`]) on cluster state's input
//!    ([`cluster`]) for the first command of emptiness, drift, multi- and single-node
//!    consolidation, on a blocking thread, within upstream's limits ([`Timeouts::UPSTREAM`]);
//! 5. re-checks a graceful command after [`VALIDATION_PERIOD`], dropping one that no longer
//!    holds;
//! 6. hands the command to the [`Orchestrator`];
//!
//! then runs again at once after a command, else after [`POLL_PERIOD`]. Metrics and events
//! are upstream's ([`observe`]); writes go through the fenced client.

mod cluster;
mod observe;
mod screen;
pub mod stale;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::catalog::Catalog;
use kerf::cluster::ControllerSettings;
use kerf::disruption::controller::{self, Pass, Planned};
use kerf::disruption::{Cluster, Forms, ManagedNode, Method, Options, Timeouts};
use kerf::feature_gates::FeatureGates;
use kerf::labels;
use kerf::scheduling::SolvePolicies;
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::created_claims::{CreatedClaims, NOMINATION_WINDOW, Nominated};
use crate::events::EventRecorder;
use crate::instance_types::InstanceTypeCache;
use crate::offering_cache::OfferingCacheHandle;
use crate::orchestrator::{Candidate, Command, Orchestrator};
use crate::state::ClusterState;

/// Upstream's polling period between passes that found nothing.
pub const POLL_PERIOD: Duration = Duration::from_secs(10);
/// Upstream waits this long before executing a graceful command, then re-validates it, so
/// a node is never consolidated on a momentary view (pods between a scale-down and the
/// next scale-up).
pub const VALIDATION_PERIOD: Duration = Duration::from_secs(15);
/// A pass that found nothing is trusted for at most this long without a cluster change:
/// time alone changes decisions too (budget schedules, `consolidateAfter`, do-not-disrupt
/// durations), so the memo expires as upstream's does.
pub const NO_OP_MEMO_TTL: Duration = Duration::from_secs(5 * 60);
/// How often a replica that does not lead, or has not synced, looks again.
const IDLE_PERIOD: Duration = Duration::from_secs(1);

/// The wall clock decisions read (budget schedules, lifetimes); tests set their own.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The loop's timings and clock.
#[derive(Clone)]
pub struct DisruptionConfig {
    pub poll_period: Duration,
    pub validation_period: Duration,
    pub memo_ttl: Duration,
    pub clock: Clock,
    /// Upstream's consolidation time limits (1 minute multi-node, 3 single-node).
    pub timeouts: Timeouts,
    /// How long a node stays nominated after a round planned pods onto it (or after its
    /// Node was initialized, for one created for pending pods): upstream's window,
    /// [`NOMINATION_WINDOW`]; tests that scale down right after scaling up shorten it.
    pub nomination_window: Duration,
}

impl Default for DisruptionConfig {
    fn default() -> Self {
        Self {
            poll_period: POLL_PERIOD,
            validation_period: VALIDATION_PERIOD,
            memo_ttl: NO_OP_MEMO_TTL,
            clock: Arc::new(Timestamp::now),
            timeouts: Timeouts::UPSTREAM,
            nomination_window: NOMINATION_WINDOW,
        }
    }
}

impl std::fmt::Debug for DisruptionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DisruptionConfig")
            .field("poll_period", &self.poll_period)
            .field("validation_period", &self.validation_period)
            .field("memo_ttl", &self.memo_ttl)
            .field("timeouts", &self.timeouts)
            .field("nomination_window", &self.nomination_window)
            .finish_non_exhaustive()
    }
}

/// Counts cluster changes; the watch streams' subscribers bump it. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct Generation(Arc<AtomicU64>);

impl Generation {
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The settings' gates as the core decides with them (destructured, so a gate added to
/// the settings fails to compile until it is mapped).
pub fn core_gates(gates: crate::settings::FeatureGates) -> FeatureGates {
    let crate::settings::FeatureGates {
        node_repair,
        reserved_capacity,
        spot_to_spot_consolidation,
        node_overlay,
        static_capacity,
        capacity_buffer: _not_read_by_disruption,
        nominate_pods: _not_read_by_disruption_either,
    } = gates;
    FeatureGates {
        node_repair,
        reserved_capacity,
        spot_to_spot_consolidation,
        node_overlay,
        static_capacity,
    }
}

/// What the loop works with.
#[derive(Clone)]
pub struct DisruptionDeps {
    pub client: Client,
    pub state: Arc<ClusterState>,
    pub catalog: Catalog,
    /// Offerings marked unavailable (ICE): replacements are neither planned on them nor
    /// priced with them, as the Provisioner's NodeClaims.
    pub offerings: Option<OfferingCacheHandle>,
    /// Each EC2NodeClass's resolved instance types, rebuilt when the OfferingCache moves;
    /// the Provisioner's, shared.
    pub instance_types: InstanceTypeCache,
    pub controller: ControllerSettings,
    /// `PREFERENCE_POLICY` and `MIN_VALUES_POLICY`, which upstream's disruption simulations
    /// schedule with as its provisioning does.
    pub policies: SolvePolicies,
    pub feature_gates: FeatureGates,
    pub orchestrator: Orchestrator,
    /// The NodeClaimCreator's record of what the Provisioner's rounds nominated: nominated nodes are
    /// no candidates.
    pub nominations: CreatedClaims,
    pub events: EventRecorder,
    pub leader: watch::Receiver<bool>,
    pub generation: Generation,
    pub config: DisruptionConfig,
}

/// What the loop last did, for observers (`kerf simulate`, tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Passes that evaluated the cluster, those the screen ended included (memoized passes
    /// are not counted).
    pub passes: u64,
    /// Of those, the passes the screen ended: they read no instance types.
    pub screened: u64,
    /// Time those passes took, from reading the cluster state to the decision (the 15 s
    /// validation wait and the command's execution are not in it).
    pub evaluating: Duration,
    /// The longest of them.
    pub longest_evaluation: Duration,
    /// Commands handed to the Orchestrator, by method.
    pub commands: Vec<(Method, Vec<String>)>,
    /// Graceful commands dropped after the validation period.
    pub failed_validations: u64,
    /// Whether the last pass found nothing to do.
    pub idle: bool,
    /// After an idle pass: when time alone (a node's `consolidateAfter`, a nomination's
    /// window) next changes the decision; `None` when only a cluster change can.
    pub next_consolidatable: Option<Timestamp>,
}

impl Progress {
    /// Counts a pass that evaluated the methods in `took`.
    fn evaluated(&mut self, took: Duration) {
        self.passes += 1;
        self.evaluating += took;
        self.longest_evaluation = self.longest_evaluation.max(took);
    }
}

/// The controller name a pass is reconciled as in controller-runtime's metrics (upstream's
/// disruption controller's name).
pub const CONTROLLER: &str = "disruption";

/// Runs the loop until `shutdown`; publishes its progress on `progress`.
pub async fn run(
    deps: DisruptionDeps,
    progress: watch::Sender<Progress>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut memo: Option<Memo> = None;
    // What the passes prepared of the cluster's nodes, for the next pass (kept only while
    // leading: a follower's would be stale by the time it leads).
    let mut forms = Forms::default();
    // Touched at zero, as upstream initialises them: a dashboard charts a rate from 0.
    for consolidation_type in ["multi", "single"] {
        metrics::counter!(
            crate::metrics::DISRUPTION_CONSOLIDATION_TIMEOUTS,
            "consolidation_type" => consolidation_type
        )
        .increment(0);
    }
    loop {
        let next = if *deps.leader.borrow() && deps.state.synced() {
            crate::supervisor::fault_point("disruption");
            // A pass handles its own failures (logged, retried after the poll period).
            let passed = crate::metrics::reconcile(CONTROLLER, async {
                Ok::<_, std::convert::Infallible>(
                    pass(&deps, &progress, &mut memo, &mut forms, &mut shutdown).await,
                )
            });
            match passed.await {
                Ok(next) => next,
                Err(never) => match never {},
            }
        } else {
            memo = None;
            forms = Forms::default();
            IDLE_PERIOD
        };
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            () = tokio::time::sleep(next) => {}
        }
    }
}

/// A pass that found nothing: the generation it saw, when, and until when time alone
/// leaves its answer standing.
#[derive(Debug, Clone, Copy)]
struct Memo {
    generation: u64,
    at: Instant,
    until: Option<Timestamp>,
}

impl Memo {
    fn holds(&self, generation: u64, now: Timestamp, ttl: Duration) -> bool {
        self.generation == generation
            && self.at.elapsed() < ttl
            && self.until.is_none_or(|until| now < until)
    }
}

/// One pass; returns when to run the next.
async fn pass(
    deps: &DisruptionDeps,
    progress: &watch::Sender<Progress>,
    memo: &mut Option<Memo>,
    forms: &mut Forms,
    shutdown: &mut watch::Receiver<bool>,
) -> Duration {
    let in_queue = deps.orchestrator.in_queue().clone();
    match stale::remove(&deps.client, &deps.state, &in_queue).await {
        Ok(removed) if removed != stale::Removed::default() => {
            tracing::info!(taints = ?removed.taints, reasons = ?removed.reasons, "removed stale disruption marks");
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(%error, "removing stale disruption marks");
            return deps.config.poll_period;
        }
    }
    let generation = deps.generation.current();
    let now = (deps.config.clock)();
    if memo.is_some_and(|m| m.holds(generation, now, deps.config.memo_ttl)) {
        return deps.config.poll_period;
    }
    let started = Instant::now();
    let nominated = nominated_now(deps);
    let lapse = lapse_time(deps, &nominated);
    if let Some(none) = screen::no_candidate(&deps.state, &nominated, &in_queue.nodes()) {
        observe::no_candidate(deps, &none);
        progress.send_modify(|p| {
            p.evaluated(started.elapsed());
            p.screened += 1;
            p.idle = true;
            p.next_consolidatable = lapse;
        });
        return deps.config.poll_period;
    }
    let Some((seen, pass)) = decide(deps, nominated, forms).await else {
        return deps.config.poll_period;
    };
    let evaluation = started.elapsed();
    observe::pass(deps, &seen.managed, &pass);
    let Some(planned) = pass.command else {
        // A nomination lapsing changes the decision as a node's `consolidateAfter` does.
        let until = earliest(pass.next_consolidatable, lapse);
        *memo = Some(Memo {
            generation,
            at: Instant::now(),
            until,
        });
        progress.send_modify(|p| {
            p.evaluated(evaluation);
            p.idle = true;
            p.next_consolidatable = until;
        });
        return deps.config.poll_period;
    };
    *memo = None;
    progress.send_modify(|p| {
        p.evaluated(evaluation);
        p.idle = false;
        p.next_consolidatable = None;
    });
    let command = command(&seen, planned.clone());
    if planned.command.method != Method::Drift {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return Duration::ZERO,
            () = tokio::time::sleep(deps.config.validation_period) => {}
        }
        if let Err(why) = revalidate(deps, &planned).await {
            tracing::info!(
                method = ?planned.command.method,
                nodes = ?planned.command.nodes,
                %why,
                "disruption command failed validation"
            );
            observe::failed_validation(&planned);
            progress.send_modify(|p| p.failed_validations += 1);
            return Duration::ZERO;
        }
    }
    let (method, nodes) = (
        command.method,
        command.candidates.iter().map(|c| c.node.clone()).collect(),
    );
    observe::decision(&command);
    tracing::info!(method = ?method, nodes = ?nodes, replacements = command.replacements.len(), "disrupting");
    if deps.orchestrator.submit(command).await.is_err() {
        return deps.config.poll_period;
    }
    progress.send_modify(|p| p.commands.push((method, nodes)));
    Duration::ZERO
}

/// What is nominated now, with the loop's window.
fn nominated_now(deps: &DisruptionDeps) -> Nominated {
    deps.nominations
        .nominated_now(&deps.state, deps.config.nomination_window)
}

/// When time alone next ends a nomination, on the loop's clock.
fn lapse_time(deps: &DisruptionDeps, nominated: &Nominated) -> Option<Timestamp> {
    let left = nominated
        .next_lapse()?
        .saturating_duration_since(Instant::now());
    (deps.config.clock)().checked_add(left).ok()
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the loop reads of a snapshot once the pass has it: the managed nodes (events for
/// those left alone, each candidate's NodeClaim and NodePool) and every node's capacity
/// type. The snapshot itself — every pod and node of the cluster — goes into the pass and
/// is gone with it, so nothing of it outlives the pass, the 15 s validation wait included
/// (what the pass prepared of the nodes, [`Forms`], is kept for the next one, holding no pod).
struct Seen {
    managed: Vec<ManagedNode>,
    capacity_types: HashMap<String, String>,
}

impl Seen {
    fn of(cluster: &Cluster) -> Self {
        Self {
            managed: cluster.nodes.clone(),
            capacity_types: cluster
                .scheduling
                .existing_nodes
                .iter()
                .filter_map(|n| {
                    Some((n.name.clone(), n.labels.get(labels::CAPACITY_TYPE)?.clone()))
                })
                .collect(),
        }
    }
}

/// The core's pass over the cluster now, computed off the runtime, starting from `forms`
/// and leaving there what it prepared (nothing, when the pass did not finish).
async fn decide(
    deps: &DisruptionDeps,
    nominated: Nominated,
    forms: &mut Forms,
) -> Option<(Seen, Pass)> {
    let cluster = snapshot(deps, nominated).await?;
    let seen = Seen::of(&cluster);
    let options = options(deps);
    let started = std::time::Instant::now();
    let timeouts = deps.config.timeouts;
    let mut kept = std::mem::take(forms);
    let pass = blocking(move || {
        let pass = controller::pass_owned(cluster, options, timeouts, &mut kept);
        (pass, kept)
    })
    .await;
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "disruption pass"
    );
    let pass = pass.map(|(pass, kept)| {
        *forms = kept;
        pass
    });
    match pass {
        Ok(Ok(pass)) => Some((seen, pass)),
        Ok(Err(error)) => {
            tracing::warn!(%error, "disruption decision");
            None
        }
        Err(error) => {
            tracing::error!(%error, "disruption decision did not finish");
            None
        }
    }
}

/// The decision's input from cluster state now, with `nominated` (read by the caller, so a
/// pass screens and decides on the same nominations).
async fn snapshot(deps: &DisruptionDeps, nominated: Nominated) -> Option<Cluster> {
    let (state, catalog, offerings, types, controller, in_queue) = (
        Arc::clone(&deps.state),
        deps.catalog,
        deps.offerings.clone(),
        deps.instance_types.clone(),
        deps.controller,
        deps.orchestrator.in_queue().clone(),
    );
    let built = blocking(move || {
        let mut source = types.round(&catalog, offerings.as_ref());
        let cluster = cluster::build(&state, &mut source, controller, &in_queue, &nominated);
        types.finish_round();
        cluster
    })
    .await;
    match built {
        Ok(Ok(mut cluster)) => {
            deps.policies.apply(&mut cluster.scheduling.options);
            Some(cluster)
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "building the disruption snapshot");
            None
        }
        Err(error) => {
            tracing::error!(%error, "building the disruption snapshot did not finish");
            None
        }
    }
}

fn options(deps: &DisruptionDeps) -> Options {
    Options {
        now: (deps.config.clock)(),
        feature_gates: deps.feature_gates,
    }
}

/// Upstream's validation of `planned` on the cluster as it is now.
async fn revalidate(deps: &DisruptionDeps, planned: &Planned) -> Result<(), String> {
    let nominated = nominated_now(deps);
    let cluster = snapshot(deps, nominated)
        .await
        .ok_or_else(|| "the cluster could not be read".to_owned())?;
    let options = options(deps);
    let planned = planned.clone();
    blocking(move || controller::validate_owned(cluster, options, &planned))
        .await?
        .map_err(|e| e.to_string())
}

/// Runs `compute` on a blocking thread. A panic there is reported as the disruption loop's
/// (logged with its message, counted, held against the restart budget) and answered as the
/// error that abandons the pass: the loop itself goes on.
async fn blocking<T: Send + 'static>(
    compute: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(compute)
        .await
        .map_err(|error| crate::supervisor::report_join_error(CONTROLLER, error))
}

/// The Orchestrator's command for `planned`, its candidates' NodeClaims from `seen`.
fn command(seen: &Seen, planned: Planned) -> Command {
    let candidates = planned
        .command
        .nodes
        .iter()
        .map(|name| {
            let managed = seen.managed.iter().find(|m| &m.name == name);
            let capacity_type = seen.capacity_types.get(name).cloned().unwrap_or_default();
            Candidate {
                node: name.clone(),
                node_claim: managed.map_or_else(|| name.clone(), |m| m.node_claim.clone()),
                node_pool: managed.map(|m| m.node_pool.clone()).unwrap_or_default(),
                capacity_type,
            }
        })
        .collect();
    Command {
        method: planned.command.method,
        reason: planned.command.reason,
        decision: planned.command.decision,
        candidates,
        replacements: planned.replacements,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_no_op_memo_ends_on_a_change_on_its_ttl_or_when_a_node_turns_consolidatable() {
        let now = Timestamp::now();
        let later = Timestamp::from_second(now.as_second() + 60).expect("a time");
        let memo = Memo {
            generation: 7,
            at: Instant::now(),
            until: Some(later),
        };
        assert!(memo.holds(7, now, NO_OP_MEMO_TTL));
        assert!(!memo.holds(8, now, NO_OP_MEMO_TTL), "the cluster changed");
        assert!(
            !memo.holds(7, later, NO_OP_MEMO_TTL),
            "consolidateAfter elapsed"
        );
        assert!(!memo.holds(7, now, Duration::ZERO), "the memo expired");
        let timeless = Memo {
            until: None,
            ..memo
        };
        assert!(timeless.holds(7, later, NO_OP_MEMO_TTL));
    }

    #[tokio::test]
    async fn a_panicking_blocking_pass_is_reported_as_the_loops_and_abandoned() {
        let scope = crate::supervisor::Supervision::new();
        let answer = scope
            .scope(blocking(|| -> u32 { panic!("a bug in the decision") }))
            .await;
        assert_eq!(answer, Err("panicked: a bug in the decision".to_owned()));
        assert_eq!(
            scope.recent_restarts(CONTROLLER),
            1,
            "held against the restart budget"
        );
    }
}
