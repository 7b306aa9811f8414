//! Behaviour tests of the scheduler, porting the intent of upstream's scheduling suite. Each
//! asserts where pods land (or why they do not), not merely that a solve succeeded.

mod basics;

use super::testing::*;
use super::*;

/// Solves and panics on input errors (fixtures are valid).
pub fn run(input: &SchedulingInput) -> SchedulingResult {
    solve(input).expect("fixture input is valid")
}

/// An input with one NodePool "default" of the given instance types.
pub fn single_pool(
    pods: Vec<k8s_openapi::api::core::v1::Pod>,
    its: Vec<InstanceType>,
) -> SchedulingInput {
    SchedulingInput {
        pods: shared(pods),
        node_pools: vec![node_pool("default", its)],
        ..Default::default()
    }
}

/// The value of requirement `key` on a planned NodeClaim (its `In` values).
pub fn req_values(claim: &PlannedNodeClaim, key: &str) -> Vec<String> {
    claim
        .requirements
        .iter()
        .filter(|r| r.key == key && r.operator == Operator::In)
        .flat_map(|r| r.values.clone())
        .collect()
}

/// Number of pods per zone across NodeClaims (claims must be pinned to one zone).
pub fn zone_counts(result: &SchedulingResult) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for c in &result.new_node_claims {
        let zones = req_values(c, crate::labels::ZONE);
        assert_eq!(zones.len(), 1, "claim not pinned to one zone: {zones:?}");
        *out.entry(zones[0].clone()).or_insert(0) += c.pods.len();
    }
    out
}

/// Sorted list of per-claim pod counts.
pub fn pods_per_claim(result: &SchedulingResult) -> Vec<usize> {
    let mut v: Vec<usize> = result
        .new_node_claims
        .iter()
        .map(|c| c.pods.len())
        .collect();
    v.sort_unstable();
    v
}
mod affinity;
mod existing;
mod nodepools;
mod parallel;
mod req_xcheck;
mod reservations;
mod rounds;
mod topology;
