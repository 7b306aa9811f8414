//! The NodePools and EC2NodeClasses a replay runs with. A `kerf record` log carries the
//! cluster's own, at its start and at each change; a kubereplay log has none, so the user's
//! (`--nodepools`) or the defaults are used. Recorded objects are moved onto the simulated
//! cluster: an EC2NodeClass keeps its name, role or instance profile, kubelet, block devices,
//! user data, tags and AMI alias, and its subnet and security group selectors (and AMI
//! selectors other than an alias) are pointed at the simulated VPC, which knows only its own
//! discovery tag. A NodePool's durations (`consolidateAfter`, `expireAfter`,
//! `terminationGracePeriod`) are divided by the replay's speed, so they last as long in the
//! log's time as they did in the cluster; so are the disruption loop's own waits
//! ([`controller_timings`]), down to a floor the controller can keep up with.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use kerf::cluster::inventory;
use kerf::manifest::{self, Object};
use kerf_actors::Timings;
use kerf_actors::disruption::DisruptionConfig;
use kerf_loadtest::apiserver::{Cluster, PatchKind, Reason};
use serde_json::{Value, json};

use super::log::ReplayLog;
use crate::defaults::CLUSTER_NAME;

/// The kinds a set holds, in the order they are applied (classes before the pools naming
/// them): apiVersion, plural, kind.
pub const KINDS: [(&str, &str, &str); 2] = [
    ("karpenter.k8s.aws/v1", "ec2nodeclasses", "EC2NodeClass"),
    ("karpenter.sh/v1", "nodepools", "NodePool"),
];

/// The AMI selector used when a recorded class selects its images otherwise than by alias.
const ALIAS: &str = "al2023@latest";

/// What a replay starts with and whether it follows the log's changes.
#[derive(Debug, Clone)]
pub struct Plan {
    pub initial: Vec<Object>,
    follow_log: bool,
}

impl Plan {
    /// The log's own first set, followed by its changes; `fallback` (the user's files or the
    /// defaults) when the log has none. The error lists every problem.
    pub fn of_log(log: &ReplayLog, fallback: Vec<Object>, speed: f64) -> Result<Self, Vec<String>> {
        match log.extensions.node_pools.first() {
            Some(first) => Ok(Self {
                initial: objects(&first.objects, speed, "the log's NodePools")?,
                follow_log: true,
            }),
            None => Ok(Self {
                initial: compress_all(fallback, speed)?,
                follow_log: false,
            }),
        }
    }

    /// `files` (NodePools and EC2NodeClasses) for the whole replay, with the log's first
    /// EC2NodeClasses where `files` bring none of that name; the log's changes are not
    /// followed.
    pub fn fixed(log: &ReplayLog, files: Vec<Object>, speed: f64) -> Result<Self, Vec<String>> {
        let mut initial = compress_all(files, speed)?;
        if let Some(first) = log.extensions.node_pools.first() {
            let recorded = objects(&first.objects, speed, "the log's NodePools")?;
            let classes = recorded.into_iter().filter(|o| {
                o.kind == "EC2NodeClass"
                    && !initial.iter().any(|i| i.kind == o.kind && i.name == o.name)
            });
            let classes: Vec<Object> = classes.collect();
            initial.splice(0..0, classes);
        }
        Ok(Self {
            initial,
            follow_log: false,
        })
    }

    /// The log's later sets, when this plan follows them.
    pub fn changes<'a>(
        &'a self,
        log: &'a ReplayLog,
    ) -> impl Iterator<Item = (Timestamp, &'a [Value])> + 'a {
        log.extensions
            .node_pools
            .iter()
            .skip(1)
            .filter(move |_| self.follow_log)
            .map(|set| (set.at, set.objects.as_slice()))
    }
}

