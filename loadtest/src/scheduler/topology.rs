//! Topology for one pod in one cycle: PodTopologySpread (`DoNotSchedule` constraints) and
//! required InterPodAffinity, evaluated the kube-scheduler's way. Domains (the values of a
//! topology key) are numbered once per cycle and counts are kept per domain index, so
//! checking a node is a couple of array reads rather than string hashing.

use super::nodeinfo::NodeInfo;
use super::podinfo::{PodInfo, PodSelector};
use super::reason::Reason;
use std::collections::{HashMap, HashSet};

/// The domains of one topology key: which domain each node is in.
pub(crate) struct Domains {
    pub(crate) of_node: Vec<Option<usize>>,
    pub(crate) len: usize,
}

impl Domains {
    pub(crate) fn build(nodes: &[NodeInfo], key: &str) -> Domains {
        let mut names: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let of_node = nodes
            .iter()
            .map(|n| {
                let value = n.labels.get(key)?;
                let next = names.len();
                Some(*names.entry(value.as_str()).or_insert(next))
            })
            .collect();
        Domains {
            of_node,
            len: names.len(),
        }
    }

    /// Per-domain sums of `per_node`, over the nodes `counted` admits.
    pub(crate) fn sum(
        &self,
        per_node: &[u32],
        counted: impl Fn(usize) -> bool,
    ) -> (Vec<u32>, Vec<bool>) {
        let mut sums = vec![0u32; self.len];
        let mut present = vec![false; self.len];
        for (node, domain) in self.of_node.iter().enumerate() {
            if let Some(d) = *domain
                && counted(node)
            {
                sums[d] += per_node[node];
                present[d] = true;
            }
        }
        (sums, present)
    }
}

/// One spread constraint's state.
pub(crate) struct Spread<'a> {
    pub(crate) domains: &'a Domains,
    pub(crate) max_skew: u32,
    pub(crate) self_match: u32,
    pub(crate) min: u32,
    pub(crate) counts: Vec<u32>,
}

/// One affinity or anti-affinity term's matching pods per domain.
pub(crate) struct Term<'a> {
    pub(crate) domains: &'a Domains,
    pub(crate) pods: &'a PodSelector,
    pub(crate) counts: Vec<u32>,
}

impl Term<'_> {
    fn count_at(&self, node: usize) -> Option<u32> {
        self.domains.of_node[node].map(|d| self.counts[d])
    }
}

/// The topology values the anti-affinity of pods already placed excludes, by topology key:
/// one per node holding a one-per-host pod, so a pod those pods repel looks its node's
/// value up rather than comparing it with each of thousands.
pub(crate) type Forbidden = HashMap<String, HashSet<String>>;

/// Everything topology needs to judge nodes for one pod.
pub(crate) struct TopologyState<'a> {
    pub(crate) spread: Vec<Spread<'a>>,
    pub(crate) affinity: Vec<Term<'a>>,
    pub(crate) anti_affinity: Vec<Term<'a>>,
    /// No pod matches the pod's affinity yet and it matches its own terms: it may start
    /// the group anywhere (kube-scheduler's rule for self-affine workloads).
    pub(crate) first_of_group: bool,
    /// Topology pairs excluded by the anti-affinity of pods already placed.
    pub(crate) forbidden: &'a Forbidden,
}

impl TopologyState<'_> {
    pub(crate) fn check_spread(&self, node: usize) -> Result<(), Reason> {
        for constraint in &self.spread {
            let Some(domain) = constraint.domains.of_node[node] else {
                return Err(Reason::SpreadMissingLabel);
            };
            if constraint.counts[domain] + constraint.self_match
                > constraint.min + constraint.max_skew
            {
                return Err(Reason::Spread);
            }
        }
        Ok(())
    }

    pub(crate) fn check_affinity(&self, node: usize, info: &NodeInfo) -> Result<(), Reason> {
        if !self.affinity.is_empty() {
            let mut all_present = true;
            for term in &self.affinity {
                match term.count_at(node) {
                    None => return Err(Reason::Affinity),
                    Some(0) => all_present = false,
                    Some(_) => {}
                }
            }
            if !all_present && !self.first_of_group {
                return Err(Reason::Affinity);
            }
        }
        if self
            .anti_affinity
            .iter()
            .any(|t| t.count_at(node).is_some_and(|c| c > 0))
        {
            return Err(Reason::AntiAffinity);
        }
        if self
            .forbidden
            .iter()
            .any(|(key, values)| info.labels.get(key).is_some_and(|v| values.contains(v)))
        {
            return Err(Reason::ExistingAntiAffinity);
        }
        Ok(())
    }

    /// kube-scheduler's `RunFilterPluginsWithNominatedPods` filters a node a second time
    /// with the pods nominated to it (of at least the pod's priority) added, so a
    /// nomination keeps the nominee's place in the node's pod anti-affinity as `used_for`
    /// keeps its room: a pod anti-affine to it, or one it repels, passes the node by.
    /// Required affinity is left out: added pods only help it, and the pass without them
    /// must hold too. So is topology spread, where kube-scheduler counts the nominees as
    /// well: the simulation does not (the README says why that matters to kerf).
    pub(crate) fn check_nominated(
        &self,
        pod: &PodInfo,
        node: usize,
        info: &NodeInfo,
    ) -> Result<(), Reason> {
        let anti_affine = |term: &Term<'_>| {
            term.count_at(node).is_some() && info.reserving(pod).any(|p| term.pods.selects(p))
        };
        if self.anti_affinity.iter().any(anti_affine) {
            return Err(Reason::AntiAffinity);
        }
        let repels = |other: &PodInfo| {
            other
                .anti_affinity
                .iter()
                .any(|term| term.pods.selects(pod) && info.labels.contains_key(&term.topology_key))
        };
        if info.reserving(pod).any(repels) {
            return Err(Reason::ExistingAntiAffinity);
        }
        Ok(())
    }
}
