//! Pod metrics as upstream's pod metrics controller keeps them: `karpenter_pods_state`, one
//! series of value 1 per pod labelled with where it runs (its node's well-known labels) and
//! how it is doing (phase, scheduled, ready); per pod not bound or not started yet, how long
//! since its creation (`karpenter_pods_unbound_time_seconds`, `…_unstarted_…`) and since a
//! provisioning round took it up or placed it (`karpenter_pods_provisioning_…`, from
//! [`crate::state::PodSchedulingTimes`]); and, observed by the [`StartupTracker`] as pods
//! turn bound and ready, the time from creation (and from placement) until then.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kerf::labels;
use kerf::pods::{ConditionView, LeanPod, PodLike};
use kerf::room::GiveBackRoom;

use super::exposition::Exposition;
use crate::metrics::{
    PODS_BOUND_DURATION, PODS_PROVISIONING_BOUND_DURATION, PODS_PROVISIONING_STARTUP_DURATION,
    PODS_PROVISIONING_UNBOUND_TIME, PODS_PROVISIONING_UNDECIDED_TIME,
    PODS_PROVISIONING_UNSTARTED_TIME, PODS_STARTUP_DURATION, PODS_STATE, PODS_UNBOUND_TIME,
    PODS_UNSTARTED_TIME,
};
use crate::state::Change;
use crate::state::{ClusterState, ObjectKey};

/// Every pod of `state`, by namespace and name: the order of each per-pod family's series.
pub fn sorted(state: &ClusterState) -> Vec<Arc<LeanPod>> {
    let mut pods = state.pods.snapshot();
    pods.sort_by(|a, b| {
        let (a, b) = (a.meta(), b.meta());
        (a.namespace, a.name).cmp(&(b.namespace, b.name))
    });
    pods
}

/// The per-pod latency families, each written in one pass over `pods`.
#[derive(Clone, Copy)]
enum Latency {
    Unbound,
    Unstarted,
    Undecided,
    ProvisioningUnbound,
    ProvisioningUnstarted,
}

impl Latency {
    const ALL: [Self; 5] = [
        Self::Unbound,
        Self::Unstarted,
        Self::Undecided,
        Self::ProvisioningUnbound,
        Self::ProvisioningUnstarted,
    ];

    fn name_and_help(self) -> (&'static str, &'static str) {
        match self {
            Self::Unbound => (
                PODS_UNBOUND_TIME,
                "The time from pod creation until the pod is bound.",
            ),
            Self::Unstarted => (
                PODS_UNSTARTED_TIME,
                "The time from pod creation until the pod is running.",
            ),
            Self::Undecided => (
                PODS_PROVISIONING_UNDECIDED_TIME,
                "The time from when Karpenter has seen a pod without making a scheduling decision for the pod.",
            ),
            Self::ProvisioningUnbound => (
                PODS_PROVISIONING_UNBOUND_TIME,
                "The time from when Karpenter first thinks the pod can schedule until it binds.",
            ),
            Self::ProvisioningUnstarted => (
                PODS_PROVISIONING_UNSTARTED_TIME,
                "The time from when Karpenter first thinks the pod can schedule until the pod is running.",
            ),
        }
    }

    /// Since when `pod` has been waiting as this family counts, if it is.
    fn since(self, state: &ClusterState, pod: &LeanPod) -> Option<Timestamp> {
        let meta = pod.meta();
        let bound = pod.node_name().is_some();
        let pending = phase(pod) == Some("Pending");
        let times = || {
            let namespace = meta.namespace.unwrap_or_default();
            let key = ObjectKey::new(Some(namespace), meta.name.unwrap_or_default());
            state.scheduling.get(&key)
        };
        match self {
            Self::Unbound => meta.creation_timestamp.filter(|_| !bound).map(|t| t.0),
            Self::Unstarted => meta.creation_timestamp.filter(|_| pending).map(|t| t.0),
            Self::Undecided => times()
                .filter(|t| t.decided.is_none() && !bound)
                .map(|t| t.acked),
            Self::ProvisioningUnbound => times().and_then(|t| t.scheduled).filter(|_| !bound),
            Self::ProvisioningUnstarted => times().and_then(|t| t.scheduled).filter(|_| pending),
        }
    }
}

