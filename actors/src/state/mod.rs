//! Cluster state: the controller's in-memory copy of every object kind it decides on, filled
//! by the PodWatcher's watch streams and read by every other actor. Each kind is a
//! [`Store`] (a `DashMap` behind `Arc`) with exactly one writer: [`ClusterState::new`] hands
//! out one [`StoreWriter`] per kind, which cannot be cloned, so two tasks can never race on a
//! kind. No decision is taken before every store has completed its initial list
//! ([`ClusterState::synced`]). NodeClaims and Nodes are also indexed by the EC2 instance id
//! of their providerID ([`instance_id`]), which is how interruption messages find them.
//! Objects are stored trimmed to the fields decisions read ([`Lean`]), once, at insert.

mod lean;
mod node_class;
mod pods;
mod scheduling_times;
mod store;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kerf::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use kerf::pods::{LeanPod, PodLike};
use kerf::scheduling::PodRef;
use tokio::sync::watch;

pub use lean::{Lean, Stored};
pub use node_class::NodeClassReadiness;
pub use pods::{is_provisionable, is_rescheduled, is_terminating_node};
pub use scheduling_times::{PodSchedulingTimes, Times as PodTimes};

/// The EC2 instance id of an `aws:///<zone>/<instance-id>` providerID.
pub fn instance_id(provider_id: &str) -> Option<String> {
    kerf::cloudprovider::parse_aws_provider_id(provider_id)
        .ok()
        .map(|p| p.instance_id.to_owned())
}
pub use store::{ObjectKey, Store, StoreWriter};

/// The Nodes among `nodes` claiming `provider_id` (normally none or one).
pub fn nodes_for(provider_id: &str, nodes: &[Arc<Node>]) -> Vec<Arc<Node>> {
    nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
        .cloned()
        .collect()
}

/// What happened to an object in cluster state: the vocabulary of the watch streams'
/// subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Applied,
    Deleted,
}

/// Every kind the controller watches.
#[derive(Debug)]
pub struct ClusterState {
    pub pods: Store<LeanPod>,
    pub nodes: Store<Node>,
    pub nodeclaims: Store<NodeClaim>,
    pub nodepools: Store<NodePool>,
    pub nodeclasses: Store<EC2NodeClass>,
    pub daemonsets: Store<DaemonSet>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub persistent_volumes: Store<PersistentVolume>,
    pub persistent_volume_claims: Store<PersistentVolumeClaim>,
    pub storage_classes: Store<StorageClass>,
    /// Each Node's CSI drivers and their volume attach limits.
    pub csi_nodes: Store<CSINode>,
    /// NodeOverlays and CapacityBuffers: watched with their gates on, else empty and synced.
    pub node_overlays: Store<NodeOverlay>,
    pub capacity_buffers: Store<CapacityBuffer>,
    /// The CapacityBuffers' virtual pods, written by the buffer controller alone
    /// (`crate::capacity_buffer`) and read by every snapshot.
    buffer_pods: std::sync::RwLock<Arc<[Arc<LeanPod>]>>,
    /// Where the latest provisioning round placed each buffer's virtual pods, written by the
    /// Provisioner and read by the buffer controller (its `Provisioning` condition).
    buffer_placements: std::sync::RwLock<BTreeMap<String, kerf::buffer::Placed>>,
    /// When the provisioner took up, decided on and placed each pending pod.
    pub scheduling: PodSchedulingTimes,
    synced: watch::Sender<bool>,
    /// When this state was made: how long it has been unsynced, until it syncs.
    created: std::time::Instant,
}

/// The single writer of each store.
#[derive(Debug)]
pub struct Writers {
    pub pods: StoreWriter<Pod>,
    pub nodes: StoreWriter<Node>,
    pub nodeclaims: StoreWriter<NodeClaim>,
    pub nodepools: StoreWriter<NodePool>,
    pub nodeclasses: StoreWriter<EC2NodeClass>,
    pub daemonsets: StoreWriter<DaemonSet>,
    pub pdbs: StoreWriter<PodDisruptionBudget>,
    pub persistent_volumes: StoreWriter<PersistentVolume>,
    pub persistent_volume_claims: StoreWriter<PersistentVolumeClaim>,
    pub storage_classes: StoreWriter<StorageClass>,
    pub csi_nodes: StoreWriter<CSINode>,
    pub node_overlays: StoreWriter<NodeOverlay>,
    pub capacity_buffers: StoreWriter<CapacityBuffer>,
}

