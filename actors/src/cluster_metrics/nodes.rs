//! Node metrics as upstream's: per node and resource, `karpenter_nodes_allocatable`, its
//! capacity less allocatable (`karpenter_nodes_system_overhead`), the requests and limits of
//! every pod bound to it (`karpenter_nodes_total_pod_requests`/`_limits`) and of its
//! DaemonSet pods alone (`karpenter_nodes_total_daemon_requests`/`_limits`), each labelled
//! with the node's name, phase, whether Karpenter manages it and its well-known labels
//! (upstream's `nodepool`, `zone`, `arch`, `capacity_type`, `instance_type`, … with the AWS
//! provider's), which its capacity dashboard groups by; per node its age
//! (`karpenter_nodes_current_lifetime_seconds`); and over all nodes the requests over
//! allocatable (`karpenter_cluster_utilization_percent`). Finished pods hold no resources
//! and are left out.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Node};
use k8s_openapi::jiff::Timestamp;
use kerf::labels;
use kerf::pods::{LeanPod, PodLike};
use kerf::resources::{Quantity, Resources};

use super::exposition::{Exposition, Family, quantity_value, resource_type};
use crate::metrics::{
    CLUSTER_UTILIZATION, NODES_ALLOCATABLE, NODES_CURRENT_LIFETIME, NODES_SYSTEM_OVERHEAD,
    NODES_TOTAL_DAEMON_LIMITS, NODES_TOTAL_DAEMON_REQUESTS, NODES_TOTAL_POD_LIMITS,
    NODES_TOTAL_POD_REQUESTS,
};
use crate::state::ClusterState;

/// Node labels upstream (core and the AWS provider) copies onto node metrics, with their
/// metric label: the name after the prefix, snake_cased.
const WELL_KNOWN: &[(&str, &str)] = &[
    (labels::NODEPOOL, "nodepool"),
    (labels::ZONE, "zone"),
    (labels::REGION, "region"),
    (labels::INSTANCE_TYPE, "instance_type"),
    (labels::ARCH, "arch"),
    (labels::OS, "os"),
    (labels::CAPACITY_TYPE, "capacity_type"),
    (labels::WINDOWS_BUILD, "windows_build"),
    (labels::ZONE_ID, "zone_id"),
    (labels::INSTANCE_CATEGORY, "instance_category"),
    (labels::INSTANCE_FAMILY, "instance_family"),
    (labels::INSTANCE_GENERATION, "instance_generation"),
    (labels::INSTANCE_SIZE, "instance_size"),
    (labels::INSTANCE_CPU, "instance_cpu"),
    (
        labels::INSTANCE_CPU_MANUFACTURER,
        "instance_cpu_manufacturer",
    ),
    (labels::INSTANCE_MEMORY, "instance_memory"),
    (labels::INSTANCE_HYPERVISOR, "instance_hypervisor"),
    (
        labels::INSTANCE_NETWORK_BANDWIDTH,
        "instance_network_bandwidth",
    ),
    (labels::INSTANCE_EBS_BANDWIDTH, "instance_ebs_bandwidth"),
    (labels::INSTANCE_LOCAL_NVME, "instance_local_nvme"),
    (labels::INSTANCE_GPU_NAME, "instance_gpu_name"),
    (
        labels::INSTANCE_GPU_MANUFACTURER,
        "instance_gpu_manufacturer",
    ),
    (labels::INSTANCE_GPU_COUNT, "instance_gpu_count"),
    (labels::INSTANCE_GPU_MEMORY, "instance_gpu_memory"),
];

/// Requests and limits on one node: of every pod, and of its DaemonSet pods alone.
#[derive(Default)]
struct Requests {
    pods: Resources,
    daemons: Resources,
    pod_limits: Resources,
    daemon_limits: Resources,
}

/// The per node and resource families, each written in one pass over the nodes.
#[derive(Clone, Copy)]
enum PerResource {
    Allocatable,
    Overhead,
    PodRequests,
    PodLimits,
    DaemonRequests,
    DaemonLimits,
}

