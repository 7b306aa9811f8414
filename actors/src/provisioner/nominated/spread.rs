//! Held pods their required topology spread keeps off their node. A pod held on an
//! initialized Node may fit its room and still be refused there by a `DoNotSchedule`
//! constraint: the kube-scheduler bound a peer planned for one zone in another, and the pod
//! planned for that other zone now skews it. The refusal may leave no trace a round can
//! read (the kube-scheduler does not write an unchanged report again), so without this the
//! pod would wait out its nomination's limit. The skew is judged as the kube-scheduler
//! judges it (the nodes its node affinity admits, the active pods each constraint selects
//! in its namespace), over the pods every node is to hold: those bound there and those held
//! there. A plan keeps within each skew, so pods are released only once bindings left it.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PodSpec, TopologySpreadConstraint};
use kerf::pods::{LeanPod, PodLike, admits_node, hard_spread_constraints, is_active, selects};
use kerf::scheduling::{ExistingNode, SchedulingInput};

/// Takes off their nodes and returns, with each one's node index, the pods of `held` (node
/// index and uid, pods held on initialized nodes, in the order they were held) whose
/// required topology spread does not allow their node's domain.
pub(super) fn release_skewed(
    input: &mut SchedulingInput,
    held: &[(usize, String)],
) -> Vec<(usize, Arc<LeanPod>)> {
    let mut released = Vec::new();
    // Pods of one workload share a spec and metadata: their counts are taken once, and kept
    // up to date as pods are released.
    let mut groups: HashMap<GroupKey, Vec<Counts>> = HashMap::new();
    for (index, uid) in held {
        let nodes = &input.existing_nodes;
        let node = &nodes[*index];
        let Some(at) = node.pods.iter().position(|p| p.meta().uid == Some(uid)) else {
            continue;
        };
        let pod = &node.pods[at];
        let Some(spec) = pod
            .spec()
            .filter(|s| hard_spread_constraints(s).next().is_some())
        else {
            continue;
        };
        let counts = groups.entry(GroupKey::of(pod, spec)).or_insert_with(|| {
            hard_spread_constraints(spec)
                .map(|c| Counts::of(pod, c, nodes))
                .collect()
        });
        if counts.iter().all(|c| c.allows(pod, *index, node)) {
            continue;
        }
        // Another workload's constraint may count it too.
        for c in groups.values_mut().flatten() {
            c.remove(pod, *index, node);
        }
        let pod = input.existing_nodes[*index].pods.remove(at);
        released.push((*index, pod));
    }
    released
}

/// What pods of one workload share: spec, namespace and labels (by address: the store
/// shares them among a workload's pods; an equal copy elsewhere only costs a second count).
#[derive(PartialEq, Eq, Hash)]
struct GroupKey {
    spec: usize,
    labels: usize,
    namespace: String,
}

impl GroupKey {
    fn of(pod: &LeanPod, spec: &PodSpec) -> Self {
        let meta = pod.meta();
        Self {
            spec: std::ptr::from_ref(spec) as usize,
            labels: meta.labels.map_or(0, |l| std::ptr::from_ref(l) as usize),
            namespace: meta.namespace.unwrap_or("default").to_owned(),
        }
    }
}

/// One constraint's count of selected pods in each domain of the nodes it considers.
struct Counts {
    constraint: TopologySpreadConstraint,
    namespace: Option<String>,
    /// The `matchLabelKeys` pairs of the workload's pods, which the selector gets besides.
    label_keys: Vec<(String, String)>,
    /// Whether each node (by index) is one it counts: its node affinity admits it.
    counted: Vec<bool>,
    by_domain: HashMap<String, u32>,
}

impl Counts {
    fn of(pod: &LeanPod, constraint: &TopologySpreadConstraint, nodes: &[ExistingNode]) -> Self {
        let labels = pod.meta().labels;
        let label_keys = constraint
            .match_label_keys
            .iter()
            .flatten()
            .filter_map(|key| Some((key.clone(), labels?.get(key)?.clone())))
            .collect();
        let mut counts = Counts {
            constraint: constraint.clone(),
            namespace: pod.meta().namespace.map(str::to_owned),
            label_keys,
            counted: Vec::with_capacity(nodes.len()),
            by_domain: HashMap::new(),
        };
        let honors_affinity = constraint.node_affinity_policy.as_deref() != Some("Ignore");
        let spec = pod.spec();
        for node in nodes {
            let admitted =
                !honors_affinity || spec.is_none_or(|s| admits_node(s, &node.name, &node.labels));
            counts.counted.push(admitted);
            let Some(domain) = node
                .labels
                .get(&constraint.topology_key)
                .filter(|_| admitted)
            else {
                continue;
            };
            let selected = node.pods.iter().filter(|p| counts.selects(p)).count();
            *counts.by_domain.entry(domain.clone()).or_default() +=
                u32::try_from(selected).unwrap_or(u32::MAX);
        }
        counts
    }

    /// Whether the constraint counts `other`: active, in the workload's namespace, selected.
    fn selects(&self, other: &LeanPod) -> bool {
        let Some(selector) = &self.constraint.label_selector else {
            return false;
        };
        let labels = other.meta().labels;
        is_active(other)
            && other.meta().namespace == self.namespace.as_deref()
            && selects(selector, other)
            && self
                .label_keys
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    }

    /// Whether `pod`, held on `node` (at `index`), keeps within the skew there: its
    /// domain's count without it, plus one, is at most `maxSkew` above the least of all
    /// domains' counts without it (zero while fewer domains than `minDomains` exist).
    fn allows(&self, pod: &LeanPod, index: usize, node: &ExistingNode) -> bool {
        let Some(domain) = node.labels.get(&self.constraint.topology_key) else {
            return false;
        };
        let own = u32::from(self.counted[index] && self.selects(pod));
        let without = |d: &str, count: u32| {
            if d == domain {
                count.saturating_sub(own)
            } else {
                count
            }
        };
        let here = self
            .by_domain
            .get(domain)
            .map_or(0, |&c| without(domain, c));
        let too_few = self
            .constraint
            .min_domains
            .is_some_and(|m| self.by_domain.len() < usize::try_from(m).unwrap_or(0));
        let least = if too_few {
            0
        } else {
            self.by_domain
                .iter()
                .map(|(d, &c)| without(d, c))
                .min()
                .unwrap_or(0)
        };
        i64::from(here) + 1 - i64::from(least) <= i64::from(self.constraint.max_skew)
    }

    /// Takes `pod`, released from `node` (at `index`), off its domain's count if the
    /// constraint counts it there.
    fn remove(&mut self, pod: &LeanPod, index: usize, node: &ExistingNode) {
        let own = u32::from(self.counted[index] && self.selects(pod));
        if let Some(count) = node
            .labels
            .get(&self.constraint.topology_key)
            .and_then(|d| self.by_domain.get_mut(d))
        {
            *count = count.saturating_sub(own);
        }
    }
}
