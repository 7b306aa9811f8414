//! The Node object a simulated kubelet registers for an instance, and the status patches
//! it sends later. Labels come from the NodeClaim (its labels and single-valued
//! requirements, as kerf passes them to the real kubelet through user data) and from the
//! instance itself (type labels, zone, capacity type, hostname), which win; taints are the
//! NodeClaim's taints and startup taints plus `karpenter.sh/unregistered:NoExecute`.

use crate::ec2::{Instance, resource_list};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::catalog::InstanceType;
use kerf::labels;
use kerf::requirements::{Requirement, Requirements};
use kerf::taints::{EFFECT_NO_EXECUTE, merge_taints};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The kubelet version simulated nodes report.
pub const KUBELET_VERSION: &str = "v1.33.0-kerf-sim";

/// The Node to register for `instance`, launched for `claim`.
pub(crate) fn registration(
    claim: &NodeClaim,
    instance: &Instance,
    instance_type: Option<&InstanceType>,
) -> Node {
    let name = instance.private_dns_name.clone();
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(node_labels(claim, instance, instance_type)),
            annotations: claim.metadata.annotations.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(instance.provider_id()),
            taints: Some(registration_taints(claim)),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(capacity(claim, instance_type, false)),
            allocatable: Some(capacity(claim, instance_type, true)),
            conditions: Some(vec![ready_condition(
                "False",
                "KubeletNotReady",
                "container runtime network not ready",
            )]),
            addresses: Some(vec![
                address("InternalIP", &instance.private_ip_address),
                address("InternalDNS", &name),
                address("Hostname", &name),
            ]),
            node_info: Some(system_info(instance, instance_type)),
            images: Some(preloaded_images()),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: KUBELET_PORT }),
            }),
            ..NodeStatus::default()
        }),
    }
}

/// Labels: NodeClaim requirements (single values), NodeClaim labels, then what the
/// instance is (type labels, zone, zone id, capacity type, hostname).
fn node_labels(
    claim: &NodeClaim,
    instance: &Instance,
    instance_type: Option<&InstanceType>,
) -> BTreeMap<String, String> {
    let mut out = claim_requirement_labels(claim);
    out.extend(claim.metadata.labels.clone().unwrap_or_default());
    if let Some(it) = instance_type {
        out.extend(it.labels.clone());
        let zone_id = it
            .offerings
            .iter()
            .find(|o| o.zone == instance.zone)
            .map(|o| o.zone_id.clone());
        if let Some(zone_id) = zone_id {
            out.insert(labels::ZONE_ID.to_owned(), zone_id);
        }
    }
    out.insert(
        labels::INSTANCE_TYPE.to_owned(),
        instance.instance_type.clone(),
    );
    out.insert(labels::ZONE.to_owned(), instance.zone.clone());
    out.insert(
        labels::CAPACITY_TYPE.to_owned(),
        instance.capacity_type.as_str().to_owned(),
    );
    out.insert(
        labels::HOSTNAME.to_owned(),
        instance.private_dns_name.clone(),
    );
    out
}

fn claim_requirement_labels(claim: &NodeClaim) -> BTreeMap<String, String> {
    let requirements: Requirements = claim
        .requirements()
        .iter()
        .filter_map(|r| Requirement::parse(&r.key, r.operator.as_str(), &r.values, None).ok())
        .collect();
    let mut single = requirements.single_value_labels();
    single.retain(|key, _| key != labels::HOSTNAME);
    single
}

/// The NodeClaim's taints and startup taints, then `karpenter.sh/unregistered:NoExecute`.
fn registration_taints(claim: &NodeClaim) -> Vec<Taint> {
    let unregistered = Taint {
        key: labels::UNREGISTERED_TAINT.to_owned(),
        effect: EFFECT_NO_EXECUTE.to_owned(),
        ..Taint::default()
    };
    let taints = merge_taints(claim.taints(), claim.startup_taints());
    merge_taints(&taints, &[unregistered])
}

/// Capacity (or allocatable) from the catalog, else what the NodeClaim status says.
fn capacity(
    claim: &NodeClaim,
    instance_type: Option<&InstanceType>,
    allocatable: bool,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    match (instance_type, allocatable) {
        (Some(it), false) => resource_list(&it.capacity),
        (Some(it), true) => resource_list(&it.allocatable()),
        (None, false) => claim
            .status
            .as_ref()
            .map(|s| s.capacity.clone())
            .unwrap_or_default(),
        (None, true) => claim
            .status
            .as_ref()
            .map(|s| s.allocatable.clone())
            .unwrap_or_default(),
    }
}

fn address(type_: &str, value: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.to_owned(),
        address: value.to_owned(),
    }
}

/// The kubelet's port, which a node reports in `status.daemonEndpoints`.
const KUBELET_PORT: i32 = 10250;

/// Images shaped like those an EKS-optimized AMI caches before any pod runs (VPC CNI,
/// network policy agent, kube-proxy, pause; representative names and sizes, not measured),
/// reported in `status.images` as a real kubelet does: bytes of every Node object that
/// clients watching nodes decode.
const PRELOADED_IMAGES: &[(&str, i64)] = &[
    (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni:v1.19.2-eksbuild.1",
        43_870_212,
    ),
    (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni-init:v1.19.2-eksbuild.1",
        61_456_318,
    ),
    (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon/aws-network-policy-agent:v1.1.6-eksbuild.1",
        31_043_109,
    ),
    (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy:v1.33.0-minimal-eksbuild.2",
        37_145_660,
    ),
    (
        "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/pause:3.10",
        321_520,
    ),
    ("localhost/kubernetes/pause:0.1.0", 321_520),
];