/// Per pod not bound or not started yet: how long since its creation, since a round took it
/// up without deciding yet, and since a round placed it. `pods` as [`sorted`] gives them.
pub fn write_latencies(out: &mut Exposition, state: &ClusterState, pods: &[Arc<LeanPod>]) {
    let now = Timestamp::now();
    for latency in Latency::ALL {
        let (name, help) = latency.name_and_help();
        let mut gauge = out.gauge(name, help);
        for pod in pods {
            if let Some(since) = latency.since(state, pod) {
                let meta = pod.meta();
                let labels = [
                    ("name", meta.name.unwrap_or_default()),
                    ("namespace", meta.namespace.unwrap_or_default()),
                ];
                gauge.series(&labels, now.duration_since(since).as_secs_f64().max(0.0));
            }
        }
    }
}

fn phase(pod: &LeanPod) -> Option<&str> {
    pod.status().and_then(|s| s.phase)
}

/// One `karpenter_pods_state` series per pod in `pods` (as [`sorted`] gives them). Its
/// labels are borrowed from the pod and its Node, and the owner is written into one buffer
/// for every pod: a scrape writes a series for each of a large cluster's pods.
pub fn write_state(out: &mut Exposition, state: &ClusterState, pods: &[Arc<LeanPod>]) {
    let mut gauge = out.gauge(
        PODS_STATE,
        "Pod state is the current state of pods. Labeled by the pod name, namespace, owner, \
         node, whether the pod is scheduled, nodepool name, zone, architecture, capacity \
         type, instance type, pod phase, pod readiness, and whether the node is \
         Karpenter-managed.",
    );
    let mut owner = String::new();
    for pod in pods {
        let node = pod
            .node_name()
            .filter(|name| !name.is_empty())
            .and_then(|name| state.nodes.get(&ObjectKey::new(None, name)));
        write_owner(&mut owner, pod);
        gauge.series(&state_labels(pod, &owner, node.as_deref()), 1.0);
    }
}

fn state_labels<'a>(
    pod: &'a LeanPod,
    owner: &'a str,
    node: Option<&'a Node>,
) -> [(&'static str, &'a str); 13] {
    let node_label = |key: &str| {
        node.and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(key))
            .map_or("", String::as_str)
    };
    let node_name = pod.node_name().unwrap_or_default();
    let nodepool = node_label(labels::NODEPOOL);
    let ready = condition(pod, "Ready").is_some_and(|c| c.status == "True");
    let flag = |b: bool| if b { "true" } else { "false" };
    [
        ("name", pod.meta().name.unwrap_or_default()),
        ("namespace", pod.meta().namespace.unwrap_or_default()),
        ("owner", owner),
        ("scheduled", flag(!node_name.is_empty())),
        ("node", node_name),
        ("managed", flag(!nodepool.is_empty())),
        ("nodepool", nodepool),
        ("zone", node_label(labels::ZONE)),
        ("arch", node_label(labels::ARCH)),
        ("capacity_type", node_label(labels::CAPACITY_TYPE)),
        ("instance_type", node_label(labels::INSTANCE_TYPE)),
        ("phase", phase(pod).unwrap_or_default()),
        ("ready", flag(ready)),
    ]
}

/// Writes into `out` upstream's `owner` label: the self link of the first owner reference.
fn write_owner(out: &mut String, pod: &LeanPod) {
    use std::fmt::Write as _;
    out.clear();
    let Some(first) = pod.meta().owner_references.first() else {
        return;
    };
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "/apis/{}/namespaces/{}/",
        first.api_version,
        pod.meta().namespace.unwrap_or_default(),
    );
    out.extend(first.kind.chars().flat_map(char::to_lowercase));
    let _ = write!(out, "s/{}", first.name);
}

fn condition<'a>(pod: &'a LeanPod, type_: &str) -> Option<ConditionView<'a>> {
    pod.status()?.condition(type_)
}

