//! Namespace cleanup: a namespace being deleted has its content deleted, and is removed
//! once nothing is left in it (what the namespace controller and the `kubernetes`
//! spec finalizer do on a real cluster).

use std::sync::Arc;

use crate::apiserver::registry::{DeleteOptions, Registry, all_objects};

/// Runs until the queue closes.
pub async fn run(registry: Arc<Registry>) {
    loop {
        for ns in registry.queues.namespaces.pop_all().await {
            reconcile(&registry, &ns);
        }
    }
}

fn reconcile(registry: &Arc<Registry>, ns: &str) {
    let Ok(namespaces) = registry.target("", "v1", "namespaces", None) else {
        return;
    };
    if !registry
        .get(&namespaces, ns)
        .is_ok_and(|n| n.attrs.deleting)
    {
        return;
    }
    let mut remaining = 0usize;
    for ts in registry.store.all() {
        let rt = ts.resource_type();
        if !rt.namespaced {
            continue;
        }
        let Some(target) = registry.target_of(&rt.group_resource(), ns) else {
            continue;
        };
        for object in all_objects(&target) {
            remaining += 1;
            if !object.attrs.deleting
                && let Err(err) =
                    registry.delete(&target, &object.attrs.name, &DeleteOptions::default())
            {
                tracing::debug!(%err, ns, "namespace cleanup delete failed");
            }
        }
    }
    if remaining == 0
        && let Err(err) = registry.finalize_namespace(ns)
    {
        tracing::warn!(%err, ns, "finalizing namespace failed");
    }
}
