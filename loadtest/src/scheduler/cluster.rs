//! One scheduling cycle's view of the cluster and the kube-scheduler's filter and score
//! plugins over it: NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts,
//! NodeResourcesFit, PodTopologySpread and InterPodAffinity filter nodes in that order (a
//! node reports its first failing plugin, as kube-scheduler does); the default profile's
//! score plugins (see [`super::score`]) rank the feasible ones. Pods placed during the cycle are
//! assumed onto their node so later pods see them. Work that only depends on a pod's node
//! affinity and tolerations is cached per workload, and pod counts per selector are kept
//! per node and updated incrementally, so a batch of 10k similar pods stays cheap.

use super::nodeinfo::{NodeInfo, UNSCHEDULABLE_TAINT};
use super::podinfo::{NodeTerm, PodInfo, PodSelector, PodShape};
use super::reason::Reason;
use super::score;
use super::topology::{Domains, Forbidden, Spread, Term, TopologyState};
use kerf::requirements::Operator;
use kerf::taints::{EFFECT_NO_SCHEDULE, toleration_tolerates};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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

/// The topology pairs placed pods' required anti-affinity forbids one shape.
struct Repelled {
    /// Held so the shape's address, the key, is not reused within the cycle.
    _shape: Arc<PodShape>,
    /// How many of [`Cluster::anti_affinity_pods`] `forbidden` covers.
    covered: usize,
    forbidden: Forbidden,
}

/// The cluster during one scheduling cycle.
pub(crate) struct Cluster {
    nodes: Vec<NodeInfo>,
    static_verdicts: HashMap<u64, StaticVerdict>,
    /// Matching pods per node, per selector, maintained as pods are assumed.
    counts: HashMap<PodSelector, Vec<u32>>,
    /// Domains per topology key.
    domains: HashMap<String, Domains>,
    /// Placed pods that carry required anti-affinity, with their node index.
    anti_affinity_pods: Vec<(usize, Arc<PodInfo>)>,
    /// What those pods' anti-affinity forbids each shape, by [`PodInfo::shape_id`]: pods of
    /// a shape are repelled alike, and the pods placed are only added to.
    repelled: HashMap<usize, Repelled>,
    /// Placed pods whose affinity terms InterPodAffinity's score reads (required affinity,
    /// preferred affinity or anti-affinity), with their node index.
    scoring_affinity_pods: Vec<(usize, Arc<PodInfo>)>,
    /// The node index each pending nominated pod is nominated to, by pod uid.
    nominations: HashMap<String, usize>,
    /// The Unschedulable message of each shape and priority no node fitted this cycle
    /// ([`Memo`]): pods of one shape fail alike until room opens.
    failed: Failures,
    /// The same for shapes whose verdict reads pod counts (spread, required affinity): valid
    /// until a pod a counted selector selects is assumed.
    failed_on_counts: Failures,
    next_start: usize,
}

