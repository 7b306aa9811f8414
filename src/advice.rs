//! Advice on input that is valid but will not work as its author expects, where upstream
//! logs errors at run time or users get surprised later. Each warning names the object and
//! says what to do, in the words of Karpenter's troubleshooting guide where it has them.
//! `kerf plan` prints them (none stops the plan); the controller raises the same findings
//! as events (the provisioner's max-pods check, `storage_advice`).

use crate::pods::{LeanPod, PodLike};
use std::sync::Arc;

use crate::api::EC2NodeClass;
use crate::api::requirement::Operator;
use crate::catalog::{Catalog, InstanceType, eni_limited_pods};
use crate::cluster::inventory::Inventory;
use crate::cluster::snapshot::pod_key;
use crate::labels;
use crate::requirements::Requirements;
use crate::scheduling::{NodePoolInput, SchedulingInput, resource_requests};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::StorageClass;

/// The in-tree EBS provisioner upstream cannot read volume limits from.
const IN_TREE_EBS: &str = "kubernetes.io/aws-ebs";

/// What the warnings need to know of the input's pods, read before the snapshot takes them
/// (see `snapshot::build_taking_pods`).
#[derive(Debug, Default)]
pub struct PodFacts {
    /// `namespace/name` of each pod with an in-tree EBS volume, in input order.
    in_tree_ebs: Vec<String>,
    /// Zones pods select by `nodeSelector`, sorted, each once.
    selected_zones: Vec<String>,
}

impl PodFacts {
    pub fn of(pods: &[Arc<LeanPod>]) -> Self {
        let in_tree_ebs = pods
            .iter()
            .filter(|pod| uses_in_tree_ebs(pod))
            .map(pod_key)
            .collect();
        let mut selected_zones: Vec<String> = pods
            .iter()
            .filter_map(|pod| pod.spec()?.node_selector.as_ref()?.get(labels::ZONE))
            .cloned()
            .collect();
        selected_zones.sort();
        selected_zones.dedup();
        Self {
            in_tree_ebs,
            selected_zones,
        }
    }
}

/// Every warning about `inventory` (whose pods `pods` describes) as planned from `input` in
/// `catalog`'s region.
pub fn warnings(
    inventory: &Inventory,
    pods: &PodFacts,
    input: &SchedulingInput,
    catalog: &Catalog,
    reserved_enis: u32,
) -> Vec<String> {
    let mut warnings = Vec::new();
    if inventory.node_pools.is_empty() {
        warnings.push(
            "no NodePool in the input: nothing can be launched for pending pods; pass your NodePools and EC2NodeClasses with -f".to_owned(),
        );
    }
    warnings.extend(in_tree_storage(inventory, pods));
    warnings.extend(long_role_names(&inventory.node_classes));
    warnings.extend(input.node_pools.iter().filter_map(|pool| {
        let class = node_class_of(&pool.name, inventory)?;
        let problem = max_pods_above_eni_limit(pool, class, catalog, reserved_enis)?;
        Some(format!("NodePool/{}: {problem}", pool.name))
    }));
    warnings.extend(zones_outside_region(pods, input, catalog));
    warnings.extend(unfit_daemonsets(input));
    warnings
}

/// Upstream's advice on in-tree volumes, for StorageClasses, PersistentVolumes and pod
/// volumes that use the in-tree EBS plugin.
fn in_tree_storage(inventory: &Inventory, facts: &PodFacts) -> Vec<String> {
    let mut found = Vec::new();
    for class in &inventory.storage_classes {
        if let Some(problem) = in_tree_storage_class(class) {
            found.push(format!(
                "StorageClass/{}: {problem}",
                name(&class.metadata.name)
            ));
        }
    }
    for volume in &inventory.volumes {
        if let Some(problem) = in_tree_volume(volume) {
            found.push(format!(
                "PersistentVolume/{}: {problem}",
                name(&volume.metadata.name)
            ));
        }
    }
    let pods = &facts.in_tree_ebs;
    if !pods.is_empty() {
        found.push(format!(
            "{} pod(s) mount an awsElasticBlockStore volume (in-tree, unsupported by Karpenter), e.g. {}: use a PersistentVolumeClaim on the EBS CSI driver",
            pods.len(),
            pods[..pods.len().min(5)].join(", ")
        ));
    }
    found
}

