//! What a replay reports, in the log's own time (replay time: wall time × speed): cost and
//! node-hours by instance type and capacity type, the cluster's peak and average size,
//! pending → bound percentiles per window of the log, NodeClaims launched and disrupted by
//! reason, and the events applied and skipped; with the node samples of a `kerf record`
//! log, what the real cluster ran over the same window, priced with the same catalog.
//! [`Meter`] integrates the fleet at each look; [`Comparison`] sets two replays side by side.
//! Latencies are the simulated cluster's own, not compressed: the controller, EC2 and
//! kubelets run at their pace whatever the speed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use kerf_loadtest::ec2::Instance;
use serde::Serialize;

use super::log::Skipped;
use crate::figures::{Latency, latency, round3};

/// Node-hours and what they cost, for one instance type or capacity type.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub node_hours: f64,
    pub dollars: f64,
}

impl Usage {
    fn add(&mut self, hours: f64, price: f64) {
        self.node_hours += hours;
        self.dollars += hours * price;
    }

    fn rounded(&self) -> Self {
        Self {
            node_hours: round3(self.node_hours),
            dollars: round4(self.dollars),
        }
    }
}

/// The fleet over the replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    pub total: Usage,
    pub by_instance_type: BTreeMap<String, Usage>,
    pub by_capacity_type: BTreeMap<String, Usage>,
    pub peak_nodes: u64,
    /// Time-weighted over the replay.
    pub average_nodes: f64,
}

/// Pending → bound over one window of the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencyWindow {
    /// Replay seconds from the log's start.
    pub from_seconds: f64,
    pub to_seconds: f64,
    /// Pods created in the window and bound.
    pub pods: usize,
    pub latency: Latency,
}

/// One look at the replay, at a replay time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplaySample {
    pub at_seconds: f64,
    /// Pods the log asks for (Deployments' replicas, Jobs' running pods).
    pub pods_requested: u64,
    /// Workload pods that exist.
    pub pods: u64,
    pub pods_pending: u64,
    pub nodes_on_demand: u64,
    pub nodes_spot: u64,
    pub hourly_cost: f64,
}

/// Events and Jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Events {
    pub read: usize,
    pub applied: usize,
    pub skipped: Vec<Skipped>,
    /// Events stamped earlier than one the file lists before them, replayed in time order.
    pub reordered: usize,
    /// Writes the simulated cluster refused (counted, the replay went on).
    pub failed: Vec<String>,
    pub jobs_started: usize,
    pub jobs_completed: usize,
    /// NodePool and EC2NodeClass sets applied from the log.
    pub node_pool_changes: usize,
}

/// One replay's report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// What this replay ran with (`recorded NodePools`, a file name, `KEY=VALUE`...).
    pub label: String,
    pub cluster: String,
    /// Replay seconds per wall second.
    pub speed: f64,
    /// The log's window, in replay seconds.
    pub span_seconds: f64,
    pub wall_seconds: f64,
    /// Whether a stop signal ended it before the log's end.
    pub interrupted: bool,
    pub events: Events,
    pub cost: Cost,
    pub pending_to_bound: Latency,
    pub pending_to_bound_over_time: Vec<LatencyWindow>,
    pub nodeclaims_launched_by_reason: BTreeMap<String, u64>,
    pub nodeclaims_disrupted_by_reason: BTreeMap<String, u64>,
    /// What the recorded cluster ran over the same window, from its node samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_cluster: Option<Cost>,
    pub process_peak_rss_bytes: Option<u64>,
    pub series: Vec<ReplaySample>,
    /// Every bound pod's pending → bound time, in seconds (for the report page's histogram).
    #[serde(skip)]
    pub pending_to_bound_seconds: Vec<f64>,
}

/// Integrates the live fleet between looks, in replay time.
#[derive(Debug, Default)]
pub struct Meter {
    cost: Cost,
    node_seconds: f64,
    last_at: Option<f64>,
    last_fleet: Vec<(String, String, f64)>,
}