/// Observes startup and binding durations from pod changes: a pod seen `Pending` that turns
/// ready is recorded once, with the time from its creation to its `Ready` transition; a pod
/// seen unbound that is bound, with the time to its `PodScheduled` transition. With cluster
/// state to read, each is also recorded from when a provisioning round placed the pod, whose
/// times are forgotten once it runs, finishes or is gone.
#[derive(Debug, Default)]
pub struct StartupTracker {
    pending: HashSet<ObjectKey>,
    unbound: HashSet<ObjectKey>,
    state: Option<Arc<ClusterState>>,
}

impl StartupTracker {
    /// A tracker that also records the durations from the placement times in `state`.
    pub fn reading(state: Arc<ClusterState>) -> Self {
        Self {
            state: Some(state),
            ..Self::default()
        }
    }

    /// Updates the tracker with one change; returns the startup duration it observed, if any.
    pub fn observe(&mut self, pod: &LeanPod, change: Change) -> Option<f64> {
        let seconds = self.track(pod, change);
        // A scale-up fills both sets with every one of its pods, which leave them as they
        // bind and start.
        self.pending.give_back_room();
        self.unbound.give_back_room();
        seconds
    }

    fn track(&mut self, pod: &LeanPod, change: Change) -> Option<f64> {
        let key = ObjectKey::new(pod.meta().namespace, pod.meta().name.unwrap_or_default());
        let placed = self
            .state
            .as_ref()
            .and_then(|s| s.scheduling.get(&key))
            .and_then(|t| t.scheduled);
        if change == Change::Deleted {
            self.pending.remove(&key);
            self.unbound.remove(&key);
            self.forget(&key);
            return None;
        }
        self.observe_binding(pod, &key, placed);
        let phase = phase(pod);
        if phase == Some("Pending") {
            self.pending.insert(key);
            return None;
        }
        if !self.pending.contains(&key) {
            return None;
        }
        if let Some(ready) = condition(pod, "Ready").filter(|c| c.status == "True") {
            self.pending.remove(&key);
            self.forget(&key);
            let created = pod.meta().creation_timestamp?;
            let became_ready = ready.last_transition_time?;
            if let Some(placed) = placed {
                let seconds = became_ready.duration_since(placed).as_secs_f64().max(0.0);
                metrics::histogram!(PODS_PROVISIONING_STARTUP_DURATION).record(seconds);
            }
            let seconds = became_ready.duration_since(created.0).as_secs_f64();
            metrics::histogram!(PODS_STARTUP_DURATION).record(seconds);
            return Some(seconds);
        }
        if matches!(phase, Some("Succeeded" | "Failed")) {
            // A pod that finished without ever being ready has no startup time.
            self.pending.remove(&key);
            self.forget(&key);
        }
        None
    }

    /// Records the binding of a pod seen unbound.
    fn observe_binding(&mut self, pod: &LeanPod, key: &ObjectKey, placed: Option<Timestamp>) {
        if pod.node_name().is_none() {
            self.unbound.insert(key.clone());
            return;
        }
        if !self.unbound.remove(key) {
            return;
        }
        let Some(bound) = condition(pod, "PodScheduled")
            .filter(|c| c.status == "True")
            .and_then(|c| c.last_transition_time)
        else {
            return;
        };
        if let Some(created) = pod.meta().creation_timestamp {
            let seconds = bound.duration_since(created.0).as_secs_f64().max(0.0);
            metrics::histogram!(PODS_BOUND_DURATION).record(seconds);
        }
        if let Some(placed) = placed {
            let seconds = bound.duration_since(placed).as_secs_f64().max(0.0);
            metrics::histogram!(PODS_PROVISIONING_BOUND_DURATION).record(seconds);
        }
    }

