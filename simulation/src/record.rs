//! `kerf record`: a live cluster's history as a replay log ([`crate::replay::log`]). Five
//! read-only list + watch streams (Deployments, Jobs, NodePools, EC2NodeClasses, Nodes) feed
//! one bounded channel; the recorder turns what changed into kubereplay events (a Deployment
//! seen → `create`, its replicas changed → `scale`, gone → `delete`; a Job seen → `create`,
//! with `durationSeconds` once it completes), keeps the NodePools and EC2NodeClasses as a
//! whole set at the start and at each change, and samples the nodes (instance type,
//! capacity type, zone) on a period. Workloads are stripped as upstream's sanitizer strips
//! them, names kept: what scheduling reads stays (see [`strip_pod_spec`]), everything else
//! — env, commands, volumes, secrets, service accounts — is dropped. The log lives in memory
//! until [`Recorder::finish`], which a stop (Ctrl-C, `--for`) calls.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::replay::log::{EXTENSIONS_VERSION, Extensions, NodeSample, SampledNode, Setup};

/// Changes waiting for the recorder. The watch streams wait when it is full (backpressure on
/// the streams, nothing dropped); the recorder does no I/O, so it is never behind for long.
const CHANGES_CAPACITY: usize = 1024;

/// How often the recorder looks at whether the NodePool set changed (changes within one look
/// make one recorded set).
const SETUP_COALESCE: Duration = Duration::from_secs(1);

/// The kinds watched: group, version, kind, plural.
const WATCHED: [(&str, &str, &str, &str); 5] = [
    ("apps", "v1", "Deployment", "deployments"),
    ("batch", "v1", "Job", "jobs"),
    ("karpenter.sh", "v1", "NodePool", "nodepools"),
    ("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses"),
    ("", "v1", "Node", "nodes"),
];

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("encoding the log: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// How a recording is made.
#[derive(Debug, Clone)]
pub struct Options {
    /// The cluster's name, written into the log.
    pub cluster: String,
    /// How often the nodes are sampled.
    pub node_sample_every: Duration,
}

/// One change from a watch stream; a `Null` object says its initial list is complete.
struct Change {
    kind: &'static str,
    object: Value,
    deleted: bool,
}

/// Records until `stop` completes and returns the log (as JSON, ready to write).
pub async fn record(
    client: kube::Client,
    options: Options,
    stop: impl Future<Output = ()>,
) -> Value {
    let (sender, mut changes) = mpsc::channel(CHANGES_CAPACITY);
    let watches: Vec<_> = WATCHED
        .iter()
        .map(|(group, version, kind, plural)| {
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            tokio::spawn(watch(api, kind, sender.clone()))
        })
        .collect();
    drop(sender);
    let mut recorder = Recorder::new(options.cluster.clone(), Timestamp::now());
    let mut samples = tokio::time::interval(options.node_sample_every);
    let mut setup = tokio::time::interval(SETUP_COALESCE);
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            change = changes.recv() => match change {
                Some(change) => recorder.observe(change.kind, &change.object, change.deleted, Timestamp::now()),
                None => break,
            },
            _ = samples.tick() => recorder.sample_nodes(Timestamp::now()),
            _ = setup.tick() => recorder.flush_setup(),
        }
    }
    for watch in watches {
        watch.abort();
    }
    recorder.finish(Timestamp::now())
}

/// Forwards one kind's watch events; a failed watch is retried with backoff (and logged).
async fn watch(api: Api<DynamicObject>, kind: &'static str, changes: mpsc::Sender<Change>) {
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let (object, deleted): (Value, bool) = match event {
            Ok(Event::Apply(object) | Event::InitApply(object)) => {
                match serde_json::to_value(&object) {
                    Ok(object) => (object, false),
                    Err(_) => continue,
                }
            }
            Ok(Event::Delete(object)) => match serde_json::to_value(&object) {
                Ok(object) => (object, true),
                Err(_) => continue,
            },
            Ok(Event::InitDone) => (Value::Null, false),
            Ok(Event::Init) => continue,
            Err(error) => {
                eprintln!("kerf record: watching {kind}s: {error}; retrying");
                continue;
            }
        };
        if changes
            .send(Change {
                kind,
                object,
                deleted,
            })
            .await
            .is_err()
        {
            return;
        }
    }
}