fn preloaded_images() -> Vec<ContainerImage> {
    PRELOADED_IMAGES
        .iter()
        .map(|(name, size)| {
            let repository = image_repository(name);
            ContainerImage {
                names: Some(vec![
                    format!("{repository}@sha256:{}", digest(name)),
                    (*name).to_owned(),
                ]),
                size_bytes: Some(*size),
            }
        })
        .collect()
}

/// An image reference without its tag (`registry:5000/app:v1` → `registry:5000/app`).
pub(crate) fn image_repository(image: &str) -> &str {
    match image.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository,
        _ => image,
    }
}

/// A stable, made-up sha256 digest (64 hex digits) for an image name.
pub(crate) fn digest(name: &str) -> String {
    use std::hash::{Hash, Hasher};
    (0u8..4)
        .map(|part| {
            let mut hasher = std::hash::DefaultHasher::new();
            (part, name).hash(&mut hasher);
            format!("{:016x}", hasher.finish())
        })
        .collect()
}

fn system_info(instance: &Instance, instance_type: Option<&InstanceType>) -> NodeSystemInfo {
    let label = |key: &str, default: &str| {
        instance_type
            .and_then(|it| it.label(key))
            .unwrap_or(default)
            .to_owned()
    };
    NodeSystemInfo {
        architecture: label(labels::ARCH, "amd64"),
        operating_system: label(labels::OS, "linux"),
        kubelet_version: KUBELET_VERSION.to_owned(),
        kube_proxy_version: KUBELET_VERSION.to_owned(),
        container_runtime_version: "containerd://1.7.27".to_owned(),
        kernel_version: "6.1.0-sim".to_owned(),
        os_image: "Amazon Linux 2023 (simulated)".to_owned(),
        machine_id: instance.instance_id.clone(),
        system_uuid: instance.instance_id.clone(),
        boot_id: instance.instance_id.clone(),
        ..NodeSystemInfo::default()
    }
}

fn ready_condition(status: &str, reason: &str, message: &str) -> NodeCondition {
    let now = Time(Timestamp::now());
    NodeCondition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// Strategic merge patch of the node status: Ready with the given status, and the pressure
/// conditions a healthy kubelet reports.
pub(crate) fn readiness_patch(status: &str, reason: &str, message: &str) -> Value {
    let now = Timestamp::now().to_string();
    let pressure = |type_: &str, reason: &str| json!({"type": type_, "status": "False", "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now});
    let mut conditions =
        vec![serde_json::to_value(ready_condition(status, reason, message)).unwrap_or(Value::Null)];
    if status == "True" {
        conditions.push(pressure("MemoryPressure", "KubeletHasSufficientMemory"));
        conditions.push(pressure("DiskPressure", "KubeletHasNoDiskPressure"));
        conditions.push(pressure("PIDPressure", "KubeletHasSufficientPID"));
    }
    json!({ "status": { "conditions": conditions } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_lose_their_tag_not_their_registry_port() {
        assert_eq!(
            image_repository("registry:5000/app:v1"),
            "registry:5000/app"
        );
        assert_eq!(image_repository("registry:5000/app"), "registry:5000/app");
        assert_eq!(image_repository("nginx"), "nginx");
        assert_eq!(digest("nginx").len(), 64);
        assert_eq!(digest("nginx"), digest("nginx"));
        assert_ne!(digest("nginx"), digest("redis"));
    }
    use crate::ec2::{CapacityType, InstanceState};

    fn claim() -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "labels": {"karpenter.sh/nodepool": "default", "team": "a"}},
            "spec": {
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "example.com/tier", "operator": "In", "values": ["gold"]}
                ],
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "cni", "effect": "NoSchedule"}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }
        }))
        .expect("valid NodeClaim")
    }

    fn instance() -> Instance {
        Instance {
            instance_id: "i-0123456789abcdef0".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            state: InstanceState::Running,
            image_id: None,
            subnet_id: None,
            launch_template_name: "lt".into(),
            private_ip_address: "10.0.0.16".into(),
            private_dns_name: "ip-10-0-0-16.ec2.internal".into(),
            launch_time: std::time::SystemTime::now(),
            price: 0.1,
            tags: BTreeMap::new(),
            interruption: None,
            capacity_reservation_id: None,
        }
    }

    #[test]
    fn registration_carries_claim_and_instance_facts() {
        let node = registration(&claim(), &instance(), None);
        let labels = node.metadata.labels.clone().expect("labels");
        assert_eq!(labels["karpenter.sh/nodepool"], "default");
        assert_eq!(labels["team"], "a");
        assert_eq!(
            labels["example.com/tier"], "gold",
            "single-valued requirement becomes a label"
        );
        assert_eq!(
            labels[labels::CAPACITY_TYPE],
            "spot",
            "the instance decides the capacity type"
        );
        assert_eq!(labels[labels::HOSTNAME], "ip-10-0-0-16.ec2.internal");
        let spec = node.spec.expect("spec");
        assert_eq!(
            spec.provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123456789abcdef0")
        );
        let taints: Vec<String> = spec
            .taints
            .expect("taints")
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        assert_eq!(
            taints,
            [
                "dedicated:NoSchedule",
                "cni:NoSchedule",
                "karpenter.sh/unregistered:NoExecute"
            ]
        );
    }
}