impl Cluster {
    pub(crate) fn new(nodes: Vec<NodeInfo>, start: usize) -> Cluster {
        let placed = || {
            nodes
                .iter()
                .enumerate()
                .flat_map(|(i, n)| n.pods.iter().map(move |p| (i, p)))
        };
        let anti_affinity_pods = placed()
            .filter(|(_, p)| !p.anti_affinity.is_empty())
            .map(|(i, p)| (i, Arc::clone(p)))
            .collect();
        let scoring_affinity_pods = placed()
            .filter(|(_, p)| scores_affinity(p))
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
            domains: HashMap::new(),
            anti_affinity_pods,
            repelled: HashMap::new(),
            scoring_affinity_pods,
            nominations: HashMap::new(),
            failed: HashMap::new(),
            failed_on_counts: HashMap::new(),
            next_start,
        }
    }

    /// Records pending `pod` as nominated to node `index`.
    pub(crate) fn nominate(&mut self, index: usize, pod: Arc<PodInfo>) {
        self.nominations.insert(pod.uid.clone(), index);
        self.nodes[index].nominated.push(pod);
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
        self.prepare(pod);
        if let Some(index) = self.nominated_node_fits(pod) {
            return Ok(index);
        }
        let key = (pod.shape_id(), pod.priority);
        let memo = Memo::of(pod);
        if let Some((_, message)) = self.memo(memo).get(&key) {
            return Err(message.clone());
        }
        let total = self.nodes.len();
        let (choice, examined) = {
            let topology = self.topology_state(pod);
            let verdict = &self.static_verdicts[&pod.static_fingerprint];
            let wanted = feasible_nodes_to_find(total);
            let mut feasible = Vec::new();
            let mut reasons: BTreeMap<Reason, usize> = BTreeMap::new();
            let mut examined = 0;
            while examined < total && feasible.len() < wanted {
                let index = (self.next_start + examined) % total;
                examined += 1;
                match self.filter(pod, index, verdict, &topology) {
                    Ok(()) => feasible.push(index),
                    Err(failed) => {
                        for reason in failed {
                            *reasons.entry(reason).or_default() += 1;
                        }
                    }
                }
            }
            let choice = self
                .best(pod, &feasible)
                .ok_or_else(|| unschedulable_message(total, &reasons));
            (choice, examined)
        };
        self.next_start = (self.next_start + examined) % total;
        if let Err(message) = &choice {
            self.memo(memo).insert(key, (pod.shape(), message.clone()));
        }
        choice
    }

    fn memo(&mut self, memo: Memo) -> &mut Failures {
        match memo {
            Memo::UntilRoomOpens => &mut self.failed,
            Memo::UntilCountsChange => &mut self.failed_on_counts,
        }
    }

    /// The pod's nominated node when it passes the filters there: kube-scheduler evaluates
    /// that node first and takes it without scoring the others.
    fn nominated_node_fits(&self, pod: &PodInfo) -> Option<usize> {
        let &index = self.nominations.get(&pod.uid)?;
        let topology = self.topology_state(pod);
        let verdict = &self.static_verdicts[&pod.static_fingerprint];
        self.filter(pod, index, verdict, &topology)
            .is_ok()
            .then_some(index)
    }

    /// Accounts `pod` on node `index` for the rest of the cycle; a nomination it had no
    /// longer holds room.
    pub(crate) fn assume(&mut self, index: usize, pod: Arc<PodInfo>) {
        if let Some(nominated) = self.nominations.remove(&pod.uid) {
            self.nodes[nominated]
                .nominated
                .retain(|other| other.uid != pod.uid);
            if nominated != index {
                // The room its nomination held there is free again.
                self.failed.clear();
                self.failed_on_counts.clear();
            }
        }
        for (selector, per_node) in &mut self.counts {
            if selector.selects(&pod) {
                per_node[index] += 1;
                self.failed_on_counts.clear();
            }
        }
        if !pod.anti_affinity.is_empty() {
            self.anti_affinity_pods.push((index, Arc::clone(&pod)));
        }
        if scores_affinity(&pod) {
            self.scoring_affinity_pods.push((index, Arc::clone(&pod)));
        }
        self.nodes[index].add_pod(pod);
    }

    /// Brings the pairs forbidding `pod`'s shape up to the placed pods.
    fn ensure_repelled(&mut self, pod: &PodInfo) {
        let repelled = self
            .repelled
            .entry(pod.shape_id())
            .or_insert_with(|| Repelled {
                _shape: pod.shape(),
                covered: 0,
                forbidden: Forbidden::new(),
            });
        for (index, other) in &self.anti_affinity_pods[repelled.covered..] {
            for term in &other.anti_affinity {
                if term.pods.selects(pod)
                    && let Some(value) = self.nodes[*index].labels.get(&term.topology_key)
                {
                    repelled
                        .forbidden
                        .entry(term.topology_key.clone())
                        .or_default()
                        .insert(value.clone());
                }
            }
        }
        repelled.covered = self.anti_affinity_pods.len();
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
        verdict: &StaticVerdict,
        topology: &TopologyState<'_>,
    ) -> Result<(), Vec<Reason>> {
        let node = &self.nodes[index];
        if let Err(reason) = &verdict.filter[index] {
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
        topology.check_spread(index).map_err(|r| vec![r])?;
        topology.check_affinity(index, node).map_err(|r| vec![r])?;
        topology
            .check_nominated(pod, index, node)
            .map_err(|r| vec![r])
    }

    /// The feasible node with the highest weighted score (the first of equals, in the
    /// rotating order nodes were examined in).
    fn best(&self, pod: &PodInfo, feasible: &[usize]) -> Option<usize> {
        let nodes: Vec<&NodeInfo> = feasible.iter().map(|&i| &self.nodes[i]).collect();
        let mut total = vec![0i64; feasible.len()];
        let mut add = |weight: i64, scores: Vec<i64>| {
            for (sum, score) in total.iter_mut().zip(scores) {
                *sum += weight * score;
            }
        };
        let per_node =
            |f: &dyn Fn(&NodeInfo) -> i64| -> Vec<i64> { nodes.iter().map(|n| f(n)).collect() };
        let mut taints: Vec<i64> = per_node(&|n| score::intolerable_preferred_taints(pod, n));
        score::normalize(&mut taints, true);
        add(score::TAINT_TOLERATION_WEIGHT, taints);
        let mut affinity: Vec<i64> = per_node(&|n| preferred_affinity_weight(pod, n));
        score::normalize(&mut affinity, false);
        add(score::NODE_AFFINITY_WEIGHT, affinity);
        add(
            score::RESOURCES_FIT_WEIGHT,
            per_node(&|n| score::least_allocated(pod, n)),
        );
        if !score::is_best_effort(pod) {
            add(
                score::BALANCED_ALLOCATION_WEIGHT,
                per_node(&|n| score::balanced_allocation(pod, n)),
            );
        }
        add(
            score::TOPOLOGY_SPREAD_WEIGHT,
            self.spread_scores(pod, feasible),
        );
        add(
            score::INTER_POD_AFFINITY_WEIGHT,
            self.inter_pod_affinity_scores(pod, feasible),
        );
        let mut best: Option<(i64, usize)> = None;
        for (&score, &index) in total.iter().zip(feasible) {
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, index));
            }
        }
        best.map(|(_, index)| index)
    }

    /// PodTopologySpread's normalized scores of the feasible nodes for the pod's soft
    /// constraints (see [`PodInfo::soft_spread`]); zeros when it has none.
    fn spread_scores(&self, pod: &PodInfo, feasible: &[usize]) -> Vec<i64> {
        let constraints = &pod.soft_spread;
        if constraints.is_empty() {
            return vec![0; feasible.len()];
        }
        let verdict = &self.static_verdicts[&pod.static_fingerprint];
        // Explicit constraints need every key on a node; the system defaults do not, so
        // nodes without a zone still spread by hostname.
        let require_all = !pod.default_spread;
        let has_keys = |i: usize| {
            constraints
                .iter()
                .all(|c| self.nodes[i].labels.contains_key(&c.topology_key))
        };
        let ignored: Vec<bool> = feasible
            .iter()
            .map(|&i| require_all && !has_keys(i))
            .collect();
        let scored: Vec<usize> = feasible
            .iter()
            .zip(&ignored)
            .filter(|(_, ignored)| !**ignored)
            .map(|(&i, _)| i)
            .collect();
        let mut raw: Vec<Option<f64>> = ignored
            .iter()
            .map(|ignored| (!ignored).then_some(0.0))
            .collect();
        for constraint in constraints {
            let domains = &self.domains[&constraint.topology_key];
            let per_node = &self.counts[&constraint.pods];
            let hostname = constraint.topology_key == kerf::labels::HOSTNAME;
            let counted = |i: usize| {
                (!require_all || has_keys(i))
                    && (!constraint.honor_node_affinity || verdict.affinity[i])
                    && (!constraint.honor_taints || verdict.taints[i])
            };
            let (sums, _) = domains.sum(per_node, counted);
            let size = if hostname {
                scored.len()
            } else {
                let mut seen: Vec<usize> =
                    scored.iter().filter_map(|&i| domains.of_node[i]).collect();
                seen.sort_unstable();
                seen.dedup();
                seen.len()
            };
            let weight = score::topology_weight(size);
            for (k, &i) in feasible.iter().enumerate() {
                let (Some(sum), Some(domain)) = (raw[k].as_mut(), domains.of_node[i]) else {
                    continue;
                };
                let count = if hostname { per_node[i] } else { sums[domain] };
                *sum += score::spread_term(count, constraint.max_skew, weight);
            }
        }
        let raw: Vec<Option<i64>> = raw.iter().map(|s| s.map(|s| s.round() as i64)).collect();
        score::normalize_spread(&raw)
    }

    /// InterPodAffinity's normalized scores: per topology domain, the weights of the pod's
    /// preferred (anti-)affinity terms times the matching pods there, plus the terms of
    /// placed pods that select this pod (required affinity at the hard weight, preferred
    /// ones at theirs, anti-affinity negative).
    fn inter_pod_affinity_scores<'a>(&'a self, pod: &'a PodInfo, feasible: &[usize]) -> Vec<i64> {
        let mut by_key: HashMap<&str, Vec<i64>> = HashMap::new();
        let mut credit = |key: &'a str, domain: Option<usize>, amount: i64| {
            let domains = &self.domains[key];
            let slots = by_key.entry(key).or_insert_with(|| vec![0; domains.len]);
            if let Some(d) = domain {
                slots[d] += amount;
            }
        };
        let own = pod
            .preferred_affinity
            .iter()
            .map(|(w, t)| (i64::from(*w), t))
            .chain(
                pod.preferred_anti_affinity
                    .iter()
                    .map(|(w, t)| (-i64::from(*w), t)),
            );
        for (weight, term) in own {
            let domains = &self.domains[&term.topology_key];
            let (sums, _) = domains.sum(&self.counts[&term.pods], |_| true);
            for (d, count) in sums.iter().enumerate() {
                credit(&term.topology_key, Some(d), weight * i64::from(*count));
            }
        }
        for (index, other) in &self.scoring_affinity_pods {
            let terms = other
                .affinity
                .iter()
                .map(|t| (score::HARD_POD_AFFINITY_WEIGHT, t))
                .chain(
                    other
                        .preferred_affinity
                        .iter()
                        .map(|(w, t)| (i64::from(*w), t)),
                )
                .chain(
                    other
                        .preferred_anti_affinity
                        .iter()
                        .map(|(w, t)| (-i64::from(*w), t)),
                );
            for (weight, term) in terms.filter(|(_, t)| t.pods.selects(pod)) {
                let domain = self.domains[&term.topology_key].of_node[*index];
                credit(&term.topology_key, domain, weight);
            }
        }
        if by_key.is_empty() {
            return vec![0; feasible.len()];
        }
        let mut scores: Vec<i64> = feasible
            .iter()
            .map(|&i| {
                by_key
                    .iter()
                    .filter_map(|(key, slots)| Some(slots[self.domains[*key].of_node[i]?]))
                    .sum()
            })
            .collect();
        score::normalize_min_max(&mut scores);
        scores
    }

    /// Fills the caches `pod`'s topology reads: static verdicts, per-node counts of its
    /// selectors, and the domains of its topology keys.
    fn prepare(&mut self, pod: &PodInfo) {
        self.ensure_static(pod);
        self.ensure_repelled(pod);
        let spread = pod
            .spread
            .iter()
            .chain(&pod.soft_spread)
            .map(|c| (c.pods.clone(), c.topology_key.clone()));
        let terms = pod
            .affinity
            .iter()
            .chain(&pod.anti_affinity)
            .chain(pod.preferred_affinity.iter().map(|(_, t)| t))
            .chain(pod.preferred_anti_affinity.iter().map(|(_, t)| t))
            .map(|t| (t.pods.clone(), t.topology_key.clone()));
        let wanted: Vec<(PodSelector, String)> = spread.chain(terms).collect();
        for (selector, key) in wanted {
            if !self.counts.contains_key(&selector) {
                let counts = self
                    .nodes
                    .iter()
                    .map(|n| n.pods.iter().filter(|p| selector.selects(p)).count() as u32)
                    .collect();
                self.counts.insert(selector, counts);
            }
            self.ensure_domains(&key);
        }
        let placed_keys: Vec<String> = self
            .scoring_affinity_pods
            .iter()
            .flat_map(|(_, p)| {
                p.affinity
                    .iter()
                    .chain(p.preferred_affinity.iter().map(|(_, t)| t))
                    .chain(p.preferred_anti_affinity.iter().map(|(_, t)| t))
                    .map(|t| t.topology_key.clone())
            })
            .collect();
        for key in placed_keys {
            self.ensure_domains(&key);
        }
    }

    fn ensure_domains(&mut self, key: &str) {
        if !self.domains.contains_key(key) {
            self.domains
                .insert(key.to_owned(), Domains::build(&self.nodes, key));
        }
    }

    /// The pod's topology state; [`Cluster::prepare`] must have run for it.
    fn topology_state<'a>(&'a self, pod: &'a PodInfo) -> TopologyState<'a> {
        let verdict = &self.static_verdicts[&pod.static_fingerprint];
        let spread = pod
            .spread
            .iter()
            .map(|constraint| {
                let domains = &self.domains[&constraint.topology_key];
                let eligible = |i: usize| {
                    (!constraint.honor_node_affinity || verdict.affinity[i])
                        && (!constraint.honor_taints || verdict.taints[i])
                };
                let (counts, present) = domains.sum(&self.counts[&constraint.pods], eligible);
                let eligible_counts = counts
                    .iter()
                    .zip(&present)
                    .filter(|(_, p)| **p)
                    .map(|(c, _)| *c);
                let eligible_domains = present.iter().filter(|p| **p).count() as u32;
                let min = if eligible_domains < constraint.min_domains {
                    0
                } else {
                    eligible_counts.min().unwrap_or(0)
                };
                Spread {
                    domains,
                    max_skew: constraint.max_skew,
                    self_match: u32::from(constraint.pods.selects(pod)),
                    min,
                    counts,
                }
            })
            .collect();
        let term = |t: &'a super::podinfo::AffinityTerm| {
            let domains = &self.domains[&t.topology_key];
            Term {
                domains,
                pods: &t.pods,
                counts: domains.sum(&self.counts[&t.pods], |_| true).0,
            }
        };
        let affinity: Vec<Term<'_>> = pod.affinity.iter().map(term).collect();
        let anti_affinity = pod.anti_affinity.iter().map(term).collect();
        let matches_exist = affinity.iter().any(|t| t.counts.iter().any(|&c| c > 0));
        let self_affine = pod.affinity.iter().all(|t| t.pods.selects(pod));
        let forbidden = &self.repelled[&pod.shape_id()].forbidden;
        TopologyState {
            spread,
            affinity,
            anti_affinity,
            first_of_group: !matches_exist && self_affine,
            forbidden,
        }
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
    pod.requests
        .shortfalls(&node.allocatable, &node.used_for(pod))
        .into_iter()
        .map(|name| {
            if name == kerf::labels::RESOURCE_PODS {
                Reason::TooManyPods
            } else {
                Reason::Insufficient(name.to_owned())
            }
        })
        .collect()
}

