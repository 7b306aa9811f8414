//! Status-condition and termination metrics as upstream's operatorpkg status controllers emit
//! them for NodeClaims, NodePools, Nodes and EC2NodeClasses (`operator_<kind>_…`, plus the
//! deprecated kind-less `operator_status_condition_…` / `operator_termination_…` names,
//! labelled `group` and `kind`, for the three kinds upstream still emits them for). The
//! gauges (one series per object and condition, how long each has held, how long a deleted
//! object has been terminating) are computed from cluster state at scrape time; the
//! transitions and termination durations need to see objects change, so the PodWatcher feeds
//! a [`ConditionTracker`] per kind, which records them through the `metrics` recorder. Like
//! upstream's, the tracker counts every condition of an object the first time it sees it.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kerf::api::{ConditionStatus, EC2NodeClass, NodeClaim, NodePool};

use super::exposition::{Exposition, Gauge};
use crate::metrics::{
    EC2NODECLASS_TERMINATION_SECONDS, EC2NODECLASS_TRANSITION_SECONDS, NODE_TERMINATION_SECONDS,
    NODE_TRANSITION_SECONDS, NODECLAIM_TERMINATION_SECONDS, NODECLAIM_TRANSITION_SECONDS,
    NODEPOOL_TERMINATION_SECONDS, NODEPOOL_TRANSITION_SECONDS, TERMINATION_SECONDS,
    TRANSITION_SECONDS,
};
use crate::state::{Change, ClusterState, ObjectKey};

/// Conditions per NodeClaim, by type, status and reason (labels `namespace`, `name`,
/// `type`, `status`, `reason`, `karpenter_k8s_aws_ec2nodeclass`, `karpenter_sh_nodepool`).
pub const NODECLAIM_CONDITION_COUNT: &str = "operator_nodeclaim_status_condition_count";
/// Seconds each NodeClaim condition has held its status (labels as the count's).
pub const NODECLAIM_CONDITION_SECONDS: &str =
    "operator_nodeclaim_status_condition_current_status_seconds";
/// NodeClaim condition transitions (labels `type`, `status`, `reason`, the NodeClass and
/// NodePool labels).
pub const NODECLAIM_TRANSITIONS: &str = "operator_nodeclaim_status_condition_transitions_total";
/// Seconds a deleted NodeClaim has been terminating (labels `namespace`, `name`, the
/// NodeClass and NodePool labels).
pub const NODECLAIM_TERMINATING_SECONDS: &str =
    "operator_nodeclaim_termination_current_time_seconds";

/// Conditions per NodePool (labels `namespace`, `name`, `type`, `status`, `reason`).
pub const NODEPOOL_CONDITION_COUNT: &str = "operator_nodepool_status_condition_count";
/// Seconds each NodePool condition has held its status.
pub const NODEPOOL_CONDITION_SECONDS: &str =
    "operator_nodepool_status_condition_current_status_seconds";
/// NodePool condition transitions (labels `type`, `status`, `reason`).
pub const NODEPOOL_TRANSITIONS: &str = "operator_nodepool_status_condition_transitions_total";
/// Seconds a deleted NodePool has been terminating (labels `namespace`, `name`).
pub const NODEPOOL_TERMINATING_SECONDS: &str = "operator_nodepool_termination_current_time_seconds";

/// Conditions per Node (labels `namespace`, `name`, `type`, `status`, `reason`,
/// `karpenter_k8s_aws_ec2nodeclass`, `karpenter_sh_nodepool`, `karpenter_sh_initialized`).
pub const NODE_CONDITION_COUNT: &str = "operator_node_status_condition_count";
/// Seconds each Node condition has held its status.
pub const NODE_CONDITION_SECONDS: &str = "operator_node_status_condition_current_status_seconds";
/// Node condition transitions (labels `type`, `status`, `reason` and the Node's labels as
/// the count's).
pub const NODE_TRANSITIONS: &str = "operator_node_status_condition_transitions_total";
/// Seconds a deleted Node has been terminating.
pub const NODE_TERMINATING_SECONDS: &str = "operator_node_termination_current_time_seconds";

