//! One simulation from start to summary: start the world, apply the set-up objects, start
//! the controller and wait for it to sync, apply the workload, then follow pods, NodeClaims
//! and the controller's provisioning rounds until every pod that can fit is bound — pods the
//! latest round reported it cannot place are excluded — or `--duration` runs out; then,
//! with `--interrupt-spot`, the spot interruption phase ([`interrupt`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use kerf_actors::provisioner::Round;
use tokio::sync::watch;
use tokio::time::Instant;

use super::apply::apply;
use super::controller_threads::Controller;
use super::exposition;
use super::figures::ClientBudget;
use super::ice::IceTarget;
use super::inputs::Inputs;
use super::interrupt;
use super::memory;
use super::observe::Tally;
use super::planned;
use super::progress::Progress;
use super::report::{self, ActiveFaults, Recorder};
use super::scale_down;
use super::summary::{
    Endpoints, Facts, Memory, Nominations, Outcome, Provisioning, RoundFigures, Summary,
};
use super::world::{Pace, StartupReads, World};

/// Longest the loop sleeps without news; progress and the deadline are checked this often.
const TICK: Duration = Duration::from_millis(100);

pub struct Config {
    pub inputs: Inputs,
    pub ice: Vec<IceTarget>,
    /// `--interrupt-spot`: the fraction of spot nodes to interrupt once scale-out settled.
    pub interrupt_spot: Option<f64>,
    /// `--reservations`: the capacity reservations the simulated region holds.
    pub reservations: Vec<super::reservations::ReservationSpec>,
    /// `--scale-down`: the fraction to scale Deployments down by after the scale-out.
    pub scale_down: Option<f64>,
    pub duration: Duration,
    pub kubeconfig_out: Option<PathBuf>,
    pub pace: Pace,
    /// `kerf controller`'s start-up reads, made by the controller before it starts.
    pub startup_reads: StartupReads,
    pub show_progress: bool,
    /// Run the `--drift` AMI rollout after the scale-out.
    pub drift: bool,
    /// `--report DIR`: record the run and write `report.json` and `report.html` there.
    pub report: Option<PathBuf>,
    /// Turns true on Ctrl-C or SIGTERM: the run stops where it is and summarises.
    pub stop: watch::Receiver<bool>,
}

/// A finished run whose cluster is still up.
pub struct Finished {
    pub summary: Summary,
    world: World,
    daemon: Controller,
}

impl Finished {
    /// Stops the controller, then the simulated cluster.
    pub async fn stop(self) {
        self.daemon.stop().await;
        self.world.stop().await;
    }
}

