//! `kerf record` end to end: the binary watches the project's API emulator (kube-rs over
//! HTTP, read-only, through a kubeconfig as for a real cluster) while the test scales
//! Deployments, adds one and a Job, deletes one and changes the NodePool; Ctrl-C ends the recording,
//! which must be written; then `kerf simulate --replay` on the recording must reproduce the
//! workload's curve — the pods requested, and the pods that exist in the simulated cluster,
//! over time — within a tolerance around each change. `--for` ends a recording by itself,
//! and the read-only ClusterRole docs/replay.md gives is all it needs, under the emulator's
//! RBAC.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf_loadtest::apiserver::rbac::{self, User};
use kerf_loadtest::apiserver::{
    ApiServer, Cluster, PatchKind, RunningServer, ServerConfig, kubeconfig,
};
use serde_json::{Value, json};

fn deployment(name: &str, replicas: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "shop/app:1",
                    "env": [{"name": "API_TOKEN", "value": "s3cret"}],
                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}}})
}

fn scale(cluster: &Cluster, name: &str, replicas: u32) {
    cluster
        .patch(
            "apps/v1",
            "deployments",
            Some("default"),
            name,
            PatchKind::Merge,
            &json!({"spec": {"replicas": replicas}}),
        )
        .expect("scaled");
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("the built-in manifests parse")
}

/// The emulator with kerf's CRDs and the default EC2NodeClass and NodePool, on a runtime
/// the caller keeps alive while it records.
fn emulator() -> (tokio::runtime::Runtime, RunningServer) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = runtime
        .block_on(ApiServer::start(ServerConfig::default()))
        .expect("the emulator starts");
    let cluster = server.cluster();
    kerf_simulation::world::install_crds(&cluster).expect("CRDs");
    cluster
        .create(
            "karpenter.k8s.aws/v1",
            "ec2nodeclasses",
            yaml(&kerf_simulation::defaults::nodeclass()),
        )
        .expect("node class");
    cluster
        .create(
            "karpenter.sh/v1",
            "nodepools",
            yaml(&kerf_simulation::defaults::nodepool()),
        )
        .expect("node pool");
    (runtime, server)
}

fn interrupt(child: &Child) {
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
}

/// `kerf record --for 4s` into `out` through `kubeconfig`, with `during` run 2 s in; its
/// output once it ended by itself.
fn record_for_4s(kubeconfig: &Path, out: &Path, during: impl FnOnce()) -> Output {
    let mut recording = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "record",
            "--for",
            "4s",
            "--node-sample-every",
            "1s",
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf record starts");
    std::thread::sleep(Duration::from_millis(2_000));
    during();
    // No signal: `--for` ends it. A generous bound for a loaded machine, not a timing.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if recording.try_wait().expect("kerf record waits").is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = recording.kill();
            panic!("kerf record --for 4s still ran after two minutes");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    recording.wait_with_output().expect("kerf record output")
}

/// The pods the test asked for at `t` seconds into the recording, given when each change
/// happened (`changes`: seconds, pods after it); `None` within `settle` after a change.
fn expected(start_pods: u64, changes: &[(f64, u64)], t: f64, settle: f64) -> Option<u64> {
    // The recording starts a moment before its first list arrives.
    if t < settle
        || changes
            .iter()
            .any(|(at, _)| t >= *at - 0.3 && t < at + settle)
    {
        return None;
    }
    Some(
        changes
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map_or(start_pods, |(_, pods)| *pods),
    )
}