/// Conditions per EC2NodeClass (labels `namespace`, `name`, `type`, `status`, `reason`).
pub const EC2NODECLASS_CONDITION_COUNT: &str = "operator_ec2nodeclass_status_condition_count";
/// Seconds each EC2NodeClass condition has held its status.
pub const EC2NODECLASS_CONDITION_SECONDS: &str =
    "operator_ec2nodeclass_status_condition_current_status_seconds";
/// EC2NodeClass condition transitions (labels `type`, `status`, `reason`).
pub const EC2NODECLASS_TRANSITIONS: &str =
    "operator_ec2nodeclass_status_condition_transitions_total";
/// Seconds a deleted EC2NodeClass has been terminating.
pub const EC2NODECLASS_TERMINATING_SECONDS: &str =
    "operator_ec2nodeclass_termination_current_time_seconds";

/// operatorpkg's deprecated condition count of NodeClaims, NodePools and EC2NodeClasses
/// together (labels as the per-kind ones without theirs, plus `group` and `kind`).
pub const CONDITION_COUNT: &str = "operator_status_condition_count";
/// The deprecated per-condition status age (labels as [`CONDITION_COUNT`]'s).
pub const CONDITION_SECONDS: &str = "operator_status_condition_current_status_seconds";
/// The deprecated transition counter (labels `type`, `status`, `reason`, `group`, `kind`).
pub const TRANSITIONS: &str = "operator_status_condition_transitions_total";
/// The deprecated terminating-time gauge (labels `namespace`, `name`, `group`, `kind`).
pub const TERMINATING_SECONDS: &str = "operator_termination_current_time_seconds";

/// One kind's metric names and the object labels upstream copies onto them.
#[derive(Debug)]
pub struct Kind {
    group: &'static str,
    kind: &'static str,
    count: &'static str,
    seconds: &'static str,
    transitions: &'static str,
    transition_seconds: &'static str,
    terminating: &'static str,
    termination: &'static str,
    /// Object labels copied as metric labels (`karpenter.sh/nodepool` → `karpenter_sh_nodepool`).
    labels: &'static [(&'static str, &'static str)],
    /// Whether upstream also emits the deprecated kind-less names for this kind.
    deprecated: bool,
}

const NODECLASS_LABEL: (&str, &str) = (
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter_k8s_aws_ec2nodeclass",
);
const NODEPOOL_LABEL: (&str, &str) = (kerf::labels::NODEPOOL, "karpenter_sh_nodepool");
const INITIALIZED_LABEL: (&str, &str) = ("karpenter.sh/initialized", "karpenter_sh_initialized");

pub const NODECLAIM: Kind = Kind {
    group: "karpenter.sh",
    kind: "NodeClaim",
    count: NODECLAIM_CONDITION_COUNT,
    seconds: NODECLAIM_CONDITION_SECONDS,
    transitions: NODECLAIM_TRANSITIONS,
    transition_seconds: NODECLAIM_TRANSITION_SECONDS,
    terminating: NODECLAIM_TERMINATING_SECONDS,
    termination: NODECLAIM_TERMINATION_SECONDS,
    labels: &[NODECLASS_LABEL, NODEPOOL_LABEL],
    deprecated: true,
};
pub const NODEPOOL: Kind = Kind {
    group: "karpenter.sh",
    kind: "NodePool",
    count: NODEPOOL_CONDITION_COUNT,
    seconds: NODEPOOL_CONDITION_SECONDS,
    transitions: NODEPOOL_TRANSITIONS,
    transition_seconds: NODEPOOL_TRANSITION_SECONDS,
    terminating: NODEPOOL_TERMINATING_SECONDS,
    termination: NODEPOOL_TERMINATION_SECONDS,
    labels: &[],
    deprecated: true,
};
pub const NODE: Kind = Kind {
    group: "",
    kind: "Node",
    count: NODE_CONDITION_COUNT,
    seconds: NODE_CONDITION_SECONDS,
    transitions: NODE_TRANSITIONS,
    transition_seconds: NODE_TRANSITION_SECONDS,
    terminating: NODE_TERMINATING_SECONDS,
    termination: NODE_TERMINATION_SECONDS,
    labels: &[NODECLASS_LABEL, NODEPOOL_LABEL, INITIALIZED_LABEL],
    deprecated: false,
};
pub const EC2NODECLASS: Kind = Kind {
    group: "karpenter.k8s.aws",
    kind: "EC2NodeClass",
    count: EC2NODECLASS_CONDITION_COUNT,
    seconds: EC2NODECLASS_CONDITION_SECONDS,
    transitions: EC2NODECLASS_TRANSITIONS,
    transition_seconds: EC2NODECLASS_TRANSITION_SECONDS,
    terminating: EC2NODECLASS_TERMINATING_SECONDS,
    termination: EC2NODECLASS_TERMINATION_SECONDS,
    labels: &[],
    deprecated: true,
};

