//! `kerf simulate --replay` end to end, as a user runs it: the binary replays a log into the
//! simulated cluster with the real controller (`--fast` millisecond delays) and its JSON
//! report is checked — cost and nodes following a generated day's load, upstream
//! kubereplay's own format read from a fixture, bad events named and skipped, and two
//! NodePool settings side by side.
//!
//! The kubereplay fixture (`fixtures/kubereplay.json`) is written by hand from the structure
//! upstream documents in aws/karpenter-provider-aws `tools/kubereplay/pkg/format/log.go`
//! (ReplayLog, WorkloadEvent) and what its sanitizer leaves in a workload; it is not a
//! capture from a cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kerf_simulation::replay::generate::{self, Diurnal};
use serde_json::Value;

#[path = "kerf_cli/temp_dir.rs"]
mod temp_dir;

use temp_dir::TempDir;

fn kerf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("simulate")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("kerf runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Replays `file` fast with `args`, expecting success; returns the JSON report and stderr.
fn replay(file: &Path, args: &[&str]) -> (Value, String) {
    let mut full = vec!["--replay", path(file), "--fast", "-o", "json"];
    full.extend_from_slice(args);
    let out = kerf(&full);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "kerf failed: {stderr}");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report is JSON ({e}); stdout: {}\nstderr: {stderr}",
            text(&out.stdout)
        )
    });
    (report, stderr)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn f64_of(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("a number: {value}"))
}

/// The generated day as a file.
fn day_file(dir: &TempDir, shape: &Diurnal) -> PathBuf {
    let start = "2026-03-02T00:00:00Z".parse().expect("a time");
    let log = generate::day(shape, start);
    dir.file("day.json", &log.to_string())
}

/// Mean of `field` over the samples whose time falls in [from, to) hours.
fn mean_between(series: &[Value], field: &str, from: f64, to: f64) -> f64 {
    let picked: Vec<f64> = series
        .iter()
        .filter(|s| {
            let hour = f64_of(&s["atSeconds"]) / 3600.0;
            hour >= from && hour < to
        })
        .map(|s| f64_of(&s[field]))
        .collect();
    assert!(!picked.is_empty(), "samples between {from}h and {to}h");
    picked.iter().sum::<f64>() / picked.len() as f64
}

fn nodes(sample: &Value) -> f64 {
    f64_of(&sample["nodesOnDemand"]) + f64_of(&sample["nodesSpot"])
}

/// `series` with each sample's on-demand and spot nodes summed as `nodes`.
fn with_node_counts(series: &[Value]) -> Vec<Value> {
    series
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s["nodes"] = nodes(&s).into();
            s
        })
        .collect()
}

