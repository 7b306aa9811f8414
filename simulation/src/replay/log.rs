//! The replay log: upstream kubereplay's JSON (`{cluster, captured, events}`, each event
//! `{type, kind, key, deployment | job, replicas, timestamp}`), read unchanged, plus kerf's
//! extensions, which kubereplay's reader ignores: `durationSeconds` on a Job's create event,
//! and a top-level `kerf` object with the recording's window, the NodePools and
//! EC2NodeClasses at its start and at each change, and samples of the cluster's own nodes.
//! Reading checks each event on its own: a bad one (unknown type or kind, a malformed
//! workload, a scale or delete before its create) is skipped and named with its index and
//! key, the rest replay. Events replay in time order, as kubereplay's engine sorts them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::cluster::inventory;
use kerf::manifest::{self, Object};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The version of kerf's extensions this reader understands and `kerf record` writes.
pub const EXTENSIONS_VERSION: u32 = 1;

/// How long a Job's pod runs when the log does not say (no `durationSeconds`, no `sleep N`
/// command): five minutes of replay time.
pub const DEFAULT_JOB_DURATION: Duration = Duration::from_secs(300);

/// A log that cannot be replayed at all (one bad event is not that: see [`Skipped`]).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {what}")]
    Shape { path: String, what: String },
}

/// An event left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// Its position in the file's `events`.
    pub index: usize,
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "events[{}] {}: {}", self.index, self.key, self.reason)
    }
}

/// What an event does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Creates the Deployment (a checked `apps/v1` object, metadata cleaned).
    CreateDeployment(Value),
    ScaleDeployment(u32),
    DeleteDeployment,
    /// Runs the Job's pods to completion, each for `duration` of replay time.
    CreateJob {
        job: Value,
        duration: Duration,
    },
    DeleteJob,
}

/// One event to replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub index: usize,
    pub at: Timestamp,
    /// `namespace/name`.
    pub key: String,
    pub action: Action,
}

impl Event {
    pub fn namespace(&self) -> &str {
        self.key.split_once('/').map_or("default", |(ns, _)| ns)
    }

    pub fn name(&self) -> &str {
        self.key
            .split_once('/')
            .map_or(self.key.as_str(), |(_, n)| n)
    }
}

/// The NodePools and EC2NodeClasses in effect from `at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    #[serde(rename = "timestamp")]
    pub at: Timestamp,
    pub objects: Vec<Value>,
}

/// The cluster's own nodes at `at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    #[serde(rename = "timestamp")]
    pub at: Timestamp,
    pub nodes: Vec<SampledNode>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SampledNode {
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
}

/// kerf's top-level extensions (`kerf` in the file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Extensions {
    pub version: u32,
    /// When the recording started and ended (the replay covers this window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<Timestamp>,
    #[serde(default)]
    pub node_pools: Vec<Setup>,
    #[serde(default)]
    pub node_samples: Vec<NodeSample>,
}

/// A log read and checked: its events in time order, what was skipped, and kerf's
/// extensions (empty for a kubereplay log).
#[derive(Debug, Clone, Default)]
pub struct ReplayLog {
    pub cluster: String,
    pub events: Vec<Event>,
    pub skipped: Vec<Skipped>,
    /// Events the file lists before an earlier-stamped one: replayed in time order.
    pub reordered: usize,
    pub extensions: Extensions,
}

impl ReplayLog {
    /// Where the replay's clock starts: the recording's start, else the first event.
    pub fn start(&self) -> Option<Timestamp> {
        let first = self.events.first().map(|e| e.at);
        let setup = self.extensions.node_pools.first().map(|s| s.at);
        [self.extensions.start, first, setup]
            .into_iter()
            .flatten()
            .min()
    }

    /// Where it ends: the recording's end, else the last event or node sample.
    pub fn end(&self) -> Option<Timestamp> {
        let last = self.events.last().map(|e| e.at);
        let sample = self.extensions.node_samples.last().map(|s| s.at);
        [self.extensions.end, last, sample]
            .into_iter()
            .flatten()
            .max()
    }

    /// The replay-time span of the log.
    pub fn span(&self) -> Duration {
        match (self.start(), self.end()) {
            (Some(start), Some(end)) => offset(start, end),
            _ => Duration::ZERO,
        }
    }
}

