//! The scenario file, as typed serde structs (`deny_unknown_fields`: a misspelt key is an
//! error, not a silently ignored one). The YAML is read into a generic value first and each
//! piece is decoded on its own through `serde_path_to_error`, so every error carries its
//! path from the root (`steps[3].fault.kind`); steps are a mapping with one step key plus an
//! optional `at`, which serde's derive cannot express, so they are split by hand. Durations
//! are Go durations (`90s`, `5m`) as everywhere else in Karpenter's configuration.

use std::collections::BTreeMap;

use kerf::api::duration::Duration;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct File {
    pub name: String,
    /// The default workload scaled to this many pods (as `--pods`).
    pub pods: Option<usize>,
    /// Manifests applied at the start instead of the default workload.
    #[serde(default, deserialize_with = "one_or_many")]
    pub workload: Vec<String>,
    /// NodePools (and EC2NodeClasses) instead of the default NodePool.
    #[serde(default, deserialize_with = "one_or_many")]
    pub nodepools: Vec<String>,
    /// Capacity reservations the simulated region holds (as `--reservations`), relative to
    /// the scenario file.
    pub reservations: Option<String>,
    #[serde(default)]
    pub controller: Controller,
    /// Decoded one by one by [`step`].
    #[serde(default)]
    pub steps: Vec<Value>,
    #[serde(default)]
    pub expect: Expect,
}

/// `controller`: how many replicas, and their environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Controller {
    #[serde(default = "one")]
    pub replicas: usize,
    /// Settings as environment variables (`BATCH_IDLE_DURATION: 1s`); scalars only.
    #[serde(default)]
    pub env: BTreeMap<String, Value>,
}

impl Default for Controller {
    fn default() -> Self {
        Self {
            replicas: 1,
            env: BTreeMap::new(),
        }
    }
}

fn one() -> usize {
    1
}

/// `expect`: every key optional; the ones given are measured and judged.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    pub all_pods_bound: Option<Within>,
    pub leaked_instances: Option<u64>,
    pub double_launches: Option<u64>,
    pub pdb_violations: Option<u64>,
    pub max_nodes: Option<u64>,
    pub max_hourly_cost: Option<f64>,
    /// The Nodes each named NodePool has at the end (`{fixed: 2}`), none being deleted.
    pub node_pool_nodes: Option<BTreeMap<String, u64>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Within {
    pub within: Duration,
}

/// One step: when it starts, and what it does.
#[derive(Debug, Clone)]
pub struct Step {
    /// From the start of the run; `None`: right after the previous step.
    pub at: Option<Duration>,
    pub action: Action,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    Wait(Wait),
    Scale(Scale),
    /// A manifest file, relative to the scenario file.
    Apply(String),
    Delete(Delete),
    Fault(Fault),
    Controller(ControllerStep),
    Drift(Drift),
}

/// The step keys, in the order errors list them.
pub const ACTIONS: [&str; 7] = [
    "wait",
    "scale",
    "apply",
    "delete",
    "fault",
    "controller",
    "drift",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Wait {
    pub pods_bound: Option<PodsBound>,
    pub settled: Option<bool>,
    pub timeout: Duration,
}

/// `podsBound: all` or a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodsBound {
    All,
    AtLeast(usize),
}

impl<'de> Deserialize<'de> for PodsBound {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(s) if s == "all" => Ok(Self::All),
            Value::Number(n) if n.as_u64().is_some() => Ok(Self::AtLeast(
                usize::try_from(n.as_u64().unwrap_or_default()).unwrap_or(usize::MAX),
            )),
            other => Err(serde::de::Error::custom(format!(
                "expected `all` or a pod count, found {other}"
            ))),
        }
    }
}

/// `scale`: a Deployment's replicas, or a static NodePool's (as `kubectl scale nodepool`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    /// `namespace/name`, or `name` in `default`.
    pub deployment: Option<String>,
    /// A static NodePool's name.
    pub nodepool: Option<String>,
    pub replicas: u32,
}

