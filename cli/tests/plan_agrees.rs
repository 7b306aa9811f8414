//! The offline plan and the live controller agree on the same cluster. A kept
//! `kerf simulate` cluster is scaled down while its NodePool's budget allows no disruption;
//! kubectl dumps it, and `kerf plan --disruption --now <the dump's time>` runs on the dump
//! with the budget lifted (the what-if a user asks: "what will the controller do when I
//! lift it?"). Then the budget is lifted in the cluster, and the controller's first command
//! — the Nodes it starts disrupting together, why, and its replacement — must be the plan's
//! first command. Once the controller has settled, the plan on a fresh dump proposes nothing.
//! The real kubectl reads the cluster (skipped with a note where it is not installed).

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

#[path = "kerf_cli/serving.rs"]
mod serving;
#[path = "kerf_cli/kubectl.rs"]
mod session;

use session::{Session, kubectl_binary};

const PODS: usize = 120;

/// Upstream's default budget: what the dump's NodePool is planned with.
const LIFTED: &str = r#"{"spec":{"disruption":{"budgets":[{"nodes":"10%"}]}}}"#;

/// What a user dumps for `kerf plan --disruption`.
const DUMPED: &str = "nodes,pods,nodeclaims,nodepools,ec2nodeclasses,pdb,ds";

/// With no disruption for this long (a pass every 10 s, a command validated for 15 s), the
/// controller has settled.
const QUIET: Duration = Duration::from_secs(45);

/// Longest the controller may take to settle after the budget is lifted.
const SETTLE: Duration = Duration::from_secs(300);

fn get_json(s: &Session, what: &str) -> Value {
    serde_json::from_str(&s.kubectl(&["get", what, "-A", "-o", "json"])).expect("kubectl json")
}