#[cfg(test)]
impl Writers {
    /// Completes every store's initial list: an empty, synced state for tests.
    pub fn mark_all_synced(&mut self) {
        self.pods.finish_relist();
        self.nodes.finish_relist();
        self.nodeclaims.finish_relist();
        self.nodepools.finish_relist();
        self.nodeclasses.finish_relist();
        self.daemonsets.finish_relist();
        self.pdbs.finish_relist();
        self.persistent_volumes.finish_relist();
        self.persistent_volume_claims.finish_relist();
        self.storage_classes.finish_relist();
        self.csi_nodes.finish_relist();
        self.node_overlays.finish_relist();
        self.capacity_buffers.finish_relist();
    }
}

impl ClusterState {
    /// Empty, unsynced state and the writers that fill it.
    pub fn new() -> (Arc<Self>, Writers) {
        let (synced, _) = watch::channel(false);
        let state = Arc::new(Self {
            pods: Store::new("Pod"),
            nodes: Store::indexed("Node", |n| {
                instance_id(n.spec.as_ref()?.provider_id.as_deref()?)
            }),
            nodeclaims: Store::indexed("NodeClaim", |c| instance_id(c.provider_id()?)),
            nodepools: Store::new("NodePool"),
            nodeclasses: Store::new("EC2NodeClass"),
            daemonsets: Store::new("DaemonSet"),
            pdbs: Store::new("PodDisruptionBudget"),
            persistent_volumes: Store::new("PersistentVolume"),
            persistent_volume_claims: Store::new("PersistentVolumeClaim"),
            storage_classes: Store::new("StorageClass"),
            csi_nodes: Store::new("CSINode"),
            node_overlays: Store::new("NodeOverlay"),
            capacity_buffers: Store::new("CapacityBuffer"),
            buffer_pods: std::sync::RwLock::new(Arc::from(Vec::new())),
            buffer_placements: std::sync::RwLock::default(),
            scheduling: PodSchedulingTimes::default(),
            synced,
            created: std::time::Instant::now(),
        });
        let writers = Writers {
            pods: StoreWriter::new(&state, |s| &s.pods),
            nodes: StoreWriter::new(&state, |s| &s.nodes),
            nodeclaims: StoreWriter::new(&state, |s| &s.nodeclaims),
            nodepools: StoreWriter::new(&state, |s| &s.nodepools),
            nodeclasses: StoreWriter::new(&state, |s| &s.nodeclasses),
            daemonsets: StoreWriter::new(&state, |s| &s.daemonsets),
            pdbs: StoreWriter::new(&state, |s| &s.pdbs),
            persistent_volumes: StoreWriter::new(&state, |s| &s.persistent_volumes),
            persistent_volume_claims: StoreWriter::new(&state, |s| &s.persistent_volume_claims),
            storage_classes: StoreWriter::new(&state, |s| &s.storage_classes),
            csi_nodes: StoreWriter::new(&state, |s| &s.csi_nodes),
            node_overlays: StoreWriter::new(&state, |s| &s.node_overlays),
            capacity_buffers: StoreWriter::new(&state, |s| &s.capacity_buffers),
        };
        (state, writers)
    }

    fn all_synced(&self) -> bool {
        [
            self.pods.is_synced(),
            self.nodes.is_synced(),
            self.nodeclaims.is_synced(),
            self.nodepools.is_synced(),
            self.nodeclasses.is_synced(),
            self.daemonsets.is_synced(),
            self.pdbs.is_synced(),
            self.persistent_volumes.is_synced(),
            self.persistent_volume_claims.is_synced(),
            self.storage_classes.is_synced(),
            self.csi_nodes.is_synced(),
            self.node_overlays.is_synced(),
            self.capacity_buffers.is_synced(),
        ]
        .into_iter()
        .all(|s| s)
    }

    /// Re-evaluates the all-synced flag; called by a writer after its initial list.
    fn store_synced(&self) {
        if self.all_synced() && !*self.synced.borrow() {
            self.synced.send_replace(true);
            metrics::gauge!(crate::metrics::CLUSTER_STATE_SYNCED).set(1.0);
            tracing::info!("cluster state synced");
        }
    }

    /// Whether every store has completed its initial list.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// How long this state has waited for its initial lists (zero once synced).
    pub fn unsynced_for(&self) -> std::time::Duration {
        if self.synced() {
            std::time::Duration::ZERO
        } else {
            self.created.elapsed()
        }
    }