/// Whether InterPodAffinity's score reads the pod's terms once it is placed.
/// Whether a failure of `pod` holds for the rest of the cycle for every pod of its shape and
/// priority, so the cycle need not filter every node again for each of a workload's
/// replicas: its filters read only the node, its room and the pods placed there, and
/// within a cycle pods are only added (a nomination released elsewhere forgets every
/// failure). Not so with its own topology spread or pod (anti-)affinity, which more pods
/// in a domain may satisfy.
/// The Unschedulable message by shape and priority, each with its shape held (see
/// [`PodInfo::shape`]).
type Failures = HashMap<(usize, i32), (Arc<PodShape>, String)>;

/// How long a shape's failure to fit anywhere holds within a cycle. Pods of one shape (and
/// priority) have the same requests, labels and constraints, so one failing pod speaks for the
/// rest until something it was judged on changes: room opening (a nomination released) for
/// every shape, and for shapes whose spread or required affinity reads pod counts, also a pod
/// those counts select being placed. Required anti-affinity only rejects more as pods are
/// placed, so its failures hold like plain ones.
#[derive(Clone, Copy)]
enum Memo {
    UntilRoomOpens,
    UntilCountsChange,
}

impl Memo {
    fn of(pod: &PodInfo) -> Memo {
        if pod.spread.is_empty() && pod.affinity.is_empty() {
            Memo::UntilRoomOpens
        } else {
            Memo::UntilCountsChange
        }
    }
}

