//! Upstream Karpenter's Grafana dashboards (deploy/dashboards) chart kerf unchanged, and
//! every metric of upstream's v1.14 reference (deploy/metrics/upstream-v1.14.txt) is
//! exported with its type and labels or named in deploy/metrics/divergences.txt: the
//! controller runs in the simulation (`kerf simulate --kubeconfig-out`, which keeps it up
//! and prints its metrics URL), its `/metrics` is scraped, and every series a dashboard
//! queries must be there with every label the query selects or groups by. The run scales
//! its workload down (`--scale-down`), so disruption decides, drains and terminates nodes
//! and its series (decisions, eligible nodes, terminations) are required like the rest.
//! A real Prometheus (Debian's, when installed; the test says it skipped otherwise)
//! scrapes a run from its start and evaluates every panel query, template variables
//! filled as Grafana fills them. `DISABLE_CLUSTER_STATE_OBSERVABILITY` is checked on a run
//! of its own.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::Value;

/// Labels a dashboard groups a series by that upstream's own controller does not export on
/// it either (the panel shows one group with the label empty), so kerf matches upstream by
/// leaving them out: `decisions_total` is labelled `decision`, `reason` and
/// `consolidation_type` only.
const NOT_ON_UPSTREAMS: &[(&str, &str)] =
    &[("karpenter_voluntary_disruption_decisions_total", "nodepool")];

/// Labels Prometheus adds (scrape target and external labels), never exported.
const TARGET_LABELS: &[&str] = &["job", "cluster", "instance"];

