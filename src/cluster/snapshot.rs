//! From the plan's [`Inventory`] to the scheduler's input: which pods are pending (unbound,
//! not daemonset or mirror pods, not finished), the existing capacity (Nodes with the pods
//! bound to them, and in-flight NodeClaims that have no Node yet), each NodePool with the
//! catalog's instance types resolved for its EC2NodeClass, daemonset pods, volumes and
//! namespace labels. This is where `kerf plan` models a cluster the way upstream Karpenter's
//! cluster state would see it a moment after the manifests were applied.

use crate::pods::{LeanPod, PodLike};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

use super::inventory::Inventory;
use super::nodeclass::{self, ControllerSettings};
use super::workloads::DEFAULT_NAMESPACE;
use super::{FieldError, SnapshotError};
use crate::api::{EC2NodeClass, NodeClaim, NodePool, Operator};
use crate::catalog::add_reserved_offerings;
use crate::catalog::{AllocatableSettings, Catalog, InstanceType};
use crate::labels;
use crate::overlay;
use crate::pods;
use crate::resources::{Quantity, Resources};
use crate::scheduling::{ExistingNode, NodeLabels, NodePoolInput, SchedulingInput, VolumeTopology};

/// The scheduler's input plus what the report needs to know about it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub input: SchedulingInput,
    /// Things worth telling the user that do not make the input invalid.
    pub warnings: Vec<String>,
    /// What became of each NodeOverlay of the inventory, by name.
    pub overlays: BTreeMap<String, overlay::Verdict>,
}

/// Where a snapshot's NodePools get their instance types: `kerf plan` takes them straight
/// from the embedded catalog, plus a `reserved` offering per capacity reservation in the
/// class's status (whose available count the status does not carry: `kerf plan` assumes
/// room for every launch, and says so); the controller goes through a cache that resolves them from
/// the cloud provider's refreshed catalog and marks the offerings that recently failed to
/// launch unavailable.
pub trait InstanceTypeSource {
    /// The instance types of NodePools whose EC2NodeClass is `class_name` (`class`, when the
    /// inventory has it), resolved with its allocatable `settings`. Called once per class
    /// per snapshot; the list is shared by the class's NodePools and sizes its in-flight
    /// NodeClaims.
    fn resolve(
        &mut self,
        class_name: &str,
        class: Option<&EC2NodeClass>,
        settings: &AllocatableSettings,
    ) -> Arc<[InstanceType]>;
}

impl InstanceTypeSource for &Catalog {
    fn resolve(
        &mut self,
        _class_name: &str,
        class: Option<&EC2NodeClass>,
        settings: &AllocatableSettings,
    ) -> Arc<[InstanceType]> {
        catalog_types(self, class, settings).into()
    }
}

/// `catalog`'s instance types with `settings`, plus a `reserved` offering per capacity
/// reservation in `class`'s status, each with room for every launch.
pub fn catalog_types(
    catalog: &Catalog,
    class: Option<&EC2NodeClass>,
    settings: &AllocatableSettings,
) -> Vec<InstanceType> {
    let mut types = catalog.instance_types(settings);
    if let Some(status) = class.and_then(|c| c.status.as_ref()) {
        add_reserved_offerings(&mut types, &status.capacity_reservations, |_| {
            Some(u32::MAX)
        });
    }
    types
}