/// What has been recorded so far.
pub struct Recorder {
    cluster: String,
    start: Timestamp,
    events: Vec<Value>,
    /// Live Deployments' replicas.
    deployments: BTreeMap<String, u64>,
    /// Jobs seen: the index of their create event, and whether their duration is known.
    jobs: BTreeMap<String, (usize, bool)>,
    /// The current NodePools and EC2NodeClasses, by kind and name.
    setup: BTreeMap<(String, String), Value>,
    setup_changed: Option<Timestamp>,
    /// The setup kinds whose initial list is complete: the first set waits for both.
    listed: Vec<String>,
    node_pools: Vec<Setup>,
    nodes: BTreeMap<String, SampledNode>,
    node_samples: Vec<NodeSample>,
}

impl Recorder {
    pub fn new(cluster: String, start: Timestamp) -> Self {
        Self {
            cluster,
            start,
            events: Vec::new(),
            deployments: BTreeMap::new(),
            jobs: BTreeMap::new(),
            setup: BTreeMap::new(),
            setup_changed: None,
            listed: Vec::new(),
            node_pools: Vec::new(),
            nodes: BTreeMap::new(),
            node_samples: Vec::new(),
        }
    }

    /// Takes in one watched change seen at `now`.
    pub fn observe(&mut self, kind: &str, object: &Value, deleted: bool, now: Timestamp) {
        if object.is_null() {
            self.listed.push(kind.to_owned());
            // The first set is recorded once both lists are in, even an empty one; a
            // watch's later re-list records nothing unless the set changed.
            if matches!(kind, "NodePool" | "EC2NodeClass") && self.node_pools.is_empty() {
                self.setup_changed = self.setup_changed.or(Some(now));
            }
            return;
        }
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let key = format!("{namespace}/{name}");
        let stamp = now.to_string();
        match (kind, deleted) {
            ("Deployment", false) => {
                let replicas = object["spec"]["replicas"].as_u64().unwrap_or(1);
                match self.deployments.insert(key.clone(), replicas) {
                    None => self
                        .events
                        .push(json!({"type": "create", "kind": "Deployment",
                        "key": key, "deployment": strip_workload(object, "Deployment"),
                        "timestamp": stamp})),
                    Some(before) if before != replicas => self.events.push(json!({
                        "type": "scale", "kind": "Deployment", "key": key,
                        "replicas": replicas, "timestamp": stamp})),
                    Some(_) => {}
                }
            }
            ("Deployment", true) if self.deployments.remove(&key).is_some() => {
                self.events
                    .push(json!({"type": "delete", "kind": "Deployment",
                    "key": key, "timestamp": stamp}));
            }
            ("Job", false) => self.job(&key, object, &stamp),
            ("Job", true) => {
                // A Job deleted before it finished stops its pods; one that finished is only
                // cleaned up.
                if let Some((_, false)) = self.jobs.remove(&key) {
                    self.events.push(json!({"type": "delete", "kind": "Job",
                        "key": key, "timestamp": stamp}));
                }
            }
            ("NodePool" | "EC2NodeClass", _) => {
                let id = (kind.to_owned(), name.to_owned());
                let changed = if deleted {
                    self.setup.remove(&id).is_some()
                } else {
                    let kept = json!({"apiVersion": object["apiVersion"], "kind": kind,
                        "metadata": present(json!({"name": name,
                            "labels": object["metadata"]["labels"],
                            "annotations": karpenter_only(&object["metadata"]["annotations"])})),
                        "spec": object["spec"]});
                    self.setup.insert(id, kept.clone()) != Some(kept)
                };
                if changed {
                    self.setup_changed = self.setup_changed.or(Some(now));
                }
            }
            ("Node", false) => {
                let labels = &object["metadata"]["labels"];
                let label = |key: &str| labels[key].as_str().map(str::to_owned);
                let capacity_type = label("karpenter.sh/capacity-type")
                    .or_else(|| {
                        label("eks.amazonaws.com/capacityType")
                            .map(|c| c.to_lowercase().replace('_', "-"))
                    })
                    .unwrap_or_else(|| "on-demand".to_owned());
                if let Some(instance_type) = label("node.kubernetes.io/instance-type")
                    .or_else(|| label("beta.kubernetes.io/instance-type"))
                {
                    self.nodes.insert(
                        name.to_owned(),
                        SampledNode {
                            instance_type,
                            capacity_type,
                            zone: label("topology.kubernetes.io/zone").unwrap_or_default(),
                        },
                    );
                }
            }
            ("Node", true) => {
                self.nodes.remove(name);
            }
            _ => {}
        }
    }

