//! A user's kubectl session against `kerf simulate --kubeconfig-out`: the real kubectl
//! (Debian's kubernetes-client, installed by `scripts/test.sh`; the test is skipped with a
//! note where it is missing) gets and describes NodeClaims, NodePools, nodes, pods and
//! events, scales a Deployment, cordons and drains a node (evictions), and deletes a
//! NodeClaim while watching its replacement appear. The printed columns are read by their
//! headers and their values checked, as a user reads them.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "kerf_cli/serving.rs"]
mod serving;
#[path = "kerf_cli/kubectl.rs"]
mod session;

use session::{PATIENCE, Session, kubectl_binary};

const WORKLOAD_PODS: usize = 12;

/// `kubectl get ARGS` read as a table.
fn table(s: &Session, args: &[&str]) -> Table {
    let mut full = vec!["get"];
    full.extend_from_slice(args);
    Table::parse(&s.kubectl(&full))
}

/// kubectl's printed table: the header's columns, and each row's cells by column.
#[derive(Debug)]
struct Table {
    headers: Vec<String>,
    rows: Vec<HashMap<String, String>>,
}

impl Table {
    /// Cuts each line at the header's column starts (kubectl aligns cells under them; a
    /// header such as `LAST SEEN` holds a single space, columns are three apart).
    fn parse(text: &str) -> Self {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header = lines.next().unwrap_or_default();
        let mut starts = Vec::new();
        let mut previous = ' ';
        let mut gap = 2;
        for (i, c) in header.char_indices() {
            if c != ' ' && previous == ' ' && gap >= 2 {
                starts.push(i);
            }
            gap = if c == ' ' { gap + 1 } else { 0 };
            previous = c;
        }
        let cut = |line: &str, i: usize| {
            let from = starts[i].min(line.len());
            let to = starts.get(i + 1).map_or(line.len(), |&s| s.min(line.len()));
            line[from..to].trim().to_owned()
        };
        let headers: Vec<String> = (0..starts.len()).map(|i| cut(header, i)).collect();
        let rows = lines
            .map(|line| {
                (0..starts.len())
                    .map(|i| (headers[i].clone(), cut(line, i)))
                    .collect()
            })
            .collect();
        Self { headers, rows }
    }

    fn column(&self, name: &str) -> Vec<&str> {
        self.rows.iter().map(|r| r[name].as_str()).collect()
    }
}

