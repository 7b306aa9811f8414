//! Node metrics as upstream's: per node and resource, `karpenter_nodes_allocatable`, the
//! requests of the non-DaemonSet pods bound to it (`karpenter_nodes_total_pod_requests`)
//! and of its DaemonSet pods (`karpenter_nodes_total_daemon_requests`), each labelled with
//! the node's name, phase and well-known labels (upstream's `nodepool`, `zone`, `arch`,
//! `capacity_type`, `instance_type`, … with the AWS provider's), which its capacity
//! dashboard groups by. Finished pods hold no resources and are left out.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use kerf::labels;
use kerf::pods::{LeanPod, PodLike};
use kerf::resources::{Quantity, Resources};

use super::exposition::{Family, quantity_value, resource_type};
use crate::metrics::{NODES_ALLOCATABLE, NODES_TOTAL_DAEMON_REQUESTS, NODES_TOTAL_POD_REQUESTS};
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

/// Requests on one node, split as upstream splits them.
#[derive(Default)]
struct Requests {
    pods: Resources,
    daemons: Resources,
}

/// The allocatable, pod request and daemon request families of every node in `state`.
pub fn families(state: &ClusterState) -> [Family; 3] {
    let mut allocatable = Family::new(
        NODES_ALLOCATABLE,
        "Node allocatable are the resources allocatable by nodes.",
    );
    let mut pod_requests = Family::new(
        NODES_TOTAL_POD_REQUESTS,
        "Node total pod requests are the resources requested by non-DaemonSet pods bound to nodes.",
    );
    let mut daemon_requests = Family::new(
        NODES_TOTAL_DAEMON_REQUESTS,
        "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
    );
    let requests = requests_by_node(state);
    let mut nodes = state.nodes.snapshot();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let base = node_labels(&node);
        let list: Vec<(String, f64)> = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|(r, q)| Some((r.clone(), quantity_value(r, Quantity::parse(&q.0).ok()?))))
            .collect();
        push(&mut allocatable, &base, list);
        let on_node = requests.get(&name);
        push(&mut pod_requests, &base, values(on_node.map(|r| &r.pods)));
        push(
            &mut daemon_requests,
            &base,
            values(on_node.map(|r| &r.daemons)),
        );
    }
    [allocatable, pod_requests, daemon_requests]
}

fn push(family: &mut Family, base: &[(&'static str, String)], list: Vec<(String, f64)>) {
    for (resource, value) in list {
        let mut labels = base.to_vec();
        labels.push(("resource_type", resource_type(&resource)));
        family.push(labels, value);
    }
}

fn values(list: Option<&Resources>) -> Vec<(String, f64)> {
    list.into_iter()
        .flat_map(Resources::iter)
        .map(|(r, q)| (r.to_owned(), quantity_value(r, q)))
        .collect()
}

fn node_labels(node: &Node) -> Vec<(&'static str, String)> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut out = vec![
        ("node_name", node.metadata.name.clone().unwrap_or_default()),
        (
            "phase",
            node.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
        ),
    ];
    for (key, label) in WELL_KNOWN {
        out.push((*label, labels.get(*key).cloned().unwrap_or_default()));
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
        let entry = by_node.entry(node).or_default();
        if is_daemon(&pod) {
            entry.daemons.add_assign(&requests);
        } else {
            entry.pods.add_assign(&requests);
        }
    }
    by_node
}

fn is_finished(pod: &LeanPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
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
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": phase}
        }))
        .expect("valid pod")
    }

    fn series(family: &Family) -> String {
        let mut text = String::new();
        family.render_into(&mut text);
        text
    }

    #[test]
    fn nodes_report_allocatable_and_requests_split_by_daemonsets() {
        let (state, mut w) = ClusterState::new();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default",
                "topology.kubernetes.io/zone": "us-east-1a", "karpenter.sh/capacity-type": "spot"}},
            "status": {"allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"}}
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
        let [allocatable, pods, daemons] = families(&state);
        let allocatable = series(&allocatable);
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
        let pods = series(&pods);
        assert!(pods.contains(r#"resource_type="cpu"} 1.5"#), "{pods}");
        assert!(pods.contains(r#"resource_type="pods"} 2"#), "{pods}");
        assert!(
            pods.contains(r#"resource_type="memory"} 2147483648"#),
            "{pods}"
        );
        let daemons = series(&daemons);
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
