//! Storage advice: the running controller says what `kerf plan` warns about in-tree EBS
//! storage — a StorageClass on the `kubernetes.io/aws-ebs` provisioner, a PersistentVolume
//! with an `awsElasticBlockStore` source, a pending pod mounting one directly — as a Warning
//! event on each object (reason [`IN_TREE_STORAGE`]), where upstream only logs. Each object is
//! warned about once per process: a pass every [`PERIOD`] reads the cluster state (no API
//! reads) and remembers the UIDs it warned, forgetting those that are gone. Only the leader
//! publishes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kerf::advice::{IN_TREE_POD_VOLUME, in_tree_storage_class, in_tree_volume, uses_in_tree_ebs};
use kerf::pods::{LeanPod, PodLike, is_bound};
use kube::ResourceExt;
use tokio::sync::watch;

use crate::events::{Event, EventRecorder, EventType};
use crate::state::ClusterState;

/// kerf's event reason (upstream has none: it logs).
pub const IN_TREE_STORAGE: &str = "InTreeStorageUnsupported";

/// Between passes: storage objects change rarely, and each is warned about once.
pub const PERIOD: Duration = Duration::from_secs(5 * 60);

/// The UIDs already warned about.
#[derive(Debug, Default)]
pub struct Warned(HashSet<String>);

impl Warned {
    /// The events for objects of `state` not warned about yet; forgets objects that are gone,
    /// so the memory stays the size of the cluster's in-tree objects.
    pub fn pass(&mut self, state: &ClusterState) -> Vec<Event> {
        let mut found: Vec<(String, ObjectReference, String)> = Vec::new();
        for class in state.storage_classes.snapshot() {
            if let Some(problem) = in_tree_storage_class(&class) {
                found.push((
                    uid(class.uid()),
                    reference(
                        "storage.k8s.io/v1",
                        "StorageClass",
                        None,
                        &class.name_any(),
                        class.uid(),
                    ),
                    problem,
                ));
            }
        }
        for volume in state.persistent_volumes.snapshot() {
            if let Some(problem) = in_tree_volume(&volume) {
                found.push((
                    uid(volume.uid()),
                    reference(
                        "v1",
                        "PersistentVolume",
                        None,
                        &volume.name_any(),
                        volume.uid(),
                    ),
                    problem,
                ));
            }
        }
        for pod in state.pods.snapshot() {
            if !is_bound(&*pod) && uses_in_tree_ebs(&pod) {
                found.push(pod_warning(&pod));
            }
        }
        let present: HashSet<&String> = found.iter().map(|(uid, _, _)| uid).collect();
        self.0.retain(|seen| present.contains(seen));
        found
            .into_iter()
            .filter(|(uid, _, _)| self.0.insert(uid.clone()))
            .map(|(_, regarding, message)| Event {
                regarding,
                type_: EventType::Warning,
                reason: IN_TREE_STORAGE,
                message,
                dedupe: None,
                throttle: None,
            })
            .collect()
    }
}

fn pod_warning(pod: &LeanPod) -> (String, ObjectReference, String) {
    let meta = pod.meta();
    let uid = meta.uid.map(str::to_owned);
    let regarding = reference(
        "v1",
        "Pod",
        meta.namespace,
        meta.name.unwrap_or_default(),
        uid.clone(),
    );
    (self::uid(uid), regarding, IN_TREE_POD_VOLUME.to_owned())
}

fn uid(uid: Option<String>) -> String {
    uid.unwrap_or_default()
}

fn reference(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    uid: Option<String>,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some(kind.to_owned()),
        namespace: namespace.map(str::to_owned),
        name: Some(name.to_owned()),
        uid,
        ..ObjectReference::default()
    }
}

/// Runs passes every [`PERIOD`] once the cluster state has synced, publishing while `leader`
/// holds, until `shutdown`.
pub async fn run(
    state: Arc<ClusterState>,
    events: EventRecorder,
    leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    state.wait_synced().await;
    let mut warned = Warned::default();
    loop {
        if *leader.borrow() {
            for event in warned.pass(&state) {
                tracing::warn!(object = ?event.regarding.name, kind = ?event.regarding.kind, message = %event.message, "in-tree storage");
                events.publish(event);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(PERIOD) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ObjectKey;
    use serde_json::json;

    fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
        serde_json::from_value(value).expect("a valid object")
    }

    #[test]
    fn each_in_tree_object_is_warned_about_once_and_forgotten_when_gone() {
        let (state, mut writers) = ClusterState::new();
        writers.storage_classes.apply(
            ObjectKey::new(None, "gp2"),
            object(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "gp2", "uid": "sc-1"}, "provisioner": "kubernetes.io/aws-ebs"})),
        );
        writers.storage_classes.apply(
            ObjectKey::new(None, "gp3"),
            object(
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "gp3", "uid": "sc-2"}, "provisioner": "ebs.csi.aws.com"}),
            ),
        );
        writers.persistent_volumes.apply(
            ObjectKey::new(None, "old"),
            object(json!({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "old", "uid": "pv-1"},
                "spec": {"awsElasticBlockStore": {"volumeID": "vol-1"}, "capacity": {"storage": "1Gi"}}})),
        );
        let pod = |name: &str, uid: &str, node: Option<&str>| -> k8s_openapi::api::core::v1::Pod {
            object(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "uid": uid},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}],
                    "volumes": [{"name": "d", "awsElasticBlockStore": {"volumeID": "vol-2"}}]}}))
        };
        writers.pods.apply(
            ObjectKey::new(Some("default"), "pending"),
            pod("pending", "pod-1", None),
        );
        writers.pods.apply(
            ObjectKey::new(Some("default"), "running"),
            pod("running", "pod-2", Some("n")),
        );

        let mut warned = Warned::default();
        let first = warned.pass(&state);
        let about: Vec<(Option<&str>, Option<&str>)> = first
            .iter()
            .map(|e| (e.regarding.kind.as_deref(), e.regarding.name.as_deref()))
            .collect();
        assert_eq!(
            about,
            [
                (Some("StorageClass"), Some("gp2")),
                (Some("PersistentVolume"), Some("old")),
                (Some("Pod"), Some("pending")),
            ],
            "the CSI class and the bound pod are left alone"
        );
        assert!(
            first
                .iter()
                .all(|e| e.type_ == EventType::Warning && e.reason == IN_TREE_STORAGE)
        );
        assert!(
            first[0]
                .message
                .contains("is an in-tree storage plugin, unsupported by Karpenter")
        );
        assert!(warned.pass(&state).is_empty(), "once per object");

        // A StorageClass deleted and made again (a new UID) is warned about again.
        writers.storage_classes.delete(&ObjectKey::new(None, "gp2"));
        assert!(warned.pass(&state).is_empty());
        writers.storage_classes.apply(
            ObjectKey::new(None, "gp2"),
            object(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "gp2", "uid": "sc-3"}, "provisioner": "kubernetes.io/aws-ebs"})),
        );
        assert_eq!(warned.pass(&state).len(), 1);
    }
}
