//! One scheduling cycle's view of the cluster and the kube-scheduler's filter and score
//! plugins over it: NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts,
//! NodeResourcesFit, PodTopologySpread and InterPodAffinity filter nodes in that order (a
//! node reports its first failing plugin, as kube-scheduler does); LeastAllocated plus
//! preferred node affinity score the feasible ones. Pods placed during the cycle are
//! assumed onto their node so later pods see them. Work that only depends on a pod's node
//! affinity and tolerations is cached per workload, and pod counts per selector are kept
//! per node and updated incrementally, so a batch of 10k similar pods stays cheap.

use super::nodeinfo::{NodeInfo, UNSCHEDULABLE_TAINT};
use super::podinfo::{NodeTerm, PodInfo, PodSelector};
use kerf::requirements::Operator;
use kerf::taints::{EFFECT_NO_SCHEDULE, toleration_tolerates};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

/// Why a node was filtered out, rendered with kube-scheduler's wording.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Reason {
    Unschedulable,
    UntoleratedTaint { key: String, value: String },
    NodeAffinity,
    HostPorts,
    Insufficient(String),
    TooManyPods,
    SpreadMissingLabel,
    Spread,
    Affinity,
    AntiAffinity,
    ExistingAntiAffinity,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unschedulable => f.write_str("node(s) were unschedulable"),
            Reason::UntoleratedTaint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Reason::NodeAffinity => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Reason::HostPorts => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Reason::Insufficient(resource) => write!(f, "Insufficient {resource}"),
            Reason::TooManyPods => f.write_str("Too many pods"),
            Reason::SpreadMissingLabel => f.write_str(
                "node(s) didn't match pod topology spread constraints (missing required label)",
            ),
            Reason::Spread => f.write_str("node(s) didn't match pod topology spread constraints"),
            Reason::Affinity => f.write_str("node(s) didn't match pod affinity rules"),
            Reason::AntiAffinity => f.write_str("node(s) didn't match pod anti-affinity rules"),
            Reason::ExistingAntiAffinity => {
                f.write_str("node(s) didn't satisfy existing pods anti-affinity rules")
            }
        }
    }
}

/// The `PodScheduled=False` message for a pod no node fits, in kube-scheduler's format:
/// `0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {...}.`
pub(crate) fn unschedulable_message(nodes: usize, reasons: &BTreeMap<Reason, usize>) -> String {
    if nodes == 0 {
        return "no nodes available to schedule pods".to_owned();
    }
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{nodes} nodes are available: {}.", parts.join(", "))
}

/// Whether `pod` may run on `node` as far as the node's own properties go (cordon, taints,
/// node selector and affinity), for controllers that place pods directly (daemonsets).
pub(crate) fn static_fit(pod: &PodInfo, node: &NodeInfo) -> Result<(), Reason> {
    if node.unschedulable && !tolerates_unschedulable(pod) {
        return Err(Reason::Unschedulable);
    }
    if let Some(reason) = first_untolerated(node, pod) {
        return Err(reason);
    }
    if !matches_node_affinity(pod, node) {
        return Err(Reason::NodeAffinity);
    }
    Ok(())
}

/// Node affinity and taint results of one workload on every node.
struct StaticVerdict {
    /// `Ok` or the first failing of NodeUnschedulable, TaintToleration, NodeAffinity.
    filter: Vec<Result<(), Reason>>,
    /// Node affinity alone: which nodes count for topology spread (`nodeAffinityPolicy`).
    affinity: Vec<bool>,
    /// Taints alone (`nodeTaintsPolicy: Honor`).
    taints: Vec<bool>,
}

/// The cluster during one scheduling cycle.
pub(crate) struct Cluster {
    nodes: Vec<NodeInfo>,
    static_verdicts: HashMap<u64, StaticVerdict>,
    /// Matching pods per node, per selector, maintained as pods are assumed.
    counts: HashMap<PodSelector, Vec<u32>>,
    /// Placed pods that carry required anti-affinity, with their node index.
    anti_affinity_pods: Vec<(usize, Arc<PodInfo>)>,
    next_start: usize,
}