    fn job(&mut self, key: &str, object: &Value, stamp: &str) {
        let status = &object["status"];
        let finished = |s: &Value| s["completionTime"].is_string() || failed(s);
        match self.jobs.get(key).copied() {
            None => {
                // A Job that finished before the recording started is history, not load.
                if finished(status) {
                    return;
                }
                self.jobs.insert(key.to_owned(), (self.events.len(), false));
                self.events
                    .push(json!({"type": "create", "kind": "Job", "key": key,
                    "job": strip_workload(object, "Job"), "timestamp": stamp}));
            }
            Some((index, false)) if finished(status) => {
                if let Some(seconds) = pod_seconds(object) {
                    self.events[index]["durationSeconds"] = json!(seconds);
                }
                self.jobs.insert(key.to_owned(), (index, true));
            }
            Some(_) => {}
        }
    }

    /// Records the NodePool set if it changed since the last flush.
    pub fn flush_setup(&mut self) {
        let listed = ["NodePool", "EC2NodeClass"]
            .iter()
            .all(|kind| self.listed.iter().any(|l| l == kind));
        if !listed {
            return;
        }
        if let Some(at) = self.setup_changed.take() {
            let at = if self.node_pools.is_empty() {
                self.start
            } else {
                at
            };
            self.node_pools.push(Setup {
                at,
                objects: self.setup.values().cloned().collect(),
            });
        }
    }

    pub fn sample_nodes(&mut self, now: Timestamp) {
        self.node_samples.push(NodeSample {
            at: now,
            nodes: self.nodes.values().cloned().collect(),
        });
    }

    /// The log, ending at `end`.
    pub fn finish(mut self, end: Timestamp) -> Value {
        self.listed = vec!["NodePool".to_owned(), "EC2NodeClass".to_owned()];
        self.flush_setup();
        self.sample_nodes(end);
        let extensions = Extensions {
            version: EXTENSIONS_VERSION,
            start: Some(self.start),
            end: Some(end),
            node_pools: self.node_pools,
            node_samples: self.node_samples,
        };
        json!({"cluster": self.cluster, "captured": end.to_string(), "events": self.events,
            "kerf": extensions})
    }
}

/// Writes `log` to `path` (through a temporary file beside it, so a reader never sees half).
pub fn write(path: &std::path::Path, log: &Value) -> Result<(), RecordError> {
    let bytes = serde_json::to_vec_pretty(log)?;
    let partial = path.with_extension("partial");
    let shown = path.display().to_string();
    std::fs::write(&partial, bytes)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|source| RecordError::Write {
            path: shown,
            source,
        })
}

fn failed(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Failed" && c["status"] == "True")
}

/// How long each of a finished Job's pods ran: its run time over its waves of
/// `parallelism` pods (`completions` / `parallelism`, rounded up).
fn pod_seconds(job: &Value) -> Option<u64> {
    let started: Timestamp = job["status"]["startTime"].as_str()?.parse().ok()?;
    let done: Timestamp = job["status"]["completionTime"].as_str()?.parse().ok()?;
    let total = done.duration_since(started).as_secs().max(0);
    let parallelism = job["spec"]["parallelism"].as_i64().unwrap_or(1).max(1);
    let completions = job["spec"]["completions"]
        .as_i64()
        .unwrap_or(parallelism)
        .max(1);
    let waves = (completions + parallelism - 1) / parallelism;
    u64::try_from(total / waves).ok()
}