/// `to − from`, zero when `to` is earlier.
pub fn offset(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// Reads the log at `path`.
pub fn read(path: &Path) -> Result<ReplayLog, LogError> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|source| LogError::Read {
        path: shown.clone(),
        source,
    })?;
    let value: Value = serde_json::from_slice(&text).map_err(|source| LogError::Json {
        path: shown.clone(),
        source,
    })?;
    parse(&value).map_err(|what| LogError::Shape { path: shown, what })
}

/// Checks a log already parsed as JSON; the error is a problem with the whole file.
pub fn parse(value: &Value) -> Result<ReplayLog, String> {
    let Some(top) = value.as_object() else {
        return Err(format!(
            "the log is a JSON {}, not an object with `events`",
            manifest::json_type(value)
        ));
    };
    let events = match top.get("events") {
        Some(Value::Array(events)) => events.as_slice(),
        Some(Value::Null) | None => &[],
        Some(other) => {
            return Err(format!(
                "`events` is a JSON {}, not a list",
                manifest::json_type(other)
            ));
        }
    };
    let extensions = match top.get("kerf") {
        None | Some(Value::Null) => Extensions::default(),
        Some(kerf) => {
            let extensions: Extensions = serde_path_to_error::deserialize(kerf)
                .map_err(|e| format!("kerf.{}: {}", e.path(), e.inner()))?;
            if extensions.version > EXTENSIONS_VERSION {
                return Err(format!(
                    "kerf.version {} is newer than this kerf reads ({EXTENSIONS_VERSION})",
                    extensions.version
                ));
            }
            extensions
        }
    };
    let mut log = ReplayLog {
        cluster: top
            .get("cluster")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        extensions,
        ..ReplayLog::default()
    };
    let mut read = Vec::new();
    let mut latest: Option<Timestamp> = None;
    for (index, raw) in events.iter().enumerate() {
        match decode(index, raw) {
            Ok(event) => {
                if latest.is_some_and(|l| event.at < l) {
                    log.reordered += 1;
                }
                latest = latest.max(Some(event.at));
                read.push(event);
            }
            Err(skipped) => log.skipped.push(skipped),
        }
    }
    // Stable: events with one timestamp keep the file's order.
    read.sort_by_key(|e| e.at);
    let mut live: BTreeMap<(bool, String), usize> = BTreeMap::new();
    for event in read {
        match sequence(&mut live, &event) {
            Ok(()) => log.events.push(event),
            Err(reason) => log.skipped.push(Skipped {
                index: event.index,
                key: event.key.clone(),
                reason,
            }),
        }
    }
    log.skipped.sort_by_key(|s| s.index);
    Ok(log)
}

/// Whether `event` makes sense after the ones kept so far (`live`: the workloads created and
/// not deleted, by `(is a Job, key)`, with the index of their create).
fn sequence(live: &mut BTreeMap<(bool, String), usize>, event: &Event) -> Result<(), String> {
    let (job, kind) = match event.action {
        Action::CreateJob { .. } | Action::DeleteJob => (true, "Job"),
        _ => (false, "Deployment"),
    };
    let id = (job, event.key.clone());
    match &event.action {
        Action::CreateDeployment(_) | Action::CreateJob { .. } => {
            if let Some(created) = live.get(&id) {
                return Err(format!(
                    "create of a {kind} already created by events[{created}] and not deleted"
                ));
            }
            live.insert(id, event.index);
        }
        Action::ScaleDeployment(_) => {
            if !live.contains_key(&id) {
                return Err(format!(
                    "out of order: scale of a {kind} not created before it"
                ));
            }
        }
        Action::DeleteDeployment | Action::DeleteJob => {
            if live.remove(&id).is_none() {
                return Err(format!(
                    "out of order: delete of a {kind} not created before it"
                ));
            }
        }
    }
    Ok(())
}

