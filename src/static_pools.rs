//! Static NodePools (`spec.replicas`, upstream's `StaticCapacity` gate): pools that keep
//! exactly `replicas` nodes whatever the pods. This is the decision half, pure: how many
//! NodeClaims to create ([`to_create`]), which to delete when there are too many
//! ([`scale_down`]), and the NodeClaim every replica is stamped from ([`template_claim`]).
//! The controller's `static_capacity` loop acts on them, disruption replaces a drifted static
//! node one for one with the same template, and `kerf plan` plans a static pool to its
//! replicas. As upstream: a NodeClaim being deleted still counts until it is gone, so no
//! replacement races a drain; `limits.nodes` is the only limit; scale-down takes NodeClaims
//! not launched yet first, then empty nodes, then the cheapest to disrupt (nodes with a
//! `karpenter.sh/do-not-disrupt` pod last), `karpenter.sh/deprovisioning-priority` first
//! within each group. Scale-down deletes NodeClaims outright, bypassing disruption budgets;
//! the termination drain still honours PodDisruptionBudgets.

use std::cmp::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Toleration};

use crate::pods::LeanPod;
use crate::scheduling::{
    NodePoolInput, PlannedNodeClaim, SchedulingError, SchedulingInput, SchedulingOptions, solve,
};

/// NodeClaim annotation ordering scale-down: higher values are removed first (upstream's).
pub const DEPROVISIONING_PRIORITY: &str = "karpenter.sh/deprovisioning-priority";

/// How many NodeClaims a static pool wanting `replicas` should create now, holding `live`
/// NodeClaims and `deleting` ones on their way out, within `node_limit`.
pub fn to_create(replicas: u64, live: u64, deleting: u64, node_limit: Option<u64>) -> u64 {
    let total = live + deleting;
    let wanted = replicas.saturating_sub(total);
    match node_limit {
        Some(limit) => wanted.min(limit.saturating_sub(total)),
        None => wanted,
    }
}

/// One NodeClaim of a static pool, as scale-down weighs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub node_claim: String,
    /// Has a providerID: its instance was launched.
    pub launched: bool,
    /// Runs no pod but DaemonSet (and other non-reschedulable) pods, none of them with
    /// `karpenter.sh/do-not-disrupt`.
    pub empty: bool,
    /// Some pod on it has `karpenter.sh/do-not-disrupt`.
    pub do_not_disrupt: bool,
    /// [`DEPROVISIONING_PRIORITY`], 0 when absent or not an integer.
    pub priority: i64,
    /// The pods' eviction costs scaled by the lifetime the node has left, as disruption's.
    pub disruption_cost: f64,
}

/// The NodeClaims to delete so that `members` (the pool's NodeClaims not being deleted)
/// come down to `replicas`, in the order they are taken.
pub fn scale_down(replicas: u64, members: &[Member]) -> Vec<String> {
    let excess = (members.len() as u64).saturating_sub(replicas) as usize;
    if excess == 0 {
        return Vec::new();
    }
    let mut ordered: Vec<&Member> = members.iter().collect();
    ordered.sort_by(|a, b| order(a, b));
    ordered
        .into_iter()
        .take(excess)
        .map(|m| m.node_claim.clone())
        .collect()
}

/// Unlaunched first, then empty, then the rest by do-not-disrupt, priority and cost.
fn order(a: &Member, b: &Member) -> Ordering {
    let group = |m: &Member| match (m.launched, m.empty) {
        (false, _) => 0,
        (true, true) => 1,
        (true, false) => 2,
    };
    group(a)
        .cmp(&group(b))
        .then_with(|| match group(a) {
            2 => a.do_not_disrupt.cmp(&b.do_not_disrupt),
            _ => Ordering::Equal,
        })
        .then_with(|| b.priority.cmp(&a.priority))
        .then_with(|| match group(a) {
            2 => a.disruption_cost.total_cmp(&b.disruption_cost),
            _ => Ordering::Equal,
        })
        .then_with(|| a.node_claim.cmp(&b.node_claim))
}