/// Only the `karpenter.sh/` annotations (the ones that change what Karpenter does).
fn karpenter_only(annotations: &Value) -> Value {
    let kept: Map<String, Value> = annotations
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("karpenter.sh/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Value::Object(kept)
}

/// A Deployment or Job as the log keeps it: name, namespace, labels, Karpenter's annotations,
/// and the spec fields that make pods (replicas, selector; a Job's parallelism, completions,
/// completion mode, suspend) with the pod template stripped by [`strip_pod_spec`].
pub fn strip_workload(object: &Value, kind: &str) -> Value {
    let meta = &object["metadata"];
    let spec = &object["spec"];
    let template = &spec["template"];
    let mut kept_spec = Map::new();
    let fields: &[&str] = if kind == "Job" {
        &[
            "parallelism",
            "completions",
            "completionMode",
            "suspend",
            "backoffLimit",
        ]
    } else {
        &["replicas", "selector"]
    };
    for field in fields {
        if !spec[*field].is_null() {
            kept_spec.insert((*field).to_owned(), spec[*field].clone());
        }
    }
    let mut labels = template["metadata"]["labels"].clone();
    if kind == "Job"
        && let Some(labels) = labels.as_object_mut()
    {
        // The Job controller's labels name the recorded cluster's Job by uid.
        labels
            .retain(|k, _| !k.contains("controller-uid") && !k.starts_with("batch.kubernetes.io/"));
    }
    kept_spec.insert(
        "template".to_owned(),
        json!({"metadata": present(json!({"labels": labels,
                "annotations": karpenter_only(&template["metadata"]["annotations"])})),
            "spec": strip_pod_spec(&template["spec"])}),
    );
    json!({"metadata": present(json!({"name": meta["name"], "namespace": meta["namespace"],
            "labels": meta["labels"], "annotations": karpenter_only(&meta["annotations"])})),
        "spec": kept_spec})
}

/// `object` without its null and empty-object fields.
fn present(mut object: Value) -> Value {
    if let Some(fields) = object.as_object_mut() {
        fields.retain(|_, v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()));
    }
    object
}

