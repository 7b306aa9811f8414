//! What a disruption decision reads: the scheduler's snapshot of the cluster (every node with
//! its bound pods, the pending pods, the NodePools with their instance types) plus what
//! disruption needs beyond scheduling — each Karpenter-managed node's NodeClaim facts
//! (creation, last pod event, initialization, drift, lifetime), the NodePool objects (policy,
//! budgets, hash) and the PodDisruptionBudgets. `kerf plan` fills it from manifests and the
//! controller will fill it from its cluster state; neither the decision nor its tests need
//! anything else.

use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::pods;
use crate::api::NodePool;
use crate::feature_gates::FeatureGates;
use crate::pods::PodLike;
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

/// A PodDisruptionBudget reduced to what an eviction check needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Pdb {
    /// `namespace/name`.
    pub key: String,
    pub namespace: String,
    pub selector: LabelSelector,
    /// Evictions the budget allows now (`status.disruptionsAllowed`).
    pub disruptions_allowed: i32,
}

impl Pdb {
    /// From the API object: `status.disruptionsAllowed` when the status is given, else what
    /// the disruption controller would compute with every selected running pod healthy and
    /// expected (`pods` are all pods of the input).
    pub fn from_api(pdb: &PodDisruptionBudget, pods: impl Iterator<Item = impl PodLike>) -> Pdb {
        let namespace = pdb
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = pdb.metadata.name.clone().unwrap_or_default();
        let spec = pdb.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        let allowed = match pdb.status.as_ref() {
            Some(status) => status.disruptions_allowed,
            None => {
                let selected = pods
                    .filter(|p| p.meta().namespace.unwrap_or("default") == namespace)
                    .filter(|p| crate::pods::is_active(p) && pods::selects(&selector, p))
                    .count() as i32;
                computed_allowance(
                    spec.min_available.as_ref(),
                    spec.max_unavailable.as_ref(),
                    selected,
                )
            }
        };
        Pdb {
            key: format!("{namespace}/{name}"),
            namespace,
            selector,
            disruptions_allowed: allowed,
        }
    }
}

/// The disruption controller's arithmetic with `healthy == expected == selected`.
fn computed_allowance(
    min_available: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    selected: i32,
) -> i32 {
    let scaled = |value: &IntOrString, round_up: bool| match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(text) => {
            let percent: f64 = text.trim_end_matches('%').parse().unwrap_or(0.0);
            let exact = percent * f64::from(selected) / 100.0;
            (if round_up {
                exact.ceil()
            } else {
                exact.floor()
            }) as i32
        }
    };
    let allowed = match (max_unavailable, min_available) {
        (Some(max), _) => scaled(max, true),
        (None, Some(min)) => selected - scaled(min, true),
        // Neither: the API server defaults minAvailable to 1.
        (None, None) => selected - 1,
    };
    allowed.max(0)
}

/// What a decision depends on besides the cluster.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    pub now: Timestamp,
    pub feature_gates: FeatureGates,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_allowance_follows_the_disruption_controller() {
        let int = IntOrString::Int;
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(computed_allowance(Some(&int(2)), None, 3), 1);
        assert_eq!(computed_allowance(Some(&int(3)), None, 3), 0);
        assert_eq!(computed_allowance(None, Some(&int(1)), 3), 1);
        // (minAvailable, maxUnavailable, selected pods)
        assert_eq!(computed_allowance(Some(&pct("50%")), None, 3), 1);
        assert_eq!(computed_allowance(None, Some(&pct("50%")), 3), 2);
        assert_eq!(computed_allowance(None, None, 1), 0);
    }
}