/// [`DEPROVISIONING_PRIORITY`] from a NodeClaim's annotations.
pub fn priority(annotations: Option<&std::collections::BTreeMap<String, String>>) -> i64 {
    annotations
        .and_then(|a| a.get(DEPROVISIONING_PRIORITY))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The NodeClaim a replica of `pool` is created from: the pool's template requirements,
/// every instance type they allow (cheapest first, at most `max_instance_types`), DaemonSet overhead
/// of `daemonsets`, no pods. It is the scheduler's own plan for one pod that asks for
/// nothing and tolerates everything, so the template is narrowed exactly as a provisioned
/// NodeClaim's would be; the pool's limits are left out (only `limits.nodes` applies, by
/// count). `None` when no instance type of the pool can launch.
pub fn template_claim(
    pool: &NodePoolInput,
    daemonsets: &[Pod],
    max_instance_types: usize,
) -> Result<Option<PlannedNodeClaim>, SchedulingError> {
    let pool = NodePoolInput {
        limits: None,
        usage: None,
        ..pool.clone()
    };
    let input = SchedulingInput {
        pods: vec![Arc::new(replica_pod(&pool.name))],
        node_pools: vec![pool],
        daemonsets: daemonsets.to_vec(),
        options: SchedulingOptions {
            parallel: false,
            max_instance_types,
            ..SchedulingOptions::default()
        },
        ..SchedulingInput::default()
    };
    let result = solve(&input)?;
    Ok(result.new_node_claims.into_iter().next().map(|mut claim| {
        claim.pods.clear();
        // The stand-in pod's own slot: the replica's requests are the DaemonSets' alone.
        if let Some(pods) = claim.requests.get("pods") {
            let one = crate::resources::Quantity::new(1, pods.format());
            match pods.sub_or_zero(one) {
                left if left.is_zero() => claim.requests.remove("pods"),
                left => claim.requests.insert("pods", left),
            };
        }
        claim
    }))
}

/// A pending pod that asks for nothing and tolerates every taint.
fn replica_pod(pool: &str) -> LeanPod {
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(format!("{pool}-replica")),
            namespace: Some("default".into()),
            uid: Some(format!("static-replica-{pool}")),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            tolerations: Some(vec![Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    LeanPod::from(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::{fake_instance_types, node_pool};

    fn member(name: &str, launched: bool, empty: bool) -> Member {
        Member {
            node_claim: name.into(),
            launched,
            empty,
            do_not_disrupt: false,
            priority: 0,
            disruption_cost: 1.0,
        }
    }

    #[test]
    fn creation_counts_deleting_claims_and_stops_at_the_node_limit() {
        assert_eq!(to_create(3, 0, 0, None), 3);
        assert_eq!(to_create(3, 1, 1, None), 1, "a deleting claim still counts");
        assert_eq!(to_create(3, 4, 0, None), 0);
        assert_eq!(to_create(5, 1, 0, Some(3)), 2, "limits.nodes caps creation");
        assert_eq!(to_create(5, 2, 2, Some(3)), 0, "already past the limit");
    }

    #[test]
    fn scale_down_takes_unlaunched_then_empty_then_the_cheapest_to_disrupt() {
        let mut busy_cheap = member("busy-cheap", true, false);
        busy_cheap.disruption_cost = 0.5;
        let mut busy_dnd = member("busy-dnd", true, false);
        busy_dnd.do_not_disrupt = true;
        busy_dnd.disruption_cost = 0.1;
        let members = vec![
            member("busy", true, false),
            busy_dnd,
            member("empty", true, true),
            busy_cheap,
            member("pending", false, false),
        ];
        assert_eq!(scale_down(5, &members), Vec::<String>::new());
        assert_eq!(scale_down(3, &members), ["pending", "empty"]);
        assert_eq!(
            scale_down(0, &members),
            ["pending", "empty", "busy-cheap", "busy", "busy-dnd"],
            "a node with a do-not-disrupt pod goes last whatever its cost"
        );
    }

    #[test]
    fn the_deprovisioning_priority_orders_within_a_group() {
        let mut high = member("b-high", true, true);
        high.priority = 100;
        let members = vec![member("a-plain", true, true), high];
        assert_eq!(scale_down(1, &members), ["b-high"]);
        let annotations = [(DEPROVISIONING_PRIORITY.to_string(), "7".to_string())]
            .into_iter()
            .collect();
        assert_eq!(priority(Some(&annotations)), 7);
        assert_eq!(priority(None), 0);
    }

    #[test]
    fn the_template_claim_offers_every_allowed_type_cheapest_first_and_holds_no_pod() {
        let mut pool = node_pool("fixed", fake_instance_types(4));
        pool.limits = Some(crate::resources::Resources::new().with(
            "cpu",
            crate::resources::Quantity::new(0, crate::resources::Format::DecimalSI),
        ));
        let claim = template_claim(&pool, &[], 600)
            .expect("solves")
            .expect("a claim");
        assert_eq!(claim.node_pool, "fixed");
        assert!(claim.pods.is_empty());
        assert!(
            claim.requests.is_empty(),
            "no DaemonSet, no pod: {}",
            claim.requests
        );
        assert_eq!(claim.instance_types.len(), 4, "cpu limits do not apply");
        let prices: Vec<f64> = claim.instance_types.iter().map(|o| o.price).collect();
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
        assert!(claim.launch.is_some());
        let capped = template_claim(&pool, &[], 2)
            .expect("solves")
            .expect("a claim");
        assert_eq!(capped.instance_types.len(), 2);
        assert_eq!(capped.instance_types[0], claim.instance_types[0]);
    }
}