/// One condition as the metrics read it.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    type_: String,
    status: String,
    reason: String,
    since: Option<Timestamp>,
}

/// An object whose conditions and termination upstream's status controller meters.
pub trait Observable {
    const KIND: &'static Kind;
    fn metadata(&self) -> &ObjectMeta;
    fn observed(&self) -> Vec<ObservedCondition>;
}

/// A condition's type, status, reason and last transition, whatever the object's type.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedCondition(Observed);

fn karpenter_conditions(list: &[kerf::api::Condition]) -> Vec<ObservedCondition> {
    list.iter()
        .map(|c| {
            ObservedCondition(Observed {
                type_: c.type_.clone(),
                status: status_text(c.status).to_owned(),
                reason: c.reason.clone(),
                since: Some(c.last_transition_time.0),
            })
        })
        .collect()
}

fn status_text(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

impl Observable for NodeClaim {
    const KIND: &'static Kind = &NODECLAIM;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn observed(&self) -> Vec<ObservedCondition> {
        karpenter_conditions(self.conditions())
    }
}

impl Observable for NodePool {
    const KIND: &'static Kind = &NODEPOOL;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn observed(&self) -> Vec<ObservedCondition> {
        karpenter_conditions(self.conditions())
    }
}

impl Observable for EC2NodeClass {
    const KIND: &'static Kind = &EC2NODECLASS;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn observed(&self) -> Vec<ObservedCondition> {
        karpenter_conditions(self.conditions())
    }
}

impl Observable for Node {
    const KIND: &'static Kind = &NODE;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn observed(&self) -> Vec<ObservedCondition> {
        let list = self.status.as_ref().and_then(|s| s.conditions.as_ref());
        list.into_iter()
            .flatten()
            .map(|c| {
                ObservedCondition(Observed {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone().unwrap_or_default(),
                    since: c.last_transition_time.as_ref().map(|t| t.0),
                })
            })
            .collect()
    }
}

/// The object labels `kind` copies onto its metrics, empty where the object has none.
fn object_labels(kind: &Kind, meta: &ObjectMeta) -> Vec<(&'static str, String)> {
    kind.labels
        .iter()
        .map(|(key, label)| {
            let value = meta.labels.as_ref().and_then(|l| l.get(*key));
            (*label, value.cloned().unwrap_or_default())
        })
        .collect()
}

fn seconds_since(now: Timestamp, then: Timestamp) -> f64 {
    now.duration_since(then).as_secs_f64().max(0.0)
}

/// One of the scrape-time gauges each kind has: per object and condition its count or the
/// seconds it has held, and per deleted object its time terminating.
#[derive(Clone, Copy)]
enum Measure {
    Count,
    Seconds,
    Terminating,
}

impl Measure {
    const ALL: [Self; 3] = [Self::Count, Self::Seconds, Self::Terminating];