pub async fn simulate(config: Config) -> anyhow::Result<Finished> {
    let started = Instant::now();
    let deadline = started + config.duration;
    let world = World::start(config.pace, &config.ice, config.startup_reads).await?;
    super::reservations::seed(
        world.provider.ec2(),
        &config.reservations,
        std::time::SystemTime::now(),
    );
    let cluster = world.cluster();
    let recorder = match config.report {
        Some(_) => Some(Recorder::start(&world, ActiveFaults::default(), started)?),
        None => None,
    };
    if let Some(path) = &config.kubeconfig_out {
        world
            .server
            .write_kubeconfig(path)
            .with_context(|| format!("--kubeconfig-out {}", path.display()))?;
        eprintln!(
            "kubeconfig for the simulated cluster: {} (kubectl --kubeconfig {} get nodes,nodeclaims,pods)",
            path.display(),
            path.display()
        );
    }
    let mut notes = apply(&cluster, &config.inputs.setup, &config.inputs.inventory)?;
    let mut tally = Tally::new(&cluster)?;
    let daemon = world.start_controller().await?;
    // Served for as long as the controller runs (with --kubeconfig-out, until Ctrl-C), so
    // Prometheus, Grafana's dashboards or curl can read it.
    eprintln!("controller metrics: http://{}/metrics", daemon.metrics_addr);
    notes.extend(apply(
        &cluster,
        &config.inputs.workload,
        &config.inputs.inventory,
    )?);
    for note in notes {
        eprintln!("{note}");
    }
    let expected = config.inputs.inventory.pods.len();
    let progress = Progress::new(expected, config.show_progress);
    let mut rounds = daemon.rounds.clone();
    let mut log = RoundLog {
        budget: world.client_budget()?,
        ..RoundLog::default()
    };
    let mut stop = config.stop.clone();
    let mut checked = Instant::now();
    let mut outcome = loop {
        tokio::select! {
            () = tally.changed() => {}
            changed = rounds.changed() => {
                if changed.is_ok() && let Some(round) = rounds.borrow_and_update().clone() {
                    log.record(round);
                }
            }
            () = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            break Outcome::Interrupted;
        }
        tally.update(std::time::Instant::now());
        // Every pod event wakes the loop; the counts read every pod, so they are read once a
        // tick (the sleep above ends a quiet spell with a last look).
        if checked.elapsed() < TICK {
            continue;
        }
        checked = Instant::now();
        let counts = tally.counts();
        progress.update(&counts, expected, log.unschedulable.len());
        // Names only once no more pods wait than were refused: they are collected and sorted.
        let unbound = counts.pods.saturating_sub(counts.bound);
        let placed_or_refused = unbound <= log.unschedulable.len()
            && tally
                .pending()
                .iter()
                .all(|p| log.unschedulable.contains_key(p));
        if counts.pods >= expected && placed_or_refused {
            break Outcome::Complete;
        }
        if Instant::now() >= deadline {
            break Outcome::TimedOut;
        }
    };
    progress.finish();
    // Each phase after the scale-out is given up on a stop signal (its own figures with it);
    // the summary still tells what happened until then.
    let drift = match (config.drift, outcome) {
        (true, Outcome::Complete) => {
            let rollout = super::drift::rollout(&world, &mut tally, deadline);
            unless_stopped(&mut stop, &mut outcome, rollout)
                .await
                .transpose()?
        }
        _ => None,
    };
    let interruptions = match (outcome, config.interrupt_spot) {
        (Outcome::Complete, Some(fraction)) => {
            eprintln!("interrupting {:.0}% of the spot nodes", fraction * 100.0);
            let phase = interrupt::run(&cluster, world.provider.ec2(), fraction, deadline);
            unless_stopped(&mut stop, &mut outcome, phase).await
        }
        _ => None,
    };
    let disruption = match (config.scale_down, outcome) {
        (Some(fraction), Outcome::Complete) => {
            let phase = scale_down::run(&world, &daemon, &mut tally, fraction, deadline);
            unless_stopped(&mut stop, &mut outcome, phase)
                .await
                .transpose()?
        }
        _ => None,
    };
    if let (Some(recorder), Some(dir)) = (recorder, &config.report) {
        let report =
            recorder
                .finish()
                .await
                .into_report("simulate", Vec::new(), Vec::new(), Vec::new());
        report::write(dir, &report).context("--report")?;
        eprintln!("report: {}", dir.join("report.html").display());
    }
    // Read before the plan below runs in this process, so it does not count in the peak.
    let heap = memory::controller_heap();
    let memory = Memory {
        controller_heap_peak_bytes: heap.peak_bytes,
        controller_heap_live_bytes: heap.live_bytes,
        simulated_heap: memory::simulated_heap(),
        process_peak_rss_bytes: memory::peak_rss_bytes(),
    };
    let plan = planned::node_claims(&config.inputs.inventory)
        .inspect_err(|error| eprintln!("kerf simulate: cannot compute kerf plan's count: {error}"))
        .ok();
    let mut summary = Summary::new(Facts {
        outcome,
        elapsed: started.elapsed(),
        counts: tally.counts(),
        pending: &tally.pending(),
        unschedulable: &log.unschedulable,
        latencies: tally.latencies(),
        instances: &world.provider.ec2().instances(),
        api_calls: &world.provider.ec2().api_calls(),
        api_writes: super::writes::per_node_claim(
            &world
                .server
                .faults()
                .mutations_from(&super::world::controller_identity()),
            tally.counts().claims_created,
        ),
        provisioning: log.provisioning(),
        memory,
        ice_pools: world.ice.len(),
        plan,
        disruption,
        endpoints: Endpoints::new(daemon.metrics_addr, daemon.probes_addr),
    });
    summary.drift = drift;
    summary.interruptions = interruptions;
    summary.rbac = Some(super::install::usage(&world.server));
    summary.pods.average_object_bytes = super::observe::average_pod_bytes(&cluster);
    Ok(Finished {
        summary,
        world,
        daemon,
    })
}

/// `phase`'s result, or `None` (and the outcome `Interrupted`) when a stop signal comes first.
async fn unless_stopped<T>(
    stop: &mut watch::Receiver<bool>,
    outcome: &mut Outcome,
    phase: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        done = phase => Some(done),
        _ = stop.wait_for(|stopped| *stopped) => {
            *outcome = Outcome::Interrupted;
            None
        }
    }
}

/// What the controller's provisioning rounds said.
#[derive(Default)]
struct RoundLog {
    /// Pods the latest round could not place, with the reason.
    unschedulable: BTreeMap<String, String>,
    rounds: u64,
    planned_pods: u64,
    largest: Option<RoundFigures>,
    /// The controller's client budget, which bounds how fast a round's creates can go.
    budget: ClientBudget,
}

