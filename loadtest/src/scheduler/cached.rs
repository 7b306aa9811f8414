//! What the simulated kube-scheduler's pod cache keeps of each pod: the few fields the
//! scheduling cycle reads (identity, whether the pod is ours to schedule, its binding,
//! nomination, priority and creation time, and its `PodScheduled` condition while unbound)
//! plus the pod compiled for scheduling ([`PodInfo`]), made once per pod version as the
//! watch delivers it, its shape shared with the other pods of its workload. A typed `Pod`
//! keeps room for every field it could have, so the cache holds this projection instead and
//! each version is compiled exactly once.

use super::DEFAULT_SCHEDULER_NAME;
use super::podinfo::{PodInfo, Shapes};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;

/// One pod as the scheduler's cache keeps it.
#[derive(Clone, Debug)]
pub(crate) struct CachedPod {
    pub(crate) name: String,
    /// `default` when the pod has none.
    pub(crate) namespace: String,
    /// The pod's uid, or `namespace/name` when it has none.
    pub(crate) uid: String,
    pub(crate) resource_version: Option<String>,
    pub(crate) created: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set.
    pub(crate) deleting: bool,
    /// `spec.schedulerName`; `None` means the default scheduler.
    pub(crate) scheduler_name: Option<String>,
    /// Some scheduling gate is still on the pod.
    pub(crate) gated: bool,
    /// `spec.nodeName`, when set and not empty.
    pub(crate) node_name: Option<String>,
    /// `spec.priority` (0 when unset).
    pub(crate) priority: i32,
    pub(crate) phase: Option<String>,
    /// `status.nominatedNodeName`, when set and not empty.
    pub(crate) nominated_node: Option<String>,
    /// The `PodScheduled` condition while the pod is unbound, which an unschedulable report
    /// compares against (a bound pod is never reported, so it does not keep it).
    pub(crate) scheduled: Option<PodCondition>,
    /// The pod compiled for scheduling, or why it could not be (a malformed quantity).
    pub(crate) info: Result<Arc<PodInfo>, String>,
}

impl CachedPod {
    /// The projection of `pod`, its shape its own.
    #[cfg(test)]
    pub(crate) fn of(pod: Pod) -> CachedPod {
        CachedPod::sharing(pod, &mut Shapes::default())
    }

    /// The projection of `pod`, sharing its shape with an equal one in `shapes`.
    pub(crate) fn sharing(pod: Pod, shapes: &mut Shapes) -> CachedPod {
        let info = PodInfo::shared(&pod, shapes).map(Arc::new);
        let Pod {
            metadata,
            spec,
            status,
        } = pod;
        let name = metadata.name.unwrap_or_default();
        let namespace = metadata.namespace.unwrap_or_else(|| "default".to_owned());
        let uid = metadata
            .uid
            .unwrap_or_else(|| format!("{namespace}/{name}"));
        let spec = spec.unwrap_or_default();
        let node_name = spec.node_name.filter(|n| !n.is_empty());
        let status = status.unwrap_or_default();
        let scheduled = if node_name.is_none() {
            status
                .conditions
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled")
        } else {
            None
        };
        CachedPod {
            name,
            namespace,
            uid,
            resource_version: metadata.resource_version,
            created: metadata.creation_timestamp.map(|t| t.0),
            deleting: metadata.deletion_timestamp.is_some(),
            scheduler_name: spec.scheduler_name.filter(|s| s != DEFAULT_SCHEDULER_NAME),
            gated: spec.scheduling_gates.is_some_and(|g| !g.is_empty()),
            node_name,
            priority: spec.priority.unwrap_or(0),
            phase: status.phase,
            nominated_node: status.nominated_node_name.filter(|n| !n.is_empty()),
            scheduled,
            info,
        }
    }

    /// The scheduler this pod asks for.
    pub(crate) fn scheduler_name(&self) -> &str {
        self.scheduler_name
            .as_deref()
            .unwrap_or(DEFAULT_SCHEDULER_NAME)
    }

    /// Succeeded and Failed pods hold no resources.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded") | Some("Failed"))
    }

    /// Bound to a node whose kubelet has not started it yet.
    pub(crate) fn is_starting(&self) -> bool {
        self.node_name.is_some() && matches!(self.phase.as_deref(), None | Some("Pending"))
    }
}

crate::informer::pod_projection_lookup!(CachedPod);

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    #[test]
    fn the_projection_keeps_what_the_cycle_reads() {
        let unbound = pod(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-02T00:00:00Z",
                "labels": {"app": "web"}},
            "spec": {"schedulerName": "other", "priority": 5, "schedulingGates": [{"name": "g"}],
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending", "nominatedNodeName": "n2",
                "conditions": [{"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }));
        let compiled = format!("{:?}", PodInfo::new(&unbound).expect("compiles"));
        let cached = CachedPod::of(unbound);
        assert_eq!(
            (
                cached.name.as_str(),
                cached.namespace.as_str(),
                cached.uid.as_str()
            ),
            ("web-1", "shop", "u1")
        );
        assert_eq!(cached.resource_version.as_deref(), Some("7"));
        assert_eq!(
            cached.created,
            Some("2026-01-01T00:00:00Z".parse().expect("a time"))
        );
        assert!(cached.deleting && cached.gated);
        assert_eq!((cached.scheduler_name(), cached.priority), ("other", 5));
        assert_eq!(cached.nominated_node.as_deref(), Some("n2"));
        assert_eq!(
            cached.scheduled.as_ref().and_then(|c| c.reason.as_deref()),
            Some("Unschedulable")
        );
        assert!(!cached.is_terminal() && !cached.is_starting());
        let info = cached.info.as_ref().expect("compiled");
        assert_eq!(format!("{info:?}"), compiled, "compiled from the whole pod");

        let bound = CachedPod::of(pod(serde_json::json!({
            "metadata": {"name": "web-2"},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}
        })));
        assert_eq!(bound.namespace, "default");
        assert_eq!(bound.uid, "default/web-2", "no uid: keyed by its name");
        assert_eq!(bound.scheduler_name(), DEFAULT_SCHEDULER_NAME);
        assert_eq!(bound.node_name.as_deref(), Some("n1"));
        assert!(bound.is_starting());
        assert!(bound.scheduled.is_none(), "a bound pod is never reported");
    }

    #[test]
    fn a_malformed_pod_is_cached_with_its_error() {
        let cached = CachedPod::of(pod(serde_json::json!({
            "metadata": {"name": "bad", "namespace": "ns"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "lots"}}}]}
        })));
        let error = cached.info.expect_err("cpu: lots does not parse");
        assert!(error.contains("pod ns/bad"), "{error}");
    }

    #[test]
    fn the_projection_is_small() {
        // Every pod of a run is cached: the projection's own room stays a fraction of a
        // typed Pod's, before counting any of the Pod's strings, maps and lists.
        assert!(
            size_of::<CachedPod>() <= 512,
            "{} bytes",
            size_of::<CachedPod>()
        );
        assert!(size_of::<Pod>() > 3 * size_of::<CachedPod>());
    }
}