impl Meter {
    /// Records the fleet `instances` seen at replay second `at`: the fleet seen at the last
    /// look is charged for the time between.
    pub fn look(&mut self, at: f64, instances: &[Instance]) {
        self.charge_until(at);
        self.last_fleet = instances
            .iter()
            .filter(|i| i.state.is_live())
            .map(|i| {
                (
                    i.instance_type.clone(),
                    i.capacity_type.to_string(),
                    i.price,
                )
            })
            .collect();
        self.cost.peak_nodes = self.cost.peak_nodes.max(self.last_fleet.len() as u64);
    }

    /// [`Meter::look`] for a fleet given as (instance type, capacity type, $/hour).
    pub fn look_at(&mut self, at: f64, fleet: Vec<(String, String, f64)>) {
        self.charge_until(at);
        self.cost.peak_nodes = self.cost.peak_nodes.max(fleet.len() as u64);
        self.last_fleet = fleet;
    }

    fn charge_until(&mut self, at: f64) {
        if let Some(last) = self.last_at {
            let hours = (at - last).max(0.0) / 3600.0;
            for (instance_type, capacity_type, price) in &self.last_fleet {
                self.cost.total.add(hours, *price);
                self.cost
                    .by_instance_type
                    .entry(instance_type.clone())
                    .or_default()
                    .add(hours, *price);
                self.cost
                    .by_capacity_type
                    .entry(capacity_type.clone())
                    .or_default()
                    .add(hours, *price);
            }
            self.node_seconds += (at - last).max(0.0) * self.last_fleet.len() as f64;
        }
        self.last_at = Some(at);
    }

    /// What the fleet cost up to the last look.
    pub fn dollars(&self) -> f64 {
        self.cost.total.dollars
    }

    /// The cost from the first look to `end`.
    pub fn finish(mut self, start: f64, end: f64) -> Cost {
        self.charge_until(end);
        let span = end - start;
        let mut cost = self.cost;
        cost.average_nodes = if span > 0.0 {
            round3(self.node_seconds / span)
        } else {
            0.0
        };
        cost.total = cost.total.rounded();
        for usage in cost
            .by_instance_type
            .values_mut()
            .chain(cost.by_capacity_type.values_mut())
        {
            *usage = usage.rounded();
        }
        cost
    }
}

/// Pending → bound per window of `width` replay seconds over `span`, from each bound pod's
/// (creation in replay seconds, latency).
pub fn over_time(bindings: &[(f64, Duration)], span: f64, width: f64) -> Vec<LatencyWindow> {
    if width <= 0.0 {
        return Vec::new();
    }
    let windows = (span / width).ceil().max(1.0) as usize;
    let mut buckets: Vec<Vec<Duration>> = vec![Vec::new(); windows];
    for (at, took) in bindings {
        let index = ((at / width).floor().max(0.0) as usize).min(windows - 1);
        buckets[index].push(*took);
    }
    buckets
        .into_iter()
        .enumerate()
        .map(|(i, times)| LatencyWindow {
            from_seconds: round3(i as f64 * width),
            to_seconds: round3(((i + 1) as f64 * width).min(span.max(width))),
            pods: times.len(),
            latency: latency(times),
        })
        .collect()
}

fn round4(value: f64) -> f64 {
    (value * 10_000.0).round() / 10_000.0
}

fn hours(seconds: f64) -> String {
    format!("{:.1}h", seconds / 3600.0)
}

fn usages(usages: &BTreeMap<String, Usage>) -> String {
    usages
        .iter()
        .map(|(k, u)| format!("{k} {:.1}h ${:.2}", u.node_hours, u.dollars))
        .collect::<Vec<_>>()
        .join(", ")
}

