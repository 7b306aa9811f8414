//! Cluster state as the plan's [`Inventory`], so the controller's snapshot is built by the
//! same code as `kerf plan`'s (`kerf::cluster::snapshot`). Only pods the kube-scheduler gave up
//! on count as pending (upstream provisions nothing else), plus the pods of terminating
//! Nodes, which are taken off their Node so the solve places them anew (pre-provisioning
//! their replacement capacity while the drain runs); other bound pods count as used
//! capacity; each DaemonSet contributes the pod it would run on every new node. NodeClaims
//! this controller created that the watch has not delivered yet are added, so a round right
//! after a launch sees them as in-flight capacity instead of planning them again. Pods, Nodes
//! and NodeClaims are the stores' own, shared (`Arc`), not copied: they are most of a
//! snapshot's objects.

use std::sync::Arc;

use kerf::api::NodeClaim;
use kerf::cluster::inventory::Inventory;
use kerf::cluster::workloads::daemon_pod;
use kerf::pods::{LeanPod, is_bound};

use crate::state::{ClusterState, ObjectKey, is_provisionable, is_rescheduled};

/// The inventory of `state` plus `unseen` NodeClaims not yet in its store.
pub fn of(state: &ClusterState, unseen: impl IntoIterator<Item = NodeClaim>) -> Inventory {
    let terminating = state.terminating_nodes();
    // The store's own pods, shared: only a pod taken off its terminating Node is copied (its
    // own parts; the spec stays shared).
    let pods: Vec<Arc<LeanPod>> = state
        .pods
        .snapshot()
        .into_iter()
        .filter(|p| is_bound(p) || is_provisionable(p))
        .map(|p| {
            if is_rescheduled(&p, &terminating) {
                Arc::new(unbound(&p))
            } else {
                p
            }
        })
        .collect();
    let mut warnings = Vec::new();
    let daemon_pods = state
        .daemonsets
        .snapshot()
        .iter()
        .filter_map(|ds| match daemon_pod(ds) {
            Ok(pod) => Some(pod),
            Err(error) => {
                warnings.push(format!(
                    "DaemonSet {}: {}: {}",
                    ds.metadata.name.as_deref().unwrap_or_default(),
                    error.path,
                    error.message
                ));
                None
            }
        })
        .collect();
    let mut node_claims = state.nodeclaims.snapshot();
    node_claims.extend(
        unseen
            .into_iter()
            .filter(|c| {
                state
                    .nodeclaims
                    .get(&ObjectKey::new(None, c.name()))
                    .is_none()
            })
            .map(Arc::new),
    );
    Inventory {
        pods,
        daemon_pods,
        nodes: state.nodes.snapshot(),
        node_claims,
        node_pools: owned(state.nodepools.snapshot()),
        node_classes: owned(state.nodeclasses.snapshot()),
        disruption_budgets: owned(state.pdbs.snapshot()),
        claims: owned(state.persistent_volume_claims.snapshot()),
        volumes: owned(state.persistent_volumes.snapshot()),
        storage_classes: owned(state.storage_classes.snapshot()),
        csi_nodes: owned(state.csi_nodes.snapshot()),
        namespaces: Vec::new(),
        node_overlays: owned(state.node_overlays.snapshot()),
        buffer_pods: state.buffer_pods(),
        ignored: Vec::new(),
        warnings,
    }
}

/// Leaves out of `inventory` the NodePools whose node class is not Ready (as upstream's
/// provisioner ignores NodePools that are not ready; see
/// [`crate::state::NodeClassReadiness::skip_reason`] for `resolving`), and says why for each.
/// Static NodePools (`spec.replicas`) are left out silently, gate on or off, as upstream's
/// provisioner leaves them: their size is their replicas, not the pods' (their nodes stay
/// in the inventory, where pending pods may use them).
pub fn skip_unready_pools(
    inventory: &mut Inventory,
    state: &ClusterState,
    resolving: bool,
) -> Vec<String> {
    let mut skipped = Vec::new();
    inventory.node_pools.retain(|pool| {
        if pool.is_static() {
            return false;
        }
        match state
            .node_class_readiness(pool)
            .skip_reason(pool, resolving)
        {
            Some(reason) => {
                skipped.push(reason);
                false
            }
            None => true,
        }
    });
    skipped
}

/// `pod` as pending: without its node, and (a terminating StatefulSet pod) as the live
/// replacement its controller recreates under the same name.
fn unbound(pod: &LeanPod) -> LeanPod {
    let mut pending = pod.with_node_name(None);
    pending.clear_deletion();
    pending
}

/// The objects themselves: the store keeps its `Arc`s, so each is cloned.
fn owned<K: Clone>(objects: Vec<Arc<K>>) -> Vec<K> {
    objects.into_iter().map(Arc::unwrap_or_clone).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn claim(name: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
        }))
        .expect("a valid NodeClaim")
    }

    #[test]
    fn the_inventory_shares_the_stores_nodes_and_nodeclaims_and_adds_unseen_ones() {
        let (state, mut writers) = ClusterState::new();
        let mut node = Node::default();
        node.metadata.name = Some("n1".to_owned());
        writers.nodes.apply(ObjectKey::new(None, "n1"), node);
        writers
            .nodeclaims
            .apply(ObjectKey::new(None, "c1"), claim("c1"));
        let inventory = of(&state, vec![claim("c1"), claim("c2")]);
        let stored_node = state.node("n1").expect("stored");
        let stored_claim = state.nodeclaim("c1").expect("stored");
        assert!(Arc::ptr_eq(&inventory.nodes[0], &stored_node));
        let names: Vec<&str> = inventory.node_claims.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            ["c1", "c2"],
            "an unseen claim the store has is not added twice"
        );
        assert!(Arc::ptr_eq(&inventory.node_claims[0], &stored_claim));
    }
}
