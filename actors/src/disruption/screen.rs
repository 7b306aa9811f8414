//! Whether a pass has anything to decide, read off the stores before a snapshot is built.
//! A snapshot is every pod and node of the cluster, copied and prepared for the
//! rescheduling simulations; during a scale-up every managed node is still booting or
//! nominated for the pods being placed, so no method may take any of them, and a pass on
//! each change would copy the cluster for nothing beside the Provisioner's rounds. As
//! upstream, a node is a candidate
//! only once initialized, and neither deleting, held by a command in flight, nor nominated;
//! the screen reports those it finds not initialized or nominated with the reasons the
//! full pass gives, and leaves the rest to it.

use std::collections::{HashMap, HashSet};

use kerf::cluster::disruption::is_initialized;
use kerf::disruption::{ManagedNode, NOMINATED, NOT_INITIALIZED};
use kerf::labels;

use crate::created_claims::Nominated;
use crate::state::ClusterState;

/// The managed nodes a pass would look at, none of which may be a candidate now, with why.
#[derive(Debug, Default, PartialEq)]
pub struct NoCandidate {
    /// Each with its name and NodeClaim (what the pass's events name).
    pub managed: Vec<ManagedNode>,
    /// Why each is none, by node name.
    pub blocked: HashMap<String, String>,
}

/// `None` when some managed node of `state` may be a candidate (the full pass decides);
/// otherwise why none may. `held` are the nodes of commands in flight.
pub fn no_candidate(
    state: &ClusterState,
    nominated: &Nominated,
    held: &HashSet<String>,
) -> Option<NoCandidate> {
    let claims: HashMap<String, _> = state
        .nodeclaims
        .snapshot()
        .into_iter()
        .filter_map(|claim| {
            let node = claim.status.as_ref()?.node_name.clone()?;
            Some((node, claim))
        })
        .collect();
    let mut screened = NoCandidate::default();
    for node in state.nodes.snapshot() {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let labels = node.metadata.labels.as_ref();
        if labels.and_then(|l| l.get(labels::NODEPOOL)).is_none() {
            continue;
        }
        let Some(claim) = claims.get(name) else {
            continue;
        };
        let deleting = node.metadata.deletion_timestamp.is_some()
            || claim.metadata.deletion_timestamp.is_some()
            || held.contains(name);
        if deleting {
            continue;
        }
        let why = if !is_initialized(&node, Some(claim)) {
            NOT_INITIALIZED
        } else if nominated.contains(name, claim.name()) {
            NOMINATED
        } else {
            return None;
        };
        screened.blocked.insert(name.to_owned(), why.to_owned());
        screened.managed.push(ManagedNode {
            name: name.to_owned(),
            node_claim: claim.name().to_owned(),
            ..ManagedNode::default()
        });
    }
    Some(screened)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use kerf::api::NodeClaim;
    use serde_json::json;

    use super::*;
    use crate::created_claims::CreatedClaims;
    use crate::state::{ClusterState, ObjectKey, StoreWriter};

    fn node(name: &str, initialized: bool) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {
            labels::NODEPOOL: "default",
            labels::INITIALIZED: if initialized { "true" } else { "false" },
        }}}))
        .expect("a valid node")
    }

    fn claim(name: &str, node: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"nodeName": node}
        }))
        .expect("a valid NodeClaim")
    }

    fn add(nodes: &mut StoreWriter<Node>, claims: &mut StoreWriter<NodeClaim>, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        claims.apply(
            ObjectKey::new(None, &format!("{name}-claim")),
            claim(&format!("{name}-claim"), &name),
        );
        nodes.apply(ObjectKey::new(None, &name), node);
    }

    fn reasons(screened: &NoCandidate) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = screened
            .blocked
            .iter()
            .map(|(node, why)| (node.as_str(), why.as_str()))
            .collect();
        out.sort_unstable();
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_goes_on_only_when_some_managed_node_may_be_a_candidate() {
        let (state, mut w) = ClusterState::new();
        let created = CreatedClaims::default();
        add(&mut w.nodes, &mut w.nodeclaims, node("booting", false));
        add(&mut w.nodes, &mut w.nodeclaims, node("planned", true));
        add(&mut w.nodes, &mut w.nodeclaims, node("leaving", true));
        let mut deleting = node("deleting", true);
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(json!("2024-01-01T00:00:00Z")).expect("a time");
        add(&mut w.nodes, &mut w.nodeclaims, deleting);
        let mut unmanaged = node("unmanaged", true);
        unmanaged.metadata.labels = None;
        w.nodes.apply(ObjectKey::new(None, "unmanaged"), unmanaged);
        created.target(["planned"]);
        let held: HashSet<String> = ["leaving".to_owned()].into();

        let screened = no_candidate(
            &state,
            &created.nominated_now(&state, crate::created_claims::NOMINATION_WINDOW),
            &held,
        )
        .expect("no node may be a candidate");
        assert_eq!(
            reasons(&screened),
            [("booting", NOT_INITIALIZED), ("planned", NOMINATED)],
            "deleting and held nodes are the pass's to count, with no event"
        );
        let claims: Vec<&str> = screened
            .managed
            .iter()
            .map(|m| m.node_claim.as_str())
            .collect();
        assert!(claims.contains(&"planned-claim"), "{claims:?}");

        let released = HashSet::new();
        assert_eq!(
            no_candidate(
                &state,
                &created.nominated_now(&state, crate::created_claims::NOMINATION_WINDOW),
                &released
            ),
            None,
            "a node no command holds any more may be a candidate"
        );
        tokio::time::advance(crate::created_claims::NOMINATION_WINDOW).await;
        assert_eq!(
            no_candidate(
                &state,
                &created.nominated_now(&state, crate::created_claims::NOMINATION_WINDOW),
                &held
            ),
            None,
            "nor does a nomination last past its window"
        );
    }
}