impl Cluster {
    pub(crate) fn new(nodes: Vec<NodeInfo>, start: usize) -> Cluster {
        let anti_affinity_pods = nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.pods.iter().map(move |p| (i, p)))
            .filter(|(_, p)| !p.anti_affinity.is_empty())
            .map(|(i, p)| (i, Arc::clone(p)))
            .collect();
        let next_start = if nodes.is_empty() {
            0
        } else {
            start % nodes.len()
        };
        Cluster {
            nodes,
            static_verdicts: HashMap::new(),
            counts: HashMap::new(),
            anti_affinity_pods,
            next_start,
        }
    }

    pub(crate) fn node_name(&self, index: usize) -> &str {
        &self.nodes[index].name
    }

    /// Where the next cycle should start looking, so load spreads over the node list.
    pub(crate) fn next_start(&self) -> usize {
        self.next_start
    }

    /// The node index for `pod`, or the Unschedulable message.
    pub(crate) fn schedule(&mut self, pod: &PodInfo) -> Result<usize, String> {
        if self.nodes.is_empty() {
            return Err(unschedulable_message(0, &BTreeMap::new()));
        }
        self.ensure_static(pod);
        let topology = self.topology_state(pod);
        let total = self.nodes.len();
        let wanted = feasible_nodes_to_find(total);
        let mut feasible = Vec::new();
        let mut reasons: BTreeMap<Reason, usize> = BTreeMap::new();
        let mut examined = 0;
        while examined < total && feasible.len() < wanted {
            let index = (self.next_start + examined) % total;
            examined += 1;
            match self.filter(pod, index, &topology) {
                Ok(()) => feasible.push(index),
                Err(failed) => {
                    for reason in failed {
                        *reasons.entry(reason).or_default() += 1;
                    }
                }
            }
        }
        self.next_start = (self.next_start + examined) % total;
        self.best(pod, &feasible)
            .ok_or_else(|| unschedulable_message(total, &reasons))
    }

    /// Accounts `pod` on node `index` for the rest of the cycle.
    pub(crate) fn assume(&mut self, index: usize, pod: Arc<PodInfo>) {
        for (selector, per_node) in &mut self.counts {
            if selector.selects(&pod) {
                per_node[index] += 1;
            }
        }
        if !pod.anti_affinity.is_empty() {
            self.anti_affinity_pods.push((index, Arc::clone(&pod)));
        }
        self.nodes[index].add_pod(pod);
    }

    fn ensure_static(&mut self, pod: &PodInfo) {
        if self.static_verdicts.contains_key(&pod.static_fingerprint) {
            return;
        }
        let mut verdict = StaticVerdict {
            filter: Vec::with_capacity(self.nodes.len()),
            affinity: Vec::with_capacity(self.nodes.len()),
            taints: Vec::with_capacity(self.nodes.len()),
        };
        for node in &self.nodes {
            let taint = first_untolerated(node, pod);
            let affinity = matches_node_affinity(pod, node);
            verdict.affinity.push(affinity);
            verdict.taints.push(taint.is_none());
            verdict
                .filter
                .push(if node.unschedulable && !tolerates_unschedulable(pod) {
                    Err(Reason::Unschedulable)
                } else if let Some(reason) = taint {
                    Err(reason)
                } else if !affinity {
                    Err(Reason::NodeAffinity)
                } else {
                    Ok(())
                });
        }
        self.static_verdicts.insert(pod.static_fingerprint, verdict);
    }

    fn filter(
        &self,
        pod: &PodInfo,
        index: usize,
        topology: &TopologyState,
    ) -> Result<(), Vec<Reason>> {
        let node = &self.nodes[index];
        if let Some(Err(reason)) = self
            .static_verdicts
            .get(&pod.static_fingerprint)
            .map(|v| &v.filter[index])
        {
            return Err(vec![reason.clone()]);
        }
        if pod
            .host_ports
            .iter()
            .any(|p| node.ports.iter().any(|used| used.conflicts(p)))
        {
            return Err(vec![Reason::HostPorts]);
        }
        let insufficient = insufficient_resources(pod, node);
        if !insufficient.is_empty() {
            return Err(insufficient);
        }
        topology.check_spread(node).map_err(|r| vec![r])?;
        topology.check_affinity(pod, node).map_err(|r| vec![r])
    }

    fn best(&self, pod: &PodInfo, feasible: &[usize]) -> Option<usize> {
        let preferred: Vec<i64> = feasible
            .iter()
            .map(|&i| preferred_affinity_weight(pod, &self.nodes[i]))
            .collect();
        let max_preferred = preferred.iter().copied().max().unwrap_or(0);
        let mut best: Option<(i64, usize)> = None;
        for (k, &index) in feasible.iter().enumerate() {
            let mut score = least_allocated(pod, &self.nodes[index]);
            if max_preferred > 0 {
                score += preferred[k] * 100 / max_preferred;
            }
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, index));
            }
        }
        best.map(|(_, index)| index)
    }

    fn counts_for(&mut self, selector: &PodSelector) -> &Vec<u32> {
        let nodes = &self.nodes;
        self.counts.entry(selector.clone()).or_insert_with(|| {
            nodes
                .iter()
                .map(|n| n.pods.iter().filter(|p| selector.selects(p)).count() as u32)
                .collect()
        })
    }

    fn topology_state(&mut self, pod: &PodInfo) -> TopologyState {
        let mut spread = Vec::new();
        for constraint in &pod.spread {
            let per_node = self.counts_for(&constraint.pods).clone();
            let verdict = &self.static_verdicts[&pod.static_fingerprint];
            let mut domains: HashMap<String, u32> = HashMap::new();
            for (i, node) in self.nodes.iter().enumerate() {
                let Some(value) = node.labels.get(&constraint.topology_key) else {
                    continue;
                };
                let counts = (!constraint.honor_node_affinity || verdict.affinity[i])
                    && (!constraint.honor_taints || verdict.taints[i]);
                if counts {
                    *domains.entry(value.clone()).or_default() += per_node[i];
                }
            }
            let min = if (domains.len() as u32) < constraint.min_domains {
                0
            } else {
                domains.values().copied().min().unwrap_or(0)
            };
            spread.push(SpreadState {
                key: constraint.topology_key.clone(),
                max_skew: constraint.max_skew,
                self_match: u32::from(constraint.pods.selects(pod)),
                min,
                domains,
            });
        }
        let affinity = self.term_domains(&pod.affinity);
        let anti_affinity = self.term_domains(&pod.anti_affinity);
        let affinity_matches_exist = affinity.iter().any(|(_, d)| d.values().any(|&c| c > 0));
        let self_affinity = pod.affinity.iter().all(|t| t.pods.selects(pod));
        let mut forbidden = Vec::new();
        for (index, other) in &self.anti_affinity_pods {
            for term in &other.anti_affinity {
                if term.pods.selects(pod)
                    && let Some(value) = self.nodes[*index].labels.get(&term.topology_key)
                {
                    forbidden.push((term.topology_key.clone(), value.clone()));
                }
            }
        }
        TopologyState {
            spread,
            affinity,
            anti_affinity,
            first_of_group: !affinity_matches_exist && self_affinity,
            forbidden,
        }
    }

    /// For each term: matching pods per value of its topology key.
    fn term_domains(
        &mut self,
        terms: &[super::podinfo::AffinityTerm],
    ) -> Vec<(String, HashMap<String, u32>)> {
        let mut out = Vec::with_capacity(terms.len());
        for term in terms {
            let per_node = self.counts_for(&term.pods).clone();
            let mut domains: HashMap<String, u32> = HashMap::new();
            for (i, node) in self.nodes.iter().enumerate() {
                if let Some(value) = node.labels.get(&term.topology_key) {
                    *domains.entry(value.clone()).or_default() += per_node[i];
                }
            }
            out.push((term.topology_key.clone(), domains));
        }
        out
    }
}

