//! One replay from start to report: start the world, apply the NodePools and EC2NodeClasses
//! (the log's, else the user's or the defaults), start the controller, then move a replay
//! clock at `speed` × wall time and, at each look, apply the events and NodePool changes it
//! has reached, run the Jobs (`driver`), read the fleet into the [`Meter`] and the pods into
//! the tally, until the clock reaches the log's end or a stop signal comes.

use std::time::Duration;

use kerf::cluster::inventory::Inventory;
use kerf_actors::metrics::{NODECLAIMS_CREATED, NODECLAIMS_DISRUPTED};
use kerf_loadtest::ec2::{CapacityType, Instance, OfferingKey};
use serde_json::Value;
use std::collections::BTreeMap;
use tokio::sync::watch;
use tokio::time::Instant;

use super::driver::Driver;
use super::log::{self, ReplayLog};
use super::report::{Events, Meter, ReplayReport, ReplaySample, over_time};
use super::setup;
use crate::apply::apply;
use crate::exposition;
use crate::figures::{hourly_cost, latency, round3};
use crate::observe::Tally;
use crate::world::{Pace, Replica, StartupReads, World, controller_identity};

/// How often the clock is read and the events it reached applied, in wall time. At 60× a
/// look covers 6 s of the log; at 500×, 50 s: the grain of the replay's timing and cost.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How often a sample goes into the report's series, in wall time.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Windows of the pending → bound percentiles over time: the log split into this many.
const LATENCY_WINDOWS: f64 = 24.0;

/// How one replay runs.
pub struct Config {
    pub label: String,
    /// The NodePools and EC2NodeClasses to start with, and whether the log's own changes to
    /// them are applied as they come.
    pub setup: setup::Plan,
    /// Replay seconds per wall second.
    pub speed: f64,
    pub pace: Pace,
    /// Settings flags for the controller (`--compare-env`), on top of the pace's.
    pub flags: Vec<String>,
    pub startup_reads: StartupReads,
    pub stop: watch::Receiver<bool>,
    /// Say what the replay is doing, every replay hour, on standard error.
    pub progress: bool,
}

/// Replays `log` into a new simulated world and reports it. Must run inside an actix
/// `System` on a multi-threaded runtime.
pub async fn replay(log: &ReplayLog, config: Config) -> anyhow::Result<ReplayReport> {
    let wall = Instant::now();
    let world = World::start(config.pace, &[], config.startup_reads).await?;
    let cluster = world.cluster();
    let notes = apply(&cluster, &config.setup.initial, &Inventory::default())?;
    for note in notes {
        eprintln!("{note}");
    }
    let mut tally = Tally::new(&cluster)?;
    let replica = Replica {
        flags: config.flags.clone(),
        timings: setup::controller_timings(config.speed),
        ..Replica::alone(&controller_identity())
    };
    let daemon = world.start_replica(&replica).await?;
    let before = nodeclaim_counters();
    let span = log.span().as_secs_f64();
    let start = log.start();
    let offset_of = |at| start.map_or(0.0, |s| log::offset(s, at).as_secs_f64());
    let events: Vec<(f64, &log::Event)> = log.events.iter().map(|e| (offset_of(e.at), e)).collect();
    let changes: Vec<(f64, &[Value])> = config
        .setup
        .changes(log)
        .map(|(at, objects)| (offset_of(at), objects))
        .collect();
    let mut driver = Driver::new(cluster.clone(), config.speed);
    let mut meter = Meter::default();
    let mut series = Vec::new();
    let mut next_event = 0;
    let mut next_change = 0;
    let mut failed_changes = Vec::new();
    let mut stop = config.stop.clone();
    let origin = Instant::now();
    let origin_std = origin.into_std();
    let mut sampled: Option<Instant> = None;
    let mut said_hour = -1.0;
    let interrupted = loop {
        let now = Instant::now();
        let clock = (now - origin).as_secs_f64() * config.speed;
        while let Some((at, objects)) = changes.get(next_change).filter(|(at, _)| *at <= clock) {
            if let Err(error) = setup::change(&cluster, objects, config.speed) {
                failed_changes.push(format!("NodePool set at {at:.0}s: {error:#}"));
            }
            next_change += 1;
        }
        while let Some((_, event)) = events.get(next_event).filter(|(at, _)| *at <= clock) {
            driver.apply(event);
            next_event += 1;
        }
        driver.tick(now);
        tally.update(std::time::Instant::now());
        let instances = world.provider.ec2().instances();
        meter.look(clock.min(span), &instances);
        if sampled.is_none_or(|s| now - s >= SAMPLE_EVERY) {
            sampled = Some(now);
            let counts = tally.counts();
            series.push(ReplaySample {
                at_seconds: round3(clock.min(span)),
                pods_requested: driver.requested(),
                pods: counts.pods as u64,
                pods_pending: (counts.pods - counts.bound) as u64,
                nodes_on_demand: live(&instances, CapacityType::OnDemand),
                nodes_spot: live(&instances, CapacityType::Spot),
                // `+ 0.0`: an empty fleet's sum is -0.0.
                hourly_cost: hourly_cost(&instances) + 0.0,
            });
            if config.progress && (clock / 3600.0).floor() > said_hour {
                said_hour = (clock / 3600.0).floor();
                eprintln!(
                    "[{}] replay {:.1}h of {:.1}h: {} pods, {} nodes, ${:.2} so far",
                    config.label,
                    clock / 3600.0,
                    span / 3600.0,
                    counts.pods,
                    series
                        .last()
                        .map_or(0, |s| s.nodes_on_demand + s.nodes_spot),
                    meter.dollars()
                );
            }
        }
        if clock >= span && next_event >= events.len() {
            break false;
        }
        tokio::select! {
            () = tokio::time::sleep(LOOK_EVERY) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            break true;
        }
    };
    let wall_seconds = wall.elapsed().as_secs_f64();
    let end = if interrupted {
        ((Instant::now() - origin).as_secs_f64() * config.speed).min(span)
    } else {
        span
    };
    let cost = meter.finish(0.0, end);
    let after = nodeclaim_counters();
    // Each bound pod's creation on the replay clock.
    let bindings: Vec<(f64, Duration)> = tally
        .bindings()
        .into_iter()
        .map(|(created, took)| {
            let clock = created.saturating_duration_since(origin_std).as_secs_f64() * config.speed;
            (clock, took)
        })
        .collect();
    let real_cluster =
        (!log.extensions.node_samples.is_empty()).then(|| real_cost(log, &world, span));
    let mut failed = failed_changes;
    failed.append(&mut driver.failed);
    let report = ReplayReport {
        label: config.label,
        cluster: log.cluster.clone(),
        speed: config.speed,
        span_seconds: round3(span),
        wall_seconds: round3(wall_seconds),
        interrupted,
        events: Events {
            read: log.events.len() + log.skipped.len(),
            applied: driver.applied,
            skipped: log.skipped.clone(),
            reordered: log.reordered,
            failed,
            jobs_started: driver.jobs_started,
            jobs_completed: driver.jobs_completed,
            node_pool_changes: next_change,
        },
        cost,
        pending_to_bound: latency(bindings.iter().map(|(_, took)| *took).collect()),
        pending_to_bound_over_time: over_time(&bindings, span, span / LATENCY_WINDOWS),
        nodeclaims_launched_by_reason: difference(&after.0, &before.0),
        nodeclaims_disrupted_by_reason: difference(&after.1, &before.1),
        real_cluster,
        process_peak_rss_bytes: crate::memory::peak_rss_bytes(),
        series,
        pending_to_bound_seconds: bindings
            .iter()
            .map(|(_, took)| took.as_secs_f64())
            .collect(),
    };
    daemon.stop().await;
    world.stop().await;
    Ok(report)
}