fn counts(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl ReplayReport {
    /// The report for people.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let how = if self.interrupted {
            " (stopped by a signal: what was replayed until then)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "replay          {} of {} at {:.0}× in {:.1}s wall{how} [{}]",
            hours(self.span_seconds),
            if self.cluster.is_empty() {
                "log"
            } else {
                &self.cluster
            },
            self.speed,
            self.wall_seconds,
            self.label
        );
        let e = &self.events;
        let _ = writeln!(
            out,
            "events          {} applied of {} read, {} skipped, {} refused, {} replayed out of file order; jobs {} started, {} completed; {} NodePool sets",
            e.applied,
            e.read,
            e.skipped.len(),
            e.failed.len(),
            e.reordered,
            e.jobs_started,
            e.jobs_completed,
            e.node_pool_changes
        );
        for skipped in &e.skipped {
            let _ = writeln!(out, "  skipped       {skipped}");
        }
        for failed in e.failed.iter().take(10) {
            let _ = writeln!(out, "  refused       {failed}");
        }
        let c = &self.cost;
        let _ = writeln!(
            out,
            "cost            ${:.2} for {:.1} node-hours; nodes peak {}, average {:.1}",
            c.total.dollars, c.total.node_hours, c.peak_nodes, c.average_nodes
        );
        let _ = writeln!(out, "  by capacity   {}", usages(&c.by_capacity_type));
        let _ = writeln!(out, "  by type       {}", usages(&c.by_instance_type));
        if let Some(real) = &self.real_cluster {
            let _ = writeln!(
                out,
                "real cluster    ${:.2} for {:.1} node-hours (its node samples, same prices); nodes peak {}, average {:.1}",
                real.total.dollars, real.total.node_hours, real.peak_nodes, real.average_nodes
            );
            let _ = writeln!(out, "  by capacity   {}", usages(&real.by_capacity_type));
        }
        let l = &self.pending_to_bound;
        let _ = writeln!(
            out,
            "pending→bound   p50 {:.2}s  p95 {:.2}s  max {:.2}s (simulated cluster's own time, not compressed)",
            l.p50, l.p95, l.max
        );
        for w in self
            .pending_to_bound_over_time
            .iter()
            .filter(|w| w.pods > 0)
        {
            let _ = writeln!(
                out,
                "  {:>5}–{:<5}  {:>5} pods  p50 {:.2}s  p95 {:.2}s  max {:.2}s",
                hours(w.from_seconds),
                hours(w.to_seconds),
                w.pods,
                w.latency.p50,
                w.latency.p95,
                w.latency.max
            );
        }
        let _ = writeln!(
            out,
            "NodeClaims      launched {}; disrupted {}",
            counts(&self.nodeclaims_launched_by_reason),
            counts(&self.nodeclaims_disrupted_by_reason)
        );
        if let Some(bytes) = self.process_peak_rss_bytes {
            let _ = writeln!(
                out,
                "process memory  peak {:.1} MiB resident",
                crate::figures::mib(bytes)
            );
        }
        out
    }
}

/// Two replays of one log, and their difference (B − A).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub a: ReplayReport,
    pub b: ReplayReport,
    pub difference: Difference,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub dollars: f64,
    /// (B − A) / A, `None` when A cost nothing.
    pub dollars_relative: Option<f64>,
    pub node_hours: f64,
    pub pending_to_bound_p50_seconds: f64,
    pub pending_to_bound_p95_seconds: f64,
    pub disruptions: i64,
}