struct SpreadState {
    key: String,
    max_skew: u32,
    self_match: u32,
    min: u32,
    domains: HashMap<String, u32>,
}

struct TopologyState {
    spread: Vec<SpreadState>,
    affinity: Vec<(String, HashMap<String, u32>)>,
    anti_affinity: Vec<(String, HashMap<String, u32>)>,
    /// No pod matches the pod's affinity yet and it matches its own terms: it may start
    /// the group anywhere (kube-scheduler's rule for self-affine workloads).
    first_of_group: bool,
    /// Topology pairs excluded by the anti-affinity of pods already placed.
    forbidden: Vec<(String, String)>,
}

impl TopologyState {
    fn check_spread(&self, node: &NodeInfo) -> Result<(), Reason> {
        for constraint in &self.spread {
            let Some(value) = node.labels.get(&constraint.key) else {
                return Err(Reason::SpreadMissingLabel);
            };
            let count = constraint.domains.get(value).copied().unwrap_or(0);
            if count + constraint.self_match > constraint.min + constraint.max_skew {
                return Err(Reason::Spread);
            }
        }
        Ok(())
    }

    fn check_affinity(&self, _pod: &PodInfo, node: &NodeInfo) -> Result<(), Reason> {
        if !self.affinity.is_empty() {
            let mut all_present = true;
            for (key, domains) in &self.affinity {
                let Some(value) = node.labels.get(key) else {
                    return Err(Reason::Affinity);
                };
                if domains.get(value).copied().unwrap_or(0) == 0 {
                    all_present = false;
                }
            }
            if !all_present && !self.first_of_group {
                return Err(Reason::Affinity);
            }
        }
        for (key, domains) in &self.anti_affinity {
            if let Some(value) = node.labels.get(key)
                && domains.get(value).copied().unwrap_or(0) > 0
            {
                return Err(Reason::AntiAffinity);
            }
        }
        let excluded = self
            .forbidden
            .iter()
            .any(|(key, value)| node.labels.get(key) == Some(value));
        if excluded {
            return Err(Reason::ExistingAntiAffinity);
        }
        Ok(())
    }
}