/// What scheduling reads of a pod spec: node selector, affinity, tolerations, topology
/// spread, priority class, scheduler name, runtime class, overhead, restart policy, and each
/// container's name, resources and host ports (the image replaced by `pause`). Env, commands,
/// arguments, volumes, secrets, service accounts and security contexts are dropped.
pub fn strip_pod_spec(spec: &Value) -> Value {
    let mut kept = Map::new();
    for field in [
        "nodeSelector",
        "affinity",
        "tolerations",
        "topologySpreadConstraints",
        "priorityClassName",
        "schedulerName",
        "runtimeClassName",
        "overhead",
        "restartPolicy",
    ] {
        if !spec[field].is_null() {
            kept.insert(field.to_owned(), spec[field].clone());
        }
    }
    for list in ["containers", "initContainers"] {
        let Some(containers) = spec[list].as_array() else {
            continue;
        };
        let stripped: Vec<Value> = containers
            .iter()
            .map(|c| {
                let mut container = json!({"name": c["name"], "image": "registry.k8s.io/pause:3.9",
                    "resources": c["resources"]});
                let host_ports: Vec<Value> = c["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["hostPort"].is_number())
                    .cloned()
                    .collect();
                if !host_ports.is_empty() {
                    container["ports"] = Value::Array(host_ports);
                }
                if !c["restartPolicy"].is_null() {
                    container["restartPolicy"] = c["restartPolicy"].clone();
                }
                container
            })
            .collect();
        kept.insert(list.to_owned(), Value::Array(stripped));
    }
    Value::Object(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + seconds).expect("a time")
    }

    fn deployment(replicas: u64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u",
                "annotations": {"deployment.kubernetes.io/revision": "3", "karpenter.sh/do-not-disrupt": "true"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"serviceAccountName": "web", "imagePullSecrets": [{"name": "regcred"}],
                        "nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                        "volumes": [{"name": "s", "secret": {"secretName": "db"}}],
                        "containers": [{"name": "app", "image": "shop/web:1.2",
                            "command": ["serve"], "env": [{"name": "DB_PASSWORD", "value": "hunter2"}],
                            "envFrom": [{"secretRef": {"name": "db"}}],
                            "ports": [{"containerPort": 80}, {"containerPort": 9100, "hostPort": 9100}],
                            "resources": {"requests": {"cpu": "1"}}}]}}},
            "status": {"replicas": replicas}})
    }

    #[test]
    fn workloads_keep_what_scheduling_reads_and_lose_secrets_and_env() {
        let stripped = strip_workload(&deployment(3), "Deployment");
        let text = stripped.to_string();
        for gone in [
            "hunter2",
            "DB_PASSWORD",
            "regcred",
            "secretName",
            "serve",
            "shop/web:1.2",
            "revision",
            "\"uid\"",
        ] {
            assert!(!text.contains(gone), "{gone} left in {text}");
        }
        let spec = &stripped["spec"]["template"]["spec"];
        assert_eq!(spec["nodeSelector"]["karpenter.sh/capacity-type"], "spot");
        assert_eq!(spec["containers"][0]["resources"]["requests"]["cpu"], "1");
        assert_eq!(
            spec["containers"][0]["ports"],
            json!([{"containerPort": 9100, "hostPort": 9100}])
        );
        assert_eq!(
            stripped["metadata"]["annotations"],
            json!({"karpenter.sh/do-not-disrupt": "true"})
        );
        assert_eq!(stripped["spec"]["replicas"], 3);
    }

    #[test]
    fn changes_become_kubereplay_events_and_the_log_reads_back() {
        let mut recorder = Recorder::new("prod".into(), at(0));
        let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "resourceVersion": "1"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}}});
        recorder.observe("NodePool", &pool, false, at(0));
        recorder.observe("NodePool", &Value::Null, false, at(0));
        recorder.flush_setup();
        assert!(
            recorder.node_pools.is_empty(),
            "waits for the classes' list"
        );
        recorder.observe("EC2NodeClass", &Value::Null, false, at(0));
        recorder.flush_setup();
        recorder.observe("Deployment", &deployment(2), false, at(0));
        recorder.observe("Deployment", &deployment(2), false, at(5));
        recorder.observe("Deployment", &deployment(6), false, at(10));
        recorder.observe("Node", &json!({"metadata": {"name": "n1", "labels": {
            "node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "eu-west-1a",
            "eks.amazonaws.com/capacityType": "SPOT"}}}), false, at(11));
        recorder.sample_nodes(at(12));
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "nightly", "namespace": "batch"},
            "spec": {"parallelism": 2, "completions": 4, "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "i"}]}}}});
        recorder.observe("Job", &job, false, at(20));
        let mut done = job.clone();
        done["status"] =
            json!({"startTime": at(21).to_string(), "completionTime": at(621).to_string()});
        recorder.observe("Job", &done, false, at(621));
        let mut changed = pool.clone();
        changed["spec"]["limits"] = json!({"cpu": "100"});
        recorder.observe("NodePool", &changed, false, at(700));
        recorder.flush_setup();
        recorder.observe("Deployment", &deployment(6), true, at(800));
        let value = recorder.finish(at(900));
        let log = crate::replay::log::parse(&value).expect("reads back");
        assert!(log.skipped.is_empty(), "{:?}", log.skipped);
        let kinds: Vec<String> = value["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["type"].as_str().unwrap_or(""),
                    e["kind"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "create Deployment",
                "scale Deployment",
                "create Job",
                "delete Deployment"
            ]
        );
        assert_eq!(
            value["events"][2]["durationSeconds"], 300,
            "600 s over two waves"
        );
        assert_eq!(log.extensions.node_pools.len(), 2);
        assert_eq!(
            log.extensions.node_pools[1].objects[0]["spec"]["limits"]["cpu"],
            "100"
        );
        assert_eq!(
            log.extensions.node_pools[0].objects[0]["metadata"].get("resourceVersion"),
            None
        );
        assert_eq!(
            log.extensions.node_samples[0].nodes,
            [SampledNode {
                instance_type: "m5.large".into(),
                capacity_type: "spot".into(),
                zone: "eu-west-1a".into()
            }]
        );
        assert_eq!(log.span(), Duration::from_secs(900));
    }
}