    fn help(self) -> &'static str {
        match self {
            Self::Count => "The number of a condition for a given object, type and status.",
            Self::Seconds => {
                "The current amount of time in seconds that a status condition has been in a specific state."
            }
            Self::Terminating => {
                "The current amount of time in seconds that an object has been in terminating state."
            }
        }
    }

    /// The family's name: `kind`'s own, or the deprecated kind-less one.
    fn name(self, kind: Option<&Kind>) -> &'static str {
        match (self, kind) {
            (Self::Count, Some(kind)) => kind.count,
            (Self::Seconds, Some(kind)) => kind.seconds,
            (Self::Terminating, Some(kind)) => kind.terminating,
            (Self::Count, None) => CONDITION_COUNT,
            (Self::Seconds, None) => CONDITION_SECONDS,
            (Self::Terminating, None) => TERMINATING_SECONDS,
        }
    }
}

/// Writes the `measure` series of `objects` (sorted by name) into `gauge`: for their kind's
/// own family, labelled with its object labels, or (`deprecated`) for the kind-less one,
/// labelled with the kind's group and kind.
fn write_series<K: Observable>(
    gauge: &mut Gauge,
    objects: &[std::sync::Arc<K>],
    now: Timestamp,
    measure: Measure,
    deprecated: bool,
) {
    let kind = K::KIND;
    for object in objects {
        let meta = object.metadata();
        let mut labels = vec![
            ("namespace", meta.namespace.clone().unwrap_or_default()),
            ("name", meta.name.clone().unwrap_or_default()),
        ];
        let id = labels.len();
        let trailing = if deprecated {
            vec![
                ("group", kind.group.to_owned()),
                ("kind", kind.kind.to_owned()),
            ]
        } else {
            object_labels(kind, meta)
        };
        if let Measure::Terminating = measure {
            if let Some(deleted) = &meta.deletion_timestamp {
                labels.extend(trailing);
                gauge.series(&labels, seconds_since(now, deleted.0));
            }
            continue;
        }
        for ObservedCondition(c) in object.observed() {
            labels.truncate(id);
            labels.extend([
                ("type", c.type_),
                ("status", c.status),
                ("reason", c.reason),
            ]);
            labels.extend(trailing.iter().cloned());
            let value = match measure {
                Measure::Count => 1.0,
                _ => c.since.map_or(0.0, |since| seconds_since(now, since)),
            };
            gauge.series(&labels, value);
        }
    }
}

/// `objects` sorted by name, the order of their series.
fn sorted<K: Observable>(mut objects: Vec<std::sync::Arc<K>>) -> Vec<std::sync::Arc<K>> {
    objects.sort_by(|a, b| a.metadata().name.cmp(&b.metadata().name));
    objects
}

/// Every status-condition and termination gauge family of `state`: each kind's, then the
/// deprecated kind-less ones.
pub fn write(out: &mut Exposition, state: &ClusterState) {
    let now = Timestamp::now();
    let nodeclaims = sorted(state.nodeclaims.snapshot());
    let nodepools = sorted(state.nodepools.snapshot());
    let nodes = sorted(state.nodes.snapshot());
    let nodeclasses = sorted(state.nodeclasses.snapshot());
    write_kind(out, &nodeclaims, now);
    write_kind(out, &nodepools, now);
    write_kind(out, &nodes, now);
    write_kind(out, &nodeclasses, now);
    for measure in Measure::ALL {
        let mut gauge = out.gauge(measure.name(None), measure.help());
        write_deprecated(&mut gauge, &nodeclaims, now, measure);
        write_deprecated(&mut gauge, &nodepools, now, measure);
        write_deprecated(&mut gauge, &nodes, now, measure);
        write_deprecated(&mut gauge, &nodeclasses, now, measure);
    }
}

/// The families of `objects`' kind.
fn write_kind<K: Observable>(out: &mut Exposition, objects: &[std::sync::Arc<K>], now: Timestamp) {
    for measure in Measure::ALL {
        let mut gauge = out.gauge(measure.name(Some(K::KIND)), measure.help());
        write_series(&mut gauge, objects, now, measure, false);
    }
}

