//! The last pod event of each node, which `status.lastPodEventTime` records as upstream's
//! `nodeclaim.podevents` controller does: a non-DaemonSet pod scheduled to the node (its
//! `PodScheduled` transition time), a pod on it turning terminating (when its deletion was
//! asked for: the deletion timestamp less the grace period) or terminal (its containers'
//! last finish), or leaving it (the moment its deletion was seen: the watch hook records it
//! in [`Departures`], since the pod is gone from state by the next pass). The time only
//! moves forward, and never past now.

use std::collections::HashMap;
use std::sync::Arc;

use dashmap::DashMap;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kerf::pods::{LeanPod, PodLike};

use crate::requeue::Trigger;
use crate::state::Change;

/// When a pod last left each node (node name → time), written by the pod watch hook and
/// pruned by the pass to the nodes that still exist.
#[derive(Clone, Debug, Default)]
pub struct Departures(Arc<DashMap<String, Timestamp>>);

impl Departures {
    pub fn record(&self, node: &str, at: Timestamp) {
        self.0
            .entry(node.to_owned())
            .and_modify(|t| *t = (*t).max(at))
            .or_insert(at);
    }

    pub fn get(&self, node: &str) -> Option<Timestamp> {
        self.0.get(node).map(|t| *t)
    }

    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.0.retain(|node, _| live(node));
    }
}

fn node_of(pod: &LeanPod) -> Option<&str> {
    pod.node_name().filter(|n| !n.is_empty())
}

/// The watch hook: records departures and wakes the pass on any pod change.
pub fn on_pod(departures: Departures, trigger: Trigger) -> impl FnMut(&LeanPod, Change) + Send {
    move |pod, change| {
        if change == Change::Deleted
            && !kerf::pods::is_owned_by(pod, "DaemonSet")
            && let Some(node) = node_of(pod)
        {
            departures.record(node, Timestamp::now());
        }
        trigger.fire();
    }
}

/// The latest event `pod` gives its node, if any.
fn event_time(pod: &LeanPod) -> Option<Timestamp> {
    if let Some(deadline) = pod.meta().deletion_timestamp {
        // The deletion timestamp is when the pod must be gone, its grace period after the
        // deletion was asked for: the event is the asking (upstream stamps the moment it sees
        // the pod terminating), never a time still to come.
        let grace = pod.meta().deletion_grace_period_seconds.unwrap_or(0);
        return deadline
            .0
            .checked_sub(SignedDuration::from_secs(grace))
            .ok();
    }
    let status = pod.status()?;
    if matches!(status.phase, Some("Succeeded" | "Failed")) {
        return status
            .container_statuses
            .iter()
            .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
            .map(|t| t.0)
            .max();
    }
    status
        .condition("PodScheduled")
        .filter(|c| c.status == "True")?
        .last_transition_time
}

/// The last pod event of every node that has one, from the pods in state and the recorded
/// departures.
pub fn last_events(pods: &[Arc<LeanPod>], departures: &Departures) -> HashMap<String, Timestamp> {
    let mut last: HashMap<String, Timestamp> = departures
        .0
        .iter()
        .map(|e| (e.key().clone(), *e.value()))
        .collect();
    for pod in pods
        .iter()
        .filter(|p| !kerf::pods::is_owned_by(p, "DaemonSet"))
    {
        let (Some(node), Some(at)) = (node_of(pod), event_time(pod)) else {
            continue;
        };
        last.entry(node.to_owned())
            .and_modify(|t| *t = (*t).max(at))
            .or_insert(at);
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(node: &str, json: serde_json::Value) -> Arc<LeanPod> {
        let mut value = serde_json::json!({"metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": node, "containers": []}});
        if let (Some(v), Some(extra)) = (value.as_object_mut(), json.as_object()) {
            for (k, x) in extra {
                if k == "metadata" {
                    v["metadata"]
                        .as_object_mut()
                        .expect("metadata")
                        .extend(x.as_object().expect("object").clone());
                } else {
                    v.insert(k.clone(), x.clone());
                }
            }
        }
        Arc::new(LeanPod::from(
            serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(value).expect("a valid pod"),
        ))
    }

    fn scheduled(at: &str) -> serde_json::Value {
        serde_json::json!({"status": {"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]}})
    }

    #[test]
    fn newest_of_scheduled_terminating_terminal_and_departed_daemons_excluded() {
        let t = |s: &str| -> Timestamp { s.parse().expect("time") };
        let departures = Departures::default();
        departures.record("gone", t("2026-01-01T10:05:00Z"));
        departures.record("gone", t("2026-01-01T10:01:00Z"));
        let pods = [
            pod("a", scheduled("2026-01-01T10:00:00Z")),
            pod("a", scheduled("2026-01-01T10:02:00Z")),
            pod(
                "b",
                serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T10:03:30Z",
                    "deletionGracePeriodSeconds": 30}}),
            ),
            pod(
                "c",
                serde_json::json!({"status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "x", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-01-01T10:04:00Z"}}}]}}),
            ),
            pod("d", {
                let mut daemon = scheduled("2026-01-01T10:09:00Z");
                daemon["metadata"] = serde_json::json!({"ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]});
                daemon
            }),
        ];
        let last = last_events(&pods, &departures);
        assert_eq!(last.get("a"), Some(&t("2026-01-01T10:02:00Z")));
        assert_eq!(
            last.get("b"),
            Some(&t("2026-01-01T10:03:00Z")),
            "when the deletion was asked for, not the grace period's end"
        );
        assert_eq!(last.get("c"), Some(&t("2026-01-01T10:04:00Z")));
        assert_eq!(last.get("gone"), Some(&t("2026-01-01T10:05:00Z")));
        assert_eq!(last.get("d"), None, "DaemonSet pods are no pod events");
    }
}
