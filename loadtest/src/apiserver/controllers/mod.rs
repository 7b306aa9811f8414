//! The API server's and controller manager's own controllers that a node autoscaler's
//! tests depend on: garbage collection (ownerReferences, foreground deletion), namespace
//! cleanup, Deployment → ReplicaSet → Pods, and PodDisruptionBudget status. They run as
//! tasks inside the emulator and act through the registry, as in-process clients.

mod deployment;
mod gc;
mod namespace;
mod pdb;
mod replicaset;

pub use replicaset::BURST_REPLICAS;

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::registry::{Registry, Target, WriteOptions};
use super::stopped;
use super::store::ObjKey;
use super::watch::{Change, Cursor};

/// How the controllers write: as `kube-controller-manager`, the field manager their writes
/// carry on a real cluster.
pub(crate) fn as_controller_manager() -> WriteOptions {
    WriteOptions {
        field_manager: Some("kube-controller-manager".to_owned()),
        ..WriteOptions::default()
    }
}

/// Starts every built-in controller; they stop when `shutdown` flips.
pub fn spawn_all(
    registry: &Arc<Registry>,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    let mut spawn = |task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
        let mut stop = shutdown.clone();
        handles.push(tokio::spawn(kerf_heap::owned(
            kerf_heap::Owner::EMULATOR,
            async move {
                tokio::select! {
                    () = task => {}
                    _ = stopped(&mut stop) => {}
                }
            },
        )));
    };
    spawn(Box::pin(gc::run(registry.clone())));
    spawn(Box::pin(namespace::run(registry.clone())));
    spawn(Box::pin(replicaset::run(registry.clone())));
    spawn(Box::pin(deployment::run(registry.clone())));
    spawn(Box::pin(pdb::run(registry.clone())));
    handles
}

/// How long a controller keeps collecting changes after a wake-up before reconciling, so
/// a stream of pod events costs one reconcile per owner in that time rather than one per
/// event. A reconcile reads every pod of its owner, and a 10k-pod scale-up's pod events
/// (nominations, bindings, kubelets' status) come for tens of seconds: at 5 ms the
/// ReplicaSet controller alone took a tenth of `kerf simulate --pods 10000`'s CPU, which the
/// controller under test then lacked. kube-controller-manager's own workqueues take about as
/// long to get to a key under such a load.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(100);

/// A controller following two resources: its own kind, and a kind whose changes map to
/// keys of its own kind. Reconciles each dirty key once per wake-up.
pub(crate) async fn follow(
    registry: Arc<Registry>,
    own: Target,
    related: Target,
    map_related: impl Fn(&Registry, &Change) -> Vec<ObjKey>,
    mut reconcile: impl FnMut(&Arc<Registry>, &ObjKey),
) {
    let (mut own_cursor, initial) = Cursor::start(&registry.store, own.ts.clone());
    let (mut related_cursor, _) = Cursor::start(&registry.store, related.ts.clone());
    let mut dirty: BTreeSet<ObjKey> = initial.iter().map(|o| o.attrs.key()).collect();
    let mut window_ends = (!dirty.is_empty()).then(tokio::time::Instant::now);
    loop {
        let window = async {
            match window_ends {
                Some(end) => tokio::time::sleep_until(end).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = window => {
                window_ends = None;
                for key in std::mem::take(&mut dirty) {
                    reconcile(&registry, &key);
                }
                continue;
            }
            batch = own_cursor.next() => match batch {
                Some(changes) => dirty.extend(changes.iter().map(|c| c.attrs.key())),
                None => return,
            },
            batch = related_cursor.next() => match batch {
                Some(changes) => {
                    for change in &changes {
                        dirty.extend(map_related(&registry, change));
                    }
                }
                None => return,
            },
        }
        if !dirty.is_empty() && window_ends.is_none() {
            window_ends = Some(tokio::time::Instant::now() + COALESCE);
        }
    }
}

/// Keys of the controllers (of `kind`) of a changed object, before and after the change.
pub(crate) fn controller_keys(change: &Change, kind: &str) -> Vec<ObjKey> {
    let mut keys = Vec::new();
    for attrs in std::iter::once(&change.attrs).chain(change.prev.iter()) {
        if let Some(owner) = attrs.controller().filter(|o| o.kind == kind) {
            let key = (attrs.namespace.clone(), owner.name.clone());
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// The target of `t`'s kind in namespace `ns`.
pub(crate) fn in_namespace(t: &Target, ns: &str) -> Target {
    Target {
        namespace: t.rt.namespaced.then(|| ns.to_string()),
        ..t.clone()
    }
}
