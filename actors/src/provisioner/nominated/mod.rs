//! Pods nominated to in-flight NodeClaims keep their place across rounds. Solved again from
//! scratch, the pods of a NodeClaim still booting pack differently (spread constraints, pod
//! order and newly arrived pods change the order of first fit), some no longer fit it, and
//! later rounds create capacity already on the way. As upstream's cluster state remembers
//! nominations, each still-pending pod nominated to an in-flight NodeClaim
//! ([`crate::created_claims::CreatedClaims::nominations`]) is moved from the round's pending
//! pods onto that NodeClaim, or its Node, so the solve places only the others on what
//! remains; pods a round places in the room left on it are added ([`assign`]). A pod is held
//! until its nomination lapses ([`crate::created_claims::NOMINATION_LIMIT`] at most), and on
//! an initialized Node only while it fits beside the pods bound there (their room, no
//! anti-affine peer, and past the nomination window a required topology spread its node's
//! domain still allows: [`spread`]): the kube-scheduler binds whichever pods come first, and
//! its refusal may leave no trace a round can read. A pod that does not fit is released
//! ([`CreatedClaims::release`]): its nomination is withdrawn and rounds plan it afresh.

use std::collections::{HashMap, HashSet};

use kerf::pods::{LeanPod, PodLike};
use kerf::resources::Resources;
use kerf::scheduling::{ExistingNode, ExistingNodePlacement, SchedulingInput, resource_requests};

use crate::created_claims::{CreatedClaims, HeldPods};

mod spread;

/// What [`hold`] did: the NodeClaim of each node that holds pods (has nominations), by
/// node name, for [`assign`]; and the pods (by uid) it found not fitting on their
/// NodeClaim's initialized Node, by NodeClaim, for [`CreatedClaims::release`].
#[derive(Debug, Default, PartialEq)]
pub struct Held {
    pub holding: HashMap<String, String>,
    pub released: HashMap<String, Vec<String>>,
}

/// Moves the pending pods of `input` nominated to one of its existing nodes (by NodeClaim)
/// onto that node, on an initialized node only those that fit beside its bound pods and,
/// for NodeClaims `past_window`, whose spread allows it (the others are solved afresh, and
/// released). Within the window the kube-scheduler is still binding the plan's pods, and a
/// skew it shows meanwhile is no reason to plan them again.
pub fn hold(
    input: &mut SchedulingInput,
    nominations: &HashMap<String, HeldPods>,
    past_window: &HashSet<String>,
) -> Held {
    let mut held = Held::default();
    let mut node_of_pod: HashMap<&str, usize> = HashMap::new();
    for (index, node) in input.existing_nodes.iter().enumerate() {
        let Some((claim, pods)) = node
            .node_claim
            .as_ref()
            .and_then(|claim| Some((claim, nominations.get(claim)?)))
        else {
            continue;
        };
        held.holding.insert(node.name.clone(), claim.clone());
        for pod in pods.iter() {
            node_of_pod.insert(pod.uid.as_str(), index);
        }
    }
    if node_of_pod.is_empty() {
        return held;
    }
    let mut pending = Vec::with_capacity(input.pods.len());
    // The free room of each initialized node holding pods, from its bound pods alone: worked
    // out at its first held pod, before any is added.
    let mut rooms: HashMap<usize, Resources> = HashMap::new();
    // The pods held on initialized nodes past the window, by node index and uid, for their
    // spread's judge.
    let mut on_initialized = Vec::new();
    for pod in std::mem::take(&mut input.pods) {
        let uid = pod.meta().uid.unwrap_or_default();
        let Some(&index) = node_of_pod.get(uid) else {
            pending.push(pod);
            continue;
        };
        let node = &mut input.existing_nodes[index];
        if node.initialized {
            let room = rooms.entry(index).or_insert_with(|| free_room(node));
            let peer = repelled_by(node, &pod);
            if peer.is_some() || !takes(room, &pod) {
                tracing::debug!(
                    pod = %pod.pod_ref(),
                    node = %node.name,
                    anti_affine_to = peer.map(|p| p.pod_ref().to_string()),
                    "held pod no longer fits on its node: released"
                );
                held.release(node, uid);
                pending.push(pod);
                continue;
            }
            if node
                .node_claim
                .as_ref()
                .is_some_and(|c| past_window.contains(c))
            {
                on_initialized.push((index, uid.to_owned()));
            }
        }
        node.pods.push(pod);
    }
    for (index, pod) in spread::release_skewed(input, &on_initialized) {
        let node = &input.existing_nodes[index];
        tracing::debug!(
            pod = %pod.pod_ref(),
            node = %node.name,
            "held pod's topology spread no longer allows its node: released"
        );
        held.release(node, pod.meta().uid.unwrap_or_default());
        pending.push(pod);
    }
    input.pods = pending;
    held
}

impl Held {
    /// Records pod `uid` released from `node`, under its NodeClaim.
    fn release(&mut self, node: &ExistingNode, uid: &str) {
        if let Some(claim) = &node.node_claim {
            let released = self.released.entry(claim.clone()).or_default();
            released.push(uid.to_owned());
        }
    }
}