impl Scale {
    /// What is scaled, for progress lines: `default/web` or `nodepool fixed`.
    pub fn target(&self) -> String {
        match (&self.deployment, &self.nodepool) {
            (Some(deployment), _) => deployment.clone(),
            (None, Some(pool)) => format!("nodepool {pool}"),
            (None, None) => String::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delete {
    pub kind: DeleteKind,
    pub count: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum DeleteKind {
    NodeClaim,
    Node,
    Pod,
}

/// `fault`: decoded by its `kind` (see [`FAULT_KINDS`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Fault {
    /// Pools answering InsufficientInstanceCapacity: `TYPE:ZONE[:CAPACITY]`, `*` globs.
    Ice {
        offerings: Vec<String>,
        #[serde(rename = "for")]
        lasting: Option<Duration>,
    },
    /// A fraction of EC2 calls throttled (`RequestLimitExceeded`).
    Ec2Throttle {
        rate: f64,
        #[serde(rename = "for")]
        lasting: Option<Duration>,
    },
    /// A fraction of API server requests failed with `status` (500 or 429).
    ApiErrors {
        rate: f64,
        status: Option<u16>,
        #[serde(rename = "for")]
        lasting: Option<Duration>,
    },
    /// Every open watch cut this often, history compacted so re-watches get 410 Gone.
    WatchDrop {
        every: Duration,
        #[serde(rename = "for")]
        lasting: Option<Duration>,
    },
    /// Latency added to every API server request.
    ApiLatency {
        latency: Duration,
        #[serde(rename = "for")]
        lasting: Option<Duration>,
    },
    /// Spot interruption warnings to a fraction of the running spot instances.
    SpotInterruption { fraction: f64 },
    /// One replica's requests to its Lease delayed by `latency` (past its renew deadline, it
    /// steps down while its other requests still go through).
    LeaseDelay {
        replica: Kill,
        latency: Duration,
        #[serde(rename = "for")]
        lasting: Option<Duration>,
    },
    /// The leader's `actor` (a folder under `actors/src`) panics on its next `count`
    /// messages (or passes, for a loop).
    ActorPanic { actor: String, count: u32 },
    /// Capacity reservation `id` ends as EC2 ends one: a Capacity Block's instances are
    /// reclaimed, an ODCR's run on as on-demand instances.
    ReservationEnd { id: String },
    /// The owner of interruptible reservation `id` reclaims it: each of its instances gets
    /// the interruption warning and is reclaimed after the two-minute notice.
    ReservationInterruption { id: String },
}

pub const FAULT_KINDS: [&str; 10] = [
    "ice",
    "ec2-throttle",
    "api-errors",
    "watch-drop",
    "api-latency",
    "spot-interruption",
    "lease-delay",
    "actor-panic",
    "reservation-end",
    "reservation-interruption",
];

/// `controller`: `{kill: leader|any}` (optionally `when: after-launch`) or `{restart: all}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerStep {
    pub kill: Option<Kill>,
    pub restart: Option<Restart>,
    /// `after-launch`: wait for the next CreateFleet that launches, kill before its answer
    /// is recorded.
    pub when: Option<When>,
    /// How long `when` may wait for its launch (default 2m).
    pub timeout: Option<Duration>,
}

/// Which replica a kill or a `lease-delay` fault hits: the one leading then, or the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kill {
    Leader,
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Restart {
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum When {
    AfterLaunch,
}

/// `drift: {ami: new}`: a newer AMI behind the default EC2NodeClass's alias.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drift {
    pub ami: NewAmi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NewAmi {
    New,
}

/// A problem at one place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// From the root: `steps[3].fault.kind`; empty for the whole file.
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Decodes `value` as `T`, naming the failing field below `base`.
pub fn decode<T: DeserializeOwned>(value: Value, base: &str) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let inner = error.path().to_string();
        let path = match (base, inner.as_str()) {
            (b, ".") | (b, "") => b.to_owned(),
            ("", i) => i.to_owned(),
            (b, i) if i.starts_with('[') => format!("{b}{i}"),
            (b, i) => format!("{b}.{i}"),
        };
        Problem::at(path, error.into_inner().to_string())
    })
}

/// Parses the YAML text into the file's top level.
pub fn parse(text: &str) -> Result<File, Problem> {
    let value: Value =
        serde_saphyr::from_str(text).map_err(|e| Problem::at("", format!("not YAML: {e}")))?;
    if !value.is_object() {
        return Err(Problem::at(
            "",
            "expected a mapping with `name` and `steps`",
        ));
    }
    decode(value, "")
}

/// Decodes `steps[index]`.
pub fn step(index: usize, value: Value) -> Result<Step, Problem> {
    let path = format!("steps[{index}]");
    let Value::Object(mut map) = value else {
        return Err(Problem::at(
            path,
            format!("expected a mapping with one of {}", ACTIONS.join(", ")),
        ));
    };
    let at = map
        .shift_remove("at")
        .map(|at| decode::<Duration>(at, &format!("{path}.at")))
        .transpose()?;
    let keys: Vec<String> = map.keys().cloned().collect();
    let [key] = keys.as_slice() else {
        return Err(Problem::at(
            path,
            format!(
                "expected exactly one of {} (besides `at`), found {}",
                ACTIONS.join(", "),
                if keys.is_empty() {
                    "none".to_owned()
                } else {
                    keys.join(", ")
                }
            ),
        ));
    };
    if !ACTIONS.contains(&key.as_str()) {
        return Err(Problem::at(
            format!("{path}.{key}"),
            format!(
                "unknown step {key:?} (expected one of {})",
                ACTIONS.join(", ")
            ),
        ));
    }
    if key == "fault" {
        check_fault_kind(&map[key.as_str()], &format!("{path}.fault"))?;
    }
    let action = decode::<Action>(Value::Object(map), &path)?;
    Ok(Step { at, action })
}

