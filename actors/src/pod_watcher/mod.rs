//! The PodWatcher: one kube watch stream per kind the controller decides on (pods, nodes,
//! NodeClaims, NodePools, EC2NodeClasses, daemonsets, PDBs, volumes and storage classes),
//! each the single writer of its cluster-state store. Streams run as tokio tasks on the
//! runtime's worker threads, not on the actor thread. Objects are watched untyped and read
//! into their kind one by one, so a malformed object (a NodePool with a field of the wrong
//! type) is reported — logged and counted — and skipped, instead of breaking the whole
//! stream. Once every store has synced, provisionable pods trigger the Batcher: all of them
//! at sync, then each as it changes, all of them again on every resync period, and all of
//! them when this replica becomes leader (a standby skips its batches, so a new leader
//! starts from every pending pod, as upstream's controllers do when they start leading).
//! Node and NodeClaim changes are passed to the NodeClaim lifecycle, when one runs.

mod kind;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kerf::api::{EC2NodeClass, NodeClaim, NodePool};
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batcher::Trigger;
use crate::cluster_metrics::StartupTracker;
use crate::launch_template_cache::{self, ReconcileNodeClass};
use crate::lifecycle::Changed;
use crate::mailbox::{DeliverError, Outbox};
use crate::state::{ClusterState, Writers, is_provisionable};
use crate::tagging::{self, TagInstance};
pub use kind::{Change, watch_kind};

/// How often every provisionable pod is triggered again. Triggers are sent with
/// `try_deliver`, so one dropped on a full Batcher mailbox is repaired here; it also retries
/// pods whose last solve failed (for example on insufficient capacity).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(60);

/// Where changes of the kinds other actors reconcile go (none without a cloud provider, or
/// when it lacks the capability).
#[derive(Default)]
pub struct CloudHooks {
    /// EC2NodeClass changes, to the LaunchTemplateCache.
    pub node_classes: Option<Outbox<ReconcileNodeClass>>,
    /// NodeClaim changes, to the Tagger.
    pub node_claims: Option<Outbox<TagInstance>>,
    /// NodeClaim and Node changes, to the NodeClaim lifecycle.
    pub lifecycle: Option<Outbox<Changed>>,
}

/// Starts one watch task per kind plus the resync task; they end when `shutdown` turns true.
/// `leader` is this replica's leadership.
pub fn spawn(
    client: &Client,
    state: &Arc<ClusterState>,
    writers: Writers,
    batcher: Outbox<Trigger>,
    hooks: CloudHooks,
    leader: &watch::Receiver<bool>,
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
    } = writers;
    let pod_state = state.clone();
    let pod_batcher = batcher.clone();
    let mut startup = StartupTracker::default();
    let on_pod = move |pod: &Pod, change: Change| {
        startup.observe(pod, change);
        if change == Change::Applied && pod_state.synced() && is_provisionable(pod) {
            trigger(&pod_batcher, pod);
        }
    };
    let mut node_class_hook = hooks
        .node_classes
        .map(|out| launch_template_cache::on_change(state.clone(), out));
    let on_node_class = move |node_class: &EC2NodeClass, change: Change| {
        if let Some(hook) = &mut node_class_hook {
            hook(node_class, change);
        }
    };
    let lifecycle = hooks.lifecycle;
    let node_lifecycle = lifecycle.clone();
    let on_node = move |node: &Node, _: Change| {
        notify(node_lifecycle.as_ref(), || Changed::Node {
            name: node.metadata.name.clone().unwrap_or_default(),
            provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        });
    };
    let mut tagging_hook = hooks
        .node_claims
        .map(|out| tagging::on_change(state.clone(), out));
    let on_nodeclaim = move |claim: &NodeClaim, change: Change| {
        notify(lifecycle.as_ref(), || {
            Changed::NodeClaim(claim.metadata.name.clone().unwrap_or_default())
        });
        if let Some(hook) = &mut tagging_hook {
            hook(claim, change);
        }
    };
    vec![
        spawn_kind(client, pods, on_pod, shutdown),
        spawn_kind::<Node>(client, nodes, on_node, shutdown),
        spawn_kind::<NodeClaim>(client, nodeclaims, on_nodeclaim, shutdown),
        spawn_kind::<NodePool>(client, nodepools, ignore, shutdown),
        spawn_kind::<EC2NodeClass>(client, nodeclasses, on_node_class, shutdown),
        spawn_kind::<DaemonSet>(client, daemonsets, ignore, shutdown),
        spawn_kind::<PodDisruptionBudget>(client, pdbs, ignore, shutdown),
        spawn_kind::<PersistentVolume>(client, persistent_volumes, ignore, shutdown),
        spawn_kind::<PersistentVolumeClaim>(client, persistent_volume_claims, ignore, shutdown),
        spawn_kind::<StorageClass>(client, storage_classes, ignore, shutdown),
        tokio::spawn(resync(
            state.clone(),
            batcher,
            leader.clone(),
            shutdown.clone(),
        )),
    ]
}

fn spawn_kind<K>(
    client: &Client,
    writer: crate::state::StoreWriter<K>,
    on_change: impl FnMut(&K, Change) + Send + 'static,
    shutdown: &watch::Receiver<bool>,
) -> JoinHandle<()>
where
    K: kube::Resource<DynamicType = ()>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let client = client.clone();
    let mut shutdown = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = watch_kind(client, writer, on_change) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    })
}

/// The hook of kinds whose changes trigger nothing yet.
fn ignore<K>(_: &K, _: Change) {}

fn trigger(batcher: &Outbox<Trigger>, pod: &Pod) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    match batcher.try_deliver(Trigger { pod_uid: uid }) {
        Ok(()) => {}
        // Counted by the outbox; the resync will trigger the pod again.
        Err(DeliverError::Full(_)) => {}
        Err(err @ DeliverError::Closed(_)) => tracing::warn!(error = %err, "triggering batcher"),
    }
}

/// Tells the lifecycle about a change; a full mailbox drops it (counted), and the
/// lifecycle's periodic resync repairs the drop.
fn notify(lifecycle: Option<&Outbox<Changed>>, change: impl FnOnce() -> Changed) {
    let Some(lifecycle) = lifecycle else {
        return;
    };
    match lifecycle.try_deliver(change()) {
        Ok(()) | Err(DeliverError::Full(_)) => {}
        Err(err @ DeliverError::Closed(_)) => tracing::debug!(error = %err, "notifying lifecycle"),
    }
}

/// Triggers every provisionable pod once cluster state has synced, then every
/// [`RESYNC_PERIOD`] and whenever this replica becomes leader.
async fn resync(
    state: Arc<ClusterState>,
    batcher: Outbox<Trigger>,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        () = state.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    let mut leading = *leader.borrow_and_update();
    loop {
        for pod in state.provisionable_pods() {
            trigger(&batcher, &pod);
        }
        tokio::select! {
            () = tokio::time::sleep(RESYNC_PERIOD) => {}
            () = became_leader(&mut leader, &mut leading) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Completes when leadership turns from false to true; never, once it can no longer change.
/// `leading` is the last value seen, kept by the caller so that no turn is missed between
/// two calls.
async fn became_leader(leader: &mut watch::Receiver<bool>, leading: &mut bool) {
    loop {
        if leader.changed().await.is_err() {
            return std::future::pending().await;
        }
        let was = std::mem::replace(leading, *leader.borrow_and_update());
        if *leading && !was {
            return;
        }
    }
}