/// The warning for a class whose status lists reservations, which `kerf plan` plans with
/// as if each had room for every launch.
pub fn reservation_count_warning(class: &EC2NodeClass) -> Option<String> {
    let reservations = &class.status.as_ref()?.capacity_reservations;
    (!reservations.is_empty()).then(|| {
        format!(
            "EC2NodeClass {}: status.capacityReservations does not carry how many instances \
             each reservation still takes (EC2 keeps that count); the plan assumes room for \
             every launch into {}",
            class.name(),
            reservations
                .iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// Builds the scheduling snapshot for `inventory` with instance types from `catalog`.
pub fn build(
    inventory: &Inventory,
    catalog: &Catalog,
    controller: ControllerSettings,
) -> Result<Snapshot, SnapshotError> {
    build_with(inventory, controller, &mut &*catalog)
}

/// [`build`], with instance types from `source`: the NodePools' and those that size
/// in-flight NodeClaims without a status yet.
pub fn build_with(
    inventory: &Inventory,
    controller: ControllerSettings,
    source: &mut dyn InstanceTypeSource,
) -> Result<Snapshot, SnapshotError> {
    let used = namespaces_of(&inventory.pods);
    let pods = inventory
        .pods
        .iter()
        .filter(|pod| pods::is_bound(pod) || pods::wants_capacity(pod))
        .map(Arc::clone)
        .collect();
    build_from(inventory, pods, used, controller, source)
}

/// [`build`], moving the inventory's pods into the snapshot, for a caller that reads no pod
/// of `inventory` afterwards: the pods' last holder is then the snapshot, so they go as soon
/// as the solve no longer needs them. `inventory.pods` is left empty.
pub fn build_taking_pods(
    inventory: &mut Inventory,
    catalog: &Catalog,
    controller: ControllerSettings,
) -> Result<Snapshot, SnapshotError> {
    let pods = std::mem::take(&mut inventory.pods);
    let used = namespaces_of(&pods);
    build_from(inventory, pods, used, controller, &mut &*catalog)
}

/// The snapshot of `inventory` with `pods` (the inventory's, or those of them that are
/// bound or pending) in namespaces `used`.
fn build_from(
    inventory: &Inventory,
    pods: Vec<Arc<LeanPod>>,
    used: BTreeSet<String>,
    controller: ControllerSettings,
    source: &mut dyn InstanceTypeSource,
) -> Result<Snapshot, SnapshotError> {
    let mut warnings = Vec::new();
    let mut class_types = ClassTypes {
        inventory,
        controller,
        source,
        resolved: HashMap::new(),
    };
    let (mut pending, bound) = split_pods(pods);
    pending.extend(inventory.buffer_pods.iter().cloned());
    let mut bound_by_node: HashMap<String, Vec<Arc<LeanPod>>> = HashMap::new();
    for pod in bound {
        let node = pod.node_name().unwrap_or_default().to_string();
        bound_by_node.entry(node).or_default().push(pod);
    }
    // Each Node's NodeClaim by node name: a scan of every NodeClaim per Node was a million
    // comparisons a round at a thousand nodes.
    let mut claim_of_node: HashMap<&str, &str> = HashMap::new();
    for claim in &inventory.node_claims {
        if let Some(node) = claim.status.as_ref().and_then(|s| s.node_name.as_deref()) {
            // The first, should two name one Node.
            claim_of_node.entry(node).or_insert(claim.name());
        }
    }
    let limits = volume_limits(inventory);
    let mut existing_nodes = Vec::new();
    for node in inventory
        .nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
    {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let pods = bound_by_node.remove(name).unwrap_or_default();
        let claim = claim_of_node.get(name).copied();
        let mut existing = existing_node(node, claim, pods)?;
        existing.volume_limits = limits.get(name).cloned().unwrap_or_default();
        existing_nodes.push(existing);
    }
    let node_names: HashSet<&str> = inventory
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    for claim in inventory
        .node_claims
        .iter()
        .filter(|c| in_flight(c, &node_names))
    {
        let node_name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        let pods = bound_by_node.remove(node_name).unwrap_or_default();
        existing_nodes.push(in_flight_node(
            claim,
            pods,
            &mut class_types,
            &mut warnings,
        )?);
    }
    let mut orphans: Vec<String> = bound_by_node
        .into_iter()
        .flat_map(|(node, pods)| {
            pods.into_iter()
                .map(move |pod| format!("{} (on {node})", pod_key(&pod)))
        })
        .collect();
    orphans.sort();
    if !orphans.is_empty() {
        warnings.push(format!(
            "pods bound to nodes that are not in the input are left out: {}",
            orphans.join(", ")
        ));
    }
    let (node_pools, overlays) = node_pools(inventory, &mut class_types, &mut warnings)?;
    let mut used = used;
    for pod in &inventory.buffer_pods {
        if let Some(namespace) = pod.meta().namespace {
            used.insert(namespace.to_owned());
        }
    }
    let input = SchedulingInput {
        namespaces: namespaces(inventory, used),
        pods: pending,
        existing_nodes,
        node_pools,
        daemonsets: inventory.daemon_pods.clone(),
        volumes: VolumeTopology {
            pvcs: inventory.claims.clone(),
            pvs: inventory.volumes.clone(),
            storage_classes: inventory.storage_classes.clone(),
        },
        options: Default::default(),
    };
    Ok(Snapshot {
        input,
        warnings,
        overlays,
    })
}

/// `namespace/name`, as the report names pods.
pub fn pod_key(pod: &impl PodLike) -> String {
    let meta = pod.meta();
    format!(
        "{}/{}",
        meta.namespace.unwrap_or(DEFAULT_NAMESPACE),
        meta.name.unwrap_or_default()
    )
}

/// Pending pods (to place) and bound pods (already using capacity); the rest (daemonset
/// and mirror pods without a node, finished or deleting pods) is neither.
/// In place: the pending pods stay in `pods`' own buffer, so a plan never holds two lists of
/// every pod.
fn split_pods(mut pods: Vec<Arc<LeanPod>>) -> (Vec<Arc<LeanPod>>, Vec<Arc<LeanPod>>) {
    let bound = pods.extract_if(.., |pod| pods::is_bound(pod)).collect();
    pods.retain(pods::wants_capacity);
    (pods, bound)
}

/// Every namespace a pod is in.
fn namespaces_of(pods: &[Arc<LeanPod>]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for namespace in pods.iter().filter_map(|p| p.meta().namespace) {
        if !used.contains(namespace) {
            used.insert(namespace.to_owned());
        }
    }
    used
}

/// A NodeClaim is in-flight capacity while no input Node stands for it.
fn in_flight(claim: &NodeClaim, node_names: &HashSet<&str>) -> bool {
    let node_name = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty());
    claim.metadata.deletion_timestamp.is_none()
        && node_name.is_none_or(|name| !node_names.contains(&name))
}

fn existing_node(
    node: &Arc<Node>,
    claim: Option<&str>,
    pods: Vec<Arc<LeanPod>>,
) -> Result<ExistingNode, SnapshotError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let invalid = |error: FieldError| SnapshotError::node("Node", &name, error);
    let mut labels = NodeLabels::OfNode(Arc::clone(node));
    if !labels.contains_key(labels::HOSTNAME) {
        labels.insert(labels::HOSTNAME.to_string(), name.clone());
    }
    let spec = node.spec.as_ref();
    let mut taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    if spec.and_then(|s| s.unschedulable) == Some(true)
        && !taints.iter().any(|t| t.key == UNSCHEDULABLE_TAINT)
    {
        // The node lifecycle controller taints cordoned nodes; the scheduler keys on the taint.
        taints.push(Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    }
    let status = node.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = resources(allocatable.or(capacity), "status.allocatable").map_err(invalid)?;
    let capacity = match capacity {
        Some(capacity) => resources(Some(capacity), "status.capacity").map_err(invalid)?,
        None => allocatable.clone(),
    };
    let node_pool = labels.get(labels::NODEPOOL).cloned();
    let initialized =
        node_pool.is_none() || labels.get(labels::INITIALIZED).is_some_and(|v| v == "true");
    Ok(ExistingNode {
        name,
        labels,
        taints,
        allocatable,
        capacity,
        pods,
        initialized,
        node_pool,
        node_claim: claim.map(str::to_owned),
        volume_limits: BTreeMap::new(),
    })
}

/// Each node's volume attach limits by CSI driver, from its CSINode (named as the Node). A
/// driver that states no count is unlimited.
fn volume_limits(inventory: &Inventory) -> HashMap<&str, BTreeMap<String, i64>> {
    inventory
        .csi_nodes
        .iter()
        .map(|csi| {
            let limits = csi
                .spec
                .drivers
                .iter()
                .filter_map(|driver| {
                    let count = driver.allocatable.as_ref()?.count?;
                    Some((driver.name.clone(), i64::from(count)))
                })
                .collect();
            (csi.metadata.name.as_deref().unwrap_or_default(), limits)
        })
        .collect()
}

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// A launched (or launching) NodeClaim without a Node: its labels are what its requirements
/// pin to one value; its resources are its status, or, before the launch filled that in,
/// what its instance types guarantee (see [`unlaunched_resources`]).
fn in_flight_node(
    claim: &Arc<NodeClaim>,
    pods: Vec<Arc<LeanPod>>,
    class_types: &mut ClassTypes<'_>,
    warnings: &mut Vec<String>,
) -> Result<ExistingNode, SnapshotError> {
    let name = claim.name().to_string();
    let invalid = |error: FieldError| SnapshotError::node("NodeClaim", &name, error);
    // A launched claim carries its pinned labels already; the map is copied only to add one.
    let mut labels = NodeLabels::OfNodeClaim(Arc::clone(claim));
    for requirement in claim.requirements() {
        if requirement.operator == Operator::In
            && requirement.values.len() == 1
            && !labels.contains_key(&requirement.key)
        {
            labels.insert(requirement.key.clone(), requirement.values[0].clone());
        }
    }
    let status = claim.status.as_ref();
    let mut allocatable = status
        .map(|s| resources(Some(&s.allocatable), "status.allocatable"))
        .transpose()
        .map_err(invalid)?
        .unwrap_or_default();
    let mut capacity = status
        .map(|s| resources(Some(&s.capacity), "status.capacity"))
        .transpose()
        .map_err(invalid)?
        .unwrap_or_default();
    if allocatable.is_empty() {
        match claim_resources(claim, &labels, class_types).map_err(invalid)? {
            Some((guaranteed, largest)) => {
                allocatable = guaranteed;
                capacity = largest;
            }
            None => warnings.push(format!(
                "NodeClaim {name} has no status.allocatable and no known instance type: no pods are placed on it"
            )),
        }
    }
    if capacity.is_empty() {
        capacity = allocatable.clone();
    }
    let node_pool = labels
        .get(labels::NODEPOOL)
        .cloned()
        .or_else(|| claim.nodepool_name().map(str::to_string));
    Ok(ExistingNode {
        name: name.clone(),
        labels,
        taints: claim.taints().to_vec(),
        allocatable,
        capacity,
        pods,
        initialized: false,
        node_pool,
        node_claim: Some(name),
        // A node's CSI drivers report their limits once it runs; until then, as upstream,
        // nothing limits what is planned onto it.
        volume_limits: BTreeMap::new(),
    })
}

/// [`unlaunched_resources`] of the instance types a NodeClaim may launch as, from its
/// class's: the one its labels name, else those its instance-type requirement allows. Read
/// in place, not copied: a round after a large one holds many unlaunched NodeClaims, each
/// allowing many instance types, and a type carries its labels and offerings.
fn claim_resources(
    claim: &NodeClaim,
    labels: &BTreeMap<String, String>,
    class_types: &mut ClassTypes<'_>,
) -> Result<Option<(Resources, Resources)>, FieldError> {
    let names: HashSet<&str> = match labels.get(labels::INSTANCE_TYPE) {
        Some(name) => HashSet::from([name.as_str()]),
        None => claim
            .requirements()
            .iter()
            .filter(|r| r.key == labels::INSTANCE_TYPE && r.operator == Operator::In)
            .flat_map(|r| r.values.iter().map(String::as_str))
            .collect(),
    };
    if names.is_empty() {
        return Ok(None);
    }
    let (types, _) = class_types.of(&claim.node_class_ref().name)?;
    Ok(unlaunched_resources(
        types.iter().filter(|it| names.contains(it.name.as_str())),
    ))
}

/// Each EC2NodeClass's instance types, resolved through the source once per snapshot and
/// shared by its NodePools and in-flight NodeClaims.
struct ClassTypes<'a> {
    inventory: &'a Inventory,
    controller: ControllerSettings,
    source: &'a mut dyn InstanceTypeSource,
    /// By class name: its types and whether the inventory has the class.
    resolved: HashMap<String, (Arc<[InstanceType]>, bool)>,
}

impl ClassTypes<'_> {
    /// The types of class `name`, and whether the inventory has it (else the default
    /// settings resolved them).
    fn of(&mut self, name: &str) -> Result<(Arc<[InstanceType]>, bool), FieldError> {
        if let Some((types, found)) = self.resolved.get(name) {
            return Ok((Arc::clone(types), *found));
        }
        let (settings, found) = settings_for(name, self.inventory, self.controller)?;
        let class = self
            .inventory
            .node_classes
            .iter()
            .find(|c| c.name() == name);
        let types = self.source.resolve(name, class, &settings);
        self.resolved
            .insert(name.to_owned(), (Arc::clone(&types), found));
        Ok((types, found))
    }
}

/// The resources of a NodeClaim whose launch has not reported yet: the allocatable every
/// one of its instance types offers (it was planned so that its pods fit each of them), and
/// the largest capacity among them, which is what its NodePool's limits must assume until
/// the launch says which one it got (upstream charges a new NodeClaim the same way).
fn unlaunched_resources<'a>(
    instance_types: impl IntoIterator<Item = &'a InstanceType>,
) -> Option<(Resources, Resources)> {
    let mut instance_types = instance_types.into_iter();
    let first = instance_types.next()?;
    let mut guaranteed = first.allocatable();
    let mut largest = first.capacity.clone();
    for instance_type in instance_types {
        guaranteed = guaranteed.min(&instance_type.allocatable());
        largest = largest.max(&instance_type.capacity);
    }
    Some((guaranteed, largest))
}

