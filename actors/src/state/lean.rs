//! What the stores keep of an object: the fields some decision reads, not the bookkeeping
//! around them. Most of a watched object is what no decision looks at (`managedFields`, a
//! pod's command lines, environment, probes and mounts, container statuses, a Node's image
//! list), and every store copy, inventory and snapshot would pay for it again, so each
//! object is trimmed once, when the watch delivers it ([`Lean::lean`]). Every kind but pods
//! keeps the API's type, so its readers read the fields they always did.
//!
//! Pods are stored as [`LeanPod`]s ([`Stored`]), their spec and shared metadata interned
//! through the store writer's [`PodInterner`] (see [`kerf::pods`]'s `lean` module); the spec
//! as [`keep_what_placement_reads`] leaves it, the status as a [`kerf::pods::LeanStatus`]
//! without the conditions nothing reads ([`READ_POD_CONDITIONS`]), and container statuses
//! only on finished pods (their last event is their containers' finish). Nodes lose their image list, attached volumes
//! and system info; a launched NodeClaim's requirements keep of their values the one its
//! labels pin ([`narrow_to_launched`]); every kind loses `managedFields` and the
//! last-applied annotation.
//! Nothing the controller writes is built from a trimmed part: its writes are merge patches
//! of the fields it sets.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    ContainerStatus, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodStatus,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, Operator};
use kerf::labels;
use kerf::pods::{LeanPod, PodInterner, keep_what_placement_reads};

/// kubectl's copy of the last applied manifest: the whole object again, read by nobody here.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The pod conditions decisions read: whether the kube-scheduler gave up on the pod (and
/// when it bound it), whether it is ready (metrics, startup time), and kerf's nomination.
/// The kubelet's others (`Initialized`, `ContainersReady`, `PodReadyToStartContainers`)
/// are read by nothing here.
pub const READ_POD_CONDITIONS: [&str; 3] =
    ["PodScheduled", "Ready", kerf::pods::NOMINATION_CONDITION];

/// An object the stores keep trimmed to what decisions read.
pub trait Lean {
    /// Drops what no decision reads, in place.
    fn lean(&mut self);
}

/// The form a store keeps an object of this kind in, made once as the watch delivers it:
/// the object itself, trimmed, for every kind but pods, which become [`LeanPod`]s whose
/// equal specs and template metadata are shared through the store writer's
/// [`PodInterner`].
pub trait Stored: Lean + Sized {
    type Form;
    /// What making the form needs from one object to the next (pods: what they share).
    type Context: Default + Send;
    fn stored(self, context: &mut Self::Context) -> Self::Form;
}

fn lean_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    drop_last_applied(meta);
    // Decoded maps are half-empty trees; a store holds them for the object's life.
    meta.labels.iter_mut().for_each(labels::compact);
    meta.annotations.iter_mut().for_each(labels::compact);
}