impl PerResource {
    const ALL: [Self; 6] = [
        Self::Allocatable,
        Self::Overhead,
        Self::PodRequests,
        Self::PodLimits,
        Self::DaemonRequests,
        Self::DaemonLimits,
    ];

    fn name_and_help(self) -> (&'static str, &'static str) {
        match self {
            Self::Allocatable => (
                NODES_ALLOCATABLE,
                "Node allocatable are the resources allocatable by nodes.",
            ),
            Self::Overhead => (
                NODES_SYSTEM_OVERHEAD,
                "Node system daemon overhead are the resources reserved for system overhead, the \
                 difference between the node's capacity and allocatable values are reported by the status.",
            ),
            Self::PodRequests => (
                NODES_TOTAL_POD_REQUESTS,
                "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
            ),
            Self::PodLimits => (
                NODES_TOTAL_POD_LIMITS,
                "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
            ),
            Self::DaemonRequests => (
                NODES_TOTAL_DAEMON_REQUESTS,
                "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
            ),
            Self::DaemonLimits => (
                NODES_TOTAL_DAEMON_LIMITS,
                "Node total daemon limits are the resources specified by DaemonSet pod limits.",
            ),
        }
    }

    /// This family's resources of `node`, given the requests of its pods.
    fn of(self, node: &Node, on_node: Option<&Requests>) -> Resources {
        let status = node.status.as_ref();
        let allocatable = || parse(status.and_then(|s| s.allocatable.as_ref()));
        let pods = |pick: fn(&Requests) -> &Resources| on_node.map(pick).cloned();
        match self {
            Self::Allocatable => allocatable(),
            Self::Overhead => {
                parse(status.and_then(|s| s.capacity.as_ref())).subtract(&allocatable())
            }
            Self::PodRequests => pods(|r| &r.pods).unwrap_or_default(),
            Self::PodLimits => pods(|r| &r.pod_limits).unwrap_or_default(),
            Self::DaemonRequests => pods(|r| &r.daemons).unwrap_or_default(),
            Self::DaemonLimits => pods(|r| &r.daemon_limits).unwrap_or_default(),
        }
    }
}

/// Every node family of `state`: allocatable, system overhead, pod and daemon requests and
/// limits, current lifetime, and the cluster's utilization.
pub fn write(out: &mut Exposition, state: &ClusterState) {
    let requests = requests_by_node(state);
    let mut nodes = state.nodes.snapshot();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let on_node = |node: &Node| requests.get(node.metadata.name.as_deref().unwrap_or_default());
    for family in PerResource::ALL {
        let (name, help) = family.name_and_help();
        let mut gauge = out.gauge(name, help);
        for node in &nodes {
            let resources = family.of(node, on_node(node));
            let values: Vec<(String, f64)> = resources
                .iter()
                .map(|(r, q)| (resource_type(r), quantity_value(r, q)))
                .collect();
            let mut labels = node_labels(node);
            for (resource_type, value) in &values {
                labels.push(("resource_type", resource_type));
                gauge.series(&labels, *value);
                labels.pop();
            }
        }
    }
    let now = Timestamp::now();
    let mut lifetime = out.gauge(NODES_CURRENT_LIFETIME, "Node age in seconds");
    for node in &nodes {
        if let Some(created) = &node.metadata.creation_timestamp {
            let age = now.duration_since(created.0).as_secs_f64().max(0.0);
            lifetime.series(&node_labels(node), age);
        }
    }
    let (mut allocatable, mut requested) = (Resources::new(), Resources::new());
    for node in &nodes {
        allocatable.add_assign(&PerResource::Allocatable.of(node, None));
        if let Some(on_node) = on_node(node) {
            requested.add_assign(&on_node.pods);
        }
    }
    utilization(&allocatable, &requested).write(out);
}