#[test]
fn a_recording_replays_the_workload_curve_it_saw() {
    let (runtime, server) = emulator();
    let cluster = server.cluster();
    for (name, instance_type, capacity) in [
        ("ip-10-0-0-1", "m5.xlarge", "on-demand"),
        ("ip-10-0-0-2", "c5.2xlarge", "spot"),
    ] {
        cluster
            .create(
                "v1",
                "nodes",
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                    "labels": {"node.kubernetes.io/instance-type": instance_type,
                        "karpenter.sh/capacity-type": capacity,
                        "topology.kubernetes.io/zone": "us-east-1a"}}}),
            )
            .expect("node");
    }
    cluster
        .create("apps/v1", "deployments", deployment("web", 2))
        .expect("web");
    cluster
        .create("apps/v1", "deployments", deployment("api", 3))
        .expect("api");
    let dir = std::env::temp_dir().join(format!("kerf-record-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let out = dir.join("history.json");
    let recording = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["record", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--out")
        .arg(&out)
        .args(["--node-sample-every", "1s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf record starts");
    // Let its watches list the cluster before anything changes.
    std::thread::sleep(Duration::from_millis(2_500));
    let step = Duration::from_secs(3);
    let mut moments = Vec::new();
    let mut act = |what: &dyn Fn(), pods: u64| {
        what();
        moments.push((Timestamp::now(), pods));
        std::thread::sleep(step);
    };
    act(&|| scale(&cluster, "web", 5), 5 + 3);
    act(
        &|| {
            cluster
                .create("apps/v1", "deployments", deployment("batch", 4))
                .expect("batch");
        },
        5 + 3 + 4,
    );
    act(
        &|| {
            cluster
                .create(
                    "batch/v1",
                    "jobs",
                    json!({"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": "report", "namespace": "default"},
                        "spec": {"parallelism": 2, "completions": 2,
                            "template": {"spec": {"restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "reports:1",
                                    "command": ["run-report"],
                                    "resources": {"requests": {"cpu": "250m"}}}]}}}}),
                )
                .expect("job");
        },
        5 + 3 + 4 + 2,
    );
    act(&|| scale(&cluster, "api", 0), 5 + 4 + 2);
    act(
        &|| {
            cluster
                .delete(
                    "apps/v1",
                    "deployments",
                    Some("default"),
                    "web",
                    &Default::default(),
                )
                .expect("deleted");
        },
        4 + 2,
    );
    act(
        &|| {
            cluster
                .patch(
                    "karpenter.sh/v1",
                    "nodepools",
                    None,
                    "default",
                    PatchKind::Merge,
                    &json!({"spec": {"limits": {"cpu": "64"}}}),
                )
                .expect("limited");
        },
        4 + 2,
    );
    interrupt(&recording);
    let done = recording.wait_with_output().expect("kerf record ends");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "Ctrl-C writes and exits 0: {stderr}");
    assert!(stderr.contains("wrote"), "{stderr}");
    let text = std::fs::read_to_string(&out).expect("the recording was written");
    assert!(
        !text.contains("s3cret") && !text.contains("API_TOKEN"),
        "env values stripped"
    );
    let log: Value = serde_json::from_str(&text).expect("JSON");
    let events: Vec<String> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            let field = |name: &str| e[name].as_str().unwrap_or_default().to_owned();
            format!("{} {} {}", field("type"), field("kind"), field("key"))
        })
        .collect();
    assert_eq!(
        events,
        [
            "create Deployment default/api",
            "create Deployment default/web",
            "scale Deployment default/web",
            "create Deployment default/batch",
            "create Job default/report",
            "scale Deployment default/api",
            "delete Deployment default/web",
        ]
    );
    let sets = log["kerf"]["nodePools"].as_array().expect("NodePool sets");
    assert_eq!(sets.len(), 2, "at the start and after the change: {sets:?}");
    assert_eq!(
        sets[1]["objects"]
            .as_array()
            .expect("objects")
            .iter()
            .find(|o| o["kind"] == "NodePool")
            .expect("the NodePool")["spec"]["limits"]["cpu"],
        "64"
    );
    let samples = log["kerf"]["nodeSamples"].as_array().expect("node samples");
    assert!(samples.len() >= 10, "one a second: {}", samples.len());
    assert_eq!(samples[3]["nodes"].as_array().map(Vec::len), Some(2));
    let start: Timestamp = log["kerf"]["start"]
        .as_str()
        .expect("start")
        .parse()
        .expect("a time");
    let changes: Vec<(f64, u64)> = moments
        .iter()
        .map(|(at, pods)| (at.duration_since(start).as_secs_f64(), *pods))
        .collect();

    let replay = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", "--replay"])
        .arg(&out)
        .args(["--speed", "1", "--fast", "-o", "json"])
        .stdin(Stdio::null())
        .output()
        .expect("kerf simulate runs");
    let stderr = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&replay.stdout).expect("a JSON report");
    assert_eq!(report["label"], "the log's NodePools");
    assert_eq!(
        report["events"]["nodePoolChanges"], 1,
        "{}",
        report["events"]
    );
    assert!(report["realCluster"]["total"]["nodeHours"].as_f64() > Some(0.0));
    assert_eq!(report["realCluster"]["peakNodes"], 2);
    let mut compared = 0;
    for sample in report["series"].as_array().expect("series") {
        let t = sample["atSeconds"].as_f64().expect("time");
        let Some(wanted) = expected(5, &changes, t, 1.0) else {
            continue;
        };
        assert_eq!(sample["podsRequested"], wanted, "at {t:.1}s: {sample}");
        let pods = sample["pods"].as_u64().expect("pods");
        assert!(
            pods.abs_diff(wanted) <= 1,
            "at {t:.1}s the replay had {pods} pods, the cluster asked for {wanted}"
        );
        compared += 1;
    }
    assert!(
        compared >= 6,
        "enough samples away from the changes: {compared}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    runtime.block_on(server.shutdown());
}