/// The pod on `node` that keeps `pod` off it by required anti-affinity over the hostname
/// (either's term selecting the other), as the kube-scheduler would.
fn repelled_by<'a>(node: &'a ExistingNode, pod: &LeanPod) -> Option<&'a LeanPod> {
    node.pods
        .iter()
        .map(|other| &**other)
        .find(|other| kerf::pods::is_active(*other) && kerf::pods::repel_on_host(pod, *other))
}

/// What `node` has left beside its active pods. A NodeClaim in flight has none bound, and
/// its allocatable may be an estimate: the pods held there were planned to fit it.
fn free_room(node: &ExistingNode) -> Resources {
    let mut room = node.allocatable.clone();
    for pod in node.pods.iter().filter(|p| kerf::pods::is_active(&***p)) {
        // An unreadable request is the solve's to report.
        if let Ok(requests) = resource_requests(&**pod) {
            room.sub_assign(&requests);
        }
    }
    room
}

/// Whether `pod` fits in `room`, taking its requests from it if so. A pod whose requests
/// cannot be read stays held: the solve reports it either way.
fn takes(room: &mut Resources, pod: &LeanPod) -> bool {
    let Ok(requests) = resource_requests(pod) else {
        return true;
    };
    if !requests.fits(room) {
        return false;
    }
    room.sub_assign(&requests);
    true
}