/// A static NodePool (`StaticCapacity` on) applied with kubectl and scaled with `kubectl
/// scale nodepool`, through the NodePool CRD's scale subresource: its NodeClaims follow the
/// replicas, `kubectl get --subresource scale` reads them back, and a dynamic pool refuses to
/// be scaled (static and dynamic do not turn into each other).
#[test]
fn kubectl_scale_nodepool_sizes_a_static_pool() {
    let Some(kubectl) = kubectl_binary() else {
        eprintln!("note: kubectl is not installed (scripts/test.sh installs it); skipping");
        return;
    };
    let s = Session::start_with_env(
        kubectl,
        "kubectl-scale",
        4,
        &[],
        &[("FEATURE_GATES", "StaticCapacity=true")],
    );
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: fixed}\nspec:\n  \
                replicas: 2\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, \
                kind: EC2NodeClass, name: default}\n      requirements: [{key: kubernetes.io/arch, \
                operator: In, values: [amd64]}]\n";
    let file = s.dir.join("fixed.yaml");
    std::fs::write(&file, pool).expect("manifest");
    s.kubectl(&["apply", "-f", file.to_str().expect("utf-8")]);
    let fixed = |s: &Session| {
        let listed = s.kubectl(&[
            "get",
            "nodeclaims",
            "-l",
            "karpenter.sh/nodepool=fixed",
            "-o",
            "json",
        ]);
        let list: Value = serde_json::from_str(&listed).expect("JSON");
        list["items"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
                .count()
        })
    };
    s.eventually("two NodeClaims of the static pool", |s| fixed(s) == 2);
    let out = s.kubectl(&["scale", "nodepool", "fixed", "--replicas", "3"]);
    assert!(out.contains("nodepool.karpenter.sh/fixed scaled"), "{out}");
    s.eventually("three NodeClaims after scaling up", |s| fixed(s) == 3);
    let read = s.kubectl(&[
        "get",
        "nodepool",
        "fixed",
        "--subresource",
        "scale",
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(read.trim(), "3");
    s.kubectl(&["scale", "nodepool", "fixed", "--replicas", "1"]);
    s.eventually("one NodeClaim after scaling down", |s| fixed(s) == 1);
    let (ok, stdout, stderr) = s.try_kubectl(&["scale", "nodepool", "default", "--replicas", "2"]);
    assert!(!ok, "a dynamic pool was scaled: {stdout}");
    assert!(
        stderr.contains("Cannot transition NodePool between static"),
        "{stderr}"
    );
}

#[test]
fn a_users_kubectl_session_reads_and_changes_the_simulated_cluster() {
    let Some(kubectl) = kubectl_binary() else {
        eprintln!("note: kubectl is not installed (scripts/test.sh installs it); skipping");
        return;
    };
    let s = Session::start(kubectl, "kubectl-session", WORKLOAD_PODS, &[]);

    let claims = table(&s, &["nodeclaims"]);
    assert_eq!(
        claims.headers,
        ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    );
    assert!(!claims.rows.is_empty());
    let nodes = table(&s, &["nodes", "-o", "wide"]);
    let node_names: BTreeSet<&str> = nodes.column("NAME").into_iter().collect();
    for claim in &claims.rows {
        assert!(claim["TYPE"].contains('.'), "{claim:?}");
        assert!(["spot", "on-demand"].contains(&claim["CAPACITY"].as_str()));
        assert!(claim["ZONE"].starts_with("us-east-1"), "{claim:?}");
        assert!(node_names.contains(claim["NODE"].as_str()), "{claim:?}");
        assert_eq!(claim["READY"], "True");
    }

    let pools = table(&s, &["nodepools"]);
    assert_eq!(
        pools.headers,
        ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
    );
    assert_eq!(pools.rows[0]["NAME"], "default");
    assert_eq!(pools.rows[0]["READY"], "True");
    // The NodePool's status counts its nodes on the controller's next status pass.
    let claims_now = || table(&s, &["nodeclaims"]).rows.len().to_string();
    s.eventually("the NodePool counting its nodes", |s| {
        table(s, &["nodepools"]).rows[0]["NODES"] == claims_now()
    });

    assert_eq!(
        nodes.headers[..7],
        [
            "NAME",
            "STATUS",
            "ROLES",
            "AGE",
            "VERSION",
            "INTERNAL-IP",
            "EXTERNAL-IP"
        ]
    );
    for node in &nodes.rows {
        assert_eq!(node["STATUS"], "Ready", "{node:?}");
        assert_eq!(node["ROLES"], "<none>");
        assert!(node["VERSION"].starts_with("v1."), "{node:?}");
        assert!(node["INTERNAL-IP"].starts_with("10."), "{node:?}");
    }
    let plain_nodes = table(&s, &["nodes"]);
    assert_eq!(
        plain_nodes.headers,
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "the address columns are -o wide only"
    );

    let pods = table(&s, &["pods", "-o", "wide"]);
    assert_eq!(
        pods.headers[..7],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    );
    assert_eq!(pods.rows.len(), WORKLOAD_PODS);
    for pod in &pods.rows {
        assert_eq!(
            (
                pod["READY"].as_str(),
                pod["STATUS"].as_str(),
                pod["RESTARTS"].as_str()
            ),
            ("1/1", "Running", "0"),
            "{pod:?}"
        );
        assert!(node_names.contains(pod["NODE"].as_str()), "{pod:?}");
        assert!(pod["IP"].starts_with("100.64."), "{pod:?}");
    }

    describe(&s, &claims, &pods);
    describe_shows_events(&s);
    strict_apply_of_a_builtin_kind(&s);
    managers(
        &s,
        &format!("nodeclaim/{}", claims.rows[0]["NAME"]),
        &["kerf"],
    );
    let pod = format!("pod/{}", pods.rows[0]["NAME"]);
    managers(&s, &pod, &["kube-controller-manager", "kubelet"]);
    events_sorted_by_last_timestamp(&s);
    scale_cordon_and_drain(&s);
    replacement_of_a_deleted_nodeclaim(&s);
}

/// The value of the first `key:` line of `kubectl describe` output (any indentation).
fn field<'a>(described: &'a str, key: &str) -> Option<&'a str> {
    described.lines().find_map(|line| {
        line.trim_start()
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

fn describe(s: &Session, claims: &Table, pods: &Table) {
    let claim = &claims.rows[0];
    let described = s.kubectl(&["describe", "nodeclaim", &claim["NAME"]]);
    assert_eq!(field(&described, "Name"), Some(claim["NAME"].as_str()));
    assert_eq!(field(&described, "Kind"), Some("NodeClaim"));
    assert_eq!(
        field(&described, "Node Name"),
        Some(claim["NODE"].as_str()),
        "{described}"
    );
    let pool = s.kubectl(&["describe", "nodepool", "default"]);
    assert_eq!(field(&pool, "Kind"), Some("NodePool"), "{pool}");
    let node = s.kubectl(&["describe", "node", &claim["NODE"]]);
    assert_eq!(field(&node, "Name"), Some(claim["NODE"].as_str()));
    for expected in [
        "KubeletReady",
        "InternalIP:",
        "System Info:",
        "Non-terminated Pods:",
    ] {
        assert!(node.contains(expected), "no {expected} in {node}");
    }
    let pod = &pods.rows[0];
    let described = s.kubectl(&["describe", "pod", &pod["NAME"]]);
    let on = field(&described, "Node").unwrap_or_default();
    assert_eq!(
        on.split_once('/').map(|(n, _)| n),
        Some(pod["NODE"].as_str()),
        "{described}"
    );
    assert_eq!(field(&described, "Status"), Some("Running"), "{described}");
    assert!(described.contains("ContainersReady"), "{described}");
    // The default workload requests without limits.
    assert_eq!(
        field(&described, "QoS Class"),
        Some("Burstable"),
        "{described}"
    );
    let port = s.kubectl(&[
        "get",
        "node",
        &claim["NODE"],
        "-o",
        "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port} {.status.images[*].sizeBytes}",
    ]);
    let mut words = port.split_whitespace();
    assert_eq!(words.next(), Some("10250"));
    assert!(
        words.count() >= 3,
        "the node lists its cached images: {port}"
    );
}

/// The reasons in the `Events:` section of `kubectl describe` output (none for `<none>`).
fn described_reasons(described: &str) -> Vec<String> {
    let mut lines = described.lines().skip_while(|l| !l.starts_with("Events:"));
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    if header.contains("<none>") {
        return Vec::new();
    }
    // The column titles, their underline, then one event a line.
    lines
        .skip(2)
        .take_while(|l| l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

/// `kubectl describe` finds an object's events with field selectors on the involved object
/// (kind, name, namespace, uid): for a pod, a node and a NodeClaim that kerf published
/// events about, the section lists them; a NodePool's (kerf publishes none on a healthy
/// pool) lists an event posted about it.
fn describe_shows_events(s: &Session) {
    let mut subjects: Vec<(String, String, String)> = Vec::new();
    s.eventually("events about a pod, a node and a NodeClaim", |s| {
        let json: Value =
            serde_json::from_str(&s.kubectl(&["get", "events", "-o", "json"])).expect("JSON");
        subjects = ["Pod", "Node", "NodeClaim"]
            .iter()
            .filter_map(|kind| {
                json["items"].as_array()?.iter().find_map(|e| {
                    let object = &e["involvedObject"];
                    (object["kind"] == *kind).then(|| {
                        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                        (
                            text(&object["kind"]),
                            text(&object["name"]),
                            text(&e["reason"]),
                        )
                    })
                })
            })
            .collect();
        subjects.len() == 3
    });
    for (kind, name, reason) in &subjects {
        let described = s.kubectl(&["describe", &kind.to_lowercase(), name]);
        let reasons = described_reasons(&described);
        assert!(
            reasons.contains(reason),
            "describe {kind} {name} lists {reasons:?}, not its {reason} event:\n{described}"
        );
    }
    let pool_uid = s.kubectl(&[
        "get",
        "nodepool",
        "default",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let event = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "default.pool-note", "namespace": "default"},
        "involvedObject": {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "name": "default", "uid": pool_uid},
        "reason": "PoolNote",
        "message": "posted by the kubectl session test",
        "type": "Normal",
        "source": {"component": "kubectl-session-test"},
    });
    let file = s.dir.join("pool-event.json");
    std::fs::write(&file, event.to_string()).expect("event file");
    s.kubectl(&["create", "-f", file.to_str().expect("utf-8 path")]);
    let described = s.kubectl(&["describe", "nodepool", "default"]);
    assert_eq!(described_reasons(&described), ["PoolNote"], "{described}");
    let selected = s.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=NodePool,source=kubectl-session-test",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "event/default.pool-note");
}

/// `kubectl apply` validates strictly on the server, as against a real one: a Deployment
/// with a misspelled field is refused, naming it, and nothing is created.
fn strict_apply_of_a_builtin_kind(s: &Session) {
    let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: typo}\nspec:\n  \
                    replicass: 2\n  selector: {matchLabels: {app: typo}}\n  template:\n    \
                    metadata: {labels: {app: typo}}\n    spec: {containers: [{name: a, image: x}]}\n";
    let file = s.dir.join("typo.yaml");
    std::fs::write(&file, manifest).expect("manifest");
    let (ok, stdout, stderr) = s.try_kubectl(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(!ok, "apply of an unknown field succeeded: {stdout}");
    assert!(
        stderr.contains(r#"strict decoding error: unknown field "spec.replicass""#),
        "{stderr}"
    );
    let (found, _, _) = s.try_kubectl(&["get", "deployment", "typo"]);
    assert!(!found, "the refused Deployment was not created");
}

/// The field managers in `object`'s managedFields include `expected` (who wrote it).
fn managers(s: &Session, object: &str, expected: &[&str]) {
    let shown = s.kubectl(&["get", object, "-o", "json", "--show-managed-fields"]);
    let object_json: Value = serde_json::from_str(&shown).expect("JSON");
    let managers: BTreeSet<&str> = object_json["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    for manager in expected {
        assert!(managers.contains(manager), "{object}: {managers:?}");
    }
}

/// `--sort-by=.lastTimestamp` prints the events oldest first: their NAME (a wide column)
/// read back from the JSON gives the timestamps.
fn events_sorted_by_last_timestamp(s: &Session) {
    let events = table(s, &["events", "--sort-by=.lastTimestamp"]);
    assert_eq!(
        events.headers,
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert!(
        events
            .rows
            .iter()
            .any(|e| e["REASON"] == "Nominated" && e["OBJECT"].starts_with("pod/")),
        "{events:?}"
    );
    let wide = table(s, &["events", "--sort-by=.lastTimestamp", "-o", "wide"]);
    let json: Value =
        serde_json::from_str(&s.kubectl(&["get", "events", "-o", "json"])).expect("JSON");
    let stamp: HashMap<&str, &str> = json["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|e| {
            Some((
                e["metadata"]["name"].as_str()?,
                e["lastTimestamp"].as_str()?,
            ))
        })
        .collect();
    let printed: Vec<&str> = wide
        .column("NAME")
        .iter()
        .filter_map(|name| stamp.get(name).copied())
        .collect();
    assert!(printed.len() > 1, "{wide:?}");
    assert!(printed.windows(2).all(|w| w[0] <= w[1]), "{printed:?}");
}

fn scale_cordon_and_drain(s: &Session) {
    s.kubectl(&["scale", "deployment/web", "--replicas=8"]);
    s.eventually("web scaled to 8 ready", |s| {
        let web = table(s, &["deployment", "web"]);
        web.rows[0]["READY"] == "8/8" && web.rows[0]["AVAILABLE"] == "8"
    });
    let pods = table(s, &["pods", "-o", "wide"]);
    let total = pods.rows.len();
    let node = pods.rows[0]["NODE"].clone();
    s.kubectl(&["cordon", &node]);
    let cordoned = table(s, &["node", &node]);
    assert_eq!(cordoned.rows[0]["STATUS"], "Ready,SchedulingDisabled");
    let drained = s.kubectl(&[
        "drain",
        &node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=60s",
    ]);
    assert!(drained.contains("evicting pod default/"), "{drained}");
    assert!(
        drained.contains(&format!("node/{node} drained")),
        "{drained}"
    );
    s.eventually("the drained pods running elsewhere", |s| {
        let pods = table(s, &["pods", "-o", "wide"]);
        pods.rows.len() == total
            && pods
                .rows
                .iter()
                .all(|p| p["STATUS"] == "Running" && p["NODE"] != node)
    });
}

fn replacement_of_a_deleted_nodeclaim(s: &Session) {
    let before: BTreeSet<String> = table(s, &["nodeclaims"])
        .rows
        .iter()
        .map(|r| r["NAME"].clone())
        .collect();
    let mut watch = Command::new(&s.binary)
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args(["get", "nodeclaims", "--watch-only"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl watch starts");
    let (lines, seen) = mpsc::channel();
    let stdout = watch.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    // The busiest NodeClaim: deleting it leaves pods that need a new one.
    let pods = table(s, &["pods", "-o", "wide"]);
    let claims = table(s, &["nodeclaims"]);
    let busiest = claims
        .rows
        .iter()
        .max_by_key(|c| {
            pods.column("NODE")
                .iter()
                .filter(|n| **n == c["NODE"])
                .count()
        })
        .expect("a NodeClaim")["NAME"]
        .clone();
    // The watch is up once kubectl listed; give it a moment before the change.
    std::thread::sleep(Duration::from_secs(1));
    s.kubectl(&["delete", "nodeclaim", &busiest, "--wait=false"]);
    let deadline = Instant::now() + PATIENCE;
    // A watch prints rows with the same columns as a get (the emulator streams Tables).
    let mut header = None;
    let replacement = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = seen
            .recv_timeout(left)
            .expect("the watch shows a new NodeClaim in time");
        let name = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        if name == "NAME" {
            header = Some(line);
        } else if !before.contains(&name) {
            break name;
        }
    };
    let header = header.expect("the watch printed its columns first");
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    );
    let _ = watch.kill();
    let _ = watch.wait();
    s.eventually(
        "the replacement Ready and the deleted NodeClaim gone",
        |s| {
            let claims = table(s, &["nodeclaims"]);
            let names = claims.column("NAME");
            !names.contains(&busiest.as_str())
                && claims
                    .rows
                    .iter()
                    .any(|c| c["NAME"] == replacement && c["READY"] == "True")
        },
    );
    s.eventually("every pod running again", |s| {
        table(s, &["pods"])
            .rows
            .iter()
            .all(|p| p["STATUS"] == "Running")
    });
}