#[test]
fn a_generated_day_replayed_fast_costs_and_grows_with_its_load() {
    let dir = TempDir::new("replay-test", "day");
    let file = day_file(&dir, &Diurnal::default());
    // A day in 54 s of wall time. Launches keep their own pace, so at this speed pods wait
    // for capacity through much of the log's time and consolidation places them first:
    // only the way up is asserted for nodes (docs/replay.md, **Time**).
    let (report, stderr) = replay(&file, &["--speed", "1600"]);
    assert_eq!(report["interrupted"], false, "{stderr}");
    let events = &report["events"];
    assert!(
        events["skipped"].as_array().is_some_and(Vec::is_empty),
        "{events}"
    );
    assert!(
        events["failed"].as_array().is_some_and(Vec::is_empty),
        "{events}"
    );
    assert_eq!(events["applied"], events["read"]);
    assert_eq!(events["jobsStarted"], 300, "{events}");
    let series: Vec<Value> = report["series"].as_array().expect("series").clone();
    let with_nodes = with_node_counts(&series);
    // The load is lowest around midnight and highest around 14:00.
    let night_pods = mean_between(&series, "podsRequested", 0.5, 3.0);
    let peak_pods = mean_between(&series, "podsRequested", 12.0, 16.0);
    assert!(peak_pods > 3.0 * night_pods, "{night_pods} → {peak_pods}");
    let night_nodes = mean_between(&with_nodes, "nodes", 0.5, 3.0);
    let peak_nodes = mean_between(&with_nodes, "nodes", 12.0, 16.0);
    assert!(
        peak_nodes > 1.5 * night_nodes,
        "nodes follow the load up: {night_nodes} at night, {peak_nodes} at the peak"
    );
    let night_cost = mean_between(&series, "hourlyCost", 0.5, 3.0);
    let peak_cost = mean_between(&series, "hourlyCost", 12.0, 16.0);
    assert!(
        peak_cost > 1.5 * night_cost,
        "{night_cost} → {peak_cost} $/h"
    );
    let cost = &report["cost"];
    let total = f64_of(&cost["total"]["dollars"]);
    let hours = f64_of(&cost["total"]["nodeHours"]);
    assert!(total > 0.0 && hours > 0.0, "{cost}");
    let by_type: f64 = cost["byInstanceType"]
        .as_object()
        .expect("by type")
        .values()
        .map(|u| f64_of(&u["nodeHours"]))
        .sum();
    assert!((by_type - hours).abs() < 0.01 * hours, "{cost}");
    assert!(f64_of(&cost["peakNodes"]) >= peak_nodes);
    assert!(f64_of(&cost["averageNodes"]) < f64_of(&cost["peakNodes"]));
    // Node-hours are the nodes' average over the day.
    let span_hours = f64_of(&report["spanSeconds"]) / 3600.0;
    let average = f64_of(&cost["averageNodes"]);
    assert!(
        (average * span_hours - hours).abs() < 0.02 * hours + 0.1,
        "{average} nodes × {span_hours}h vs {hours}"
    );
    assert!(
        report["nodeclaimsLaunchedByReason"]["provisioning"].as_u64() > Some(0),
        "{report}"
    );
    let windows = report["pendingToBoundOverTime"]
        .as_array()
        .expect("windows");
    assert_eq!(windows.len(), 24, "hourly over the day");
    assert!(
        windows
            .iter()
            .map(|w| w["pods"].as_u64().unwrap_or(0))
            .sum::<u64>()
            > 300
    );
}

#[test]
fn at_a_moderate_speed_nodes_and_cost_come_down_with_the_evening_load() {
    let dir = TempDir::new("replay-test", "evening");
    // A four-hour day scaled every ten minutes: its load peaks 2 h 20 min in, and its last
    // 24 minutes ask for under half the pods of the peak's.
    let shape = Diurnal {
        deployments: 8,
        jobs: 20,
        span: Duration::from_secs(4 * 3600),
        scale_every: Duration::from_secs(10 * 60),
        ..Diurnal::default()
    };
    let file = day_file(&dir, &shape);
    // Two minutes of wall time: the disruption loop's paced waits stay within half a minute
    // of the log (docs/replay.md, **Time**), and the last window's 24 minutes give its
    // passes 12 s of wall time, which a debug build on two cores needs.
    let (report, stderr) = replay(&file, &["--speed", "120"]);
    assert_eq!(report["interrupted"], false, "{stderr}");
    let series: Vec<Value> = report["series"].as_array().expect("series").clone();
    let peak_pods = mean_between(&series, "podsRequested", 2.0, 2.8);
    let late_pods = mean_between(&series, "podsRequested", 3.6, 4.0);
    assert!(late_pods < 0.6 * peak_pods, "{peak_pods} → {late_pods}");
    // Nodes come in sizes, so they and their cost fall by less than the pods; a replay that
    // consolidates nothing keeps the peak's nodes to the end.
    let with_nodes = with_node_counts(&series);
    let peak_nodes = mean_between(&with_nodes, "nodes", 2.0, 2.8);
    let late_nodes = mean_between(&with_nodes, "nodes", 3.6, 4.0);
    assert!(
        late_nodes < 0.7 * peak_nodes,
        "nodes follow the load down: {peak_nodes} at the peak, {late_nodes} late"
    );
    let peak_cost = mean_between(&series, "hourlyCost", 2.0, 2.8);
    let late_cost = mean_between(&series, "hourlyCost", 3.6, 4.0);
    // Cost falls by less than the node count: the nodes consolidation keeps are the larger
    // ones, and at 120× the paced loop may still be replacing them as the log ends. A
    // replay that consolidates nothing stays at the peak's cost.
    assert!(
        late_cost < 0.9 * peak_cost,
        "cost follows the load down: {peak_cost} $/h at the peak, {late_cost} $/h late"
    );
    let disrupted: u64 = report["nodeclaimsDisruptedByReason"]
        .as_object()
        .expect("disrupted by reason")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert!(disrupted > 0, "consolidation took nodes away: {report}");
}