/// Recorded objects moved onto the simulated cluster and read as manifest objects.
fn objects(values: &[Value], speed: f64, source: &str) -> Result<Vec<Object>, Vec<String>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for value in values {
        let moved = moved(value, speed);
        let text = serde_json::to_string(&moved).map_err(|e| vec![e.to_string()])?;
        match manifest::parse_all(&text, source) {
            Ok(mut parsed) => out.append(&mut parsed),
            Err(error) => errors.push(error.to_string()),
        }
    }
    out.sort_by_key(|o| KINDS.iter().position(|(_, _, k)| *k == o.kind));
    if let Err(problems) = inventory::inventory(&out) {
        errors.extend(problems.iter().map(ToString::to_string));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn compress_all(objects: Vec<Object>, speed: f64) -> Result<Vec<Object>, Vec<String>> {
    Ok(objects
        .into_iter()
        .map(|mut o| {
            if o.kind == "NodePool" {
                compress(&mut o.value, speed);
            }
            o
        })
        .collect())
}

/// The shortest wall-time poll and validation wait a paced disruption loop is given: a pass
/// over a replayed cluster's few dozen nodes takes milliseconds, and a shorter wait would
/// spend the controller's threads on passes that find the cluster unchanged.
pub const MIN_DISRUPTION_WAIT: Duration = Duration::from_millis(250);

/// The controller's timings for a replay at `speed`: the disruption loop's poll, validation
/// wait, nomination window and no-op memo divided by the speed (not below
/// [`MIN_DISRUPTION_WAIT`]), so scale-down follows the log's time as a NodePool's
/// `consolidateAfter` does. Batching, launches and kubelets keep their own pace.
pub fn controller_timings(speed: f64) -> Timings {
    let paced = |wait: Duration| wait.div_f64(speed.max(1.0)).max(MIN_DISRUPTION_WAIT);
    let upstream = DisruptionConfig::default();
    Timings {
        disruption: DisruptionConfig {
            poll_period: paced(upstream.poll_period),
            validation_period: paced(upstream.validation_period),
            nomination_window: paced(upstream.nomination_window),
            memo_ttl: paced(upstream.memo_ttl),
            ..upstream
        },
        ..Timings::default()
    }
}

/// A recorded NodePool or EC2NodeClass as the simulated cluster takes it.
pub fn moved(value: &Value, speed: f64) -> Value {
    let mut value = value.clone();
    if let Some(meta) = value["metadata"].as_object_mut() {
        meta.retain(|k, v| matches!(k.as_str(), "name" | "labels" | "annotations") && !v.is_null());
    }
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
    }
    match value["kind"].as_str() {
        Some("EC2NodeClass") => point_at_simulated_vpc(&mut value),
        Some("NodePool") => compress(&mut value, speed),
        _ => {}
    }
    value
}

fn point_at_simulated_vpc(class: &mut Value) {
    let Some(spec) = class["spec"].as_object_mut() else {
        return;
    };
    let discovery = json!([{"tags": {"karpenter.sh/discovery": CLUSTER_NAME}}]);
    spec.insert("subnetSelectorTerms".into(), discovery.clone());
    spec.insert("securityGroupSelectorTerms".into(), discovery);
    spec.remove("capacityReservationSelectorTerms");
    let aliases: Vec<Value> = spec
        .get("amiSelectorTerms")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t["alias"].is_string())
        .cloned()
        .collect();
    if aliases.is_empty() {
        spec.remove("amiFamily");
        spec.insert("amiSelectorTerms".into(), json!([{"alias": ALIAS}]));
    } else {
        spec.insert("amiSelectorTerms".into(), Value::Array(aliases));
    }
}

/// Divides a NodePool's durations by `speed` (whole seconds, as the CRD's pattern allows).
fn compress(pool: &mut Value, speed: f64) {
    for path in [
        "/spec/disruption/consolidateAfter",
        "/spec/template/spec/expireAfter",
        "/spec/template/spec/terminationGracePeriod",
    ] {
        let Some(field) = pool.pointer_mut(path) else {
            continue;
        };
        let Some(text) = field.as_str() else {
            continue;
        };
        if let Ok(duration) = kerf::api::duration::Duration::parse(text) {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a non-negative number of seconds"
            )]
            let seconds = (duration.as_std().as_secs_f64() / speed).round() as u64;
            *field = json!(format!("{seconds}s"));
        }
    }
}

