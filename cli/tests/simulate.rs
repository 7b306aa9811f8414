//! `kerf simulate` end to end: the binary runs the simulated cluster and the real controller
//! in one process (with `--fast` millisecond delays) and its JSON summary is checked — pods
//! bound, NodeClaims, nodes, cost, API calls — as are its refusals of bad flags and files.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

#[path = "kerf_cli/temp_dir.rs"]
mod temp_dir;

use temp_dir::TempDir;

#[path = "kerf_cli/serving.rs"]
mod serving;

fn kerf(args: &[&str]) -> Output {
    kerf_in(&[], args)
}

/// Runs kerf with `environment` added to this process's.
fn kerf_in(environment: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .envs(environment.iter().copied())
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

/// Runs a fast simulation with `args` and returns its exit success and JSON summary.
fn simulate(args: &[&str]) -> (Output, Value) {
    simulate_in(&[], args)
}

/// [`simulate`] with the controller's settings in `environment`.
fn simulate_in(environment: &[(&str, &str)], args: &[&str]) -> (Output, Value) {
    let mut full = vec!["--fast", "-o", "json", "--duration", "60s"];
    full.extend_from_slice(args);
    let out = kerf_in(environment, &full);
    let summary = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "summary is JSON ({e}); stdout: {}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    (out, summary)
}

fn count(value: &Value) -> u64 {
    value.as_u64().expect("a count")
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[test]
fn the_default_workload_is_bound_on_launched_capacity() {
    let (out, summary) = simulate(&["--pods", "40"]);
    assert!(
        out.status.success(),
        "stderr: {}\n{summary:#}",
        text(&out.stderr)
    );
    assert_eq!(summary["outcome"], "complete");
    let pods = &summary["pods"];
    assert_eq!(count(&pods["total"]), 40, "{summary:#}");
    assert_eq!(count(&pods["bound"]), 40, "{summary:#}");
    assert_eq!(count(&pods["pending"]), 0);
    let claims = &summary["nodeClaims"];
    assert!(count(&claims["created"]) > 0, "{summary:#}");
    assert_eq!(claims["launched"], claims["created"]);
    // `kerf plan` on the same objects: the cache pods alone need two hosts.
    assert!(count(&claims["plan"]) >= 2, "{summary:#}");
    let ratio = claims["createdOverPlan"].as_f64().expect("a ratio");
    assert!(
        (ratio - count(&claims["created"]) as f64 / count(&claims["plan"]) as f64).abs() < 1e-3,
        "{summary:#}"
    );
    // Six zone-spread web pods... and two one-per-node cache pods need two nodes at least.
    let nodes = &summary["nodes"];
    assert!(count(&nodes["total"]) >= 2, "{summary:#}");
    assert_eq!(count(&nodes["total"]), count(&claims["created"]));
    let types = nodes["byInstanceType"].as_object().expect("by type");
    assert!(!types.is_empty());
    assert_eq!(
        types.values().map(count).sum::<u64>(),
        count(&nodes["total"])
    );
    assert!(summary["hourlyCost"].as_f64().expect("cost") > 0.0);
    assert_eq!(
        count(&summary["cloudApiCalls"]["byOperation"]["CreateFleet"]),
        count(&claims["created"]),
        "one CreateFleet per NodeClaim"
    );
    let latency = &summary["podLatencySeconds"];
    assert!(latency["p50"].as_f64() <= latency["p95"].as_f64());
    assert!(latency["p95"].as_f64() <= latency["max"].as_f64());
    assert!(latency["max"].as_f64().expect("max") > 0.0);
    assert!(count(&summary["provisioning"]["rounds"]) >= 1);
    // The client budget's bound beside the measured time: --fast's budget is well above 40
    // pods' NodeClaims, so the bound is zero.
    let largest = &summary["provisioning"]["largestRound"];
    let bound = largest["clientBudgetBoundSeconds"]
        .as_f64()
        .expect("the budget's bound");
    assert!(bound >= 0.0, "{largest:#}");
    assert!(
        largest["batchCloseToCreatedSeconds"]
            .as_f64()
            .expect("measured")
            >= 0.0
    );
    // Writes per NodeClaim from the emulator's request log: one create each, a launch's
    // three writes up to Launched where upstream takes four.
    let writes = &summary["apiWritesPerNodeClaim"];
    let node_claims = &writes["byKind"]["nodeclaims"];
    assert_eq!(node_claims["creates"].as_f64(), Some(1.0), "{writes:#}");
    assert!(
        node_claims["patches"].as_f64().expect("patches") >= 1.0,
        "{writes:#}"
    );
    assert!(
        node_claims["statusWrites"].as_f64().expect("status") >= 1.0,
        "{writes:#}"
    );
    assert_eq!(
        writes["nodeClaimWritesToLaunched"].as_f64(),
        Some(3.0),
        "{writes:#}"
    );
    assert_eq!(writes["upstreamNodeClaimWritesToLaunched"], 4);
    assert!(
        writes["byKind"]["nodes"]["patches"]
            .as_f64()
            .expect("node patches")
            > 0.0
    );
    // The controller's heap is counted on its own threads: some, and well below the whole
    // process, which also holds the API emulator's objects, kubelets, scheduler and EC2.
    let memory = &summary["memory"];
    let heap = count(&memory["controllerHeapPeakBytes"]);
    let process = count(&memory["processPeakRssBytes"]);
    assert!(heap > 0 && heap < process / 2, "{memory:#}");
    assert!(
        count(&memory["controllerHeapLiveBytes"]) <= heap,
        "{memory:#}"
    );
    // Each part of the simulated cluster is counted on its own: every part that runs held
    // some heap, none holds more than it peaked at, and with the controller's the live heaps
    // fit in the process.
    let parts = memory["simulatedHeap"].as_array().expect("the parts");
    let names: Vec<&str> = parts.iter().filter_map(|p| p["part"].as_str()).collect();
    assert_eq!(
        names,
        [
            "emulator",
            "kubelets",
            "scheduler",
            "ec2",
            "observers",
            "simulate"
        ]
    );
    for part in parts {
        assert!(count(&part["peakBytes"]) > 0, "{part:#}");
        assert!(
            count(&part["liveBytes"]) <= count(&part["peakBytes"]),
            "{part:#}"
        );
    }
    let live: u64 = parts.iter().map(|p| count(&p["liveBytes"])).sum::<u64>()
        + count(&memory["controllerHeapLiveBytes"]);
    assert!(live < process, "{memory:#}");
}

/// The kube-scheduler spreads replicas (its default topology spread) and breaks ties among
/// empty nodes its own way, so without nominations pods planned for one new node land on
/// another and leave the ones planned there pending, and the next round launches again.
/// Registration's nominations keep each node's room for the pods it was launched for. The
/// batching window waits 2 s for the next pod (twice upstream's idle), so the emulator's
/// ReplicaSets create every pod within one batch even on a machine busy with other tests:
/// the fast pace's half-second window can split them over rounds, which plan apart what
/// `kerf plan` packs together. The environment's setting beats the pace's.
#[test]
fn the_pods_go_where_they_were_planned_and_no_second_wave_launches() {
    let window = [("BATCH_IDLE_DURATION", "2s"), ("BATCH_MAX_DURATION", "10s")];
    let (out, summary) = simulate_in(&window, &["--pods", "300"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(count(&summary["pods"]["bound"]), 300, "{summary:#}");
    let first = &summary["provisioning"]["largestRound"];
    assert_eq!(count(&first["pendingPods"]), 300, "one batch: {summary:#}");
    assert_eq!(count(&first["plannedPods"]), 300, "{summary:#}");
    let planned = count(&summary["provisioning"]["plannedPods"]);
    assert!((300..=330).contains(&planned), "{summary:#}");
    let claims = &summary["nodeClaims"];
    let ratio = claims["createdOverPlan"].as_f64().expect("a ratio");
    assert!(ratio <= 1.1, "created over plan {ratio}: {summary:#}");
}

#[test]
fn a_pod_that_cannot_fit_is_reported_and_does_not_fail_the_run() {
    let dir = TempDir::new("sim-test", "too-big");
    let workload = dir.file(
        "workload.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: huge}
spec:
  containers:
    - name: c
      image: i
      resources: {requests: {cpu: '5000'}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: report, namespace: jobs}
spec:
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: c
          image: i
          resources: {requests: {cpu: '1', memory: 1Gi}}
",
    );
    let (out, summary) = simulate(&["--workload", path(&workload)]);
    assert!(
        out.status.success(),
        "stderr: {}\n{summary:#}",
        text(&out.stderr)
    );
    let pods = &summary["pods"];
    assert_eq!(count(&pods["total"]), 3, "{summary:#}");
    assert_eq!(count(&pods["bound"]), 2, "the Job's pods: {summary:#}");
    let unschedulable = pods["unschedulable"].as_array().expect("list");
    assert_eq!(unschedulable.len(), 1, "{summary:#}");
    assert_eq!(unschedulable[0]["pod"], "default/huge");
}

#[test]
fn insufficient_capacity_is_injected_into_the_named_pools() {
    // Every on-demand and spot pool of every type in us-east-1a is dry: nothing lands there.
    let dir = TempDir::new("sim-test", "ice");
    let workload = dir.file(
        "workload.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 6
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: api
          image: i
          resources: {requests: {cpu: '1', memory: 1Gi}}
",
    );
    let (out, summary) = simulate(&["--workload", path(&workload), "--ice", "*:us-east-1a"]);
    assert!(
        out.status.success(),
        "stderr: {}\n{summary:#}",
        text(&out.stderr)
    );
    assert!(count(&summary["insufficientCapacityPools"]) > 0);
    let zones = summary["nodes"]["byZone"].as_object().expect("zones");
    assert!(!zones.is_empty());
    assert!(!zones.contains_key("us-east-1a"), "{summary:#}");
}

#[test]
fn interrupted_spot_nodes_lose_their_pods_which_run_again() {
    // A longer deadline than other runs: scale-out, then the interruption and recovery.
    let out = kerf(&[
        "--fast",
        "-o",
        "json",
        "--duration",
        "300s",
        "--pods",
        "40",
        "--interrupt-spot",
        "0.5",
    ]);
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("summary is JSON ({e}): {}", text(&out.stderr)));
    assert!(
        out.status.success(),
        "stderr: {}\n{summary:#}",
        text(&out.stderr)
    );
    let i = &summary["interruptions"];
    assert!(count(&i["spotNodes"]) > 0, "{summary:#}");
    assert!(
        count(&i["interruptedNodes"]) >= count(&i["spotNodes"]) / 2,
        "{i:#}"
    );
    assert!(count(&i["displacedPods"]) > 0, "{i:#}");
    assert_eq!(i["recovered"], true, "{i:#}");
    // The displaced pods ran again (on the nodes left or on replacements) after the warning.
    assert!(
        i["displacedToRunningSeconds"]["max"]
            .as_f64()
            .is_some_and(|s| s > 0.0),
        "{i:#}"
    );
    // With --fast, EC2 reclaims at the warning: every displaced pod lost its node.
    assert_eq!(
        i["podsLostNodeBeforeReplacement"], i["displacedPods"],
        "{i:#}"
    );
}

#[test]
fn an_interrupt_spot_fraction_outside_zero_to_one_is_refused() {
    let out = kerf(&["--fast", "--interrupt-spot", "1.5"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--interrupt-spot"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_nodepools_file_replaces_the_default_pool() {
    let dir = TempDir::new("sim-test", "pools");
    let pools = dir.file(
        "pools.yaml",
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-demand}
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, m6i]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
",
    );
    let (out, summary) = simulate(&["--pods", "10", "--nodepools", path(&pools)]);
    assert!(
        out.status.success(),
        "stderr: {}\n{summary:#}",
        text(&out.stderr)
    );
    assert_eq!(count(&summary["pods"]["bound"]), 10, "{summary:#}");
    let nodes = &summary["nodes"];
    let capacity = nodes["byCapacityType"].as_object().expect("by capacity");
    assert_eq!(
        capacity.keys().collect::<Vec<_>>(),
        ["on-demand"],
        "{summary:#}"
    );
    for instance_type in nodes["byInstanceType"].as_object().expect("types").keys() {
        assert!(
            instance_type.starts_with("m5.") || instance_type.starts_with("m6i."),
            "{instance_type}"
        );
    }
}

/// `GET path` over plain HTTP/1.1: the body.
fn http_get(server: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let address = server.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("emulator reachable");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: kerf\r\nConnection: close\r\n\r\n"
    )
    .expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response read");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

#[test]
fn kubeconfig_out_keeps_the_cluster_up_until_sigterm() {
    let dir = TempDir::new("sim-test", "kubeconfig");
    let kubeconfig = dir.0.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", "--fast", "--pods", "6", "-o", "json"])
        .args(["--kubeconfig-out", path(&kubeconfig)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf starts");
    serving::until_serving(&mut child);
    let config = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written");
    let server = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("a server URL")
        .to_owned();
    let nodes: Value =
        serde_json::from_str(&http_get(&server, "/api/v1/nodes")).expect("a NodeList");
    let nodes = nodes["items"].as_array().expect("items").len();
    assert!(nodes > 0, "the cluster is still up with its nodes");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let out = child.wait_with_output().expect("kerf stops");
    assert!(out.status.success(), "{:?}", out.status);
    let summary: Value = serde_json::from_slice(&out.stdout).expect("summary is JSON");
    assert_eq!(count(&summary["pods"]["bound"]), 6);
    // Every registered Node is a live instance (an instance may still be booting).
    assert!(
        nodes as u64 <= count(&summary["nodes"]["total"]),
        "{summary:#}"
    );
}

#[test]
fn a_malformed_ice_value_names_the_flag() {
    let out = kerf(&["--ice", "m5.large"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--ice"), "{stderr}");
    assert!(stderr.contains("TYPE:ZONE"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unknown_instance_type_in_ice_names_the_flag_and_the_type() {
    let out = kerf(&["--fast", "--ice", "m5.lrge:us-east-1a"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--ice m5.lrge:us-east-1a: the region sells no instance type \"m5.lrge\""),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_bad_workload_file_is_named_and_nothing_runs() {
    let dir = TempDir::new("sim-test", "bad-workload");
    let broken = dir.file(
        "broken.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx
          resources: {requests: {cpu: a-lot}}
",
    );
    let out = kerf(&["--workload", path(&broken)]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("broken.yaml"), "{stderr}");
    assert!(stderr.contains("Deployment/web"), "{stderr}");
    assert!(out.stdout.is_empty());

    let missing = dir.0.join("missing.yaml");
    let out = kerf(&["--workload", path(&missing)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("missing.yaml"));
}

#[test]
fn pods_and_a_workload_file_do_not_mix() {
    let out = kerf(&["--pods", "10", "--workload", "x.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--pods") && stderr.contains("--workload"),
        "{stderr}"
    );
}

#[test]
fn api_only_serves_the_crds_and_nothing_launches() {
    use std::io::{BufRead, BufReader};
    let dir = TempDir::new("sim-test", "api-only");
    let kubeconfig = dir.0.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "simulate",
            "--api-only",
            "--kubeconfig-out",
            path(&kubeconfig),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let first = BufReader::new(stderr)
        .lines()
        .next()
        .expect("a line on stderr")
        .expect("stderr is text");
    assert!(first.contains("Ctrl-C stops it"), "{first}");
    let config = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written");
    let server = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("a server URL")
        .to_owned();
    let pools: Value = serde_json::from_str(&http_get(&server, "/apis/karpenter.sh/v1/nodepools"))
        .expect("the NodePool CRD is served");
    assert_eq!(pools["items"].as_array().map(Vec::len), Some(0));
    let nodes: Value =
        serde_json::from_str(&http_get(&server, "/api/v1/nodes")).expect("a NodeList");
    assert_eq!(
        nodes["items"].as_array().map(Vec::len),
        Some(0),
        "no kubelets"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let out = child.wait_with_output().expect("kerf stops");
    assert!(out.status.success(), "{:?}", out.status);
    assert!(out.stdout.is_empty(), "no summary without a simulation");
}

#[test]
fn api_only_needs_a_kubeconfig_path() {
    let out = kerf(&["--api-only"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--kubeconfig-out"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn report_writes_a_sample_a_second_and_a_page_of_plots() {
    let dir = TempDir::new("sim-test", "report");
    let report_dir = dir.0.join("out");
    let (out, summary) = simulate(&["--pods", "12", "--report", path(&report_dir)]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let json = std::fs::read_to_string(report_dir.join("report.json")).expect("report.json");
    let report: Value = serde_json::from_str(&json).expect("JSON");
    let series = report["series"].as_array().expect("a series");
    // A sample a second from when the world is up to the end of the run, and one at the end.
    let at: Vec<f64> = series
        .iter()
        .map(|s| s["atSeconds"].as_f64().expect("a time"))
        .collect();
    let elapsed = summary["elapsedSeconds"].as_f64().expect("elapsed");
    assert!(
        at.len() >= 2 && at[at.len() - 1] <= elapsed,
        "{at:?} in {elapsed}s"
    );
    let span = at[at.len() - 1] - at[0];
    assert!(
        (at.len() as f64 - (span.floor() + 1.0)).abs() <= 1.0,
        "{} samples over {span}s",
        at.len()
    );
    // Samples stay on a one-second grid, so a late tick (a busy machine) shortens the gap
    // after it and a skipped one doubles its own: bounds that catch another rate, not jitter.
    let gaps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps[..gaps.len() - 1]
            .iter()
            .all(|g| (0.5..2.5).contains(g)),
        "{gaps:?}"
    );
    let last = series.last().expect("a last sample");
    assert_eq!(count(&last["podsBound"]), 12, "{last:#}");
    assert_eq!(count(&last["podsPending"]), 0);
    let nodes = count(&last["nodesSpot"]) + count(&last["nodesOnDemand"]);
    assert_eq!(nodes, count(&summary["nodes"]["total"]));
    assert_eq!(last["hourlyCost"], summary["hourlyCost"]);
    // The summary is read just after the last sample; the controller may call EC2 between.
    assert!(count(&last["cloudCalls"]) > 0);
    assert!(count(&last["cloudCalls"]) <= count(&summary["cloudApiCalls"]["total"]));
    assert!(count(&last["apiRequests"]) > count(&series[0]["apiRequests"]));
    // The controller's live heap each second, never above the peak the summary reports.
    let heap_peak = count(&summary["memory"]["controllerHeapPeakBytes"]);
    assert!(
        series
            .iter()
            .all(|s| count(&s["controllerMemoryBytes"]) <= heap_peak),
        "{heap_peak}"
    );
    assert!(count(&last["controllerMemoryBytes"]) > 0, "{last:#}");
    assert_eq!(
        count(&series[0]["podsBound"]),
        0,
        "sampling starts before the workload"
    );
    // Status, conditions, container statuses and managedFields make a pod a few kB, as on a
    // real cluster.
    let pod_bytes = count(&summary["pods"]["averageObjectBytes"]);
    assert!((2_000..20_000).contains(&pod_bytes), "{pod_bytes}");
    let times = report["pendingToBoundSeconds"].as_array().expect("times");
    assert_eq!(times.len(), 12);
    let p = &report["pendingToBoundPercentiles"];
    assert!(p["p50"].as_f64() <= p["p99"].as_f64());
    let page = std::fs::read_to_string(report_dir.join("report.html")).expect("report.html");
    assert_eq!(
        page.matches("<svg").count(),
        5,
        "pending, nodes, cost, calls, latency"
    );
}

#[test]
fn ctrl_c_mid_run_prints_what_happened_so_far_and_exits_130() {
    use std::io::{BufRead, BufReader};
    // Every offering refused: the pods never bind, so only the signal ends the run.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", "--fast", "--pods", "6", "-o", "json"])
        .args(["--ice", "*:*", "--duration", "10m"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut lines = BufReader::new(stderr).lines();
    // The metrics line is printed once the controller runs.
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("controller metrics"));
    assert!(started, "the run started");
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    let out = child.wait_with_output().expect("kerf stops");
    assert_eq!(out.status.code(), Some(130), "{:?}", out.status);
    let summary: Value = serde_json::from_slice(&out.stdout).expect("summary is JSON");
    assert_eq!(summary["outcome"], "interrupted");
    // How many pods it saw depends on when the signal came; none could bind.
    assert!(count(&summary["pods"]["total"]) <= 6, "{summary:#}");
    assert_eq!(count(&summary["pods"]["bound"]), 0);
    assert!(
        summary["controllerEndpoints"]["metrics"]
            .as_str()
            .is_some_and(|m| m.starts_with("http://") && m.ends_with("/metrics")),
        "{summary:#}"
    );
}

#[test]
fn a_workload_may_carry_a_static_pool_held_at_its_replicas() {
    // The workload brings its own NodePools: a static one, held at its three replicas
    // whatever the pods ask for, and a dynamic one for the pods. Whether the first round
    // plans the pods onto replicas already in flight or onto a node of its own races the
    // replicas' creation (as upstream's controllers race), so only the replicas are counted.
    let dir = TempDir::new("sim-test", "static");
    let workload = dir.file(
        "workload.yaml",
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed}
spec:
  replicas: 3
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: spare}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: api
          image: i
          resources: {requests: {cpu: '1', memory: 1Gi}}
",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", "--fast", "-o", "json", "--duration", "60s"])
        .args(["--workload", path(&workload)])
        .env("FEATURE_GATES", "StaticCapacity=true")
        .stdin(Stdio::null())
        .output()
        .expect("kerf runs");
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("summary is JSON ({e}); stderr: {}", text(&out.stderr)));
    assert!(
        out.status.success(),
        "stderr: {}\n{summary:#}",
        text(&out.stderr)
    );
    assert_eq!(count(&summary["pods"]["bound"]), 2, "{summary:#}");
    let types = summary["nodes"]["byInstanceType"]
        .as_object()
        .expect("by type");
    assert_eq!(types.get("m5.large").map(count), Some(3), "{summary:#}");
}