    /// Completes once every store has completed its initial list.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives in `self`, so the channel cannot close while we borrow it.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The CapacityBuffers' virtual pods, as the buffer controller last computed them.
    pub fn buffer_pods(&self) -> Vec<Arc<LeanPod>> {
        // Every write replaces the whole list: a poisoned lock still holds a whole one.
        let pods = self
            .buffer_pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pods.to_vec()
    }

    /// Replaces the virtual pods; only the buffer controller calls it.
    pub fn set_buffer_pods(&self, pods: Vec<Arc<LeanPod>>) {
        let mut current = self
            .buffer_pods
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = pods.into();
    }

    /// Records where a round placed the buffers' virtual pods (a round that placed none of
    /// a buffer's leaves what an earlier one said of it).
    pub fn record_buffer_placements(&self, placed: BTreeMap<String, kerf::buffer::Placed>) {
        if placed.is_empty() {
            return;
        }
        let mut current = self
            .buffer_placements
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        current.extend(placed);
    }

    /// Where the latest round that placed buffer `key`'s pods (`namespace/name`) put them.
    pub fn buffer_placement(&self, key: &str) -> Option<kerf::buffer::Placed> {
        self.buffer_placements
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .copied()
    }

    /// The NodeClaim launched as EC2 instance `instance_id`, if cluster state holds one.
    pub fn nodeclaim_by_instance_id(&self, instance_id: &str) -> Option<Arc<NodeClaim>> {
        self.nodeclaims.get_indexed(instance_id)
    }

    /// The Node of EC2 instance `instance_id`, if it registered.
    pub fn node_by_instance_id(&self, instance_id: &str) -> Option<Arc<Node>> {
        self.nodes.get_indexed(instance_id)
    }

    /// Pods the Provisioner must find capacity for: the pending ones and those of
    /// terminating Nodes ([`pods`]).
    pub fn provisionable_pods(&self) -> Vec<Arc<LeanPod>> {
        let terminating = self.terminating_nodes();
        self.pods
            .snapshot()
            .into_iter()
            .filter(|p| is_provisionable(p) || is_rescheduled(p, &terminating))
            .collect()
    }

    /// The stored pod `pod` names, while it is still that pod (a pod deleted and created
    /// again under the same name has another uid).
    pub fn pod(&self, pod: &PodRef) -> Option<Arc<LeanPod>> {
        let stored = self
            .pods
            .get(&ObjectKey::new(Some(&pod.namespace), &pod.name))?;
        (stored.meta().uid == Some(pod.uid.as_str())).then_some(stored)
    }

    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectKey::new(None, name))
    }

    pub fn nodeclaim(&self, name: &str) -> Option<Arc<NodeClaim>> {
        self.nodeclaims.get(&ObjectKey::new(None, name))
    }

    /// The NodeClaims launched with `provider_id` (normally none or one).
    pub fn nodeclaims_launched_as(&self, provider_id: &str) -> Vec<Arc<NodeClaim>> {
        self.nodeclaims
            .snapshot()
            .into_iter()
            .filter(|c| c.provider_id() == Some(provider_id))
            .collect()
    }

    /// The Nodes registered with `claim`'s providerID (normally none or one).
    pub fn nodes_of(&self, claim: &NodeClaim) -> Vec<Arc<Node>> {
        claim
            .provider_id()
            .map(|id| nodes_for(id, &self.nodes.snapshot()))
            .unwrap_or_default()
    }

    /// Names of the Nodes that are going away (deleting or tainted for disruption).
    pub fn terminating_nodes(&self) -> std::collections::HashSet<String> {
        self.nodes
            .snapshot()
            .iter()
            .filter(|n| is_terminating_node(n))
            .filter_map(|n| n.metadata.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_are_matched_by_provider_id() {
        let node = |spec: serde_json::Value| -> Arc<Node> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": spec}))
                    .expect("valid node"),
            )
        };
        let nodes = vec![
            node(json!({"providerID": "aws:///us-east-1a/i-1"})),
            node(json!({"providerID": "aws:///us-east-1a/i-2"})),
            node(json!({})),
        ];
        assert_eq!(nodes_for("aws:///us-east-1a/i-1", &nodes).len(), 1);
        assert_eq!(nodes_for("aws:///us-east-1a/i-3", &nodes).len(), 0);
    }
}