fn items(list: &Value) -> &[Value] {
    list["items"].as_array().map_or(&[], Vec::as_slice)
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// Pods bound and running, and whether any is still going away.
fn running_pods(s: &Session) -> (usize, bool) {
    let pods = get_json(s, "pods");
    let running = items(&pods)
        .iter()
        .filter(|p| p["status"]["phase"] == "Running")
        .count();
    let leaving = items(&pods)
        .iter()
        .any(|p| !p["metadata"]["deletionTimestamp"].is_null());
    (running, leaving)
}

/// Every Deployment scaled to one replica; the replicas left.
fn scale_down(s: &Session) -> usize {
    let mut left = 0;
    for deployment in items(&get_json(s, "deployments")) {
        let to = 1;
        left += to;
        s.kubectl(&[
            "scale",
            "deployment",
            name(deployment),
            "-n",
            deployment["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default"),
            &format!("--replicas={to}"),
        ]);
    }
    left
}

/// `kerf plan --disruption` on `dump` at `now`, as JSON.
fn plan(s: &Session, dump: &Value, now: &str, file: &str) -> Value {
    let path = s.dir.join(file);
    std::fs::write(&path, dump.to_string()).expect("dump written");
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["plan", "--disruption", "-o", "json", "--now", now, "-f"])
        .arg(&path)
        .output()
        .expect("kerf plan runs");
    assert!(
        out.status.success(),
        "kerf plan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("plan json");
    report["disruption"].clone()
}

/// The cluster as a user dumps it, and when the dump was read (the plan's default `--now`:
/// a moment after every object it holds was written).
fn dump(s: &Session) -> (Value, String) {
    let dump = get_json(s, DUMPED);
    (dump, Timestamp::now().to_string())
}

/// `dump` with every NodePool's budget lifted to upstream's default.
fn lifted(mut dump: Value) -> Value {
    let lifted: Value = serde_json::from_str(LIFTED).expect("budget json");
    for object in dump["items"].as_array_mut().into_iter().flatten() {
        if object["kind"] == "NodePool" {
            object["spec"]["disruption"]["budgets"] =
                lifted["spec"]["disruption"]["budgets"].clone();
        }
    }
    dump
}

/// `DisruptionTerminating` events on Nodes: (when, node, message).
fn terminating(s: &Session) -> Vec<(Timestamp, String, String)> {
    let mut found: Vec<_> = items(&get_json(s, "events"))
        .iter()
        .filter(|e| e["reason"] == "DisruptionTerminating" && e["involvedObject"]["kind"] == "Node")
        .filter_map(|e| {
            let when: Timestamp = e["metadata"]["creationTimestamp"].as_str()?.parse().ok()?;
            let node = e["involvedObject"]["name"].as_str()?.to_owned();
            Some((
                when,
                node,
                e["message"].as_str().unwrap_or_default().to_owned(),
            ))
        })
        .collect();
    found.sort();
    found
}

/// The instance types the replacement NodeClaims launched for disruption may take.
fn replacement_types(s: &Session) -> BTreeSet<String> {
    let launching: BTreeSet<String> = items(&get_json(s, "events"))
        .iter()
        .filter(|e| e["reason"] == "DisruptionLaunching")
        .filter_map(|e| e["involvedObject"]["name"].as_str().map(str::to_owned))
        .collect();
    items(&get_json(s, "nodeclaims"))
        .iter()
        .filter(|c| launching.contains(name(c)))
        .flat_map(|c| {
            c["spec"]["requirements"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|r| r["key"] == "node.kubernetes.io/instance-type")
        .flat_map(|r| r["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_plan_on_a_dump_names_the_controllers_next_command_and_nothing_once_it_settles() {
    let Some(kubectl) = kubectl_binary() else {
        eprintln!("note: kubectl is not installed (scripts/test.sh installs it); skipping");
        return;
    };
    let s = Session::start(kubectl, "plan-agrees", PODS, &[]);
    s.eventually("every pod running", |s| running_pods(s).0 == PODS);
    s.kubectl(&[
        "patch",
        "nodepool",
        "default",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"disruption":{"consolidateAfter":"0s","budgets":[{"nodes":"0"}]}}}"#,
    ]);
    let left = scale_down(&s);
    s.eventually("the scale-down done", |s| running_pods(s) == (left, false));
    // The controller records the nodes' last pod events as it sees the pods go.
    std::thread::sleep(Duration::from_secs(2));

    let (held, at) = dump(&s);
    let report = plan(&s, &lifted(held), &at, "held.json");
    let commands = report["commands"].as_array().expect("commands");
    assert!(
        !commands.is_empty(),
        "the scale-down leaves something to disrupt: {report:#}"
    );
    let first = &commands[0];
    let planned: BTreeSet<String> = first["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    s.kubectl(&[
        "patch", "nodepool", "default", "--type", "merge", "-p", LIFTED,
    ]);
    s.eventually("the controller's first command", |s| {
        !terminating(s).is_empty()
    });
    // A command's Nodes are tainted and told together; the next command waits at least a
    // validation period (15 s) behind it.
    std::thread::sleep(Duration::from_secs(3));
    let events = terminating(&s);
    let started = events[0].0;
    let taken: BTreeSet<String> = events
        .iter()
        .filter(|(when, _, _)| when.duration_since(started).as_secs() <= 5)
        .map(|(_, node, _)| node.clone())
        .collect();
    assert_eq!(
        taken, planned,
        "the controller's first command is the plan's: {first:#}"
    );
    let reason = first["reason"].as_str().expect("reason");
    assert!(
        events[0].2.ends_with(reason),
        "the controller disrupts for the plan's reason {reason}: {}",
        events[0].2
    );
    if first["decision"] == "replace" {
        let launch = first["replacements"][0]["launch"]["instanceType"]
            .as_str()
            .expect("the plan's launch");
        s.eventually("the replacement NodeClaim", |s| {
            replacement_types(s).contains(launch)
        });
    }

    let deadline = Instant::now() + SETTLE;
    loop {
        let events = terminating(&s);
        let last = events.last().map(|(when, _, _)| *when);
        let quiet = last.is_none_or(|when| {
            Timestamp::now().duration_since(when).as_secs() >= QUIET.as_secs() as i64
        });
        let deleting = items(&get_json(&s, "nodeclaims"))
            .iter()
            .any(|c| !c["metadata"]["deletionTimestamp"].is_null());
        if quiet && !deleting {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the controller did not settle in {SETTLE:?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let (settled, at) = dump(&s);
    let report = plan(&s, &settled, &at, "settled.json");
    assert_eq!(
        report["commands"],
        json!([]),
        "the settled cluster leaves the plan nothing to do: {report:#}"
    );
}
