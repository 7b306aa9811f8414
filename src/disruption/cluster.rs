//! What a disruption decision reads: the scheduler's snapshot of the cluster (every node with
//! its bound pods, the pending pods, the NodePools with their instance types) plus what
//! disruption needs beyond scheduling — each Karpenter-managed node's NodeClaim facts
//! (creation, last pod event, initialization, drift, lifetime), the NodePool objects (policy,
//! budgets, hash) and the PodDisruptionBudgets. `kerf plan` fills it from manifests and the
//! controller will fill it from its cluster state; neither the decision nor its tests need
//! anything else.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::pods::Pdb;
use crate::api::NodePool;
use crate::feature_gates::FeatureGates;
use crate::scheduling::SchedulingInput;

/// The cluster as a disruption decision sees it.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Every node (managed or not) with its bound pods, the pending pods and the NodePools'
    /// instance types. Managed nodes are those named in [`Cluster::nodes`].
    pub scheduling: SchedulingInput,
    /// Karpenter-managed nodes; those marked `deleting` need not be in `scheduling`.
    pub nodes: Vec<ManagedNode>,
    pub node_pools: Vec<NodePool>,
    pub pdbs: Vec<Pdb>,
}

/// A node with a NodeClaim (or standing for one): what disruption knows beyond scheduling.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManagedNode {
    /// Node name, as in `scheduling.existing_nodes`.
    pub name: String,
    pub node_claim: String,
    pub node_pool: String,
    /// NodeClaim creation, from which lifetime and expiry count.
    pub created: Option<Timestamp>,
    /// The last time a pod was bound to or left the node; `None` is long ago.
    pub last_pod_event: Option<Timestamp>,
    pub initialized: bool,
    /// Node `Ready` condition is true.
    pub ready: bool,
    /// Being deleted already: not a candidate, counted against budgets.
    pub deleting: bool,
    /// A recent provisioning round planned pending pods onto it (upstream's nominated
    /// node): not a candidate of any method while the nomination lasts. Never set by
    /// `kerf plan`, whose input has no rounds.
    pub nominated: bool,
    /// The Node carries `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// The NodeClaim's `Drifted` condition, when true: its reason and transition time.
    pub drifted: Option<(String, Option<Timestamp>)>,
    /// `karpenter.sh/nodepool-hash` and `-hash-version` of the NodeClaim.
    pub nodepool_hash: Option<(String, String)>,
    /// `spec.expireAfter`; `None` is `Never`.
    pub expire_after: Option<Duration>,
    /// `spec.terminationGracePeriod`: lets eventual disruption (drift) pass blocking pods.
    pub termination_grace_period: Option<Duration>,
}

/// What a decision depends on besides the cluster.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    pub now: Timestamp,
    pub feature_gates: FeatureGates,
}