/// The EC2NodeClass's settings, or the defaults (and `false`) when it is not in the input.
fn settings_for(
    class_name: &str,
    inventory: &Inventory,
    controller: ControllerSettings,
) -> Result<(crate::catalog::AllocatableSettings, bool), FieldError> {
    match inventory
        .node_classes
        .iter()
        .find(|c| c.name() == class_name)
    {
        Some(class) => Ok((nodeclass::allocatable_settings(class, controller)?, true)),
        None => Ok((nodeclass::default_settings(controller), false)),
    }
}

/// Each NodePool with its class's instance types, the inventory's NodeOverlays applied to
/// them (a pool no overlay touches shares its class's list), and each overlay's verdict.
fn node_pools(
    inventory: &Inventory,
    class_types: &mut ClassTypes<'_>,
    warnings: &mut Vec<String>,
) -> Result<(Vec<NodePoolInput>, BTreeMap<String, overlay::Verdict>), SnapshotError> {
    let mut warned = HashSet::new();
    let mut resolved = Vec::new();
    for pool in &inventory.node_pools {
        let class_name = &pool.node_class_ref().name;
        let (instance_types, found) = class_types
            .of(class_name)
            .map_err(|error| SnapshotError::node("EC2NodeClass", class_name, error))?;
        if !found && warned.insert(class_name.clone()) {
            warnings.push(format!(
                "NodePool {}: EC2NodeClass {class_name} is not in the input; using the default AL2023 settings",
                pool.name()
            ));
        }
        resolved.push((pool, instance_types));
    }
    if inventory.node_overlays.is_empty() {
        let pools = resolved
            .into_iter()
            .map(|(pool, types)| node_pool(pool, types))
            .collect::<Result<_, _>>()?;
        return Ok((pools, BTreeMap::new()));
    }
    let evaluated = {
        let pools: Vec<overlay::PoolTypes<'_>> = resolved
            .iter()
            .map(|(pool, types)| overlay::PoolTypes {
                name: pool.name(),
                labels: pool.template_labels(),
                types,
                zones: class_zones(inventory, &pool.node_class_ref().name),
            })
            .collect();
        overlay::evaluate(&inventory.node_overlays, &pools)
    };
    let pools = resolved
        .into_iter()
        .map(|(pool, types)| node_pool(pool, evaluated.apply(pool.name(), &types)))
        .collect::<Result<_, _>>()?;
    Ok((pools, evaluated.verdicts))
}

