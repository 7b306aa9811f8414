//! A node as the simulated kube-scheduler sees it: labels, the taints its filter checks
//! (including the `not-ready` taint the node lifecycle controller puts on a node that is
//! not Ready) and the PreferNoSchedule ones its score reads, allocatable, and what the pods
//! already on it use.

use super::amounts::Amounts;
use super::podinfo::{HostPort, PodInfo};
use k8s_openapi::api::core::v1::{Node, Taint};
use kerf::resources::{Quantity, Resources};
use kerf::taints::{EFFECT_NO_EXECUTE, EFFECT_NO_SCHEDULE, EFFECT_PREFER_NO_SCHEDULE};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The taint kube-controller-manager keeps on nodes whose Ready condition is not True.
pub(crate) const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The taint equivalent of `spec.unschedulable` (cordon), which pods may tolerate.
pub(crate) const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

#[derive(Clone, Debug)]
pub(crate) struct NodeInfo {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    /// NoSchedule and NoExecute taints, the only ones the filter considers.
    pub(crate) taints: Vec<Taint>,
    /// PreferNoSchedule taints, which only TaintToleration's score reads.
    pub(crate) preferred_taints: Vec<Taint>,
    pub(crate) unschedulable: bool,
    pub(crate) allocatable: Amounts,
    pub(crate) requested: Amounts,
    /// cpu and memory requested with kube-scheduler's defaults for request-less containers.
    pub(crate) non_zero_requested: (i64, i64),
    pub(crate) ports: Vec<HostPort>,
    pub(crate) pods: Vec<Arc<PodInfo>>,
    /// Pending pods nominated to this node (`status.nominatedNodeName`), whose room the
    /// filter keeps for them against pods of no higher priority.
    pub(crate) nominated: Vec<Arc<PodInfo>>,
}

impl NodeInfo {
    /// Compiles a Node; a malformed allocatable quantity is reported with node and resource.
    pub(crate) fn new(node: &Node) -> Result<NodeInfo, String> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let status = node.status.as_ref();
        let listed = status
            .and_then(|s| s.allocatable.as_ref())
            .or_else(|| status.and_then(|s| s.capacity.as_ref()));
        let mut allocatable = Resources::new();
        for (resource, quantity) in listed.into_iter().flatten() {
            let parsed = Quantity::parse(&quantity.0).map_err(|e| {
                format!(
                    "node {name}: status.allocatable[{resource}]: invalid quantity {:?}: {e}",
                    quantity.0
                )
            })?;
            allocatable.insert(resource, parsed);
        }
        let spec = node.spec.as_ref();
        let (preferred_taints, mut taints): (Vec<Taint>, Vec<Taint>) = spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| {
                [
                    EFFECT_NO_SCHEDULE,
                    EFFECT_NO_EXECUTE,
                    EFFECT_PREFER_NO_SCHEDULE,
                ]
                .contains(&t.effect.as_str())
            })
            .cloned()
            .partition(|t| t.effect == EFFECT_PREFER_NO_SCHEDULE);
        if !is_ready(node) && !taints.iter().any(|t| t.key == NOT_READY_TAINT) {
            taints.push(Taint {
                key: NOT_READY_TAINT.to_owned(),
                effect: EFFECT_NO_SCHEDULE.to_owned(),
                ..Taint::default()
            });
        }
        Ok(NodeInfo {
            name,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints,
            preferred_taints,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable: Amounts::of(&allocatable),
            requested: Amounts::default(),
            non_zero_requested: (0, 0),
            ports: Vec::new(),
            pods: Vec::new(),
            nominated: Vec::new(),
        })
    }

    /// Accounts a pod running (or assumed) on this node.
    pub(crate) fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.0 += pod.non_zero.0;
        self.non_zero_requested.1 += pod.non_zero.1;
        self.ports.extend(pod.host_ports.iter().cloned());
        self.pods.push(pod);
    }

    /// The other pods nominated to this node whose priority is at least `pod`'s: as
    /// kube-scheduler's `RunFilterPluginsWithNominatedPods`, the filter counts them as if
    /// they were running here.
    pub(crate) fn reserving<'a>(&'a self, pod: &'a PodInfo) -> impl Iterator<Item = &'a PodInfo> {
        self.nominated
            .iter()
            .filter(|other| other.uid != pod.uid && other.priority >= pod.priority)
            .map(|other| &**other)
    }

    /// What the filter counts as used when it checks `pod`: the pods on the node and the
    /// pods nominated to it that it must leave room for ([`NodeInfo::reserving`]).
    pub(crate) fn used_for(&self, pod: &PodInfo) -> Cow<'_, Amounts> {
        let mut reserving = self.reserving(pod).peekable();
        if reserving.peek().is_none() {
            return Cow::Borrowed(&self.requested);
        }
        let mut used = self.requested.clone();
        for other in reserving {
            used.add(&other.requests);
        }
        Cow::Owned(used)
    }
}

/// Whether the node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}
