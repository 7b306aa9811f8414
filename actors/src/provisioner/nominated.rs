//! Pods nominated to in-flight NodeClaims keep their place across rounds. A round solves
//! every pending pod, and a NodeClaim created by an earlier round is in flight for seconds
//! to minutes while its pods stay pending. Solving those pods again from scratch packs them
//! differently (spread constraints, pod order and the pods that arrived since all change the
//! order of first fit), so some no longer fit the NodeClaims made for them and later rounds
//! create capacity the cluster already has on the way. Upstream's cluster state remembers
//! nominations and its scheduler sees an in-flight NodeClaim's remaining capacity; here each
//! still-pending pod nominated to a NodeClaim that is in flight (the Launcher's record, see
//! [`crate::launcher::CreatedClaims::nominations`]) is moved from the round's pending pods
//! onto that NodeClaim, or onto its Node, so the solve places only the others, on what
//! remains. A nomination lapses a window after the Node is initialized, time the
//! kube-scheduler has to bind the pods there: a pod it refused is planned afresh (one it
//! has not tried yet stays held for longer, see [`crate::launcher::NOMINATION_LIMIT`]).
//! The pods a round places in the room left on such a NodeClaim are added to the ones it
//! holds ([`assign`]): held from the next round on like the others (and nominated when its
//! Node registers), instead of being solved again from scratch every round among the pods
//! that arrived since, where a different packing spills some onto new NodeClaims.

use std::collections::HashMap;

use kerf::pods::PodLike;
use kerf::scheduling::{ExistingNodePlacement, SchedulingInput};

use crate::launcher::{CreatedClaims, HeldPods};

/// Moves the pending pods of `input` nominated to one of its existing nodes (by NodeClaim)
/// onto that node; returns the NodeClaim of each node that holds pods (has nominations), by
/// node name, for [`assign`].
pub fn hold(
    input: &mut SchedulingInput,
    nominations: &HashMap<String, HeldPods>,
) -> HashMap<String, String> {
    let mut holding = HashMap::new();
    let mut node_of_pod: HashMap<&str, usize> = HashMap::new();
    for (index, node) in input.existing_nodes.iter().enumerate() {
        let Some((claim, pods)) = node
            .node_claim
            .as_ref()
            .and_then(|claim| Some((claim, nominations.get(claim)?)))
        else {
            continue;
        };
        holding.insert(node.name.clone(), claim.clone());
        for pod in pods.iter() {
            node_of_pod.insert(pod.uid.as_str(), index);
        }
    }
    if node_of_pod.is_empty() {
        return holding;
    }
    let mut pending = Vec::with_capacity(input.pods.len());
    for pod in std::mem::take(&mut input.pods) {
        let uid = pod.meta().uid.unwrap_or_default();
        match node_of_pod.get(uid) {
            Some(&index) => input.existing_nodes[index].pods.push(pod),
            None => pending.push(pod),
        }
    }
    input.pods = pending;
    holding
}

/// Adds the pods a round placed on nodes in `holding` to what their NodeClaims hold;
/// returns how many were added.
pub fn assign(
    created: &CreatedClaims,
    holding: &HashMap<String, String>,
    placements: &[ExistingNodePlacement],
) -> usize {
    placements
        .iter()
        .filter_map(|placed| {
            let claim = holding.get(&placed.name)?;
            Some(created.assign(claim, &placed.pods))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kerf::scheduling::{ExistingNode, PodRef};
    use std::sync::Arc;

    fn pod(uid: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .expect("valid pod")
    }

    fn node(name: &str, claim: Option<&str>, initialized: bool) -> ExistingNode {
        ExistingNode {
            name: name.to_owned(),
            labels: Default::default(),
            taints: Vec::new(),
            allocatable: Default::default(),
            capacity: Default::default(),
            pods: Vec::new(),
            initialized,
            node_pool: Some("default".to_owned()),
            node_claim: claim.map(str::to_owned),
        }
    }

    fn nominated(uids: &[&str]) -> HeldPods {
        let pods = uids.iter().map(|uid| PodRef {
            namespace: "default".to_owned(),
            name: (*uid).to_owned(),
            uid: (*uid).to_owned(),
        });
        Arc::new(pods.collect())
    }

    fn uids(pods: &[Arc<kerf::pods::LeanPod>]) -> Vec<&str> {
        pods.iter().filter_map(|p| p.meta().uid).collect()
    }

    #[test]
    fn nominated_pods_stay_on_their_nodeclaims_nodes_and_the_rest_are_solved() {
        let mut input = SchedulingInput {
            pods: ["a", "b", "c", "d", "e"]
                .map(|uid| Arc::new(pod(uid).into()))
                .to_vec(),
            existing_nodes: vec![
                node("claim-1", Some("claim-1"), false),
                node("ip-10-0-0-1", Some("claim-2"), false),
                node("ip-10-0-0-2", Some("claim-3"), true),
            ],
            ..SchedulingInput::default()
        };
        let nominations = HashMap::from([
            ("claim-1".to_owned(), nominated(&["a", "gone"])),
            ("claim-2".to_owned(), nominated(&["b"])),
            ("claim-3".to_owned(), nominated(&["c"])),
            ("claim-4".to_owned(), nominated(&["d"])),
        ]);
        let holding = hold(&mut input, &nominations);
        assert_eq!(
            holding,
            HashMap::from([
                ("claim-1".to_owned(), "claim-1".to_owned()),
                ("ip-10-0-0-1".to_owned(), "claim-2".to_owned()),
                ("ip-10-0-0-2".to_owned(), "claim-3".to_owned()),
            ])
        );
        assert_eq!(
            uids(&input.existing_nodes[0].pods),
            ["a"],
            "in-flight NodeClaim"
        );
        assert_eq!(
            uids(&input.existing_nodes[1].pods),
            ["b"],
            "its registering Node"
        );
        assert_eq!(
            uids(&input.existing_nodes[2].pods),
            ["c"],
            "its initialized Node"
        );
        assert_eq!(
            uids(&input.pods),
            ["d", "e"],
            "pods of an unknown NodeClaim and unnominated pods are solved"
        );
    }
}
