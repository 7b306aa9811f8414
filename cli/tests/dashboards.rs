//! Upstream Karpenter's Grafana dashboards (deploy/dashboards) chart kerf unchanged: the
//! controller runs in the simulation (`kerf simulate --kubeconfig-out`, which keeps it up
//! and prints its metrics URL), its `/metrics` is scraped, and every series a dashboard
//! queries must be there with every label the query selects or groups by. The run scales
//! its workload down (`--scale-down`), so disruption decides, drains and terminates nodes
//! and its series (decisions, eligible nodes, terminations) are required like the rest.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
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
    response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// A pool with limits (for the usage/limit panels) and a workload with a DaemonSet (for
/// the daemon requests panels): what a cluster the dashboards chart has. `spread` wants a
/// node per replica, so the scale-down empties nodes for disruption to take.
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
      containers: [{name: agent, image: agent, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
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
      containers: [{name: web, image: web, resources: {requests: {cpu: 500m, memory: 512Mi}}}]
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
        let dir = std::env::temp_dir().join(format!("kerf-dashboards-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pools.yaml"), NODEPOOLS).unwrap();
        std::fs::write(dir.join("workload.yaml"), WORKLOAD).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
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
