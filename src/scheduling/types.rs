//! The scheduler's input snapshot and its result. These are plain data: the controller and
//! `kerf plan` map cluster objects (NodePools, Nodes, NodeClaims, DaemonSets, PVCs) onto
//! [`SchedulingInput`] and act on [`SchedulingResult`]; nothing here parses CRDs or performs
//! I/O, so a solve is a pure function of its input.

use crate::pods::LeanPod;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Taint};
use k8s_openapi::api::storage::v1::StorageClass;
use serde::Serialize;

pub use crate::api::{NodeSelectorRequirementWithMinValues, Operator};
pub use crate::catalog::{CapacityType, InstanceType, Offering};
pub use crate::pods::{PodId, PodRef};
pub use crate::resources::Resources;

use super::NodeLabels;

/// Everything one solve needs: the pods to place and the capacity they may use.
#[derive(Clone, Debug, Default)]
pub struct SchedulingInput {
    /// Pending pods to place. Their order does not matter: the solver sorts them. Shared, not
    /// owned: a round's input points at the pods its caller holds (the controller's stores,
    /// the plan's inventory) instead of copying them.
    pub pods: Vec<Arc<LeanPod>>,
    /// Nodes that already exist, and in-flight NodeClaims that have no Node yet, with the pods
    /// already bound to them (those pods count for topology and consume capacity).
    pub existing_nodes: Vec<ExistingNode>,
    /// NodePools with their instance types. Any order: the solver tries them by weight
    /// (highest first), then by name.
    pub node_pools: Vec<NodePoolInput>,
    /// DaemonSet pod templates, one pod per DaemonSet (`spec` from the template, `metadata`
    /// naming the DaemonSet). Their requests are reserved on every node they would run on.
    pub daemonsets: Vec<Pod>,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses that constrain where pods
    /// with volumes may run.
    pub volumes: VolumeTopology,
    /// Namespace labels, for pod (anti-)affinity terms with a namespaceSelector.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Solver knobs; the defaults match upstream Karpenter's.
    pub options: SchedulingOptions,
}

/// A node (or in-flight NodeClaim) that pods may be placed on without launching anything.
#[derive(Clone, Debug, Default)]
pub struct ExistingNode {
    /// Node name (or NodeClaim name while the Node has not registered).
    pub name: String,
    /// Node labels; for an in-flight NodeClaim, the labels its requirements resolve to.
    pub labels: NodeLabels,
    /// Taints currently on the node (startup taints of initialized nodes are gone by then).
    pub taints: Vec<Taint>,
    /// Allocatable resources (capacity minus system overhead).
    pub allocatable: Resources,
    /// Capacity, counted against the owning NodePool's limits when `node_pool` is set.
    pub capacity: Resources,
    /// Pods already bound to (or nominated for) this node, shared like
    /// [`SchedulingInput::pods`].
    pub pods: Vec<Arc<LeanPod>>,
    /// Whether the node is initialized; initialized nodes are tried first.
    pub initialized: bool,
    /// The NodePool that owns the node, if Karpenter manages it.
    pub node_pool: Option<String>,
    /// Name of the NodeClaim backing this node, when there is one.
    pub node_claim: Option<String>,
    /// How many volumes each CSI driver can attach here, by driver name (the node's CSINode
    /// `spec.drivers[].allocatable.count`); a driver not listed is unlimited, as upstream.
    pub volume_limits: BTreeMap<String, i64>,
}

/// One NodePool as the scheduler sees it: its template constraints and its instance types.
#[derive(Clone, Debug, Default)]
pub struct NodePoolInput {
    pub name: String,
    /// `spec.weight`; higher is tried first.
    pub weight: i32,
    /// `spec.template.spec.requirements`.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// `spec.template.metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.template.spec.taints`: pods must tolerate them.
    pub taints: Vec<Taint>,
    /// `spec.template.spec.startupTaints`: ignored for scheduling, carried to the NodeClaim.
    pub startup_taints: Vec<Taint>,
    /// `spec.limits`; `None` means unlimited. A `nodes` entry limits the node count.
    pub limits: Option<Resources>,
    /// Resources already used by the pool (status.resources). When `None`, the solver sums
    /// the capacity of `existing_nodes` owned by the pool, as upstream does.
    pub usage: Option<Resources>,
    /// Instance types the pool may launch (already resolved against its EC2NodeClass),
    /// shared: NodePools of one class, and the controller's rounds while the class's types
    /// do not change, hold one list.
    pub instance_types: std::sync::Arc<[InstanceType]>,
}

/// Volume objects the pods' PVCs refer to.
#[derive(Clone, Debug, Default)]
pub struct VolumeTopology {
    pub pvcs: Vec<PersistentVolumeClaim>,
    pub pvs: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
}

