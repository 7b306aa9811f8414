//! Pods as the simulated node agents touch them: the daemonset pods the daemonset
//! controller would create for a node (owned by their DaemonSet, with its default
//! tolerations, bound to the node), and the status a kubelet reports once a pod runs; and
//! [`KubeletPod`], what the kubelets' pod cache keeps of each pod.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kerf::taints::{EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE};
use rand::Rng;
use serde_json::{Value, json};

/// Tolerations the daemonset controller adds to every daemon pod, so daemons survive the
/// conditions that would evict ordinary pods.
fn default_tolerations(host_network: bool) -> Vec<Toleration> {
    let exists = |key: &str, effect: &str| Toleration {
        key: Some(key.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some(effect.to_owned()),
        ..Toleration::default()
    };
    let mut tolerations = vec![
        exists("node.kubernetes.io/not-ready", EFFECT_NO_EXECUTE),
        exists("node.kubernetes.io/unreachable", EFFECT_NO_EXECUTE),
        exists("node.kubernetes.io/disk-pressure", EFFECT_NO_SCHEDULE),
        exists("node.kubernetes.io/memory-pressure", EFFECT_NO_SCHEDULE),
        exists("node.kubernetes.io/pid-pressure", EFFECT_NO_SCHEDULE),
        exists("node.kubernetes.io/unschedulable", EFFECT_NO_SCHEDULE),
    ];
    if host_network {
        tolerations.push(exists(
            "node.kubernetes.io/network-unavailable",
            EFFECT_NO_SCHEDULE,
        ));
    }
    tolerations
}

/// The daemon pod of `daemonset` for `node`: its template, owned by the DaemonSet, bound.
pub(crate) fn daemon_pod(daemonset: &DaemonSet, node: &str) -> Pod {
    let ds_name = daemonset.metadata.name.clone().unwrap_or_default();
    let template = daemonset
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);
    let mut tolerations = spec.tolerations.take().unwrap_or_default();
    for toleration in default_tolerations(host_network) {
        if !tolerations.contains(&toleration) {
            tolerations.push(toleration);
        }
    }
    spec.tolerations = Some(tolerations);
    spec.node_name = Some(node.to_owned());
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{ds_name}-{}", random_suffix())),
            namespace: daemonset.metadata.namespace.clone(),
            labels: template_meta.labels,
            annotations: template_meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_owned(),
                kind: "DaemonSet".to_owned(),
                name: ds_name,
                uid: daemonset.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Whether `daemonset` wants a pod on `node` (taints, cordon and node affinity allow it).
pub(crate) fn should_run(daemonset: &DaemonSet, node: &Node) -> bool {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    crate::scheduler::fits_node(&daemon_pod(daemonset, name), node).is_ok()
}

/// The DaemonSet that owns `pod`, by uid.
#[cfg(test)]
fn daemonset_owner(pod: &Pod) -> Option<&str> {
    daemonset_owner_of(&pod.metadata)
}

/// The DaemonSet controlling the object of `meta`, by uid.
fn daemonset_owner_of(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "DaemonSet" && o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// A pod as the kubelets and the attach/detach controller read it: what their pod cache keeps
/// of each pod ([`KubeletPod::of`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletPod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub resource_version: Option<String>,
    /// `spec.nodeName`, when bound.
    pub node_name: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.phase`.
    pub phase: Option<String>,
    /// The uid of the DaemonSet controlling the pod.
    pub daemonset: Option<String>,
    /// Each container's name and image, which a started pod reports.
    pub containers: Vec<(String, String)>,
    /// The PersistentVolumeClaims its volumes mount, by name.
    pub claims: Vec<String>,
}

impl KubeletPod {
    /// The projection of `pod`.
    pub fn of(pod: Pod) -> Self {
        let spec = pod.spec.unwrap_or_default();
        Self {
            daemonset: daemonset_owner_of(&pod.metadata).map(str::to_owned),
            uid: pod.metadata.uid.unwrap_or_default(),
            namespace: pod
                .metadata
                .namespace
                .unwrap_or_else(|| "default".to_owned()),
            name: pod.metadata.name.unwrap_or_default(),
            resource_version: pod.metadata.resource_version,
            node_name: spec.node_name.filter(|n| !n.is_empty()),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            phase: pod.status.and_then(|s| s.phase),
            containers: spec
                .containers
                .into_iter()
                .map(|c| (c.name, c.image.unwrap_or_default()))
                .collect(),
            claims: spec
                .volumes
                .into_iter()
                .flatten()
                .filter_map(|v| v.persistent_volume_claim.map(|c| c.claim_name))
                .collect(),
        }
    }

    /// Running, or finished: past Pending.
    pub fn is_started(&self) -> bool {
        self.phase.as_deref().is_some_and(|p| p != "Pending")
    }

    /// Succeeded or Failed.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

crate::informer::pod_projection_lookup!(KubeletPod);

/// Strategic merge patch of a pod's status: Running and Ready on `host_ip` with `pod_ip`.
pub(crate) fn running_patch(pod: &KubeletPod, host_ip: &str, pod_ip: &str) -> Value {
    let now = Timestamp::now().to_string();
    let condition =
        |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now});
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|(name, image)| {
            let repository = super::node::image_repository(image);
            json!({
                "name": name,
                "imageID": format!("{repository}@sha256:{}", super::node::digest(image)),
                "image": image,
                "lastState": {},
                "containerID": format!("containerd://{:016x}", rand::rng().random::<u64>()),
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    json!({
        "status": {
            "phase": "Running",
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "conditions": [
                condition("PodReadyToStartContainers"),
                condition("Initialized"),
                condition("Ready"),
                condition("ContainersReady"),
                condition("PodScheduled"),
            ],
            "containerStatuses": containers,
        }
    })
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemonset(tolerations: Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-uid"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "agent", "image": "agent:1"}], "tolerations": tolerations}
                }
            }
        }))
        .expect("valid DaemonSet")
    }

    fn node(taints: Value, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux"}},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .expect("valid Node")
    }

    #[test]
    fn daemon_pods_are_owned_bound_and_tolerate_node_conditions() {
        let pod = daemon_pod(&daemonset(json!([])), "n1");
        assert_eq!(daemonset_owner(&pod), Some("ds-uid"));
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(
            spec.tolerations
                .expect("tolerations")
                .iter()
                .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable"))
        );
        assert!(pod.metadata.name.expect("name").starts_with("agent-"));
    }

    #[test]
    fn the_projection_keeps_what_starting_owning_and_attaching_read() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "agent-x", "namespace": "kube-system", "uid": "u",
                "resourceVersion": "9", "annotations": {"note": "x"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                    "uid": "ds-uid", "controller": true}]},
            "spec": {"nodeName": "n1",
                "containers": [{"name": "agent", "image": "agent:1", "env": [{"name": "A", "value": "b"}]}],
                "volumes": [{"name": "cache", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}]},
            "status": {"phase": "Pending", "qosClass": "Burstable"}
        }))
        .expect("valid pod");
        let projected = KubeletPod::of(pod);
        assert_eq!(
            projected,
            KubeletPod {
                uid: "u".into(),
                namespace: "kube-system".into(),
                name: "agent-x".into(),
                resource_version: Some("9".into()),
                node_name: Some("n1".into()),
                deleting: false,
                phase: Some("Pending".into()),
                daemonset: Some("ds-uid".into()),
                containers: vec![("agent".into(), "agent:1".into())],
                claims: vec!["data-0".into()],
            }
        );
        assert!(!projected.is_started() && !projected.is_terminal());
        let patch = running_patch(&projected, "10.0.0.1", "100.64.0.2");
        assert_eq!(patch["status"]["containerStatuses"][0]["image"], "agent:1");
        assert_eq!(patch["status"]["containerStatuses"][0]["name"], "agent");
    }

    #[test]
    fn daemons_wait_for_taints_they_do_not_tolerate() {
        let unregistered = json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]);
        assert!(!should_run(
            &daemonset(json!([])),
            &node(unregistered.clone(), true)
        ));
        assert!(should_run(
            &daemonset(json!([{"operator": "Exists"}])),
            &node(unregistered, false)
        ));
        assert!(
            !should_run(&daemonset(json!([])), &node(json!([]), false)),
            "not ready counts as tainted"
        );
        assert!(should_run(&daemonset(json!([])), &node(json!([]), true)));
    }
}