fn live(instances: &[Instance], capacity: CapacityType) -> u64 {
    instances
        .iter()
        .filter(|i| i.state.is_live() && i.capacity_type == capacity)
        .count() as u64
}

/// The controller's `karpenter_nodeclaims_created_total` and `_disrupted_total` by reason.
/// The counters are the process's: a second replay in the same process reads the difference.
fn nodeclaim_counters() -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let text = kerf_actors::metrics::render();
    let mut created = BTreeMap::new();
    let mut disrupted = BTreeMap::new();
    for (name, labels, value) in exposition::samples(&text) {
        let into = match name {
            NODECLAIMS_CREATED => &mut created,
            NODECLAIMS_DISRUPTED => &mut disrupted,
            _ => continue,
        };
        let reason = exposition::label(labels, "reason").unwrap_or("unknown");
        *into.entry(reason.to_owned()).or_insert(0) += value;
    }
    (created, disrupted)
}

fn difference(
    after: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(reason, n)| {
            let d = n.saturating_sub(before.get(reason).copied().unwrap_or(0));
            (d > 0).then(|| (reason.clone(), d))
        })
        .collect()
}

/// The recorded cluster's nodes over the log's window, each sample holding until the next,
/// priced as the simulated region prices the same pool (the type's cheapest zone there when
/// the zone is not the region's; on-demand for capacity types EC2 does not sell by that name).
fn real_cost(log: &ReplayLog, world: &World, span: f64) -> super::report::Cost {
    let ec2 = world.provider.ec2();
    let zones = ["a", "b", "c", "d", "e", "f"].map(|z| format!("{}{z}", crate::defaults::REGION));
    let price = |node: &log::SampledNode| {
        let capacity = CapacityType::parse(&node.capacity_type).unwrap_or(CapacityType::OnDemand);
        ec2.price(&OfferingKey::new(&node.instance_type, &node.zone, capacity))
            .or_else(|| {
                zones
                    .iter()
                    .filter_map(|z| ec2.price(&OfferingKey::new(&node.instance_type, z, capacity)))
                    .min_by(f64::total_cmp)
            })
            .unwrap_or(0.0)
    };
    let start = log.start();
    let mut meter = Meter::default();
    for sample in &log.extensions.node_samples {
        let at = start.map_or(0.0, |s| log::offset(s, sample.at).as_secs_f64());
        let fleet = sample
            .nodes
            .iter()
            .map(|n| (n.instance_type.clone(), n.capacity_type.clone(), price(n)))
            .collect();
        meter.look_at(at, fleet);
    }
    meter.finish(0.0, span)
}