impl RoundLog {
    fn record(&mut self, round: Round) {
        self.rounds = round.number;
        self.planned_pods += round.planned_pods as u64;
        self.unschedulable = unschedulable_pods(&round);
        let figures = RoundFigures {
            number: round.number,
            pending_pods: round.pending.len(),
            node_claims: round.nodeclaims.len(),
            planned_pods: round.planned_pods,
            solve_seconds: round.timing.solve.as_secs_f64(),
            batch_close_to_created_seconds: round.timing.closed_to_created.as_secs_f64(),
            client_budget_bound_seconds: self.budget.bound_seconds(round.nodeclaims.len()),
        };
        if self
            .largest
            .as_ref()
            .is_none_or(|l| figures.node_claims > l.node_claims)
        {
            self.largest = Some(figures);
        }
    }

    fn provisioning(&self) -> Provisioning {
        Provisioning {
            rounds: self.rounds,
            planned_pods: self.planned_pods,
            largest_round: self.largest.clone(),
            nominations: nominations(&kerf_actors::metrics::render()),
        }
    }
}

/// The controller's nomination counters in the exposition `text`.
fn nominations(text: &str) -> Nominations {
    use kerf_actors::lifecycle::{LEFT_UNNOMINATED, PODS_NOMINATED, REGISTERED_BEFORE_NOMINATED};
    let mut out = Nominations::default();
    for (name, labels, value) in exposition::samples(text) {
        let field = match name {
            PODS_NOMINATED => match exposition::label(labels, "result") {
                Some("nominated") => &mut out.written,
                Some("expired") => &mut out.expired,
                Some("unusable") => &mut out.unusable,
                Some("failed") => &mut out.failed,
                _ => continue,
            },
            LEFT_UNNOMINATED => &mut out.left_at_registration,
            REGISTERED_BEFORE_NOMINATED => &mut out.nodes_opened_before_constrained_nominated,
            _ => continue,
        };
        *field += value;
    }
    out
}

/// The pods among a round's problems (`namespace/name: reason`), by pod.
fn unschedulable_pods(round: &Round) -> BTreeMap<String, String> {
    let pending: BTreeSet<String> = round.pending.iter().map(ToString::to_string).collect();
    round
        .problems
        .iter()
        .filter_map(|problem| {
            let (pod, reason) = problem.split_once(": ")?;
            pending
                .contains(pod)
                .then(|| (pod.to_owned(), reason.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::pods::PodRef;
    use kerf_actors::provisioner::RoundTiming;

    #[test]
    fn nominations_are_read_from_the_controllers_counters() {
        let text = "\
# TYPE kerf_pods_nominated_total counter
kerf_pods_nominated_total{result=\"nominated\"} 1200
kerf_pods_nominated_total{result=\"expired\"} 7
kerf_pods_nominated_total{result=\"unusable\"} 31
kerf_pods_nominated_total{result=\"gone\"} 2
kerf_pods_nominated_total{result=\"failed\"} 1
kerf_pods_left_unnominated_at_registration_total 450
kerf_registered_before_nominated_total 3
karpenter_nodeclaims_created_total{reason=\"provisioning\"} 99
";
        assert_eq!(
            nominations(text),
            Nominations {
                written: 1200,
                expired: 7,
                unusable: 31,
                failed: 1,
                left_at_registration: 450,
                nodes_opened_before_constrained_nominated: 3,
            }
        );
    }

    #[test]
    fn only_pending_pods_count_as_unschedulable() {
        let round = Round {
            number: 3,
            triggered: 0,
            pending: ["big", "web-1"]
                .map(|name| PodRef::new("default", name, format!("{name}-uid")))
                .into(),
            placing: 2,
            withheld: 0,
            released: 0,
            forms_reused: 0,
            nodes_reused: 0,
            window: Duration::ZERO,
            nodeclaims: vec!["default-abcde".into()],
            planned_pods: 1,
            problems: vec![
                "default/big: incompatible with nodepool \"default\": no instance type fits".into(),
                "EC2NodeClass default is not in the input: using defaults".into(),
                "other/gone: whatever".into(),
            ],
            timing: RoundTiming::default(),
        };
        let mut log = RoundLog::default();
        log.record(round.clone());
        log.record(Round {
            number: 4,
            planned_pods: 2,
            ..round
        });
        assert_eq!(log.provisioning().planned_pods, 3, "summed over rounds");
        assert_eq!(log.unschedulable.len(), 1);
        assert!(log.unschedulable["default/big"].starts_with("incompatible"));
        assert_eq!(log.rounds, 4);
        assert_eq!(
            log.provisioning().largest_round.map(|r| r.node_claims),
            Some(1)
        );
    }
}