/// Every query string of a dashboard: panel `expr`s and templating `query`s.
fn queries(dashboard: &Value, out: &mut Vec<String>) {
    match dashboard {
        Value::Object(map) => {
            for (key, value) in map {
                if let (Some(text), true) = (value.as_str(), key == "expr" || key == "query") {
                    out.push(text.to_owned());
                }
                queries(value, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// metric name → the labels the queries select it by or group it by.
fn wanted_series() -> BTreeMap<String, BTreeSet<String>> {
    let metric =
        Regex::new(r"\b((?:karpenter|controller_runtime|workqueue)_[a-z_]+)\s*(\{[^}]*\})?")
            .unwrap();
    let matcher = Regex::new(r"([a-z_]+)\s*(?:=~|!~|!=|=)").unwrap();
    let grouping = Regex::new(r"\bby\s*\(([^)$]*)\)").unwrap();
    let label_values = Regex::new(r"label_values\(\s*([a-z_]+)[^,]*,\s*([a-z_]+)\s*\)").unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/dashboards");
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let dashboard: Value =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        let mut all = Vec::new();
        queries(&dashboard, &mut all);
        for query in all {
            let grouped: Vec<String> = grouping
                .captures_iter(&query)
                .flat_map(|c| {
                    c[1].split(',')
                        .map(|l| l.trim().to_owned())
                        .collect::<Vec<_>>()
                })
                .filter(|l| !l.is_empty())
                .collect();
            for found in metric.captures_iter(&query) {
                let labels = wanted.entry(found[1].to_owned()).or_default();
                if let Some(selector) = found.get(2) {
                    labels.extend(
                        matcher
                            .captures_iter(selector.as_str())
                            .map(|c| c[1].to_owned()),
                    );
                }
                labels.extend(grouped.iter().cloned());
            }
            for found in label_values.captures_iter(&query) {
                wanted
                    .entry(found[1].to_owned())
                    .or_default()
                    .insert(found[2].to_owned());
            }
        }
    }
    for labels in wanted.values_mut() {
        labels.retain(|l| !TARGET_LABELS.contains(&l.as_str()));
    }
    wanted
}

/// metric name → the label names its exported samples carry.
fn exported_series(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let sample = Regex::new(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s").unwrap();
    let label = Regex::new(r#"([a-zA-Z_][a-zA-Z0-9_]*)="#).unwrap();
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(found) = sample.captures(line) {
            let labels = series.entry(found[1].to_owned()).or_default();
            if let Some(set) = found.get(2) {
                labels.extend(label.captures_iter(set.as_str()).map(|c| c[1].to_owned()));
            }
        }
    }
    series
}

fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (address, path) = rest.split_once('/').unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET /{path} HTTP/1.1\r\nHost: kerf\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_default();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    }
}

/// The payload of an HTTP/1.1 chunked body (Prometheus's API answers that way).
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A pool with limits (for the usage/limit panels) and a workload with a DaemonSet (for
/// the daemon requests panels) and memory limits (for the node limits): what a cluster
/// the dashboards chart has. `spread` wants a node per replica, so the scale-down empties
/// nodes for disruption to take.
const NODEPOOLS: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  limits: {cpu: 1000, memory: 1000Gi}
  disruption: {consolidateAfter: 0s, budgets: [{nodes: '100%'}]}
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
";
const WORKLOAD: &str = "apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: agent, resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 128Mi}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 12
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: web, resources: {requests: {cpu: 500m, memory: 512Mi}, limits: {memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {labelSelector: {matchLabels: {app: spread}}, topologyKey: kubernetes.io/hostname}
      containers: [{name: spread, image: spread, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
";

/// A simulated cluster kept up with the controller that provisioned it.
struct Simulation {
    child: std::process::Child,
    metrics_url: String,
    dir: std::path::PathBuf,
}

impl Simulation {
    fn start() -> Self {
        Self::start_then(|_| {})
    }

    /// [`Self::start`] with the controller's environment variable `name` set to `value`.
    fn start_with_env(name: &str, value: &str) -> Self {
        Self::launch(Some((name, value)), |_| {})
    }

    /// Starts the run, calling `on_metrics` with the controller's metrics URL as soon as it
    /// is printed (the run goes on: a scraper started then sees it), and returns once the
    /// run has reported and the controller keeps running.
    fn start_then(on_metrics: impl FnOnce(&str)) -> Self {
        Self::launch(None, on_metrics)
    }

    fn launch(env: Option<(&str, &str)>, on_metrics: impl FnOnce(&str)) -> Self {
        let mut on_metrics = Some(on_metrics);
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("kerf-dashboards-{}-{run}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pools.yaml"), NODEPOOLS).unwrap();
        std::fs::write(dir.join("workload.yaml"), WORKLOAD).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_kerf"));
        if let Some((name, value)) = env {
            command.env(name, value);
        }
        let mut child = command
            .args(["simulate", "--fast", "-o", "json", "--scale-down", "0.5"])
            .arg("--nodepools")
            .arg(dir.join("pools.yaml"))
            .arg("--workload")
            .arg(dir.join("workload.yaml"))
            .arg("--kubeconfig-out")
            .arg(dir.join("kubeconfig"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut url = None;
        let mut seen = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(found) = line.strip_prefix("controller metrics: ") {
                url = Some(found.trim().to_owned());
                if let Some(call) = on_metrics.take() {
                    call(found.trim());
                }
            }
            let up = line.contains("keeps running");
            seen.push(line);
            if up {
                break;
            }
        }
        let Some(metrics_url) = url else {
            let _ = child.kill();
            panic!("no metrics URL printed: {seen:#?}");
        };
        Self {
            child,
            metrics_url,
            dir,
        }
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What is missing from `exported` for the dashboards.
fn missing(
    wanted: &BTreeMap<String, BTreeSet<String>>,
    exported: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut missing = Vec::new();
    for (name, labels) in wanted {
        match exported.get(name) {
            None => missing.push(format!("{name} (not exported)")),
            Some(have) => {
                let lacking: Vec<_> = labels
                    .difference(have)
                    .filter(|l| !NOT_ON_UPSTREAMS.contains(&(name.as_str(), l.as_str())))
                    .collect();
                if !lacking.is_empty() {
                    missing.push(format!("{name} lacks labels {lacking:?} (has {have:?})"));
                }
            }
        }
    }
    missing
}

#[test]
fn every_series_the_dashboards_query_is_exported_with_its_labels() {
    let wanted = wanted_series();
    assert!(wanted.len() >= 15, "{wanted:#?}");
    let simulation = Simulation::start();
    // The pods are bound when the simulation reports; a node's registration (and its
    // counters) may trail its first pods by a reconcile, so scrape until nothing is missing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (text, exported) = loop {
        let text = http_get(&simulation.metrics_url);
        let exported = exported_series(&text);
        if missing(&wanted, &exported).is_empty() || Instant::now() > deadline {
            break (text, exported);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let missing = missing(&wanted, &exported);
    assert!(missing.is_empty(), "{missing:#?}");
    // Not on a dashboard, but how upstream tells which build runs.
    assert!(exported.contains_key("karpenter_build_info"), "{text}");
}

/// One metric of upstream's reference: its type and label names.
#[derive(Debug)]
struct Upstream {
    kind: String,
    labels: BTreeSet<String>,
}

/// The node labels `@node` stands for in the vendored reference.
const NODE_LABELS: &[&str] = &[
    "node_name",
    "phase",
    "managed",
    "nodepool",
    "zone",
    "region",
    "instance_type",
    "arch",
    "os",
    "capacity_type",
];

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// deploy/metrics/upstream-v1.14.txt: name → type and labels.
fn upstream_reference() -> BTreeMap<String, Upstream> {
    let mut out = BTreeMap::new();
    for line in repo_file("deploy/metrics/upstream-v1.14.txt").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        let labels = fields
            .get(2)
            .into_iter()
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .flat_map(|l| match l {
                "@node" => NODE_LABELS
                    .iter()
                    .map(|n| (*n).to_owned())
                    .collect::<Vec<_>>(),
                other => vec![other.to_owned()],
            })
            .collect();
        let upstream = Upstream {
            kind: fields[1].to_owned(),
            labels,
        };
        out.insert(fields[0].to_owned(), upstream);
    }
    out
}

/// deploy/metrics/divergences.txt, by kind of divergence.
#[derive(Debug, Default)]
struct Divergences {
    /// Metrics not exported.
    absent: BTreeMap<String, String>,
    /// (metric, label) pairs not exported.
    labels: BTreeMap<(String, String), String>,
    /// Metrics exported only on an event the run does not produce.
    event_only: BTreeMap<String, String>,
}

fn divergences() -> Divergences {
    let mut out = Divergences::default();
    for line in repo_file("deploy/metrics/divergences.txt").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, reason) = line.split_once('|').unwrap();
        let (name, reason) = (name.trim(), reason.trim().to_owned());
        assert!(!reason.is_empty(), "{name}: a divergence needs its reason");
        if let Some(event) = name.strip_prefix('~') {
            out.event_only.insert(event.to_owned(), reason);
        } else if let Some((metric, label)) = name.split_once('{') {
            let label = label.trim_end_matches('}').to_owned();
            out.labels.insert((metric.to_owned(), label), reason);
        } else {
            out.absent.insert(name.to_owned(), reason);
        }
    }
    out
}

/// metric family → its `# TYPE`.
fn exported_types(text: &str) -> HashMap<String, String> {
    let line = Regex::new(r"(?m)^# TYPE (\S+) (\S+)$").unwrap();
    line.captures_iter(text)
        .map(|c| (c[1].to_owned(), c[2].to_owned()))
        .collect()
}

/// The labels of a family's samples, histogram and summary samples folded into it.
fn family_labels(
    name: &str,
    exported: &BTreeMap<String, BTreeSet<String>>,
) -> Option<BTreeSet<String>> {
    let mut found: Option<BTreeSet<String>> = None;
    for suffix in ["", "_bucket", "_sum", "_count"] {
        if let Some(labels) = exported.get(&format!("{name}{suffix}")) {
            let mut labels = labels.clone();
            labels.remove("le");
            labels.remove("quantile");
            found.get_or_insert_with(BTreeSet::new).extend(labels);
        }
    }
    found
}

/// Every way `text` differs from upstream's reference beyond the divergences listed.
fn reference_problems(
    text: &str,
    upstream: &BTreeMap<String, Upstream>,
    divergences: &Divergences,
    documented: &str,
) -> Vec<String> {
    let exported = exported_series(text);
    let types = exported_types(text);
    let mut problems = Vec::new();
    for (name, metric) in upstream {
        let labels = family_labels(name, &exported);
        if divergences.absent.contains_key(name) {
            if labels.is_some() {
                problems.push(format!("{name} is exported but listed as a divergence"));
            }
            continue;
        }
        let Some(labels) = labels else {
            if divergences.event_only.contains_key(name) {
                // Event-only: the controller must record it somewhere (the generated
                // reference lists every metric its code records).
                if !documented.contains(&format!("| `{name}` | {} |", metric.kind)) {
                    problems.push(format!(
                        "{name} is listed as event-only but the controller never records it \
                         as a {} (docs/reference/metrics.md)",
                        metric.kind
                    ));
                }
            } else {
                problems.push(format!("{name} ({}) is not exported", metric.kind));
            }
            continue;
        };
        match types.get(name) {
            Some(kind) if *kind == metric.kind => {}
            other => problems.push(format!(
                "{name} is exported as {other:?}, upstream's is a {}",
                metric.kind
            )),
        }
        for label in &metric.labels {
            let diverged = divergences
                .labels
                .contains_key(&(name.clone(), label.clone()));
            match (labels.contains(label), diverged) {
                (false, false) => {
                    problems.push(format!("{name} lacks label {label} (has {labels:?})"))
                }
                (true, true) => {
                    problems.push(format!("{name} has label {label}, listed as a divergence"))
                }
                _ => {}
            }
        }
    }
    let listed = divergences
        .absent
        .keys()
        .chain(divergences.event_only.keys())
        .chain(divergences.labels.keys().map(|(m, _)| m));
    for name in listed {
        if !upstream.contains_key(name) {
            problems.push(format!(
                "{name} is listed as a divergence but is not upstream's"
            ));
        }
    }
    problems
}

#[test]
fn every_metric_of_upstreams_reference_is_exported_or_a_listed_divergence() {
    let upstream = upstream_reference();
    assert_eq!(upstream.len(), 126, "the v1.14 reference names 126 metrics");
    let divergences = divergences();
    let documented = repo_file("docs/reference/metrics.md");
    let simulation = Simulation::start();
    // Series recorded as the run's last nodes terminate may trail the report by a
    // reconcile: scrape until nothing is missing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (text, problems) = loop {
        let text = http_get(&simulation.metrics_url);
        let problems = reference_problems(&text, &upstream, &divergences, &documented);
        if problems.is_empty() || Instant::now() > deadline {
            break (text, problems);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(problems.is_empty(), "{problems:#?}\n{text}");
    let exported = upstream.len() - divergences.absent.len() - divergences.event_only.len();
    assert!(
        exported >= 80,
        "{exported} of upstream's metrics exported by the run"
    );
}

#[test]
fn the_reference_check_fails_on_a_missing_metric_or_a_dishonest_divergence() {
    let upstream = upstream_reference();
    let mut divergences = Divergences::default();
    let text = "# TYPE karpenter_nodes_created_total counter\n\
                karpenter_nodes_created_total{nodepool=\"a\",zone=\"z\"} 1\n";
    let only = |name: &str| {
        upstream
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(n, m)| {
                (
                    n.clone(),
                    Upstream {
                        kind: m.kind.clone(),
                        labels: m.labels.clone(),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    let created = only("karpenter_nodes_created_total");
    assert!(reference_problems(text, &created, &divergences, "").is_empty());
    divergences
        .absent
        .insert("karpenter_nodes_created_total".into(), "test".into());
    assert_eq!(
        reference_problems(text, &created, &divergences, "").len(),
        1,
        "exported yet diverged"
    );
    let terminated = only("karpenter_nodes_terminated_total");
    assert_eq!(
        reference_problems(text, &terminated, &Divergences::default(), "").len(),
        1,
        "missing"
    );
    let mut event = Divergences::default();
    event
        .event_only
        .insert("karpenter_nodes_terminated_total".into(), "test".into());
    assert_eq!(
        reference_problems(text, &terminated, &event, "").len(),
        1,
        "never recorded"
    );
    let documented = "| `karpenter_nodes_terminated_total` | counter |";
    assert!(reference_problems(text, &terminated, &event, documented).is_empty());
}

/// Panel queries that cannot return data from kerf alone, with the reason.
const NO_DATA: &[(&str, &str)] = &[(
    "node_time_seconds",
    "node-exporter's node clock, not Karpenter's: upstream's panel needs node-exporter too",
)];

/// Every panel query of `dashboard` (its targets' `expr`), with its title.
fn panel_queries(dashboard: &Value, out: &mut Vec<(String, String)>) {
    match dashboard {
        Value::Object(map) => {
            if let Some(targets) = map.get("targets").and_then(Value::as_array) {
                let title = map.get("title").and_then(Value::as_str).unwrap_or_default();
                for expr in targets.iter().filter_map(|t| t.get("expr")?.as_str()) {
                    out.push((title.to_owned(), expr.to_owned()));
                }
            }
            map.values().for_each(|v| panel_queries(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| panel_queries(v, out)),
        _ => {}
    }
}

/// Percent-encodes `text` for a URL query.
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server scraping the controller, on its own port and storage.
struct Prometheus {
    child: std::process::Child,
    url: String,
    dir: std::path::PathBuf,
}

impl Prometheus {
    /// Starts Prometheus scraping the targets in `dir/targets.json` (written later, when
    /// the controller's port is known) every second, as job `karpenter`.
    fn start(binary: &Path) -> Self {
        let dir = std::env::temp_dir().join(format!("kerf-prometheus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("targets.json"), "[]").unwrap();
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n\
             - job_name: karpenter\n  \
               file_sd_configs: [{{files: ['{}'], refresh_interval: 1s}}]\n",
            dir.join("targets.json").display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    /// Points the scrape at the controller's metrics URL.
    fn target(&self, metrics_url: &str) {
        let address = metrics_url
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap();
        let targets = format!("[{{\"targets\": [\"{address}\"]}}]");
        // Written whole, then renamed: Prometheus never reads half a file.
        let staged = self.dir.join("targets.json.new");
        std::fs::write(&staged, targets).unwrap();
        std::fs::rename(staged, self.dir.join("targets.json")).unwrap();
    }

    /// The result of an instant query, as Prometheus's JSON answer.
    fn query(&self, promql: &str) -> Value {
        let body = http_get(&format!(
            "{}/api/v1/query?query={}",
            self.url,
            url_encode(promql)
        ));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    /// The values of `label` on the series `selector` matches.
    fn label_values(&self, label: &str, selector: &str) -> Vec<String> {
        let body = http_get(&format!(
            "{}/api/v1/label/{label}/values?match[]={}",
            self.url,
            url_encode(selector)
        ));
        let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        answer["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `expr` with the dashboard's template variables as Grafana would fill them: a query
/// variable takes its saved value when the run has it, else its first value (`.*` when it
/// includes all), a custom one its saved value, and the interval variables one minute.
fn substitute(expr: &str, dashboard: &Value, prometheus: &Prometheus) -> String {
    let mut out = expr
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "1m");
    let list = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // Longest names first, so `$controller` is not cut by a shorter prefix.
    let mut variables: Vec<&Value> = list.iter().collect();
    variables.sort_by_key(|v| std::cmp::Reverse(v["name"].as_str().unwrap_or("").len()));
    let label_values = Regex::new(r"label_values\(\s*([^,]+),\s*([a-z_]+)\s*\)").unwrap();
    for variable in variables {
        let name = variable["name"].as_str().unwrap_or_default();
        let token = format!("${name}");
        if !out.contains(&token) {
            continue;
        }
        let saved = match &variable["current"]["value"] {
            Value::String(s) => Some(s.clone()),
            Value::Array(items) => items.first().and_then(Value::as_str).map(str::to_owned),
            _ => None,
        };
        let value = match variable["type"].as_str() {
            Some("query") => {
                let query = variable["query"]["query"]
                    .as_str()
                    .or_else(|| variable["query"].as_str())
                    .unwrap_or_default();
                let found = label_values.captures(query).unwrap();
                let values = prometheus.label_values(&found[2], found[1].trim());
                match saved {
                    Some(all) if all == "$__all" => ".*".to_owned(),
                    Some(saved) if values.contains(&saved) => saved,
                    _ => values.first().cloned().unwrap_or_default(),
                }
            }
            _ => saved.unwrap_or_default(),
        };
        out = out.replace(&token, &value);
    }
    out
}

/// Whether an instant query's answer holds at least one sample with a number.
fn has_data(answer: &Value) -> bool {
    answer["data"]["result"].as_array().is_some_and(|results| {
        results.iter().any(|r| {
            r["value"][1]
                .as_str()
                .is_some_and(|v| v.parse::<f64>().is_ok_and(|v| !v.is_nan()))
        })
    })
}

fn prometheus_binary() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("prometheus"))
            .find(|candidate| candidate.is_file())
    })
}

#[test]
fn every_dashboard_panel_query_returns_data_from_a_real_prometheus() {
    let Some(binary) = prometheus_binary() else {
        eprintln!("skipped: no prometheus on PATH (scripts/test.sh installs Debian's package)");
        return;
    };
    let prometheus = Prometheus::start(&binary);
    let simulation = Simulation::start_then(|url| prometheus.target(url));
    // The run has reported; a few more scrapes give every rate two points after its last
    // event.
    std::thread::sleep(Duration::from_secs(5));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/dashboards");
    let mut empty = Vec::new();
    let mut checked = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let dashboard: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut panels = Vec::new();
        panel_queries(&dashboard, &mut panels);
        for (title, expr) in panels {
            if let Some((_, reason)) = NO_DATA.iter().find(|(m, _)| expr.contains(m)) {
                eprintln!("not checked: {title}: {reason}");
                continue;
            }
            checked += 1;
            // Prometheus may not have scraped everything yet: ask again until the deadline.
            let promql = substitute(&expr, &dashboard, &prometheus);
            let answer = loop {
                let answer = prometheus.query(&promql);
                if has_data(&answer) || Instant::now() > deadline {
                    break answer;
                }
                std::thread::sleep(Duration::from_secs(1));
            };
            if !has_data(&answer) {
                let file = path.file_name().unwrap().to_string_lossy().into_owned();
                empty.push(format!("{file}: {title}: {promql} -> {answer}"));
            }
        }
    }
    drop(simulation);
    assert!(checked >= 35, "only {checked} panel queries found");
    assert!(
        empty.is_empty(),
        "panel queries without data:\n{}",
        empty.join("\n")
    );
}

#[test]
fn disable_cluster_state_observability_leaves_out_the_cluster_state_metrics() {
    let simulation = Simulation::start_with_env("DISABLE_CLUSTER_STATE_OBSERVABILITY", "true");
    let text = http_get(&simulation.metrics_url);
    let exported = exported_series(&text);
    // What upstream's flag turns off: its pod, node and NodePool metrics controllers and
    // the status-condition controllers.
    for name in [
        "karpenter_pods_state",
        "karpenter_pods_startup_duration_seconds",
        "karpenter_nodes_allocatable",
        "karpenter_nodes_total_pod_requests",
        "karpenter_cluster_utilization_percent",
        "karpenter_nodepools_usage",
        "karpenter_nodepools_limit",
        "karpenter_nodepools_cost_total",
        "operator_nodeclaim_status_condition_count",
        "operator_nodeclaim_status_condition_transitions_total",
        "operator_node_status_condition_count",
        "operator_status_condition_count",
    ] {
        assert!(
            family_labels(name, &exported).is_none(),
            "{name} exported with DISABLE_CLUSTER_STATE_OBSERVABILITY=true"
        );
    }
    // What it leaves on: cluster state's own, the controllers' and the provider's.
    for name in [
        "karpenter_cluster_state_node_count",
        "karpenter_cluster_state_synced",
        "karpenter_nodeclaims_created_total",
        "karpenter_cloudprovider_instance_type_offering_available",
        "controller_runtime_reconcile_total",
    ] {
        assert!(exported.contains_key(name), "{name} missing:\n{text}");
    }
}