/// The requests over allocatable of every resource the nodes have.
fn utilization(allocatable: &Resources, requested: &Resources) -> Family {
    let mut family = Family::new(
        CLUSTER_UTILIZATION,
        "Utilization of allocatable resources by pod requests",
    );
    for (resource, quantity) in allocatable.iter() {
        if quantity.milli_value() == 0 {
            continue;
        }
        let used = requested.get_or_zero(resource);
        #[allow(
            clippy::cast_precision_loss,
            reason = "resource amounts are far below 2^52"
        )]
        let percent = 100.0 * used.milli_value() as f64 / quantity.milli_value() as f64;
        family.push(vec![("resource_type", resource_type(resource))], percent);
    }
    family
}

/// A resource list of the API as [`Resources`], leaving out quantities that do not parse.
fn parse(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Resources {
    let mut out = Resources::new();
    for (name, quantity) in list.into_iter().flatten() {
        if let Ok(q) = Quantity::parse(&quantity.0) {
            out.insert(name, q);
        }
    }
    out
}

/// The labels every series of `node` carries, borrowed from it: the node families write
/// them once per family and resource, so they are not copied for each.
fn node_labels(node: &Node) -> Vec<(&'static str, &str)> {
    let labels = node.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map_or("", String::as_str);
    let managed = labels.is_some_and(|l| l.contains_key(labels::NODEPOOL));
    let mut out = vec![
        (
            "node_name",
            node.metadata.name.as_deref().unwrap_or_default(),
        ),
        (
            "phase",
            node.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or_default(),
        ),
        ("managed", if managed { "true" } else { "false" }),
    ];
    for (key, name) in WELL_KNOWN {
        out.push((*name, label(key)));
    }
    out
}

/// Requests of the pods bound to each node, by node name.
fn requests_by_node(state: &ClusterState) -> HashMap<String, Requests> {
    let mut by_node: HashMap<String, Requests> = HashMap::new();
    for pod in state.pods.snapshot() {
        let Some(node) = pod.node_name().map(str::to_string) else {
            continue;
        };
        if is_finished(&pod) {
            continue;
        }
        // A pod whose quantities do not parse was refused by the API server; skip it.
        let Ok(requests) = kerf::scheduling::resource_requests(&pod) else {
            continue;
        };
        let limits = pod_limits(&pod);
        let entry = by_node.entry(node).or_default();
        entry.pods.add_assign(&requests);
        entry.pod_limits.add_assign(&limits);
        if is_daemon(&pod) {
            entry.daemons.add_assign(&requests);
            entry.daemon_limits.add_assign(&limits);
        }
    }
    by_node
}

/// A pod's limits as the API computes its effective requests: its containers' and
/// sidecars' summed, or the largest regular init container's where that is more.
fn pod_limits(pod: &LeanPod) -> Resources {
    let Some(spec) = pod.spec() else {
        return Resources::new();
    };
    let limits = |c: &Container| parse(c.resources.as_ref().and_then(|r| r.limits.as_ref()));
    let mut running = Resources::new();
    for container in &spec.containers {
        running.add_assign(&limits(container));
    }
    let mut init = Resources::new();
    let mut sidecars = Resources::new();
    for container in spec.init_containers.iter().flatten() {
        if container.restart_policy.as_deref() == Some("Always") {
            sidecars.add_assign(&limits(container));
        } else {
            let mut during = sidecars.clone();
            during.add_assign(&limits(container));
            init = init.max(&during);
        }
    }
    running.add_assign(&sidecars);
    running.max(&init)
}

fn is_finished(pod: &LeanPod) -> bool {
    matches!(
        pod.status().and_then(|s| s.phase),
        Some("Succeeded" | "Failed")
    )
}

fn is_daemon(pod: &LeanPod) -> bool {
    pod.meta()
        .owner_references
        .iter()
        .any(|o| o.kind == "DaemonSet")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ObjectKey;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(name: &str, node: &str, cpu: &str, owner: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u"}]},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"},
                    "limits": {"memory": "2Gi"}}}]},
            "status": {"phase": phase}
        }))
        .expect("valid pod")
    }

    /// The lines of family `name` in `text`.
    fn series(text: &str, name: &str) -> String {
        let prefix = format!("{name}{{");
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn nodes_report_allocatable_overhead_requests_and_limits() {
        let (state, mut w) = ClusterState::new();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"karpenter.sh/nodepool": "default",
                "topology.kubernetes.io/zone": "us-east-1a", "karpenter.sh/capacity-type": "spot"}},
            "status": {"allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"}}
        }))
        .expect("valid node");
        w.nodes.apply(ObjectKey::new(None, "n1"), node);
        w.pods.apply(
            ObjectKey::new(Some("default"), "a"),
            pod("a", "n1", "1", "ReplicaSet", "Running"),
        );
        w.pods.apply(
            ObjectKey::new(Some("default"), "b"),
            pod("b", "n1", "500m", "ReplicaSet", "Running"),
        );
        w.pods.apply(
            ObjectKey::new(Some("default"), "d"),
            pod("d", "n1", "100m", "DaemonSet", "Running"),
        );
        w.pods.apply(
            ObjectKey::new(Some("default"), "f"),
            pod("f", "n1", "8", "Job", "Succeeded"),
        );
        let text = super::super::exposition::collect(|out| write(out, &state));
        let overhead = series(&text, NODES_SYSTEM_OVERHEAD);
        assert!(
            overhead.contains(r#"resource_type="cpu"} 0.08"#),
            "{overhead}"
        );
        assert!(
            overhead.contains(r#"resource_type="pods"} 0"#),
            "{overhead}"
        );
        let pod_limits = series(&text, NODES_TOTAL_POD_LIMITS);
        assert!(
            pod_limits.contains(r#"resource_type="memory"} 6442450944"#),
            "three running pods' 2Gi: {pod_limits}"
        );
        let daemon_limits = series(&text, NODES_TOTAL_DAEMON_LIMITS);
        assert!(
            daemon_limits.contains(r#"resource_type="memory"} 2147483648"#),
            "{daemon_limits}"
        );
        let lifetime = series(&text, NODES_CURRENT_LIFETIME);
        assert!(lifetime.contains(r#"managed="true""#), "{lifetime}");
        assert!(!lifetime.contains("resource_type"), "{lifetime}");
        let utilization = series(&text, CLUSTER_UTILIZATION);
        assert!(
            utilization
                .contains(r#"karpenter_cluster_utilization_percent{resource_type="pods"} 5.17"#),
            "three pods of 58: {utilization}"
        );
        let allocatable = series(&text, NODES_ALLOCATABLE);
        assert!(allocatable.contains(r#"node_name="n1""#), "{allocatable}");
        assert!(
            allocatable.contains(r#"nodepool="default""#),
            "{allocatable}"
        );
        assert!(
            allocatable.contains(r#"capacity_type="spot""#),
            "{allocatable}"
        );
        assert!(
            allocatable.contains(r#"zone="us-east-1a""#),
            "{allocatable}"
        );
        assert!(
            allocatable.contains(r#"resource_type="cpu"} 3.92"#),
            "{allocatable}"
        );
        assert!(
            allocatable.contains(r#"resource_type="pods"} 58"#),
            "{allocatable}"
        );
        let pods = series(&text, NODES_TOTAL_POD_REQUESTS);
        assert!(
            pods.contains(r#"resource_type="cpu"} 1.6"#),
            "DaemonSet pods included: {pods}"
        );
        assert!(pods.contains(r#"resource_type="pods"} 3"#), "{pods}");
        assert!(
            pods.contains(r#"resource_type="memory"} 3221225472"#),
            "{pods}"
        );
        let daemons = series(&text, NODES_TOTAL_DAEMON_REQUESTS);
        assert!(daemons.contains(r#"resource_type="cpu"} 0.1"#), "{daemons}");
    }

    #[test]
    fn well_known_labels_are_snake_cased_short_names() {
        for (key, label) in WELL_KNOWN {
            let short = key.rsplit('/').next().unwrap_or(key);
            assert_eq!(*label, short.replace('-', "_"), "{key}");
        }
    }
}
