//! The PodWatcher: one kube watch stream per kind the controller decides on (pods, nodes,
//! NodeClaims, NodePools, EC2NodeClasses, daemonsets, PDBs, volumes and storage classes, and
//! with their gates NodeOverlays and CapacityBuffers),
//! each the single writer of its cluster-state store. Streams run as tokio tasks on the
//! runtime's worker threads, not on an actor's thread. Objects are watched untyped and read
//! into their kind one by one, so a malformed object (a NodePool with a field of the wrong
//! type) is reported — logged and counted — and skipped, instead of breaking the whole
//! stream. Each applied or deleted object is published to the kind's [`Subscribers`]; the
//! watcher knows nothing of who they are (the daemon wires the Batcher's triggers, the
//! NodeClaim lifecycle, the Tagger, the LaunchTemplateCache and the metrics).

mod kind;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kerf::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use kerf::pods::LeanPod;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::{Change, Writers};
use crate::supervisor;
pub use kind::watch_kind;

/// One subscriber to a kind's changes, called on the kind's watch task.
pub type Subscriber<K> = Box<dyn FnMut(&K, Change) + Send>;

/// Who hears about each kind's changes.
#[derive(Default)]
pub struct Subscribers {
    pub pods: Vec<Subscriber<LeanPod>>,
    pub nodes: Vec<Subscriber<Node>>,
    pub nodeclaims: Vec<Subscriber<NodeClaim>>,
    pub nodepools: Vec<Subscriber<NodePool>>,
    pub nodeclasses: Vec<Subscriber<EC2NodeClass>>,
    pub node_overlays: Vec<Subscriber<NodeOverlay>>,
    pub capacity_buffers: Vec<Subscriber<CapacityBuffer>>,
}

/// The alpha kinds watched only with their gate on (their CRDs may not be installed).
#[derive(Debug, Clone, Copy, Default)]
pub struct AlphaKinds {
    pub node_overlays: bool,
    pub capacity_buffers: bool,
}

/// Starts one watch task per kind; they end when `shutdown` turns true. An alpha kind whose
/// gate is off is not watched: its store is marked synced, empty.
pub fn spawn(
    client: &Client,
    writers: Writers,
    subscribers: Subscribers,
    alpha: AlphaKinds,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let Writers {
        pods,
        nodes,
        nodeclaims,
        nodepools,
        nodeclasses,
        daemonsets,
        pdbs,
        persistent_volumes,
        persistent_volume_claims,
        storage_classes,
        csi_nodes,
        mut node_overlays,
        mut capacity_buffers,
    } = writers;
    let Subscribers {
        pods: on_pod,
        nodes: on_node,
        nodeclaims: on_nodeclaim,
        nodepools: on_nodepool,
        nodeclasses: on_nodeclass,
        node_overlays: on_overlay,
        capacity_buffers: on_buffer,
    } = subscribers;
    let mut tasks = Vec::new();
    if alpha.node_overlays {
        tasks.push(spawn_kind(
            client,
            node_overlays,
            publish(on_overlay),
            shutdown,
        ));
    } else {
        node_overlays.begin_relist();
        node_overlays.finish_relist();
    }
    if alpha.capacity_buffers {
        tasks.push(spawn_kind(
            client,
            capacity_buffers,
            publish(on_buffer),
            shutdown,
        ));
    } else {
        capacity_buffers.begin_relist();
        capacity_buffers.finish_relist();
    }
    tasks.extend([
        spawn_kind(client, pods, publish(on_pod), shutdown),
        spawn_kind(client, nodes, publish(on_node), shutdown),
        spawn_kind(client, nodeclaims, publish(on_nodeclaim), shutdown),
        spawn_kind(client, nodepools, publish(on_nodepool), shutdown),
        spawn_kind(client, nodeclasses, publish(on_nodeclass), shutdown),
        spawn_kind::<DaemonSet>(client, daemonsets, ignore, shutdown),
        spawn_kind::<PodDisruptionBudget>(client, pdbs, ignore, shutdown),
        spawn_kind::<PersistentVolume>(client, persistent_volumes, ignore, shutdown),
        spawn_kind::<PersistentVolumeClaim>(client, persistent_volume_claims, ignore, shutdown),
        spawn_kind::<StorageClass>(client, storage_classes, ignore, shutdown),
        spawn_kind::<CSINode>(client, csi_nodes, ignore, shutdown),
    ]);
    tasks
}

/// Calls every subscriber, in order.
fn publish<K>(mut subscribers: Vec<Subscriber<K>>) -> impl FnMut(&K, Change) + Send + 'static
where
    K: 'static,
{
    move |object, change| {
        for subscriber in &mut subscribers {
            subscriber(object, change);
        }
    }
}

fn spawn_kind<K>(
    client: &Client,
    writer: crate::state::StoreWriter<K>,
    on_change: impl FnMut(&K::Form, Change) + Send + 'static,
    shutdown: &watch::Receiver<bool>,
) -> JoinHandle<()>
where
    K: kube::Resource<DynamicType = ()>
        + crate::state::Stored<Form: Send + Sync + 'static, Context: 'static>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let client = client.clone();
    let shutdown = shutdown.clone();
    // The store and the hooks outlive a panicking watch; the next one relists into them.
    let carried = Arc::new(tokio::sync::Mutex::new((writer, on_change)));
    supervisor::task("pod_watcher", move || {
        let (client, carried, mut shutdown) =
            (client.clone(), Arc::clone(&carried), shutdown.clone());
        async move {
            let mut carried = carried.lock().await;
            let (writer, on_change) = &mut *carried;
            tokio::select! {
                () = watch_kind(client, writer, on_change) => {}
                _ = shutdown.wait_for(|s| *s) => {}
            }
        }
    })
}

/// The hook of kinds whose changes trigger nothing yet.
fn ignore<K>(_: &K, _: Change) {}