fn check_fault_kind(fault: &Value, path: &str) -> Result<(), Problem> {
    let kind_path = format!("{path}.kind");
    match fault.get("kind") {
        Some(Value::String(kind)) if FAULT_KINDS.contains(&kind.as_str()) => Ok(()),
        Some(Value::String(kind)) => Err(Problem::at(
            kind_path,
            format!(
                "unknown fault {kind:?} (expected one of {})",
                FAULT_KINDS.join(", ")
            ),
        )),
        Some(other) => Err(Problem::at(
            kind_path,
            format!("expected a fault name, found {other}"),
        )),
        None if fault.is_object() => Err(Problem::at(
            kind_path,
            format!("missing (one of {})", FAULT_KINDS.join(", ")),
        )),
        None => Err(Problem::at(path, "expected a mapping with `kind`")),
    }
}

/// `[a, b]` or a lone `a`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problem(value: Value) -> Problem {
        step(3, value).expect_err("refused")
    }

    #[test]
    fn a_step_carries_its_at_and_action() {
        let s = step(
            0,
            json!({"at": "30s", "scale": {"deployment": "default/web", "replicas": 4}}),
        )
        .expect("valid");
        assert_eq!(s.at.map(|d| d.as_std().as_secs()), Some(30));
        assert!(matches!(s.action, Action::Scale(Scale { replicas: 4, .. })));
        let s = step(
            1,
            json!({"fault": {"kind": "ice", "offerings": ["c6a.*:us-east-1a:spot"], "for": "3m"}}),
        )
        .expect("valid");
        let Action::Fault(Fault::Ice { lasting, .. }) = s.action else {
            panic!("an ice fault: {s:?}");
        };
        assert_eq!(lasting.map(|d| d.as_std().as_secs()), Some(180));
    }

    #[test]
    fn an_unknown_fault_names_its_path_and_the_known_ones() {
        let p = problem(json!({"fault": {"kind": "icee"}}));
        assert_eq!(p.path, "steps[3].fault.kind");
        assert!(
            p.message
                .starts_with("unknown fault \"icee\" (expected one of ice, ec2-throttle,"),
            "{p:?}"
        );
    }

    #[test]
    fn a_lease_delay_names_its_replica_latency_and_length() {
        let s = step(
            2,
            json!({"fault": {"kind": "lease-delay", "replica": "leader", "latency": "12s", "for": "1m"}}),
        )
        .expect("valid");
        let Action::Fault(Fault::LeaseDelay {
            replica,
            latency,
            lasting,
        }) = s.action
        else {
            panic!("a lease-delay fault: {s:?}");
        };
        assert_eq!(replica, Kill::Leader);
        assert_eq!(latency.as_std().as_secs(), 12);
        assert_eq!(lasting.map(|d| d.as_std().as_secs()), Some(60));
        let p = problem(
            json!({"fault": {"kind": "lease-delay", "replica": "follower", "latency": "12s"}}),
        );
        assert_eq!(p.path, "steps[3].fault", "{p:?}");
        assert!(
            p.message
                .contains("unknown variant `follower`, expected `leader` or `any`"),
            "{p:?}"
        );
        let p = problem(json!({"fault": {"kind": "lease-delay", "replica": "leader"}}));
        assert!(p.message.contains("missing field `latency`"), "{p:?}");
    }

    #[test]
    fn a_misspelt_field_is_named() {
        let p = problem(json!({"fault": {"kind": "ec2-throttle", "rat": 0.2}}));
        assert_eq!(p.path, "steps[3].fault", "{p:?}");
        assert!(p.message.contains("unknown field `rat`"), "{p:?}");
        let p = problem(json!({"wait": {"podsBound": "all", "timeout": "5 minutes"}}));
        assert_eq!(p.path, "steps[3].wait.timeout", "{p:?}");
    }

    #[test]
    fn a_step_needs_exactly_one_known_key() {
        let p = problem(json!({"at": "1s"}));
        assert_eq!(p.path, "steps[3]");
        assert!(p.message.contains("found none"), "{p:?}");
        let p = problem(json!({"scale": {}, "apply": "x.yaml"}));
        assert!(p.message.contains("found scale, apply"), "{p:?}");
        let p = problem(json!({"sleep": "1s"}));
        assert_eq!(p.path, "steps[3].sleep");
        assert!(p.message.starts_with("unknown step \"sleep\""), "{p:?}");
        let p = problem(json!({"at": "soon", "apply": "x.yaml"}));
        assert_eq!(p.path, "steps[3].at");
    }

    #[test]
    fn top_level_errors_are_named() {
        let p = parse("name: x\ncontroler: {replicas: 2}\n").expect_err("misspelt");
        assert!(p.message.contains("unknown field `controler`"), "{p:?}");
        let p = parse("name: x\ncontroller: {replicas: two}\n").expect_err("not a number");
        assert_eq!(p.path, "controller.replicas");
        let p = parse("name: x\nexpect: {maxNodes: -1}\n").expect_err("negative");
        assert_eq!(p.path, "expect.maxNodes");
        let file = parse("name: x\nworkload: w.yaml\n").expect("one path");
        assert_eq!(file.workload, ["w.yaml"]);
    }
}