impl Comparison {
    pub fn new(a: ReplayReport, b: ReplayReport) -> Self {
        let disrupted = |r: &ReplayReport| {
            r.nodeclaims_disrupted_by_reason
                .values()
                .map(|v| i64::try_from(*v).unwrap_or(i64::MAX))
                .sum::<i64>()
        };
        let difference = Difference {
            dollars: round4(b.cost.total.dollars - a.cost.total.dollars),
            dollars_relative: (a.cost.total.dollars > 0.0).then(|| {
                round3((b.cost.total.dollars - a.cost.total.dollars) / a.cost.total.dollars)
            }),
            node_hours: round3(b.cost.total.node_hours - a.cost.total.node_hours),
            pending_to_bound_p50_seconds: round3(b.pending_to_bound.p50 - a.pending_to_bound.p50),
            pending_to_bound_p95_seconds: round3(b.pending_to_bound.p95 - a.pending_to_bound.p95),
            disruptions: disrupted(&b) - disrupted(&a),
        };
        Self { a, b, difference }
    }

    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "── A: {}", self.a.label);
        out.push_str(&self.a.to_table());
        let _ = writeln!(out, "── B: {}", self.b.label);
        out.push_str(&self.b.to_table());
        let d = &self.difference;
        let _ = writeln!(out, "── B − A");
        let relative = d
            .dollars_relative
            .map(|r| format!(" ({:+.1}%)", r * 100.0))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "cost            {}${:.2}{relative}, {:+.1} node-hours",
            if d.dollars < 0.0 { "-" } else { "+" },
            d.dollars.abs(),
            d.node_hours
        );
        let _ = writeln!(
            out,
            "pending→bound   p50 {:+.2}s  p95 {:+.2}s",
            d.pending_to_bound_p50_seconds, d.pending_to_bound_p95_seconds
        );
        let _ = writeln!(out, "disruptions     {:+}", d.disruptions);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_charges_each_fleet_for_the_time_until_the_next_look() {
        let mut meter = Meter::default();
        let fleet = |n: usize| {
            (0..n)
                .map(|_| ("m5.large".to_owned(), "spot".to_owned(), 0.04))
                .collect::<Vec<_>>()
        };
        meter.look_at(0.0, fleet(2));
        meter.look_at(3600.0, fleet(4));
        let cost = meter.finish(0.0, 7200.0);
        assert_eq!(cost.total.node_hours, 6.0);
        assert_eq!(cost.total.dollars, 0.24);
        assert_eq!(cost.peak_nodes, 4);
        assert_eq!(cost.average_nodes, 3.0);
        assert_eq!(cost.by_capacity_type["spot"].node_hours, 6.0);
    }

    #[test]
    fn a_comparison_is_b_minus_a() {
        let report = |dollars: f64, p95: f64, disrupted: u64| ReplayReport {
            cost: Cost {
                total: Usage {
                    node_hours: dollars * 10.0,
                    dollars,
                },
                ..Cost::default()
            },
            pending_to_bound: Latency {
                p50: 1.0,
                p95,
                max: p95,
            },
            nodeclaims_disrupted_by_reason: BTreeMap::from([("Empty".to_owned(), disrupted)]),
            ..ReplayReport::default()
        };
        let comparison = Comparison::new(report(80.0, 20.0, 0), report(60.0, 5.0, 3));
        let d = &comparison.difference;
        assert_eq!(d.dollars, -20.0);
        assert_eq!(d.dollars_relative, Some(-0.25));
        assert_eq!(d.node_hours, -200.0);
        assert_eq!(d.pending_to_bound_p95_seconds, -15.0);
        assert_eq!(d.disruptions, 3);
        let table = comparison.to_table();
        assert!(
            table.contains("cost            -$20.00 (-25.0%), -200.0 node-hours"),
            "{table}"
        );
    }

    #[test]
    fn latencies_fall_in_the_window_their_pod_was_created_in() {
        let bindings = [
            (10.0, Duration::from_secs(2)),
            (3599.0, Duration::from_secs(4)),
            (3700.0, Duration::from_secs(9)),
        ];
        let windows = over_time(&bindings, 7200.0, 3600.0);
        assert_eq!(windows.len(), 2);
        assert_eq!(windows[0].pods, 2);
        assert_eq!(windows[0].latency.max, 4.0);
        assert_eq!(windows[1].pods, 1);
        assert_eq!(windows[1].latency.p50, 9.0);
    }
}
