//! `kerf plan --rounds N`: provisioning rounds as the controller runs them. One solve charges
//! each new NodeClaim against its NodePool's limits at the largest candidate instance type
//! (upstream does the same: it cannot know which type will launch), so pods can be reported
//! unschedulable for limits that the controller's next round, seeing the NodeClaims launched
//! as their cheapest type, would still have room under. Each further round carries every
//! NodeClaim planned so far in as in-flight capacity at its launch choice and solves the
//! pods still unplaced, until nothing more is placed or `N` rounds have run.

use crate::pods::LeanPod;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::cluster::snapshot::pod_key;
use crate::pods::bound_to;
use crate::scheduling::{
    self, ExistingNodePlacement, InstanceType, PodRef, SchedulingError, SchedulingInput,
    SchedulingResult,
};

/// The name an earlier round's NodeClaim carries as in-flight capacity; never a real node's.
const CARRIED_PREFIX: &str = "kerf-plan-round-nodeclaim-";

/// The merged decisions of up to `rounds` rounds, and how many ran.
pub fn solve(
    input: &SchedulingInput,
    rounds: usize,
) -> Result<(SchedulingResult, usize), SchedulingError> {
    let mut merged = scheduling::solve(input)?;
    let mut ran = 1;
    while ran < rounds && !merged.errors.is_empty() {
        let next = scheduling::solve(&carried(input, &merged))?;
        ran += 1;
        if !merge(&mut merged, next) {
            break;
        }
    }
    Ok((merged, ran))
}

/// The next round's input: the pods still unplaced, the existing nodes with what earlier
/// rounds put on them, and every NodeClaim planned so far as a launched, uninitialized node.
fn carried(input: &SchedulingInput, merged: &SchedulingResult) -> SchedulingInput {
    let by_key: HashMap<String, &Arc<LeanPod>> =
        input.pods.iter().map(|p| (pod_key(p), p)).collect();
    let pods_of = |refs: &[PodRef]| -> Vec<Arc<LeanPod>> {
        refs.iter()
            .filter_map(|r| by_key.get(&ref_key(r)).map(|p| Arc::clone(p)))
            .collect()
    };
    let mut existing_nodes = input.existing_nodes.clone();
    for placement in &merged.existing_nodes {
        if let Some(node) = existing_nodes.iter_mut().find(|n| n.name == placement.name) {
            let placed: Vec<Arc<LeanPod>> = pods_of(&placement.pods)
                .into_iter()
                .map(|pod| bound_to(&pod, &node.name))
                .collect();
            node.pods.extend(placed);
        }
    }
    for (i, claim) in merged.new_node_claims.iter().enumerate() {
        let Some(launch) = &claim.launch else {
            continue;
        };
        let Some(it) = instance_type(input, &claim.node_pool, &launch.instance_type) else {
            continue;
        };
        let name = format!("{CARRIED_PREFIX}{i}");
        existing_nodes.push(claim.launched_node(&name, launch, it, pods_of(&claim.pods), false));
    }
    let unplaced: HashSet<String> = merged.errors.keys().map(ref_key).collect();
    SchedulingInput {
        pods: input
            .pods
            .iter()
            .filter(|p| unplaced.contains(&pod_key(p)))
            .cloned()
            .collect(),
        existing_nodes,
        node_pools: input.node_pools.clone(),
        daemonsets: input.daemonsets.clone(),
        volumes: input.volumes.clone(),
        namespaces: input.namespaces.clone(),
        options: input.options,
    }
}

/// Adds a round's decisions to the merged ones; whether it placed any pod.
fn merge(merged: &mut SchedulingResult, round: SchedulingResult) -> bool {
    let mut placed = !round.new_node_claims.is_empty();
    for placement in round.existing_nodes {
        placed |= !placement.pods.is_empty();
        let carried = placement
            .name
            .strip_prefix(CARRIED_PREFIX)
            .and_then(|i| i.parse::<usize>().ok());
        match carried {
            Some(i) => merged.new_node_claims[i].pods.extend(placement.pods),
            None => add_placement(&mut merged.existing_nodes, placement),
        }
    }
    merged.new_node_claims.extend(round.new_node_claims);
    merged.errors = round.errors;
    placed
}

fn add_placement(placements: &mut Vec<ExistingNodePlacement>, placement: ExistingNodePlacement) {
    match placements.iter_mut().find(|p| p.name == placement.name) {
        Some(existing) => existing.pods.extend(placement.pods),
        None => placements.push(placement),
    }
}

fn instance_type<'a>(
    input: &'a SchedulingInput,
    pool: &str,
    name: &str,
) -> Option<&'a InstanceType> {
    input
        .node_pools
        .iter()
        .find(|p| p.name == pool)?
        .instance_types
        .iter()
        .find(|it| it.name == name)
}

fn ref_key(pod: &PodRef) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::HOSTNAME;
    use crate::scheduling::testing::{fake_instance_types, node_pool, pod, resources, shared};

    /// Three pods that each need their own node, under a 4-vCPU limit, with 1- to 4-vCPU
    /// types: one round charges the first NodeClaim at 4 vCPUs and refuses the rest.
    fn spread_under_a_cpu_limit() -> SchedulingInput {
        let mut pool = node_pool("default", fake_instance_types(4));
        pool.limits = Some(resources(&[("cpu", "4")]));
        SchedulingInput {
            pods: shared(
                pod("w")
                    .labels(&[("app", "w")])
                    .cpu("500m")
                    .anti_affinity_to(HOSTNAME, &[("app", "w")])
                    .replicas("w", 3),
            ),
            node_pools: vec![pool],
            ..Default::default()
        }
    }

    #[test]
    fn one_round_charges_the_largest_candidate_and_refuses_what_later_rounds_place() {
        let input = spread_under_a_cpu_limit();
        let (one, ran) = solve(&input, 1).expect("solves");
        assert_eq!(
            (one.new_node_claims.len(), one.errors.len(), ran),
            (1, 2, 1)
        );

        let (three, ran) = solve(&input, 3).expect("solves");
        assert_eq!(ran, 3, "round 2 places one pod, round 3 the last");
        assert!(three.errors.is_empty(), "{:?}", three.errors);
        let launched: Vec<&str> = three
            .new_node_claims
            .iter()
            .map(|c| c.launch.as_ref().expect("launch").instance_type.as_str())
            .collect();
        assert_eq!(launched, ["fake-it-0"; 3], "each pod on the cheapest type");
        let pods: usize = three.new_node_claims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(pods, 3);
    }

    #[test]
    fn rounds_stop_once_a_round_places_nothing() {
        let mut input = spread_under_a_cpu_limit();
        input.node_pools[0].limits = Some(resources(&[("cpu", "1")]));
        let (result, ran) = solve(&input, 10).expect("solves");
        assert_eq!(ran, 2, "round 2 finds no room and the rounds stop");
        assert_eq!((result.new_node_claims.len(), result.errors.len()), (1, 2));
    }
}