fn decode(index: usize, raw: &Value) -> Result<Event, Skipped> {
    let key = raw["key"].as_str().unwrap_or_default().to_owned();
    let skip = |reason: String| Skipped {
        index,
        key: if key.is_empty() {
            "<no key>".to_owned()
        } else {
            key.clone()
        },
        reason,
    };
    if !raw.is_object() {
        return Err(skip(format!(
            "an event is an object, not a JSON {}",
            manifest::json_type(raw)
        )));
    }
    if key.is_empty() {
        return Err(skip("no `key` (namespace/name)".to_owned()));
    }
    let at: Timestamp = raw["timestamp"]
        .as_str()
        .ok_or_else(|| skip("no `timestamp`".to_owned()))?
        .parse()
        .map_err(|e| skip(format!("`timestamp`: {e}")))?;
    let kind = raw["kind"].as_str().unwrap_or_default();
    let action = match (raw["type"].as_str().unwrap_or_default(), kind) {
        ("create", "Deployment") => Action::CreateDeployment(
            workload(&raw["deployment"], "Deployment", &key).map_err(skip)?,
        ),
        ("create", "Job") => {
            let job = workload(&raw["job"], "Job", &key).map_err(skip)?;
            let duration = match &raw["durationSeconds"] {
                Value::Null => sleep_seconds(&job).unwrap_or(DEFAULT_JOB_DURATION),
                seconds => seconds
                    .as_f64()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        skip(format!(
                            "`durationSeconds` {seconds} is not a number of seconds"
                        ))
                    })?,
            };
            Action::CreateJob { job, duration }
        }
        ("scale", "Deployment") => {
            let replicas = raw["replicas"]
                .as_u64()
                .and_then(|r| u32::try_from(r).ok())
                .ok_or_else(|| {
                    skip(format!(
                        "scale with `replicas` {} (a count is wanted)",
                        raw["replicas"]
                    ))
                })?;
            Action::ScaleDeployment(replicas)
        }
        ("delete", "Deployment") => Action::DeleteDeployment,
        ("delete", "Job") => Action::DeleteJob,
        ("create" | "scale" | "delete", other) => {
            return Err(skip(format!(
                "unknown kind {other:?} for {} (Deployment or Job)",
                raw["type"]
            )));
        }
        (other, _) => {
            return Err(skip(format!(
                "unknown event type {other:?} (create, scale or delete)"
            )));
        }
    };
    Ok(Event {
        index,
        at,
        key,
        action,
    })
}

/// The workload of a create event, cleaned of what a captured object carries that a new one
/// must not (uid, resourceVersion, owners, status...), named by the event's key, and checked
/// as `kerf plan` checks a workload.
fn workload(raw: &Value, kind: &str, key: &str) -> Result<Value, String> {
    let field = if kind == "Job" { "job" } else { "deployment" };
    if !raw.is_object() {
        return Err(format!("create {kind} without its `{field}` object"));
    }
    let mut value = raw.clone();
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    value["apiVersion"] = json!(if kind == "Job" { "batch/v1" } else { "apps/v1" });
    value["kind"] = json!(kind);
    let meta = &mut value["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    if let Some(meta) = meta.as_object_mut() {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "ownerReferences",
            "finalizers",
            "managedFields",
            "generation",
            "generateName",
        ] {
            meta.remove(field);
        }
        meta.insert("name".into(), json!(name));
        meta.insert("namespace".into(), json!(namespace));
    }
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
    }
    if kind == "Job" {
        // The selector and its controller-uid label were the captured cluster's.
        if let Some(spec) = value["spec"].as_object_mut() {
            spec.remove("selector");
            spec.remove("manualSelector");
        }
    }
    check(&value, kind, key)?;
    Ok(value)
}

