//! Upstream's first step of every disruption pass: marks no command holds any more — the
//! `karpenter.sh/disrupted:NoSchedule` taint on a Node, the `DisruptionReason` condition on
//! a NodeClaim — are removed, so a node a crashed controller or a lost leader left tainted
//! takes pods again. A node being deleted (its Node or its NodeClaim) keeps both:
//! termination owns it. Reads come from cluster state; only nodes that carry a mark cost a
//! request.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use kerf::api::NodeClaim;
use kube::Client;
use kube::api::Api;

use crate::orchestrator::{
    InQueue, MarkError, has_disrupted_taint, has_disruption_reason, set_disrupted_taint,
    set_disruption_reason,
};
use crate::state::ClusterState;

/// What one sweep removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub taints: Vec<String>,
    pub reasons: Vec<String>,
}

/// Removes the marks of nodes neither held by a command nor being deleted.
pub async fn remove(
    client: &Client,
    state: &ClusterState,
    in_queue: &InQueue,
) -> Result<Removed, MarkError> {
    let claims = state.nodeclaims.snapshot();
    let claim_of_node: HashMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c.as_ref())))
        .collect();
    let mut removed = Removed::default();
    let nodes_api: Api<Node> = Api::all(client.clone());
    for node in state.nodes.snapshot() {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let deleting = node.metadata.deletion_timestamp.is_some()
            || claim_of_node
                .get(name)
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        if !has_disrupted_taint(&node) || deleting || in_queue.holds_node(name) {
            continue;
        }
        set_disrupted_taint(&nodes_api, name, false).await?;
        removed.taints.push(name.to_owned());
    }
    let claims_api: Api<NodeClaim> = Api::all(client.clone());
    for claim in &claims {
        let name = claim.name();
        if !has_disruption_reason(claim)
            || claim.metadata.deletion_timestamp.is_some()
            || in_queue.holds_node_claim(name)
        {
            continue;
        }
        set_disruption_reason(&claims_api, name, None).await?;
        removed.reasons.push(name.to_owned());
    }
    Ok(removed)
}