/// kube-scheduler's `percentageOfNodesToScore` adaptive default: every node up to 100,
/// then a shrinking share (50% minus 1% per 125 nodes, at least 5%), never below 100.
fn feasible_nodes_to_find(nodes: usize) -> usize {
    if nodes < 100 {
        return nodes;
    }
    let percent = 50usize.saturating_sub(nodes / 125).max(5);
    (nodes * percent / 100).max(100)
}

fn first_untolerated(node: &NodeInfo, pod: &PodInfo) -> Option<Reason> {
    node.taints
        .iter()
        .find(|taint| {
            !pod.tolerations
                .iter()
                .any(|t| toleration_tolerates(t, taint))
        })
        .map(|taint| Reason::UntoleratedTaint {
            key: taint.key.clone(),
            value: taint.value.clone().unwrap_or_default(),
        })
}

fn tolerates_unschedulable(pod: &PodInfo) -> bool {
    let taint = k8s_openapi::api::core::v1::Taint {
        key: UNSCHEDULABLE_TAINT.to_owned(),
        effect: EFFECT_NO_SCHEDULE.to_owned(),
        ..Default::default()
    };
    pod.tolerations
        .iter()
        .any(|t| toleration_tolerates(t, &taint))
}

fn matches_node_affinity(pod: &PodInfo, node: &NodeInfo) -> bool {
    let selector_ok = pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    selector_ok
        && pod
            .required_terms
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| term_matches(t, node)))
}

/// An empty term matches nothing (kube-scheduler's rule); otherwise all its expressions must.
fn term_matches(term: &NodeTerm, node: &NodeInfo) -> bool {
    if term.invalid || (term.labels.is_empty() && term.names.is_empty()) {
        return false;
    }
    let label_ok = term
        .labels
        .iter()
        .all(|req| match node.labels.get(req.key()) {
            Some(value) => req.has(value),
            None => matches!(req.operator(), Operator::NotIn | Operator::DoesNotExist),
        });
    label_ok && term.names.iter().all(|req| req.has(&node.name))
}

fn preferred_affinity_weight(pod: &PodInfo, node: &NodeInfo) -> i64 {
    pod.preferred_terms
        .iter()
        .filter(|(_, term)| term_matches(term, node))
        .map(|(weight, _)| i64::from(*weight))
        .sum()
}

fn insufficient_resources(pod: &PodInfo, node: &NodeInfo) -> Vec<Reason> {
    let mut reasons = Vec::new();
    for (name, wanted) in pod.requests.iter() {
        if wanted <= kerf::resources::Quantity::ZERO {
            continue;
        }
        let free = node
            .allocatable
            .get_or_zero(name)
            .saturating_sub(node.requested.get_or_zero(name));
        if wanted > free {
            reasons.push(if name == kerf::labels::RESOURCE_PODS {
                Reason::TooManyPods
            } else {
                Reason::Insufficient(name.to_owned())
            });
        }
    }
    reasons
}

/// kube-scheduler's LeastAllocated score (0..=100) over cpu and memory.
fn least_allocated(pod: &PodInfo, node: &NodeInfo) -> i64 {
    let mut total = 0i64;
    for name in [kerf::labels::RESOURCE_CPU, kerf::labels::RESOURCE_MEMORY] {
        let capacity = node.allocatable.get_or_zero(name).milli_value();
        if capacity <= 0 {
            continue;
        }
        let used = node.requested.get_or_zero(name).milli_value()
            + pod.requests.get_or_zero(name).milli_value();
        total += (capacity - used).max(0) * 100 / capacity;
    }
    total / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_follow_kube_scheduler_format() {
        let mut reasons = BTreeMap::new();
        reasons.insert(Reason::Insufficient("cpu".into()), 1);
        reasons.insert(
            Reason::UntoleratedTaint {
                key: "k".into(),
                value: "v".into(),
            },
            2,
        );
        assert_eq!(
            unschedulable_message(3, &reasons),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}."
        );
        assert_eq!(
            unschedulable_message(0, &BTreeMap::new()),
            "no nodes available to schedule pods"
        );
    }

    #[test]
    fn feasible_node_sampling_matches_kube_defaults() {
        assert_eq!(feasible_nodes_to_find(50), 50);
        assert_eq!(feasible_nodes_to_find(100), 100);
        assert_eq!(feasible_nodes_to_find(1000), 420);
        assert_eq!(feasible_nodes_to_find(5000), 500);
    }
}
