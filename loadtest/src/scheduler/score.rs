//! The score plugins of kube-scheduler's default profile, as pure functions over one pod and
//! the nodes that passed the filters, so each is unit-tested against hand-computed numbers.
//! Every plugin yields 0..=100 per node (after its own normalization), and the node's score
//! is the sum weighted as the default profile weighs them: TaintToleration 3, NodeAffinity
//! 2, PodTopologySpread 2, InterPodAffinity 2, NodeResourcesFit (LeastAllocated, cpu and
//! memory weighted 1) 1, NodeResourcesBalancedAllocation 1. ImageLocality (weight 1) is
//! left out: the simulated nodes pull no images, so it scores every node 0 and changes no
//! choice. The integer arithmetic and rounding follow kube-scheduler's, so near-ties break
//! the same way.

use super::nodeinfo::NodeInfo;
use super::podinfo::PodInfo;
use kerf::taints::{EFFECT_PREFER_NO_SCHEDULE, toleration_tolerates};

/// `framework.MaxNodeScore`.
pub(crate) const MAX_NODE_SCORE: i64 = 100;

/// Plugin weights of the default profile (`getDefaultPlugins`).
pub(crate) const TAINT_TOLERATION_WEIGHT: i64 = 3;
pub(crate) const NODE_AFFINITY_WEIGHT: i64 = 2;
pub(crate) const TOPOLOGY_SPREAD_WEIGHT: i64 = 2;
pub(crate) const INTER_POD_AFFINITY_WEIGHT: i64 = 2;
pub(crate) const RESOURCES_FIT_WEIGHT: i64 = 1;
pub(crate) const BALANCED_ALLOCATION_WEIGHT: i64 = 1;

/// What an existing pod's required affinity term adds to a node that shares its domain
/// (InterPodAffinity's `hardPodAffinityWeight`, default 1).
pub(crate) const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// NodeResourcesFit with the LeastAllocated strategy: the free share of cpu and of memory
/// after placing the pod, each on 0..=100 (integer division), averaged with weight 1 each.
/// Requests are the "non-zero" ones (request-less containers count 100m and 200Mi).
pub(crate) fn least_allocated(pod: &PodInfo, node: &NodeInfo) -> i64 {
    let free = |capacity: i64, requested: i64| {
        if capacity == 0 || requested > capacity {
            0
        } else {
            (capacity - requested) * MAX_NODE_SCORE / capacity
        }
    };
    let cpu = free(
        node.allocatable.cpu(),
        node.non_zero_requested.0 + pod.non_zero.0,
    );
    let memory = free(
        node.allocatable.memory(),
        node.non_zero_requested.1 + pod.non_zero.1,
    );
    (cpu + memory) / 2
}

/// Whether BalancedAllocation skips the pod (it requests neither cpu nor memory).
pub(crate) fn is_best_effort(pod: &PodInfo) -> bool {
    pod.requests.cpu() == 0 && pod.requests.memory() == 0
}