#[test]
fn a_recording_for_a_duration_ends_by_itself_and_is_written() {
    let (_runtime, server) = emulator();
    let cluster = server.cluster();
    cluster
        .create("apps/v1", "deployments", deployment("web", 2))
        .expect("web");
    let dir = std::env::temp_dir().join(format!("kerf-record-for-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let out = dir.join("history.json");
    let done = record_for_4s(&kubeconfig, &out, || scale(&cluster, "web", 3));
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stderr}");
    let log: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("the log is written"))
            .expect("JSON");
    let _ = std::fs::remove_dir_all(&dir);
    let events: Vec<(&str, &str, Option<u64>)> = log["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default(),
                e["key"].as_str().unwrap_or_default(),
                e["replicas"].as_u64(),
            )
        })
        .collect();
    assert!(
        events.contains(&("scale", "default/web", Some(3))),
        "the scale during the recording: {events:?}"
    );
}

/// The ClusterRole and ClusterRoleBinding docs/replay.md gives `kerf record`, read from the
/// page's "Permissions" section.
fn documented_rbac() -> Vec<Value> {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/replay.md"))
            .expect("docs/replay.md");
    let fence = "```yaml\napiVersion: rbac.authorization.k8s.io/v1";
    let start = page.find(fence).expect("the page's RBAC block") + "```yaml\n".len();
    let block = &page[start..];
    let block = &block[..block.find("```").expect("the block is closed")];
    block.split("\n---\n").map(yaml).collect()
}

#[test]
fn the_documented_read_only_role_is_all_kerf_record_needs() {
    let (_runtime, server) = emulator();
    let cluster = server.cluster();
    cluster
        .create("apps/v1", "deployments", deployment("web", 2))
        .expect("web");
    let objects = documented_rbac();
    assert_eq!(objects.len(), 2, "a ClusterRole and its binding");
    let verbs: Vec<&Value> = objects[0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .flat_map(|r| r["verbs"].as_array().expect("verbs"))
        .collect();
    assert!(
        verbs.iter().all(|v| *v == "list" || *v == "watch"),
        "read-only: {verbs:?}"
    );
    for object in objects {
        let plural = rbac::plural(object["kind"].as_str().unwrap_or("")).expect("an RBAC kind");
        cluster
            .create("rbac.authorization.k8s.io/v1", plural, object)
            .expect("the documented RBAC object is created");
    }
    // The binding's subject, as the page writes it; its requests must carry its token.
    let user = User {
        name: "you@example.com".to_owned(),
        groups: Vec::new(),
    };
    server
        .access()
        .enforce(HashMap::from([("record-token".to_owned(), user.clone())]));
    let dir = std::env::temp_dir().join(format!("kerf-record-rbac-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("kubeconfig");
    let text =
        kubeconfig::render(&server.url()).replace("  user: {}", "  user:\n    token: record-token");
    std::fs::write(&config, text).expect("kubeconfig");
    let out = dir.join("history.json");
    let done = record_for_4s(&config, &out, || scale(&cluster, "web", 3));
    let stderr = String::from_utf8_lossy(&done.stderr);
    let log = std::fs::read_to_string(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(done.status.success(), "{stderr}");
    let log: Value = serde_json::from_str(&log.expect("the log is written")).expect("JSON");
    assert!(
        log["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|e| e["type"] == "scale" && e["key"] == "default/web"),
        "{log}"
    );
    let refused = server.access().denied_to(&user.name);
    assert!(refused.is_empty(), "refused: {refused:?}");
    let unused = server.unused_grants(&user);
    assert!(unused.is_empty(), "granted and never used: {unused:?}");
}