/// The series of `objects` in the deprecated kind-less family, for the kinds upstream still
/// emits it for.
fn write_deprecated<K: Observable>(
    gauge: &mut Gauge,
    objects: &[std::sync::Arc<K>],
    now: Timestamp,
    measure: Measure,
) {
    if K::KIND.deprecated {
        write_series(gauge, objects, now, measure, true);
    }
}

/// What the tracker remembers of an object: its conditions and labels when last seen, and
/// when it was deleted, if it was.
#[derive(Debug)]
struct Seen {
    conditions: Vec<Observed>,
    labels: Vec<(&'static str, String)>,
    deleted_at: Option<Timestamp>,
}

/// Records one kind's condition transitions and termination durations from its watch
/// changes, as upstream's status controller does from its reconciles: a condition counts a
/// transition when its status differs from the one last seen (or it is new), with how long
/// the previous status held; an object seen deleting and then gone records how long it
/// terminated. Holds one entry per object of the kind.
#[derive(Debug)]
pub struct ConditionTracker<K> {
    seen: HashMap<ObjectKey, Seen>,
    kind: std::marker::PhantomData<fn(&K)>,
}

impl<K> Default for ConditionTracker<K> {
    fn default() -> Self {
        Self {
            seen: HashMap::new(),
            kind: std::marker::PhantomData,
        }
    }
}

impl<K: Observable> ConditionTracker<K> {
    /// Records what `change` of `object` shows.
    pub fn observe(&mut self, object: &K, change: Change) {
        let kind = K::KIND;
        let meta = object.metadata();
        let key = ObjectKey::new(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
        if change == Change::Deleted {
            if let Some(Seen {
                labels,
                deleted_at: Some(deleted),
                ..
            }) = self.seen.remove(&key)
            {
                let seconds = seconds_since(Timestamp::now(), deleted);
                metrics::histogram!(kind.termination, metric_labels(&labels)).record(seconds);
                if kind.deprecated {
                    metrics::histogram!(TERMINATION_SECONDS, kind_labels(kind, Vec::new()))
                        .record(seconds);
                }
            }
            return;
        }
        let labels = object_labels(kind, meta);
        let current: Vec<Observed> = object.observed().into_iter().map(|c| c.0).collect();
        let previous = self.seen.get(&key).map(|s| s.conditions.as_slice());
        for condition in &current {
            let before = previous.and_then(|p| p.iter().find(|o| o.type_ == condition.type_));
            if before.is_some_and(|b| b.status == condition.status) {
                continue;
            }
            let mut counted = vec![
                ("type", condition.type_.clone()),
                ("status", condition.status.clone()),
                ("reason", condition.reason.clone()),
            ];
            if kind.deprecated {
                metrics::counter!(TRANSITIONS, kind_labels(kind, counted.clone())).increment(1);
            }
            counted.extend(labels.iter().cloned());
            metrics::counter!(kind.transitions, metric_labels(&counted)).increment(1);
            let Some(before) = before else { continue };
            let (Some(from), Some(to)) = (before.since, condition.since) else {
                continue;
            };
            let held = to.duration_since(from).as_secs_f64().max(0.0);
            let mut timed = vec![
                ("type", before.type_.clone()),
                ("status", before.status.clone()),
            ];
            if kind.deprecated {
                metrics::histogram!(TRANSITION_SECONDS, kind_labels(kind, timed.clone()))
                    .record(held);
            }
            timed.extend(labels.iter().cloned());
            metrics::histogram!(kind.transition_seconds, metric_labels(&timed)).record(held);
        }
        let deleted_at = meta.deletion_timestamp.as_ref().map(|t: &Time| t.0);
        self.seen.insert(
            key,
            Seen {
                conditions: current,
                labels,
                deleted_at,
            },
        );
    }
}

fn metric_labels(labels: &[(&'static str, String)]) -> Vec<metrics::Label> {
    labels
        .iter()
        .map(|(k, v)| metrics::Label::new(*k, v.clone()))
        .collect()
}

/// `labels` plus the deprecated names' `group` and `kind`.
fn kind_labels(kind: &Kind, mut labels: Vec<(&'static str, String)>) -> Vec<metrics::Label> {
    labels.extend([
        ("group", kind.group.to_owned()),
        ("kind", kind.kind.to_owned()),
    ]);
    metric_labels(&labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, ready: &str, at: &str, deleting: bool) -> NodeClaim {
        let mut meta = json!({"name": name, "labels": {
            "karpenter.sh/nodepool": "pool-c", "karpenter.k8s.aws/ec2nodeclass": "default"}});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta,
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                "name": "default"}, "requirements": []},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": ready,
                "lastTransitionTime": at}]}
        }))
        .expect("valid NodeClaim")
    }

    #[test]
    fn transitions_are_counted_once_per_status_change_with_the_time_held() {
        crate::metrics::handle();
        let mut tracker = ConditionTracker::<NodeClaim>::default();
        let unknown = claim("tracked-a", "Unknown", "2026-01-01T00:00:00Z", false);
        tracker.observe(&unknown, Change::Applied);
        tracker.observe(&unknown, Change::Applied);
        let ready = claim("tracked-a", "True", "2026-01-01T00:00:30Z", false);
        tracker.observe(&ready, Change::Applied);
        let deleting = claim("tracked-a", "True", "2026-01-01T00:00:30Z", true);
        tracker.observe(&deleting, Change::Applied);
        tracker.observe(&deleting, Change::Deleted);
        let text = crate::metrics::render();
        for line in [
            "operator_nodeclaim_status_condition_transitions_total{type=\"Ready\",status=\"Unknown\",reason=\"Unknown\",karpenter_k8s_aws_ec2nodeclass=\"default\",karpenter_sh_nodepool=\"pool-c\"} 1",
            "operator_nodeclaim_status_condition_transitions_total{type=\"Ready\",status=\"True\",reason=\"True\",karpenter_k8s_aws_ec2nodeclass=\"default\",karpenter_sh_nodepool=\"pool-c\"} 1",
            "operator_nodeclaim_status_condition_transition_seconds_bucket{type=\"Ready\",status=\"Unknown\",karpenter_k8s_aws_ec2nodeclass=\"default\",karpenter_sh_nodepool=\"pool-c\",le=\"32\"} 1",
            "operator_nodeclaim_status_condition_transition_seconds_bucket{type=\"Ready\",status=\"Unknown\",karpenter_k8s_aws_ec2nodeclass=\"default\",karpenter_sh_nodepool=\"pool-c\",le=\"16\"} 0",
            "operator_nodeclaim_termination_duration_seconds_count{karpenter_k8s_aws_ec2nodeclass=\"default\",karpenter_sh_nodepool=\"pool-c\"} 1",
            "operator_status_condition_transitions_total{type=\"Ready\",status=\"True\",reason=\"True\",group=\"karpenter.sh\",kind=\"NodeClaim\"}",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn gauges_follow_the_objects_in_state() {
        let (state, mut writers) = ClusterState::new();
        writers.nodeclaims.apply(
            ObjectKey::new(None, "gauged-a"),
            claim("gauged-a", "True", "2026-01-01T00:00:00Z", true),
        );
        let text = super::super::exposition::collect(|out| write(out, &state));
        assert!(
            text.contains("operator_nodeclaim_status_condition_count{namespace=\"\",name=\"gauged-a\",type=\"Ready\",status=\"True\",reason=\"True\",karpenter_k8s_aws_ec2nodeclass=\"default\",karpenter_sh_nodepool=\"pool-c\"} 1"),
            "{text}"
        );
        assert!(text.contains("operator_nodeclaim_termination_current_time_seconds{namespace=\"\",name=\"gauged-a\""), "{text}");
        assert!(text.contains("operator_status_condition_count{namespace=\"\",name=\"gauged-a\",type=\"Ready\",status=\"True\",reason=\"True\",group=\"karpenter.sh\",kind=\"NodeClaim\"} 1"), "{text}");
        writers.nodeclaims.delete(&ObjectKey::new(None, "gauged-a"));
        let after = super::super::exposition::collect(|out| write(out, &state));
        assert!(!after.contains("gauged-a"), "{after}");
    }
}