/// The Job's pod duration from a `sleep N` command (kubereplay's own demo Jobs), if any.
fn sleep_seconds(job: &Value) -> Option<Duration> {
    let containers = job["spec"]["template"]["spec"]["containers"].as_array()?;
    containers.iter().find_map(|c| {
        let words: Vec<&str> = c["command"]
            .as_array()
            .into_iter()
            .chain(c["args"].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .flat_map(str::split_whitespace)
            .collect();
        let at = words.iter().position(|w| *w == "sleep")?;
        words
            .get(at + 1)?
            .parse::<u64>()
            .ok()
            .map(Duration::from_secs)
    })
}

/// Reads the workload as `kerf plan` would, so a malformed one is caught before the replay.
fn check(value: &Value, kind: &str, key: &str) -> Result<(), String> {
    let text = serde_json::to_string(value).map_err(|e| e.to_string())?;
    let objects = parse_workload(&text, kind, key)?;
    inventory::inventory(&objects).map_err(|problems| {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    Ok(())
}

/// The workload's text read with the manifest reader (its source names the event).
pub fn parse_workload(text: &str, kind: &str, key: &str) -> Result<Vec<Object>, String> {
    manifest::parse_all(text, &format!("{kind} {key}")).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: u32) -> Value {
        json!({"metadata": {"name": "web", "namespace": "shop", "uid": "u-1",
                "resourceVersion": "7"},
            "spec": {"replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "i",
                        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]}}},
            "status": {"replicas": 3}})
    }

    #[test]
    fn events_replay_in_time_order_and_bad_ones_are_named_and_skipped() {
        let log = parse(&json!({"cluster": "prod", "captured": "2026-01-01T00:00:00Z", "events": [
            {"type": "create", "kind": "Deployment", "key": "shop/web",
                "deployment": deployment(2), "timestamp": "2026-01-01T00:00:00Z"},
            {"type": "scale", "kind": "Deployment", "key": "shop/web", "replicas": 5,
                "timestamp": "2026-01-01T00:10:00Z"},
            {"type": "scale", "kind": "Deployment", "key": "shop/web", "replicas": 4,
                "timestamp": "2026-01-01T00:05:00Z"},
            {"type": "restart", "kind": "Deployment", "key": "shop/web",
                "timestamp": "2026-01-01T00:06:00Z"},
            {"type": "scale", "kind": "Deployment", "key": "shop/api", "replicas": 1,
                "timestamp": "2026-01-01T00:07:00Z"},
            {"type": "create", "kind": "Job", "key": "batch/bad",
                "job": {"spec": {"template": {"spec": {"containers": [{"name": "c",
                    "resources": {"requests": {"cpu": "lots"}}}]}}}},
                "timestamp": "2026-01-01T00:08:00Z"},
            {"type": "create", "kind": "Job", "key": "batch/report", "durationSeconds": 90,
                "job": {"spec": {"parallelism": 2, "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "i"}]}}}},
                "timestamp": "2026-01-01T00:09:00Z"},
            {"type": "delete", "kind": "Deployment", "key": "shop/web",
                "timestamp": "2026-01-01T00:20:00Z"}
        ]}))
        .expect("a log");
        assert_eq!(log.cluster, "prod");
        let order: Vec<usize> = log.events.iter().map(|e| e.index).collect();
        assert_eq!(order, [0, 2, 6, 1, 7], "time order, not file order");
        assert_eq!(
            log.reordered, 3,
            "00:05, 00:07 and 00:09 listed after 00:10"
        );
        let skipped: Vec<String> = log.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(skipped[0].starts_with("events[3] shop/web: unknown event type \"restart\""));
        assert!(
            skipped[1].starts_with("events[4] shop/api: out of order: scale"),
            "{skipped:?}"
        );
        assert!(
            skipped[2].starts_with("events[5] batch/bad:") && skipped[2].contains("cpu"),
            "{skipped:?}"
        );
        let Action::CreateDeployment(created) = &log.events[0].action else {
            panic!("a create first: {:?}", log.events[0]);
        };
        assert_eq!(created["metadata"]["uid"], Value::Null, "cleaned");
        assert_eq!(created["status"], Value::Null);
        assert_eq!(created["kind"], "Deployment");
        assert_eq!(
            log.events[2].action,
            Action::CreateJob {
                job: match &log.events[2].action {
                    Action::CreateJob { job, .. } => job.clone(),
                    _ => Value::Null,
                },
                duration: Duration::from_secs(90)
            }
        );
        assert_eq!(log.span(), Duration::from_secs(20 * 60));
    }

    #[test]
    fn a_job_runs_for_its_sleep_or_the_default() {
        let job = |command: Value| {
            json!({"type": "create", "kind": "Job", "key": "ns/j", "timestamp": "2026-01-01T00:00:00Z",
                "job": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": command}]}}}}})
        };
        for (command, seconds) in [
            (json!(["sh", "-c", "sleep 17"]), 17),
            (json!(["run-report"]), DEFAULT_JOB_DURATION.as_secs()),
        ] {
            let log = parse(&json!({"events": [job(command)]})).expect("a log");
            let Action::CreateJob { duration, .. } = &log.events[0].action else {
                panic!("a job: {:?}", log.events);
            };
            assert_eq!(duration.as_secs(), seconds);
        }
    }

    #[test]
    fn a_file_that_is_not_a_log_is_refused_whole() {
        assert!(parse(&json!([])).is_err());
        assert!(parse(&json!({"events": 3})).is_err());
        assert!(parse(&json!({"events": [], "kerf": {"version": 99}})).is_err());
        let empty = parse(&json!({"cluster": "c"})).expect("no events is a log");
        assert!(empty.events.is_empty() && empty.start().is_none());
    }
}