fn scores_affinity(pod: &PodInfo) -> bool {
    !pod.affinity.is_empty()
        || !pod.preferred_affinity.is_empty()
        || !pod.preferred_anti_affinity.is_empty()
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

    fn node(name: &str, zone: &str, extra_labels: serde_json::Value) -> NodeInfo {
        let mut labels = serde_json::json!({"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone});
        if let (Some(l), Some(extra)) = (labels.as_object_mut(), extra_labels.as_object()) {
            l.extend(extra.clone());
        }
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("valid node");
        NodeInfo::new(&node).expect("compiles")
    }

    fn pod(labels: serde_json::Value, spec: serde_json::Value) -> Arc<PodInfo> {
        named_pod("p", labels, spec)
    }

    /// A pod whose uid is its name: a nominated pod holds no room against itself alone.
    fn named_pod(name: &str, labels: serde_json::Value, spec: serde_json::Value) -> Arc<PodInfo> {
        let mut full = serde_json::json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]});
        if let (Some(f), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
            f.extend(extra.clone());
        }
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels},
            "spec": full
        }))
        .expect("valid pod");
        Arc::new(PodInfo::new(&pod).expect("compiles"))
    }

    fn place(cluster: &mut Cluster, pod: &Arc<PodInfo>) -> Result<String, String> {
        let index = cluster.schedule(pod)?;
        cluster.assume(index, Arc::clone(pod));
        Ok(cluster.node_name(index).to_owned())
    }

    fn nominated_pod(uid: &str, cpu: &str, priority: i32) -> Arc<PodInfo> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"priority": priority, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}
            ]}
        }))
        .expect("valid pod");
        Arc::new(PodInfo::new(&pod).expect("compiles"))
    }

    #[test]
    fn room_on_a_node_is_kept_for_the_pods_nominated_to_it() {
        // "a" is emptier, so an unnominated pod would take it; six cpu of it are nominated.
        let mut busy = node("b", "z1", serde_json::json!({}));
        busy.add_pod(nominated_pod("running", "4", 0));
        let mut cluster = Cluster::new(vec![node("a", "z1", serde_json::json!({})), busy], 0);
        let expected = nominated_pod("expected", "6", 0);
        cluster.nominate(0, Arc::clone(&expected));

        let other = nominated_pod("other", "3", 0);
        assert_eq!(
            place(&mut cluster, &other),
            Ok("b".to_owned()),
            "a's room is kept"
        );
        assert_eq!(place(&mut cluster, &expected), Ok("a".to_owned()));
        // Once placed, the nomination holds nothing: the remaining two cpu are free.
        let small = nominated_pod("small", "2", 0);
        assert_eq!(place(&mut cluster, &small), Ok("a".to_owned()));
    }

    #[test]
    fn a_shape_is_repelled_by_anti_affine_pods_placed_after_it_was_first_judged() {
        let mut shapes = super::super::podinfo::Shapes::default();
        let noisy = |name: &str, shapes: &mut _| shared_replica("noisy", "1", name, shapes);
        let guard = |name: &str| {
            named_pod(
                name,
                serde_json::json!({"app": "guard"}),
                serde_json::json!({"affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "noisy"}}}
                ]}}}),
            )
        };
        let nodes = ["a", "b", "c"].map(|n| node(n, "z1", serde_json::json!({})));
        let mut cluster = Cluster::new(nodes.into(), 0);
        cluster.assume(0, guard("guard-a"));
        let first = place(&mut cluster, &noisy("noisy-1", &mut shapes)).expect("b or c is free");
        assert_ne!(first, "a");
        cluster.assume(1, guard("guard-b"));
        cluster.assume(2, guard("guard-c"));
        assert_eq!(
            place(&mut cluster, &noisy("noisy-2", &mut shapes)),
            Err("0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules.".to_owned()),
            "the guards placed since the shape was first judged count too"
        );
    }

    /// Replica `name` of workload `app`, one container requesting `cpu`: the workload's pods
    /// share one shape.
    fn shared_replica(
        app: &str,
        cpu: &str,
        name: &str,
        shapes: &mut super::super::podinfo::Shapes,
    ) -> Arc<PodInfo> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name,
                         "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .expect("valid pod");
        Arc::new(PodInfo::shared(&pod, shapes).expect("compiles"))
    }

    /// A 4-cpu replica of one workload: its pods share one shape.
    fn web_replica(name: &str, shapes: &mut super::super::podinfo::Shapes) -> Arc<PodInfo> {
        shared_replica("web", "4", name, shapes)
    }

    #[test]
    fn a_shapes_failure_holds_for_its_replicas_until_a_nomination_frees_room() {
        let mut shapes = super::super::podinfo::Shapes::default();
        let (first, second, third) = (
            web_replica("web-1", &mut shapes),
            web_replica("web-2", &mut shapes),
            web_replica("web-3", &mut shapes),
        );
        assert_eq!(
            first.shape_id(),
            second.shape_id(),
            "replicas share a shape"
        );
        // "a" keeps six of its eight cpu for "expected"; "b" is full.
        let mut full = node("b", "z1", serde_json::json!({}));
        full.add_pod(nominated_pod("running", "8", 0));
        let mut cluster = Cluster::new(vec![node("a", "z1", serde_json::json!({})), full], 0);
        let expected = nominated_pod("expected", "6", 0);
        cluster.nominate(0, Arc::clone(&expected));

        let refused = place(&mut cluster, &first).expect_err("no node has four cpu free");
        assert_eq!(
            place(&mut cluster, &second),
            Err(refused),
            "the same answer"
        );
        // "expected" went elsewhere: the room it held on "a" is free for the next replica.
        cluster.assume(1, expected);
        assert_eq!(place(&mut cluster, &third), Ok("a".to_owned()));
    }

    /// A 1-cpu replica spread over zones with maxSkew 1: its pods share one shape.
    fn spread_replica(name: &str, shapes: &mut super::super::podinfo::Shapes) -> Arc<PodInfo> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name,
                         "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                     "topologySpreadConstraints": [{
                         "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                         "whenUnsatisfiable": "DoNotSchedule",
                         "labelSelector": {"matchLabels": {"app": "web"}}}]}
        }))
        .expect("valid pod");
        Arc::new(PodInfo::shared(&pod, shapes).expect("compiles"))
    }

    #[test]
    fn a_spread_shapes_failure_holds_until_a_pod_it_counts_is_placed() {
        let mut shapes = super::super::podinfo::Shapes::default();
        // z1 already has a web pod; z2's only node is full, so z1 is one too many ahead.
        let mut ahead = node("a", "z1", serde_json::json!({}));
        ahead.add_pod(named_pod(
            "web-0",
            serde_json::json!({"app": "web"}),
            serde_json::json!({}),
        ));
        let mut full = node("b", "z2", serde_json::json!({}));
        full.add_pod(nominated_pod("running", "8", 0));
        let mut cluster = Cluster::new(vec![ahead, full], 0);

        let refused = place(&mut cluster, &spread_replica("web-1", &mut shapes))
            .expect_err("z1 would be two ahead and z2 has no room");
        assert_eq!(
            place(&mut cluster, &spread_replica("web-2", &mut shapes)),
            Err(refused),
            "the same answer"
        );
        // A web pod placed in z2 evens the zones: z1 may take the next replica.
        let evening = named_pod(
            "web-z2",
            serde_json::json!({"app": "web"}),
            serde_json::json!({}),
        );
        cluster.assume(1, evening);
        assert_eq!(
            place(&mut cluster, &spread_replica("web-3", &mut shapes)),
            Ok("a".to_owned())
        );
    }

    #[test]
    fn a_nomination_keeps_no_room_from_a_pod_of_higher_priority() {
        let mut cluster = Cluster::new(vec![node("a", "z1", serde_json::json!({}))], 0);
        cluster.nominate(0, nominated_pod("expected", "6", 0));
        let urgent = nominated_pod("urgent", "3", 1000);
        assert_eq!(place(&mut cluster, &urgent), Ok("a".to_owned()));
        let same = nominated_pod("same", "3", 0);
        assert!(
            place(&mut cluster, &same).is_err(),
            "six of eight cpu are kept"
        );
    }

    fn one_per_node(name: &str, priority: i32) -> Arc<PodInfo> {
        named_pod(
            name,
            serde_json::json!({"app": "cache"}),
            serde_json::json!({"priority": priority, "affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "cache"}}}
            ]}}}),
        )
    }

    /// Two empty nodes, "a" examined first, and `nominated` nominated to "a".
    fn nominated_to_a(nominated: &Arc<PodInfo>) -> Cluster {
        let nodes = vec![
            node("a", "z1", serde_json::json!({})),
            node("b", "z2", serde_json::json!({})),
        ];
        let mut cluster = Cluster::new(nodes, 0);
        cluster.nominate(0, Arc::clone(nominated));
        cluster
    }

    #[test]
    fn a_nomination_keeps_its_node_from_pods_anti_affine_to_the_nominated_pod() {
        let expected = one_per_node("expected", 0);
        let mut cluster = nominated_to_a(&expected);
        let other = one_per_node("other", 0);
        assert_eq!(place(&mut cluster, &other), Ok("b".to_owned()), "a is kept");
        assert_eq!(place(&mut cluster, &expected), Ok("a".to_owned()));

        let mut cluster = nominated_to_a(&expected);
        let urgent = one_per_node("urgent", 1000);
        assert_eq!(
            place(&mut cluster, &urgent),
            Ok("a".to_owned()),
            "a nomination keeps nothing from a pod of higher priority"
        );
    }

    #[test]
    fn a_nominated_pods_anti_affinity_repels_the_pods_it_selects_from_its_node() {
        let loner = named_pod(
            "loner",
            serde_json::json!({"app": "loner"}),
            serde_json::json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "noisy"}}}
            ]}}}),
        );
        let mut cluster = nominated_to_a(&loner);
        let noisy = named_pod(
            "noisy",
            serde_json::json!({"app": "noisy"}),
            serde_json::json!({}),
        );
        assert_eq!(place(&mut cluster, &noisy), Ok("b".to_owned()));
        let quiet = named_pod(
            "quiet",
            serde_json::json!({"app": "quiet"}),
            serde_json::json!({}),
        );
        assert_eq!(place(&mut cluster, &quiet), Ok("a".to_owned()));
    }

    #[test]
    fn required_node_affinity_terms_are_ored_and_not_in_admits_unlabelled_nodes() {
        let nodes = vec![
            node("a", "z1", serde_json::json!({"disk": "ssd"})),
            node("b", "z2", serde_json::json!({"disk": "hdd"})),
            node("c", "z3", serde_json::json!({})),
        ];
        let mut cluster = Cluster::new(nodes, 0);
        let either = pod(
            serde_json::json!({}),
            serde_json::json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]},
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]}]}
            ]}}}}),
        );
        assert_eq!(place(&mut cluster, &either), Ok("b".to_owned()));
        let not_hdd = pod(
            serde_json::json!({}),
            serde_json::json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": "disk", "operator": "NotIn", "values": ["hdd", "ssd"]},
                ]}
            ]}}}}),
        );
        assert_eq!(
            place(&mut cluster, &not_hdd),
            Ok("c".to_owned()),
            "absent label passes NotIn"
        );
        let nothing = pod(
            serde_json::json!({}),
            serde_json::json!({"nodeSelector": {"disk": "tape"}}),
        );
        assert_eq!(
            place(&mut cluster, &nothing),
            Err(
                "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
                    .to_owned()
            )
        );
    }

    #[test]
    fn pod_affinity_lets_the_first_pod_start_the_group_and_the_rest_follow() {
        let mut cluster = Cluster::new(
            vec![
                node("a", "z1", serde_json::json!({})),
                node("b", "z2", serde_json::json!({})),
            ],
            0,
        );
        let affine = serde_json::json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "db"}}}
        ]}}});
        let first = place(
            &mut cluster,
            &pod(serde_json::json!({"app": "db"}), affine.clone()),
        )
        .expect("starts the group");
        for _ in 0..5 {
            let next = place(
                &mut cluster,
                &pod(serde_json::json!({"app": "db"}), affine.clone()),
            )
            .expect("follows");
            assert_eq!(next, first, "stays in the zone of the group");
        }
        let outsider = pod(
            serde_json::json!({"app": "web"}),
            serde_json::json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "cache"}}}
            ]}}}),
        );
        assert_eq!(
            place(&mut cluster, &outsider),
            Err("0/2 nodes are available: 2 node(s) didn't match pod affinity rules.".to_owned())
        );
    }

    #[test]
    fn existing_pods_anti_affinity_repels_the_pods_it_selects() {
        let mut cluster = Cluster::new(
            vec![
                node("a", "z1", serde_json::json!({})),
                node("b", "z1", serde_json::json!({})),
            ],
            0,
        );
        let loner = pod(
            serde_json::json!({"app": "loner"}),
            serde_json::json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "noisy"}}}
            ]}}}),
        );
        place(&mut cluster, &loner).expect("placed");
        let noisy = pod(serde_json::json!({"app": "noisy"}), serde_json::json!({}));
        assert_eq!(
            place(&mut cluster, &noisy),
            Err("0/2 nodes are available: 2 node(s) didn't satisfy existing pods anti-affinity rules.".to_owned())
        );
        let quiet = pod(serde_json::json!({"app": "quiet"}), serde_json::json!({}));
        assert!(place(&mut cluster, &quiet).is_ok());
    }

    fn replica(owner: &str, cpu: &str, memory: &str) -> Arc<PodInfo> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r", "namespace": "default", "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": owner,
                "controller": true}]},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
        }))
        .expect("valid pod");
        Arc::new(PodInfo::new(&pod).expect("compiles"))
    }

    #[test]
    fn replicas_spread_over_hosts_by_the_system_default_even_onto_a_busier_node() {
        // Node a holds one replica of `x` (100m, 100Mi); node b an unrelated 1-cpu pod.
        // LeastAllocated and BalancedAllocation prefer a (98 + 99 against 91 + 94), but
        // the system default spread (hostname maxSkew 3, zone maxSkew 5) scores a's raw
        // 1·ln4 + 2 + 1·ln4 + 4 = 8.77 → 9 against b's 6, normalized to 66 and 100, each
        // weighted 2: b wins 385 to 329.
        let mut a = node("a", "z1", serde_json::json!({}));
        a.add_pod(replica("x", "100m", "100Mi"));
        let mut b = node("b", "z2", serde_json::json!({}));
        b.add_pod(replica("other", "1", "1Gi"));
        let mut cluster = Cluster::new(vec![a, b], 0);
        assert_eq!(
            place(&mut cluster, &replica("x", "100m", "100Mi")),
            Ok("b".to_owned())
        );
        // A pod no controller owns gets no default spread: the emptier node wins.
        let mut a = node("a", "z1", serde_json::json!({}));
        a.add_pod(replica("x", "100m", "100Mi"));
        let mut b = node("b", "z2", serde_json::json!({}));
        b.add_pod(replica("other", "1", "1Gi"));
        let mut cluster = Cluster::new(vec![a, b], 0);
        let loose = pod(
            serde_json::json!({}),
            serde_json::json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]}),
        );
        assert_eq!(place(&mut cluster, &loose), Ok("a".to_owned()));
    }

    #[test]
    fn balanced_allocation_outweighs_least_allocated_toward_even_use() {
        // Pod 2 cpu / 2Gi. Node c (16 cpu / 3Gi): LeastAllocated (87 + 33) / 2 = 60,
        // BalancedAllocation shares 0.125 and 0.667 → 1 - 0.271 → 72: 132.
        // Node a (4 cpu / 4Gi): LeastAllocated 50, BalancedAllocation 100: 150, so a wins
        // although LeastAllocated alone prefers c.
        let sized = |name: &str, cpu: &str, memory: &str| {
            let node: k8s_openapi::api::core::v1::Node =
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]}
                }))
                .expect("valid node");
            NodeInfo::new(&node).expect("compiles")
        };
        let mut cluster = Cluster::new(vec![sized("c", "16", "3Gi"), sized("a", "4", "4Gi")], 0);
        let pod = pod(
            serde_json::json!({}),
            serde_json::json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}]}),
        );
        assert_eq!(place(&mut cluster, &pod), Ok("a".to_owned()));
    }

    #[test]
    fn spread_counts_missing_domains_as_empty_under_min_domains() {
        let mut cluster = Cluster::new(
            vec![
                node("a", "z1", serde_json::json!({})),
                node("b", "z2", serde_json::json!({})),
            ],
            0,
        );
        let spread = |min_domains: i32| {
            pod(
                serde_json::json!({"app": "web"}),
                serde_json::json!({"topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                    "minDomains": min_domains, "labelSelector": {"matchLabels": {"app": "web"}}
                }]}),
            )
        };
        for _ in 0..4 {
            place(&mut cluster, &spread(2)).expect("two zones hold two each");
        }
        assert_eq!(
            place(&mut cluster, &spread(3)),
            Err(
                "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints."
                    .to_owned()
            ),
            "with three domains required and two present, the global minimum is 0"
        );
        assert!(place(&mut cluster, &spread(2)).is_ok());
    }
}