#[test]
fn a_kubereplay_log_is_read_unchanged_and_its_bad_events_are_named() {
    let fixture = fixtures().join("kubereplay.json");
    let dir = TempDir::new("replay-test", "kubereplay");
    let pages = dir.0.join("report");
    let (report, stderr) = replay(&fixture, &["--speed", "60", "--report", path(&pages)]);
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(pages.join("replay.json")).expect("replay.json written"),
    )
    .expect("JSON");
    assert_eq!(written, report, "--report writes what -o json prints");
    let page = std::fs::read_to_string(pages.join("report.html")).expect("report.html written");
    assert!(page.contains("<svg"), "plots over the log's time");
    let events = &report["events"];
    let skipped: Vec<String> = events["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| {
            let field = |name: &str| s[name].as_str().unwrap_or_default().to_owned();
            format!(
                "events[{}] {}: {}",
                s["index"],
                field("key"),
                field("reason")
            )
        })
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped[0].starts_with("events[5] kubereplay/deployment-1: unknown event type \"restart\""),
        "{skipped:?}"
    );
    assert!(
        skipped[1].starts_with("events[6] kubereplay/deployment-9: out of order"),
        "{skipped:?}"
    );
    assert!(
        stderr.contains("skipped events[5] kubereplay/deployment-1"),
        "{stderr}"
    );
    assert_eq!(events["applied"], 6, "{events}");
    assert_eq!(events["jobsStarted"], 1);
    assert_eq!(
        events["jobsCompleted"], 1,
        "its two 20 s pods ran to completion"
    );
    let series = report["series"].as_array().expect("series");
    let most = series
        .iter()
        .map(|s| s["podsRequested"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    assert_eq!(
        most,
        3 + 4 + 2,
        "deployment-0 scaled to 4 beside deployment-1's 3 and the Job's 2"
    );
    let bound = series
        .iter()
        .map(|s| s["pods"].as_u64().unwrap_or(0) - s["podsPending"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    assert!(bound >= 7, "the pods were bound: {series:?}");
    assert!(f64_of(&report["cost"]["total"]["dollars"]) > 0.0);
    assert_eq!(report["label"], "the default NodePool");
}

#[test]
fn two_nodepool_settings_side_by_side_differ_in_cost() {
    let dir = TempDir::new("replay-test", "compare");
    let shape = Diurnal {
        deployments: 8,
        jobs: 20,
        span: Duration::from_secs(4 * 3600),
        ..Diurnal::default()
    };
    let file = day_file(&dir, &shape);
    let nodepools = |capacity: &str| {
        format!(
            "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: only-{capacity}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity}]}}
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
        - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
"
        )
    };
    let spot = dir.file("spot.yaml", &nodepools("spot"));
    let on_demand = dir.file("on-demand.yaml", &nodepools("on-demand"));
    let (report, stderr) = replay(
        &file,
        &[
            "--speed",
            "960",
            "--nodepools",
            path(&spot),
            "--compare",
            path(&on_demand),
        ],
    );
    let a = &report["a"];
    let b = &report["b"];
    assert!(
        a["cost"]["byCapacityType"]["spot"]["nodeHours"].as_f64() > Some(0.0),
        "{stderr}"
    );
    assert!(
        a["cost"]["byCapacityType"]["on-demand"].is_null(),
        "{}",
        a["cost"]
    );
    assert!(b["cost"]["byCapacityType"]["on-demand"]["nodeHours"].as_f64() > Some(0.0));
    assert!(
        b["cost"]["byCapacityType"]["spot"].is_null(),
        "{}",
        b["cost"]
    );
    let (cost_a, cost_b) = (
        f64_of(&a["cost"]["total"]["dollars"]),
        f64_of(&b["cost"]["total"]["dollars"]),
    );
    assert!(
        cost_b > cost_a,
        "on-demand costs more than spot: {cost_a} vs {cost_b}"
    );
    let difference = &report["difference"];
    assert!(
        (f64_of(&difference["dollars"]) - (cost_b - cost_a)).abs() < 0.001,
        "{difference}"
    );
    assert_eq!(
        a["events"]["applied"], b["events"]["applied"],
        "the same log twice"
    );
}

#[test]
fn a_setting_compared_with_compare_env_reaches_only_the_second_replay() {
    let dir = TempDir::new("replay-test", "compare-env");
    // The c category has fewer than 50 instance families: under upstream's default
    // MIN_VALUES_POLICY (Strict) nothing launches, under BestEffort the minimum is relaxed.
    let pool = dir.file(
        "min-values.yaml",
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: min-values
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c]}
        - {key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 50}
",
    );
    let (report, stderr) = replay(
        &fixtures().join("kubereplay.json"),
        &[
            "--speed",
            "60",
            "--nodepools",
            path(&pool),
            "--compare-env",
            "MIN_VALUES_POLICY=BestEffort",
        ],
    );
    let (a, b) = (&report["a"], &report["b"]);
    assert_eq!(
        b["label"],
        format!("{}, MIN_VALUES_POLICY=BestEffort", path(&pool)),
        "{stderr}"
    );
    let launched = |r: &Value| r["nodeclaimsLaunchedByReason"]["provisioning"].as_u64();
    assert_eq!(launched(a).unwrap_or(0), 0, "Strict launches nothing: {a}");
    assert!(
        launched(b) > Some(0),
        "BestEffort relaxes and launches: {b}"
    );
    assert!(f64_of(&b["cost"]["total"]["dollars"]) > 0.0, "{b}");
    assert!(f64_of(&report["difference"]["dollars"]) > 0.0, "{report}");
}

#[test]
fn a_file_that_is_not_a_log_is_refused_before_anything_runs() {
    let dir = TempDir::new("replay-test", "bad");
    let file = dir.file("bad.json", "{\"events\": 7}");
    let out = kerf(&["--replay", path(&file)]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.json: `events` is a JSON integer, not a list"),
        "{stderr}"
    );
    let out = kerf(&["--replay", path(&file), "--compare-env", "NOT_A_SETTING=1"]);
    assert_eq!(out.status.code(), Some(2), "refused by the argument parser");
    assert!(
        text(&out.stderr).contains("NOT_A_SETTING"),
        "{}",
        text(&out.stderr)
    );
}

/// Writes the generated day to `$KERF_DAY_OUT` (for the figures in the docs: `kerf simulate
/// --replay` on it at 500×).
#[test]
#[ignore = "writes a file for a manual replay"]
fn write_the_generated_day() {
    let out = std::env::var("KERF_DAY_OUT").expect("KERF_DAY_OUT names the file to write");
    let start = "2026-03-02T00:00:00Z".parse().expect("a time");
    let log = generate::day(&Diurnal::default(), start);
    std::fs::write(&out, log.to_string()).expect("written");
}

#[test]
fn ctrl_c_ends_the_replay_with_a_report_of_what_was_replayed_and_exits_130() {
    let fixture = fixtures().join("kubereplay.json");
    let child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", "--replay", path(&fixture)])
        .args(["--speed", "1", "--fast", "-o", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf starts");
    // The world starts in a few seconds; the log's second create is 10.5 s in.
    std::thread::sleep(Duration::from_secs(6));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let out = child.wait_with_output().expect("kerf ends");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(report["interrupted"], true);
    assert_eq!(report["spanSeconds"], 600.0);
    assert_eq!(
        report["events"]["applied"], 1,
        "only the first create was due"
    );
    assert!(
        stderr.contains("stopped by a signal before the replay reached the log's end"),
        "{stderr}"
    );
}