/// Makes the cluster's NodePools and EC2NodeClasses the recorded set `values`: creates the
/// new, replaces the changed specs, deletes the gone.
pub fn change(cluster: &Cluster, values: &[Value], speed: f64) -> anyhow::Result<()> {
    let objects: Vec<Value> = values.iter().map(|v| moved(v, speed)).collect();
    for (api_version, plural, kind) in KINDS {
        let wanted: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
        let existing = cluster
            .list(api_version, plural, None, "")
            .with_context(|| format!("listing {plural}"))?;
        for object in wanted.iter() {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if existing.iter().any(|e| e["metadata"]["name"] == name) {
                cluster
                    .patch(
                        api_version,
                        plural,
                        None,
                        name,
                        PatchKind::Json,
                        &json!([{"op": "replace", "path": "/spec", "value": object["spec"]}]),
                    )
                    .map_err(|e| anyhow::anyhow!("replacing {kind}/{name}'s spec: {e}"))?;
            } else {
                cluster
                    .create(api_version, plural, (*object).clone())
                    .map_err(|e| anyhow::anyhow!("creating {kind}/{name}: {e}"))?;
            }
        }
        for object in &existing {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if !wanted.iter().any(|w| w["metadata"]["name"] == name) {
                match cluster.delete(api_version, plural, None, name, &Default::default()) {
                    Ok(_) => {}
                    Err(error) if error.reason == Reason::NotFound => {}
                    Err(error) => return Err(anyhow::anyhow!("deleting {kind}/{name}: {error}")),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_class_is_pointed_at_the_simulated_vpc_and_pool_durations_shrink() {
        let class = moved(
            &json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "prod", "uid": "u", "resourceVersion": "9"},
                "spec": {"role": "NodeRole", "amiFamily": "AL2023",
                    "amiSelectorTerms": [{"id": "ami-0123"}],
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                    "securityGroupSelectorTerms": [{"id": "sg-1"}]},
                "status": {"subnets": []}}),
            60.0,
        );
        assert_eq!(class["metadata"], json!({"name": "prod"}));
        assert_eq!(class["status"], Value::Null);
        assert_eq!(class["spec"]["role"], "NodeRole");
        assert_eq!(class["spec"]["amiSelectorTerms"], json!([{"alias": ALIAS}]));
        assert_eq!(class["spec"]["amiFamily"], Value::Null);
        assert_eq!(
            class["spec"]["subnetSelectorTerms"][0]["tags"]["karpenter.sh/discovery"],
            CLUSTER_NAME
        );
        let pool = moved(
            &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
                "spec": {"disruption": {"consolidateAfter": "5m"},
                    "template": {"spec": {"expireAfter": "Never", "nodeClassRef": {}}}}}),
            60.0,
        );
        assert_eq!(pool["spec"]["disruption"]["consolidateAfter"], "5s");
        assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "Never");
    }

    #[test]
    fn the_disruption_loop_keeps_the_logs_time_down_to_its_floor() {
        let upstream = DisruptionConfig::default();
        let at_10 = controller_timings(10.0).disruption;
        assert_eq!(at_10.poll_period, upstream.poll_period / 10);
        assert_eq!(at_10.validation_period, upstream.validation_period / 10);
        assert_eq!(at_10.nomination_window, upstream.nomination_window / 10);
        assert_eq!(at_10.memo_ttl, upstream.memo_ttl / 10);
        let at_500 = controller_timings(500.0).disruption;
        assert_eq!(at_500.poll_period, MIN_DISRUPTION_WAIT);
        assert_eq!(at_500.validation_period, MIN_DISRUPTION_WAIT);
        assert_eq!(at_500.memo_ttl, upstream.memo_ttl / 500);
        // Slower than real time is real time: nothing waits longer than upstream's.
        assert_eq!(
            controller_timings(0.5).disruption.poll_period,
            upstream.poll_period
        );
    }
}