/// Adds the pods a round placed on nodes in `holding` to what their NodeClaims hold, and
/// nominates every node the round placed pods on ([`CreatedClaims::target`]); returns how
/// many pods were added.
pub fn assign(
    created: &CreatedClaims,
    holding: &HashMap<String, String>,
    placements: &[ExistingNodePlacement],
) -> usize {
    // Only real pods nominate a node: a CapacityBuffer's virtual pods come back every round,
    // and a node they kept nominated would never be disrupted (upstream leaves them out too).
    created.target(
        placements
            .iter()
            .filter(|placed| {
                placed
                    .pods
                    .iter()
                    .any(|p| !kerf::buffer::is_virtual_uid(&p.uid))
            })
            .map(|placed| placed.name.as_str()),
    );
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
        requesting(uid, "0")
    }

    fn requesting(uid: &str, cpu: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .expect("valid pod")
    }

    /// A node of 2 cpu and 110 pods.
    fn node(name: &str, claim: Option<&str>, initialized: bool) -> ExistingNode {
        ExistingNode {
            name: name.to_owned(),
            labels: Default::default(),
            taints: Vec::new(),
            allocatable: kerf::scheduling::testing::resources(&[("cpu", "2"), ("pods", "110")]),
            capacity: Default::default(),
            pods: Vec::new(),
            initialized,
            node_pool: Some("default".to_owned()),
            node_claim: claim.map(str::to_owned),
            ..Default::default()
        }
    }

    fn nominated(uids: &[&str]) -> HeldPods {
        let pods = uids.iter().map(|uid| PodRef::new("default", *uid, *uid));
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
        let held = hold(&mut input, &nominations, &HashSet::new());
        assert!(held.released.is_empty());
        assert_eq!(
            held.holding,
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

    #[test]
    fn a_pod_is_held_on_an_initialized_node_only_while_it_fits_beside_the_bound_ones() {
        // The kube-scheduler bound "other" (1.5 cpu) to the 2-cpu Node planned for "a" and
        // "b" (half a cpu each): "a" still fits in the half cpu left, "b" does not. The
        // NodeClaim in flight holds all it was planned for, even past its allocatable (an
        // estimate until it launches): nothing can be bound there yet.
        let mut initialized = node("ip-10-0-0-1", Some("claim-1"), true);
        initialized
            .pods
            .push(Arc::new(requesting("other", "1500m").into()));
        let mut input = SchedulingInput {
            pods: [("a", "500m"), ("b", "500m"), ("c", "2"), ("d", "2")]
                .map(|(uid, cpu)| Arc::new(requesting(uid, cpu).into()))
                .to_vec(),
            existing_nodes: vec![initialized, node("claim-2", Some("claim-2"), false)],
            ..SchedulingInput::default()
        };
        let nominations = HashMap::from([
            ("claim-1".to_owned(), nominated(&["a", "b"])),
            ("claim-2".to_owned(), nominated(&["c", "d"])),
        ]);
        let held = hold(&mut input, &nominations, &HashSet::new());
        assert_eq!(uids(&input.existing_nodes[0].pods), ["other", "a"]);
        assert_eq!(uids(&input.existing_nodes[1].pods), ["c", "d"]);
        assert_eq!(uids(&input.pods), ["b"], "solved afresh");
        let released = HashMap::from([("claim-1".to_owned(), vec!["b".to_owned()])]);
        assert_eq!(held.released, released, "and released from its nomination");
    }

    #[test]
    fn a_pod_is_released_from_a_node_an_anti_affine_pod_was_bound_to() {
        let cache = |uid: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "namespace": "default", "uid": uid,
                    "labels": {"app": "cache"}},
                "spec": {"containers": [], "affinity": {"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "topologyKey": kerf::labels::HOSTNAME,
                        "labelSelector": {"matchLabels": {"app": "cache"}}}]}}}
            }))
            .expect("valid pod")
        };
        let mut initialized = node("ip-10-0-0-1", Some("claim-1"), true);
        initialized.pods.push(Arc::new(cache("stray").into()));
        let mut input = SchedulingInput {
            pods: vec![
                Arc::new(cache("planned").into()),
                Arc::new(pod("web").into()),
            ],
            existing_nodes: vec![initialized],
            ..SchedulingInput::default()
        };
        let nominations = HashMap::from([("claim-1".to_owned(), nominated(&["planned", "web"]))]);
        let held = hold(&mut input, &nominations, &HashSet::new());
        assert_eq!(uids(&input.existing_nodes[0].pods), ["stray", "web"]);
        assert_eq!(
            uids(&input.pods),
            ["planned"],
            "a cache pod is bound there already"
        );
        let released = HashMap::from([("claim-1".to_owned(), vec!["planned".to_owned()])]);
        assert_eq!(held.released, released);
    }

    /// A replica of `web`, spread over zones a, b and c (its node affinity) with skew 1.
    fn web(uid: &str) -> Arc<kerf::pods::LeanPod> {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid,
                "labels": {"app": "web"}},
            "spec": {"containers": [],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE,
                        "operator": "In", "values": ["a", "b", "c"]}]}]}}},
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}}]}
        }))
        .expect("valid pod");
        Arc::new(pod.into())
    }

    const ZONE: &str = kerf::labels::ZONE;

    /// `name` in `zone`, of NodeClaim `claim-<name>`, with `bound` pods on it.
    fn zonal(name: &str, zone: &str, initialized: bool, bound: &[&str]) -> ExistingNode {
        let claim = format!("claim-{name}");
        let mut node = node(name, Some(&claim), initialized);
        node.labels.insert(ZONE.to_owned(), zone.to_owned());
        node.pods = bound
            .iter()
            .map(|uid| {
                let pod = web(uid);
                Arc::new(pod.with_node_name(Some(name)))
            })
            .collect();
        node
    }

    #[test]
    fn a_pod_is_released_from_a_node_whose_zone_its_spread_no_longer_allows() {
        // Planned two per zone; the kube-scheduler bound b's second replica in c instead,
        // and b's node has no room left for it: "late", held in c, would skew c by 2 over b.
        // Zone d is no domain of the workload's (its node affinity leaves it out).
        let mut input = SchedulingInput {
            pods: vec![web("late")],
            existing_nodes: vec![
                zonal("na", "a", true, &["a1", "a2"]),
                zonal("nb", "b", true, &["b1"]),
                zonal("nc", "c", true, &["c1", "jumped"]),
                zonal("nd", "d", true, &[]),
            ],
            ..SchedulingInput::default()
        };
        let nominations = HashMap::from([("claim-nc".to_owned(), nominated(&["late"]))]);
        let mut within_window = input.clone();
        let held = hold(&mut within_window, &nominations, &HashSet::new());
        assert!(
            held.released.is_empty(),
            "the kube-scheduler may still be binding"
        );
        let past_window = HashSet::from(["claim-nc".to_owned()]);
        let held = hold(&mut input, &nominations, &past_window);
        assert_eq!(uids(&input.pods), ["late"], "solved afresh");
        assert_eq!(uids(&input.existing_nodes[2].pods), ["c1", "jumped"]);
        let released = HashMap::from([("claim-nc".to_owned(), vec!["late".to_owned()])]);
        assert_eq!(held.released, released);
    }

    #[test]
    fn held_pods_of_a_plan_that_keeps_its_skew_stay_held_until_bound() {
        // Nothing bound yet in b and c, and b's replicas on a NodeClaim still in flight: what
        // every node is to hold keeps within the skew, however far the bindings have got,
        // also past the window.
        let mut input = SchedulingInput {
            pods: ["a2", "b1", "b2", "c1", "c2"].map(web).to_vec(),
            existing_nodes: vec![
                zonal("na", "a", true, &["a1"]),
                zonal("nb", "b", false, &[]),
                zonal("nc", "c", true, &[]),
                zonal("nd", "d", true, &[]),
            ],
            ..SchedulingInput::default()
        };
        let nominations = HashMap::from([
            ("claim-na".to_owned(), nominated(&["a2"])),
            ("claim-nb".to_owned(), nominated(&["b1", "b2"])),
            ("claim-nc".to_owned(), nominated(&["c1", "c2"])),
        ]);
        let past_window = nominations.keys().cloned().collect();
        let held = hold(&mut input, &nominations, &past_window);
        assert!(held.released.is_empty(), "{held:?}");
        assert!(input.pods.is_empty());
        assert_eq!(uids(&input.existing_nodes[2].pods), ["c1", "c2"]);
    }
}