fn drop_last_applied(meta: &mut ObjectMeta) {
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// Kinds whose every field but the metadata's bookkeeping may be read.
macro_rules! metadata_only {
    ($($kind:ty),*) => {$(
        impl Lean for $kind {
            fn lean(&mut self) {
                lean_metadata(&mut self.metadata);
            }
        }
        stored_as_itself!($kind);
    )*};
}

/// Kinds a store keeps in their API form.
macro_rules! stored_as_itself {
    ($kind:ty) => {
        impl Stored for $kind {
            type Form = Self;
            type Context = ();
            fn stored(mut self, (): &mut ()) -> Self {
                self.lean();
                self
            }
        }
    };
}

stored_as_itself!(Node);

impl Stored for Pod {
    type Form = LeanPod;
    type Context = PodInterner;
    fn stored(mut self, interner: &mut PodInterner) -> LeanPod {
        self.lean();
        LeanPod::new(self, interner)
    }
}

stored_as_itself!(NodeClaim);

metadata_only!(
    NodePool,
    EC2NodeClass,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    CSINode,
    NodeOverlay,
    CapacityBuffer
);

impl Lean for Pod {
    fn lean(&mut self) {
        // `managedFields` are left for `LeanPod::new`, which keeps of them the one thing
        // read (when the kube-scheduler last gave a verdict) and drops the rest.
        drop_last_applied(&mut self.metadata);
        if let Some(spec) = self.spec.as_mut() {
            keep_what_placement_reads(spec);
        }
        let bound = kerf::pods::is_bound(&*self);
        if let Some(status) = self.status.as_mut() {
            if bound {
                // A bound pod's nomination is history: every reader of it (nomination
                // writes and withdrawals, preemption) looks at pending pods only, and the
                // kube-scheduler leaves it on the pod for good: about a fifth of a lean
                // pod, kept for every running pod.
                status.nominated_node_name = None;
                if let Some(conditions) = status.conditions.as_mut() {
                    conditions.retain(|c| c.type_ != kerf::pods::NOMINATION_CONDITION);
                }
            }
            // Of the rest, the stored form (`LeanPod`'s status) keeps only what is read: no
            // addresses, QoS class, or init and ephemeral containers' statuses.
            if finished(status) {
                status
                    .container_statuses
                    .iter_mut()
                    .flatten()
                    .for_each(lean_container_status);
            } else {
                status.container_statuses = None;
            }
            if let Some(conditions) = status.conditions.as_mut() {
                conditions.retain(|c| READ_POD_CONDITIONS.contains(&c.type_.as_str()));
                // Only kerf's nomination is read for its message (it names the node). The
                // kube-scheduler's `0/1005 nodes are available: …` on every pending pod
                // is read by nothing, and is held for every pending pod.
                conditions
                    .iter_mut()
                    .filter(|c| c.type_ != kerf::pods::NOMINATION_CONDITION)
                    .for_each(|c| c.message = None);
            }
        }
    }
}

/// Whether the pod has finished (`Succeeded` or `Failed`): only then are its containers'
/// statuses read (their finish time is the pod's last event on its node).
fn finished(status: &PodStatus) -> bool {
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
}

fn lean_container_status(status: &mut ContainerStatus) {
    let ContainerStatus {
        name,
        ready,
        restart_count,
        started,
        state,
        ..
    } = std::mem::take(status);
    *status = ContainerStatus {
        name,
        ready,
        restart_count,
        started,
        state,
        ..ContainerStatus::default()
    };
}

impl Lean for NodeClaim {
    fn lean(&mut self) {
        lean_metadata(&mut self.metadata);
        narrow_to_launched(self);
    }
}

/// Narrows each `In` requirement of a launched NodeClaim to the value its labels pin. The
/// values a NodeClaim may launch as are read only until it launches (to launch, and to
/// size its room while it has no instance type); from then its labels say what it is.
/// The instance-type requirement alone lists up to sixty types: kilobytes a NodeClaim
/// would hold for its Node's whole life.
fn narrow_to_launched(claim: &mut NodeClaim) {
    let launched = claim.provider_id().is_some_and(|id| !id.is_empty());
    let (Some(labels), true) = (claim.metadata.labels.as_ref(), launched) else {
        return;
    };
    for requirement in &mut claim.spec.requirements {
        if requirement.operator != Operator::In || requirement.values.len() < 2 {
            continue;
        }
        if let Some(value) = labels.get(&requirement.key)
            && requirement.values.contains(value)
        {
            // One value is as many as it will ever have: no minimum is left to check.
            requirement.values = vec![value.clone()];
            requirement.min_values = None;
        }
    }
}

impl Lean for Node {
    fn lean(&mut self) {
        lean_metadata(&mut self.metadata);
        if let Some(status) = self.status.as_mut() {
            status.images = None;
            status.volumes_attached = None;
            status.volumes_in_use = None;
            status.node_info = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::pods::PodLike;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u-1",
                "labels": {"app": "web"},
                "annotations": {
                    "karpenter.sh/do-not-disrupt": "true",
                    LAST_APPLIED: "{\"a whole\": \"manifest\"}"
                },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs"}],
                "managedFields": [
                    {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}},
                    {"manager": "kube-scheduler", "operation": "Update", "subresource": "status",
                     "time": "2024-01-01T00:00:05Z", "fieldsV1": {"f:status": {}}}
                ]
            },
            "spec": {
                "priority": 100,
                "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "containers": [{
                    "name": "app", "image": "web:1", "env": [{"name": "SECRET", "value": "x"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
                }],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}},
                    {"name": "config", "configMap": {"name": "web"}}
                ]
            },
            "status": {
                "phase": "Succeeded",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available: 3 Insufficient cpu."},
                    {"type": "Ready", "status": "False"},
                    {"type": "ContainersReady", "status": "False"},
                    {"type": kerf::pods::NOMINATION_CONDITION, "status": "True", "message": "expected on node n1"}
                ],
                "containerStatuses": [{
                    "name": "app", "image": "web:1", "imageID": "sha256:abc", "ready": false,
                    "restartCount": 2, "containerID": "containerd://1",
                    "lastState": {"terminated": {"exitCode": 1}},
                    "state": {"terminated": {"exitCode": 0, "finishedAt": "2024-01-01T00:00:00Z"}}
                }]
            }
        }))
        .expect("a valid pod")
    }

    #[test]
    fn a_pod_keeps_what_decisions_read_and_loses_the_rest() {
        let stored = pod().stored(&mut PodInterner::default());
        let full = pod();
        assert_eq!(
            stored.scheduler_reported_at().map(|t| t.to_string()),
            Some("2024-01-01T00:00:05Z".to_owned()),
            "of managedFields, the kube-scheduler's status write time"
        );
        let lean = stored.to_pod();
        let kept: Vec<(Option<&str>, bool)> = lean
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .map(|e| (e.manager.as_deref(), e.fields_v1.is_some()))
            .collect();
        assert_eq!(kept, [(Some("kube-scheduler"), false)], "its time alone");
        let annotations = stored.meta().annotations.expect("annotations");
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(annotations["karpenter.sh/do-not-disrupt"], "true");
        assert_eq!(lean.metadata.labels, full.metadata.labels);
        assert_eq!(
            lean.metadata.owner_references,
            full.metadata.owner_references
        );
        assert_eq!(lean.metadata.uid, full.metadata.uid);
        assert_eq!(lean.metadata.namespace, full.metadata.namespace);
        assert_eq!(lean.metadata.name, full.metadata.name);

        let (spec, was) = (lean.spec.as_ref().expect("spec"), full.spec.expect("spec"));
        assert_eq!(spec.node_name, was.node_name);
        assert_eq!(spec.priority, was.priority);
        assert_eq!(spec.node_selector, was.node_selector);
        assert_eq!(spec.tolerations, was.tolerations);
        let mut trimmed = was;
        keep_what_placement_reads(&mut trimmed);
        assert_eq!(*spec, trimmed, "the spec as placement reads it");

        let status = lean.status.as_ref().expect("status");
        let was = full.status.expect("status");
        assert_eq!(status.phase, was.phase);
        let kept: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            kept,
            ["PodScheduled", "Ready", kerf::pods::NOMINATION_CONDITION]
        );
        let (conditions, were) = (
            status.conditions.as_ref().expect("conditions"),
            was.conditions.as_ref().expect("conditions"),
        );
        assert_eq!(
            conditions[2], were[3],
            "kerf's nomination names its node in the message"
        );
        assert_eq!(
            (
                conditions[0].reason.as_deref(),
                conditions[0].message.as_deref()
            ),
            (Some("Unschedulable"), None),
            "the kube-scheduler's verdict without its message"
        );
        let app = &status.container_statuses.as_ref().expect("statuses")[0];
        let was = &was.container_statuses.expect("statuses")[0];
        assert_eq!(app.state, was.state, "a finished pod's last event");
        assert_eq!((app.ready, app.restart_count), (false, 2));
        assert!(app.image_id.is_empty() && app.container_id.is_none() && app.last_state.is_none());
    }

    #[test]
    fn a_running_pod_keeps_no_container_status_nor_addresses() {
        let mut running = pod();
        let status = running.status.as_mut().expect("status");
        status.phase = Some("Running".to_owned());
        status.pod_ip = Some("10.0.3.4".to_owned());
        status.host_ip = Some("10.0.1.2".to_owned());
        status.qos_class = Some("Burstable".to_owned());
        let stored = running.stored(&mut PodInterner::default());
        let status = stored.status().expect("status");
        assert_eq!(status.phase, Some("Running"));
        assert_eq!(status.conditions().count(), 3);
        assert!(status.container_statuses.is_empty());
        let back = stored.to_pod().status.expect("status");
        assert!(back.pod_ip.is_none() && back.host_ip.is_none() && back.qos_class.is_none());
    }

    #[test]
    fn a_bound_pod_loses_its_nomination_and_a_pending_one_keeps_it() {
        let nominated = |node_name: Option<&str>| {
            let mut pod = pod();
            pod.spec.as_mut().expect("spec").node_name = node_name.map(str::to_owned);
            let status = pod.status.as_mut().expect("status");
            status.phase = Some("Running".to_owned());
            status.nominated_node_name = Some("n1".to_owned());
            pod.lean();
            pod.status.expect("status")
        };
        let types = |status: &PodStatus| -> Vec<String> {
            status
                .conditions
                .iter()
                .flatten()
                .map(|c| c.type_.clone())
                .collect()
        };

        let pending = nominated(None);
        assert_eq!(pending.nominated_node_name.as_deref(), Some("n1"));
        assert!(types(&pending).contains(&kerf::pods::NOMINATION_CONDITION.to_owned()));

        let bound = nominated(Some("n1"));
        assert_eq!(bound.nominated_node_name, None);
        assert_eq!(types(&bound), ["PodScheduled", "Ready"]);
    }

    #[test]
    fn a_node_keeps_labels_taints_conditions_and_resources() {
        let node = || -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default"},
                    "managedFields": [{"manager": "kubelet"}]},
                "spec": {"providerID": "aws:///us-east-1a/i-1",
                    "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
                "status": {
                    "allocatable": {"cpu": "2"}, "capacity": {"cpu": "2"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "images": [{"names": ["web:1"], "sizeBytes": 1}],
                    "volumesInUse": ["v"],
                    "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                        "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                        "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}
                }
            }))
            .expect("a valid node")
        };
        let mut lean = node();
        lean.lean();
        let full = node();
        assert!(lean.metadata.managed_fields.is_none());
        assert_eq!(lean.metadata.labels, full.metadata.labels);
        assert_eq!(lean.spec, full.spec);
        let (status, was) = (lean.status.expect("status"), full.status.expect("status"));
        assert_eq!(status.allocatable, was.allocatable);
        assert_eq!(status.capacity, was.capacity);
        assert_eq!(status.conditions, was.conditions);
        assert!(status.images.is_none() && status.volumes_in_use.is_none());
        assert!(status.node_info.is_none());
    }

    #[test]
    fn other_kinds_lose_only_metadata_bookkeeping() {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "annotations": {"karpenter.sh/nodepool-hash": "1"},
                "managedFields": [{"manager": "kerf"}]},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]}
        }))
        .expect("a valid NodeClaim");
        let full = claim.clone();
        claim.lean();
        assert!(claim.metadata.managed_fields.is_none());
        assert_eq!(claim.metadata.annotations, full.metadata.annotations);
        assert_eq!(claim.spec, full.spec);
    }

    fn claim(provider_id: Option<&str>) -> NodeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "labels": {
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/zone": "us-east-1b",
                "team": "x"
            }},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In",
                     "values": ["m5.large", "m5.xlarge", "c5.large"], "minValues": 2},
                    {"key": "topology.kubernetes.io/zone", "operator": "In",
                     "values": ["us-east-1a", "us-east-1b"]},
                    {"key": "team", "operator": "NotIn", "values": ["y", "z"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In",
                     "values": ["spot", "on-demand"]}
                ]
            },
            "status": {"providerID": provider_id}
        }))
        .expect("a valid NodeClaim")
    }

    fn values(claim: &NodeClaim) -> Vec<Vec<&str>> {
        claim
            .requirements()
            .iter()
            .map(|r| r.values.iter().map(String::as_str).collect())
            .collect()
    }

    #[test]
    fn a_launched_nodeclaim_keeps_of_its_requirements_the_values_its_labels_pin() {
        let mut launched = claim(Some("aws:///us-east-1b/i-0123"));
        launched.lean();
        assert_eq!(
            values(&launched),
            [
                vec!["m5.xlarge"],
                vec!["us-east-1b"],
                vec!["y", "z"],
                vec!["spot", "on-demand"],
            ],
            "In narrowed to the label; NotIn and unlabelled keys as they were"
        );
        assert_eq!(launched.requirements()[0].min_values, None);
        let mut unlaunched = claim(None);
        unlaunched.lean();
        assert_eq!(
            unlaunched.spec,
            claim(None).spec,
            "still to launch: all kept"
        );
    }
}