/// The zones of the class's resolved subnets; `None` while it has none.
fn class_zones(inventory: &Inventory, class_name: &str) -> Option<BTreeSet<String>> {
    let class = inventory
        .node_classes
        .iter()
        .find(|c| c.name() == class_name)?;
    let zones: BTreeSet<String> = class
        .status
        .as_ref()?
        .subnets
        .iter()
        .map(|s| s.zone.clone())
        .collect();
    (!zones.is_empty()).then_some(zones)
}

fn node_pool(
    pool: &NodePool,
    instance_types: Arc<[InstanceType]>,
) -> Result<NodePoolInput, SnapshotError> {
    let invalid = |error: FieldError| SnapshotError::node("NodePool", pool.name(), error);
    let limits = pool
        .limits()
        .map(|limits| resources(Some(limits), "spec.limits"))
        .transpose()
        .map_err(invalid)?;
    Ok(NodePoolInput {
        name: pool.name().to_string(),
        weight: pool.weight(),
        requirements: pool.requirements().to_vec(),
        labels: pool.template_labels().clone(),
        taints: pool.taints().to_vec(),
        startup_taints: pool.startup_taints().to_vec(),
        limits,
        usage: None,
        instance_types,
    })
}

/// Labels of every namespace: declared ones with their labels, and any other a pod uses,
/// each with the `kubernetes.io/metadata.name` label the API server sets.
fn namespaces(
    inventory: &Inventory,
    used: BTreeSet<String>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    const NAME_LABEL: &str = "kubernetes.io/metadata.name";
    let mut namespaces = BTreeMap::new();
    for name in used
        .into_iter()
        .chain(std::iter::once(DEFAULT_NAMESPACE.to_string()))
    {
        namespaces.insert(
            name.clone(),
            BTreeMap::from([(NAME_LABEL.to_string(), name)]),
        );
    }
    for namespace in &inventory.namespaces {
        let name = namespace.metadata.name.clone().unwrap_or_default();
        let mut labels = namespace.metadata.labels.clone().unwrap_or_default();
        labels.insert(NAME_LABEL.to_string(), name.clone());
        namespaces.insert(name, labels);
    }
    namespaces
}

/// A Kubernetes resource list as exact quantities.
fn resources(
    list: Option<&BTreeMap<String, KubeQuantity>>,
    path: &str,
) -> Result<Resources, FieldError> {
    let mut resources = Resources::new();
    for (name, quantity) in list.into_iter().flatten() {
        let parsed = Quantity::parse(&quantity.0)
            .map_err(|error| FieldError::new(format!("{path}.{name}"), error.to_string()))?;
        resources.insert(name, parsed);
    }
    Ok(resources)
}

#[cfg(test)]
mod tests;