/// What is wrong with a StorageClass on the in-tree EBS plugin (the running controller warns
/// with the same words).
pub fn in_tree_storage_class(class: &StorageClass) -> Option<String> {
    (class.provisioner == IN_TREE_EBS).then(|| format!(
        ".spec.provisioner {IN_TREE_EBS} is an in-tree storage plugin, unsupported by Karpenter and deprecated by Kubernetes: scale-ups may fail because volume limits cannot be discovered; create a StorageClass with the CSI driver's provisioner ebs.csi.aws.com"
    ))
}

/// What is wrong with a PersistentVolume on the in-tree EBS source.
pub fn in_tree_volume(volume: &PersistentVolume) -> Option<String> {
    volume
        .spec
        .as_ref()
        .is_some_and(|s| s.aws_elastic_block_store.is_some())
        .then(|| "source AWSElasticBlockStore is an in-tree storage plugin, unsupported by Karpenter and deprecated by Kubernetes: scale-ups may fail because volume limits cannot be discovered; use a PersistentVolume with the CSI volume source".to_owned())
}

/// What a pod mounting an in-tree EBS volume is told.
pub const IN_TREE_POD_VOLUME: &str = "its volumes mount an awsElasticBlockStore volume (in-tree, unsupported by Karpenter): use a PersistentVolumeClaim on the EBS CSI driver";

/// Whether `pod` mounts an in-tree EBS volume directly.
pub fn uses_in_tree_ebs(pod: &LeanPod) -> bool {
    pod.spec()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| v.iter().any(|v| v.aws_elastic_block_store.is_some()))
}

fn long_role_names(classes: &[EC2NodeClass]) -> Vec<String> {
    classes
        .iter()
        .filter_map(|class| {
            let problem = class.role_name_problem()?;
            Some(format!(
                "EC2NodeClass/{}: {problem}",
                name(&class.metadata.name)
            ))
        })
        .collect()
}

/// A `kubelet.maxPods` set by `class` above the VPC CNI's IP limit of some of `pool`'s
/// instance types (the running controller warns with the same words).
pub fn max_pods_above_eni_limit(
    pool: &NodePoolInput,
    class: &EC2NodeClass,
    catalog: &Catalog,
    reserved_enis: u32,
) -> Option<String> {
    let max_pods = i64::from(class.spec.kubelet.as_ref()?.max_pods?);
    // The pool's own types: those its requirements allow.
    let allowed = Requirements::from_requirements_with_min_values(&pool.requirements).ok()?;
    let types: Vec<&InstanceType> = pool
        .instance_types
        .iter()
        .filter(|it| {
            allowed
                .intersects(&Requirements::from_labels(&it.labels))
                .is_ok()
        })
        .collect();
    let limited: Vec<(&str, i64)> = types
        .iter()
        .filter_map(|it| {
            let info = catalog.info(&it.name)?;
            let limit = eni_limited_pods(info, reserved_enis, None);
            (limit < max_pods).then_some((it.name.as_str(), limit))
        })
        .collect();
    let (smallest, limit) = limited.iter().min_by_key(|(_, limit)| *limit)?;
    Some(format!(
        "EC2NodeClass/{} sets kubelet maxPods={max_pods}, above the VPC CNI's IP limit of {} of its {} instance types (e.g. {smallest}: {limit}): pods past the limit stay ContainerCreating (failed to assign an IP address); enable prefix delegation, lower maxPods or remove it (with security groups for pods, set RESERVED_ENIS=1)",
        name(&class.metadata.name),
        limited.len(),
        types.len()
    ))
}