/// NodeResourcesBalancedAllocation: `(1 - std) * 100` of the cpu and memory shares the node
/// would have requested with the pod (real requests, each share capped at 1); with two
/// resources the standard deviation is half their difference.
pub(crate) fn balanced_allocation(pod: &PodInfo, node: &NodeInfo) -> i64 {
    let share = |requested: i64, allocatable: i64| {
        (allocatable != 0).then(|| (requested as f64 / allocatable as f64).min(1.0))
    };
    let shares: Vec<f64> = [
        share(
            node.requested.cpu() + pod.requests.cpu(),
            node.allocatable.cpu(),
        ),
        share(
            node.requested.memory() + pod.requests.memory(),
            node.allocatable.memory(),
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    let std = match shares.as_slice() {
        [a, b] => ((a - b) / 2.0).abs(),
        _ => 0.0,
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// TaintToleration's raw score: the node's PreferNoSchedule taints the pod does not
/// tolerate (only tolerations with that effect or none count).
pub(crate) fn intolerable_preferred_taints(pod: &PodInfo, node: &NodeInfo) -> i64 {
    let tolerations: Vec<_> = pod
        .tolerations
        .iter()
        .filter(|t| {
            t.effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == EFFECT_PREFER_NO_SCHEDULE)
        })
        .collect();
    node.preferred_taints
        .iter()
        .filter(|taint| !tolerations.iter().any(|t| toleration_tolerates(t, taint)))
        .count() as i64
}

/// `helper.DefaultNormalizeScore`: scales to 0..=100 by the highest score; `reverse` turns
/// it around (fewest is best). All zero stays zero, or becomes 100 everywhere when reversed.
pub(crate) fn normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    for score in scores.iter_mut() {
        if max == 0 {
            if reverse {
                *score = MAX_NODE_SCORE;
            }
            continue;
        }
        let scaled = MAX_NODE_SCORE * *score / max;
        *score = if reverse {
            MAX_NODE_SCORE - scaled
        } else {
            scaled
        };
    }
}

/// PodTopologySpread's weight of a constraint whose key takes `domains` values among the
/// scored nodes: `ln(domains + 2)`, so counts in few large domains weigh less.
pub(crate) fn topology_weight(domains: usize) -> f64 {
    ((domains + 2) as f64).ln()
}

/// One constraint's contribution to a node: matching pods in its domain times the weight,
/// plus `maxSkew - 1` (which waters small differences down).
pub(crate) fn spread_term(count: u32, max_skew: u32, weight: f64) -> f64 {
    f64::from(count) * weight + f64::from(max_skew) - 1.0
}

/// PodTopologySpread's normalization: `None` (a node lacking a required key) scores 0; the
/// rest `100 * (max + min - s) / max`, so the node with the fewest matching pods gets 100;
/// all 100 when every raw score is 0.
pub(crate) fn normalize_spread(raw: &[Option<i64>]) -> Vec<i64> {
    let scored = raw.iter().flatten().copied();
    let min = scored.clone().min().unwrap_or(0);
    let max = scored.max().unwrap_or(0);
    raw.iter()
        .map(|score| match score {
            None => 0,
            Some(_) if max == 0 => MAX_NODE_SCORE,
            Some(s) => MAX_NODE_SCORE * (max + min - s) / max,
        })
        .collect()
}

/// InterPodAffinity's normalization: min–max scaled to 0..=100 (truncated); all 0 when the
/// scores do not differ.
pub(crate) fn normalize_min_max(scores: &mut [i64]) {
    let min = scores.iter().copied().min().unwrap_or(0);
    let max = scores.iter().copied().max().unwrap_or(0);
    for score in scores.iter_mut() {
        *score = if max > min {
            (MAX_NODE_SCORE as f64 * ((*score - min) as f64 / (max - min) as f64)) as i64
        } else {
            0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(cpu: &str, memory: &str, taints: serde_json::Value) -> NodeInfo {
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("valid node");
        NodeInfo::new(&node).expect("compiles")
    }

    fn pod(containers: serde_json::Value, tolerations: serde_json::Value) -> PodInfo {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": containers, "tolerations": tolerations}
        }))
        .expect("valid pod");
        PodInfo::new(&pod).expect("compiles")
    }

    fn requesting(cpu: &str, memory: &str) -> PodInfo {
        pod(
            json!([{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]),
            json!([]),
        )
    }

    #[test]
    fn least_allocated_averages_the_free_shares_with_integer_division() {
        let mut n = node("4", "8Gi", json!([]));
        n.add_pod(std::sync::Arc::new(requesting("1", "2Gi")));
        // cpu: (4000 - 1000 - 500) * 100 / 4000 = 62 (62.5 truncated);
        // memory: (8 - 2 - 3) * 100 / 8 = 37 (37.5 truncated); (62 + 37) / 2 = 49.
        assert_eq!(least_allocated(&requesting("500m", "3Gi"), &n), 49);
        // More cpu than the node holds scores 0 for cpu; the zero memory request counts
        // as 200Mi: (8192 - 2048 - 200) * 100 / 8192 = 72; (0 + 72) / 2 = 36.
        assert_eq!(least_allocated(&requesting("4", "0"), &n), 36);
    }

    #[test]
    fn least_allocated_counts_request_less_containers_at_the_defaults() {
        let n = node("1", "1000Mi", json!([]));
        let best_effort = pod(json!([{"name": "a"}, {"name": "b"}]), json!([]));
        // Two containers: 200m of 1000m used → 80; 400Mi of 1000Mi → 60; average 70.
        assert_eq!(least_allocated(&best_effort, &n), 70);
        assert!(is_best_effort(&best_effort));
    }

    #[test]
    fn balanced_allocation_is_one_minus_half_the_share_difference() {
        let n = node("4", "8Gi", json!([]));
        // cpu 1/4 = 0.25, memory 4/8 = 0.5: std 0.125 → 87 (87.5 truncated).
        assert_eq!(balanced_allocation(&requesting("1", "4Gi"), &n), 87);
        // Equal shares are perfectly balanced.
        assert_eq!(balanced_allocation(&requesting("2", "4Gi"), &n), 100);
        // Shares cap at 1: cpu 8/4 → 1, memory 0 → std 0.5 → 50.
        assert_eq!(balanced_allocation(&requesting("8", "0"), &n), 50);
    }

    #[test]
    fn only_untolerated_prefer_no_schedule_taints_count() {
        let n = node(
            "4",
            "8Gi",
            json!([
                {"key": "a", "effect": "PreferNoSchedule"},
                {"key": "b", "effect": "PreferNoSchedule"},
                {"key": "c", "effect": "NoSchedule"}
            ]),
        );
        let none = pod(json!([{"name": "c"}]), json!([]));
        assert_eq!(intolerable_preferred_taints(&none, &n), 2);
        let tolerates_a = pod(
            json!([{"name": "c"}]),
            json!([{"key": "a", "operator": "Exists", "effect": "PreferNoSchedule"},
                   {"key": "b", "operator": "Exists", "effect": "NoSchedule"}]),
        );
        assert_eq!(
            intolerable_preferred_taints(&tolerates_a, &n),
            1,
            "a NoSchedule toleration does not count for a PreferNoSchedule taint"
        );
    }

    #[test]
    fn default_normalization_scales_by_the_maximum_and_reverses() {
        let mut scores = [0, 1, 3];
        normalize(&mut scores, false);
        assert_eq!(scores, [0, 33, 100]);
        let mut taints = [0, 1, 3];
        normalize(&mut taints, true);
        assert_eq!(taints, [100, 67, 0]);
        let mut none = [0, 0];
        normalize(&mut none, true);
        assert_eq!(none, [100, 100]);
    }

    #[test]
    fn spread_favours_the_emptiest_domain_and_zeroes_ignored_nodes() {
        // Three zones holding 0, 2 and 4 matching pods, maxSkew 1, weight ln(5).
        let weight = topology_weight(3);
        let raw: Vec<Option<i64>> = [0, 2, 4]
            .iter()
            .map(|&c| Some(spread_term(c, 1, weight).round() as i64))
            .chain([None])
            .collect();
        // ln 5 = 1.609: raw 0, 3, 6 → 100 * (6 + 0 - s) / 6.
        assert_eq!(raw, [Some(0), Some(3), Some(6), None]);
        assert_eq!(normalize_spread(&raw), [100, 50, 0, 0]);
        assert_eq!(normalize_spread(&[Some(0), Some(0)]), [100, 100]);
    }

    #[test]
    fn min_max_normalization_spans_the_range() {
        let mut scores = [-2, 0, 2];
        normalize_min_max(&mut scores);
        assert_eq!(scores, [0, 50, 100]);
        let mut flat = [3, 3];
        normalize_min_max(&mut flat);
        assert_eq!(flat, [0, 0]);
    }
}