/// How preferences (preferred affinities, ScheduleAnyway spreads) are treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreferencePolicy {
    /// Treat preferences as required, then relax them one at a time on failure (upstream default).
    #[default]
    Respect,
    /// Ignore preferences entirely.
    Ignore,
}

/// What to do when `minValues` cannot be met.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinValuesPolicy {
    /// Fail the pod (upstream default).
    #[default]
    Strict,
    /// Relax `minValues` down to what the remaining instance types can satisfy.
    BestEffort,
}

/// The solver settings an operator chooses (`PREFERENCE_POLICY`, `MIN_VALUES_POLICY`): a
/// controller applies them to every solve it runs, provisioning rounds and disruption's
/// simulations alike, as upstream's scheduler options do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SolvePolicies {
    pub preference: PreferencePolicy,
    pub min_values: MinValuesPolicy,
}

impl SolvePolicies {
    /// Sets the policies on `options`, leaving its other knobs.
    pub fn apply(self, options: &mut SchedulingOptions) {
        options.preference_policy = self.preference;
        options.min_values_policy = self.min_values;
    }
}

/// Solver knobs.
#[derive(Clone, Copy, Debug)]
pub struct SchedulingOptions {
    pub preference_policy: PreferencePolicy,
    pub min_values_policy: MinValuesPolicy,
    /// Instance types kept on a NodeClaim, cheapest first (upstream: 600).
    pub max_instance_types: usize,
    /// Solve independent groups of NodePools on separate threads.
    pub parallel: bool,
}

impl Default for SchedulingOptions {
    fn default() -> Self {
        SchedulingOptions {
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            max_instance_types: 600,
            parallel: true,
        }
    }
}

/// What the solve decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SchedulingResult {
    /// NodeClaims to create, each with the pods it was sized for.
    pub new_node_claims: Vec<PlannedNodeClaim>,
    /// Existing nodes that received pods (nodes that received none are omitted).
    pub existing_nodes: Vec<ExistingNodePlacement>,
    /// Pods that could not be placed, with the reason from their last attempt.
    pub errors: BTreeMap<PodRef, String>,
}

/// Pods placed on an existing node or in-flight NodeClaim.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExistingNodePlacement {
    pub name: String,
    pub pods: Vec<PodRef>,
}

/// A NodeClaim the scheduler wants launched.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedNodeClaim {
    pub node_pool: String,
    /// Instance types that fit every pod, cheapest first, at most `max_instance_types`.
    pub instance_types: InstanceTypeOptions,
    /// `minValues` of the NodePool's instance-type requirement, if any (as relaxed under
    /// [`MinValuesPolicy::BestEffort`]).
    pub instance_type_min_values: Option<i64>,
    /// Whether a requirement's `minValues` was lowered below the NodePool's to launch it
    /// ([`MinValuesPolicy::BestEffort`] only): upstream's
    /// `karpenter.sh/nodeclaim-min-values-relaxed` annotation and `min_values_relaxed` label.
    pub min_values_relaxed: bool,
    /// Requirements of the NodeClaim (pool requirements narrowed by its pods, and the
    /// capacity types its instance types offer), sorted by key, without the instance-type
    /// list: [`PlannedNodeClaim::node_claim_requirements`] adds it from `instance_types`.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Template labels plus custom labels the requirements resolve to a single value.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Pod requests plus the smallest daemonset overhead among the remaining instance types.
    pub requests: Resources,
    pub pods: Vec<PodRef>,
    /// The offering a launch would pick now; `None` if no offering is available.
    pub launch: Option<LaunchChoice>,
}

impl PlannedNodeClaim {
    /// The full `spec.requirements` of the NodeClaim to create: `requirements` plus
    /// `node.kubernetes.io/instance-type In [instance types]` (names sorted).
    pub fn node_claim_requirements(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        let mut names: Vec<String> = self.instance_types.iter().map(|i| i.name.clone()).collect();
        names.sort();
        let mut out = self.requirements.clone();
        out.push(NodeSelectorRequirementWithMinValues {
            key: crate::labels::INSTANCE_TYPE.to_string(),
            operator: Operator::In,
            values: names,
            min_values: self.instance_type_min_values,
        });
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

/// A NodeClaim's instance-type options. NodeClaims with the same options share one list, so
/// thousands of NodeClaims do not each hold hundreds of copies of the same names.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceTypeOptions(pub std::sync::Arc<[InstanceTypeOption]>);

impl std::ops::Deref for InstanceTypeOptions {
    type Target = [InstanceTypeOption];
    fn deref(&self) -> &[InstanceTypeOption] {
        &self.0
    }
}

impl Serialize for InstanceTypeOptions {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}

/// An instance type option of a planned NodeClaim with its cheapest compatible price.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstanceTypeOption {
    pub name: String,
    pub price: f64,
}

/// The instance type, zone and capacity type a launch would choose, and its hourly price.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LaunchChoice {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
}