fn node_class_of<'a>(pool: &str, inventory: &'a Inventory) -> Option<&'a EC2NodeClass> {
    let node_pool = inventory
        .node_pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pool))?;
    let class = &node_pool.node_class_ref().name;
    inventory
        .node_classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(class.as_str()))
}

/// Zones a NodePool requires or pods select that the region does not have.
fn zones_outside_region(
    pods: &PodFacts,
    input: &SchedulingInput,
    catalog: &Catalog,
) -> Vec<String> {
    let region = catalog.region();
    let known = |zone: &str| catalog.zones().iter().any(|z| z.name == zone);
    let mut warnings = Vec::new();
    for pool in &input.node_pools {
        let foreign: Vec<&str> = pool
            .requirements
            .iter()
            .filter(|r| r.key == labels::ZONE && r.operator == Operator::In)
            .flat_map(|r| r.values.iter().map(String::as_str))
            .filter(|zone| !known(zone))
            .collect();
        if !foreign.is_empty() {
            warnings.push(format!(
                "NodePool/{}: requires zone(s) {} outside --region {region}: no offering matches them; plan with the cluster's region",
                pool.name,
                foreign.join(", ")
            ));
        }
    }
    let selected: Vec<&str> = pods
        .selected_zones
        .iter()
        .map(String::as_str)
        .filter(|zone| !known(zone))
        .collect();
    if !selected.is_empty() {
        warnings.push(format!(
            "pods select zone(s) {} outside --region {region}: they cannot be placed there; plan with the cluster's region",
            selected.join(", ")
        ));
    }
    warnings
}

/// DaemonSets whose pod fits on no instance type any NodePool may launch.
fn unfit_daemonsets(input: &SchedulingInput) -> Vec<String> {
    if input.node_pools.is_empty() {
        return Vec::new();
    }
    input
        .daemonsets
        .iter()
        .filter_map(|daemon| {
            let requests = resource_requests(daemon).ok()?;
            let mut shown = requests.clone();
            // Every pod takes one of the node's pod slots; that is not what is too large.
            shown.remove("pods");
            let fits = input
                .node_pools
                .iter()
                .flat_map(|pool| pool.instance_types.iter())
                .any(|it| requests.fits(&it.allocatable()));
            (!fits).then(|| {
                format!(
                    "DaemonSet {}: its pod requests {shown}, more than any instance type a NodePool may launch can allocate: it will stay Pending on every new node",
                    pod_key(daemon)
                )
            })
        })
        .collect()
}

fn name(name: &Option<String>) -> &str {
    name.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::requirement::NodeSelectorRequirementWithMinValues;
    use crate::catalog::AllocatableSettings;

    fn pool_of(instance_type: &str, catalog: &Catalog) -> NodePoolInput {
        NodePoolInput {
            name: "default".into(),
            requirements: vec![NodeSelectorRequirementWithMinValues {
                key: labels::INSTANCE_TYPE.into(),
                operator: Operator::In,
                values: vec![instance_type.into()],
                min_values: None,
            }],
            instance_types: catalog
                .instance_types(&AllocatableSettings::default())
                .into(),
            ..NodePoolInput::default()
        }
    }

    #[test]
    fn max_pods_is_checked_against_the_types_the_pool_allows_only() {
        let catalog = Catalog::embedded("us-east-1").expect("catalog");
        let class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "kubelet": {"maxPods": 110}}
        }))
        .expect("class");
        let small = max_pods_above_eni_limit(&pool_of("t3.medium", &catalog), &class, &catalog, 0);
        assert!(
            small.as_deref().is_some_and(
                |m| m.contains("1 of its 1 instance types") && m.contains("t3.medium: 17")
            ),
            "{small:?}"
        );
        let large =
            max_pods_above_eni_limit(&pool_of("m5.24xlarge", &catalog), &class, &catalog, 0);
        assert_eq!(large, None, "m5.24xlarge's ENIs address 737 pods");
    }
}