    fn forget(&self, key: &ObjectKey) {
        if let Some(state) = &self.state {
            state.scheduling.forget(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(phase: &str, ready_at: Option<&str>) -> LeanPod {
        pod_on(Some("node-a"), phase, ready_at)
    }

    fn pod_on(node: Option<&str>, phase: &str, ready_at: Option<&str>) -> LeanPod {
        let mut conditions = Vec::new();
        if let Some(at) = ready_at {
            conditions.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": at}));
        }
        serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(json!({
            "metadata": {"name": "web-1", "namespace": "default",
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-abc", "uid": "u"}]},
            "spec": {"containers": [], "nodeName": node},
            "status": {"phase": phase, "conditions": conditions}
        }))
        .expect("valid pod")
        .into()
    }

    #[test]
    fn startup_is_observed_once_for_a_pod_seen_pending() {
        let mut tracker = StartupTracker::default();
        let ready = pod("Running", Some("2024-01-01T00:01:30Z"));
        assert_eq!(
            tracker.observe(&ready, Change::Applied),
            None,
            "never seen pending"
        );
        assert_eq!(
            tracker.observe(&pod("Pending", None), Change::Applied),
            None
        );
        assert_eq!(
            tracker.observe(&pod("Running", None), Change::Applied),
            None,
            "not ready yet"
        );
        assert_eq!(tracker.observe(&ready, Change::Applied), Some(90.0));
        assert_eq!(tracker.observe(&ready, Change::Applied), None, "once");
        tracker.observe(&pod("Pending", None), Change::Applied);
        tracker.observe(&pod("Pending", None), Change::Deleted);
        assert_eq!(
            tracker.observe(&ready, Change::Applied),
            None,
            "deleted pods are forgotten"
        );
    }

    #[test]
    fn binding_is_observed_for_a_pod_seen_unbound_and_placement_times_forgotten() {
        crate::metrics::handle();
        let (state, mut writers) = ClusterState::new();
        let key = ObjectKey::new(Some("default"), "bound-1");
        state.scheduling.decided(&key, true);
        let mut tracker = StartupTracker::reading(state.clone());
        let unbound: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "bound-1", "namespace": "default",
                "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": []}, "status": {"phase": "Pending"}
        }))
        .expect("valid pod");
        writers.pods.apply(key.clone(), unbound.clone());
        tracker.observe(&unbound.into(), Change::Applied);
        let pods = sorted(&state);
        let text = super::super::exposition::collect(|out| write_latencies(out, &state, &pods));
        assert!(
            text.contains(
                "karpenter_pods_unbound_time_seconds{name=\"bound-1\",namespace=\"default\"}"
            ),
            "{text}"
        );
        assert!(
            text.contains("karpenter_pods_provisioning_unbound_time_seconds{name=\"bound-1\""),
            "{text}"
        );
        let before = crate::metrics::render();
        let count = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("karpenter_pods_bound_duration_seconds_count"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let bound: LeanPod = serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(json!({
            "metadata": {"name": "bound-1", "namespace": "default",
                "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [], "nodeName": "node-a"},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:00:20Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:40Z"}]}
        }))
        .expect("valid pod")
        .into();
        assert_eq!(tracker.observe(&bound, Change::Applied), Some(40.0));
        assert!(count(&crate::metrics::render()) > count(&before));
        assert!(
            state.scheduling.get(&key).is_none(),
            "forgotten once running"
        );
    }

    #[test]
    fn state_labels_describe_the_pod_and_its_node() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-a", "labels": {
            "karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": "us-east-1a",
            "kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "spot",
            "node.kubernetes.io/instance-type": "m5.large"}}}))
        .expect("valid node");
        let running = pod("Running", Some("2024-01-01T00:01:30Z"));
        let mut owner = String::new();
        write_owner(&mut owner, &running);
        let labels = state_labels(&running, &owner, Some(&node));
        let get = |k: &str| labels.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        assert_eq!(
            get("owner"),
            Some("/apis/apps/v1/namespaces/default/replicasets/web-abc")
        );
        assert_eq!(get("scheduled"), Some("true"));
        assert_eq!(get("managed"), Some("true"));
        assert_eq!(get("nodepool"), Some("default"));
        assert_eq!(get("zone"), Some("us-east-1a"));
        assert_eq!(get("capacity_type"), Some("spot"));
        assert_eq!(get("instance_type"), Some("m5.large"));
        assert_eq!(get("phase"), Some("Running"));
        assert_eq!(get("ready"), Some("true"));
        let pending = pod_on(None, "Pending", None);
        let unbound = state_labels(&pending, "", None);
        let get = |k: &str| unbound.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        assert_eq!(get("scheduled"), Some("false"));
        assert_eq!(get("managed"), Some("false"));
        assert_eq!(get("nodepool"), Some(""));
    }
}
