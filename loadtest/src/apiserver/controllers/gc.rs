//! Garbage collection by ownerReferences. When an owner is removed, each dependent loses
//! the reference; a dependent left with no live owner is deleted (background cascade).
//! An owner deleted in the foreground keeps its `foregroundDeletion` finalizer until all
//! its dependents are gone.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::apiserver::meta::finalizers;
use crate::apiserver::registry::{DeleteOptions, FOREGROUND_FINALIZER, Registry, Sub};

/// Runs the collector until the queue closes.
pub async fn run(registry: Arc<Registry>) {
    loop {
        for uid in registry.queues.gc.pop_all().await {
            collect(&registry, &uid);
        }
    }
}

fn collect(registry: &Arc<Registry>, uid: &str) {
    match registry.locate(uid) {
        None => release_dependents(registry, uid),
        Some((gr, (ns, name))) => finish_foreground(registry, uid, &gr, &ns, &name),
    }
}

/// The owner `uid` is gone: drop references to it and delete orphans.
fn release_dependents(registry: &Arc<Registry>, uid: &str) {
    for (gr, (ns, name)) in registry.store.dependents(uid) {
        let Some(target) = registry.target_of(&gr, &ns) else {
            continue;
        };
        let Ok(dependent) = registry.get(&target, &name) else {
            continue;
        };
        let live_owners = dependent
            .attrs
            .owners
            .iter()
            .filter(|o| o.uid != uid && registry.locate(&o.uid).is_some())
            .count();
        let result = if live_owners == 0 {
            if dependent.attrs.deleting {
                continue;
            }
            let opts = DeleteOptions {
                precondition_uid: Some(dependent.attrs.uid.clone()),
                ..DeleteOptions::default()
            };
            registry.delete(&target, &name, &opts).map(drop)
        } else {
            registry
                .update_with(
                    &target,
                    &name,
                    Sub::Main,
                    &super::as_controller_manager(),
                    |current| {
                        let mut next = current.clone();
                        if let Some(refs) = next
                            .pointer_mut("/metadata/ownerReferences")
                            .and_then(Value::as_array_mut)
                        {
                            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
                        }
                        Ok(next)
                    },
                )
                .map(drop)
        };
        if let Err(err) = result {
            tracing::debug!(%err, name, "garbage collection of dependent failed");
        }
    }
}

/// The owner is alive; if it waits for its dependents in the foreground, delete them,
/// and release the owner once none is left.
fn finish_foreground(
    registry: &Arc<Registry>,
    uid: &str,
    gr: &crate::apiserver::resources::GroupResource,
    ns: &str,
    name: &str,
) {
    let Some(target) = registry.target_of(gr, ns) else {
        return;
    };
    let Some(owner) = registry.find(&target, name) else {
        return;
    };
    if !owner.attrs.deleting
        || !finalizers(&owner.value())
            .iter()
            .any(|f| f == FOREGROUND_FINALIZER)
    {
        return;
    }
    let dependents = registry.store.dependents(uid);
    if dependents.is_empty() {
        let result = registry.update_with(
            &target,
            name,
            Sub::Main,
            &super::as_controller_manager(),
            |current| {
                let mut next = current.clone();
                let remaining: Vec<String> = finalizers(current)
                    .into_iter()
                    .filter(|f| f != FOREGROUND_FINALIZER)
                    .collect();
                next["metadata"]["finalizers"] = json!(remaining);
                Ok(next)
            },
        );
        if let Err(err) = result {
            tracing::debug!(%err, name, "releasing foreground owner failed");
        }
        return;
    }
    for (dgr, (dns, dname)) in dependents {
        let Some(dtarget) = registry.target_of(&dgr, &dns) else {
            continue;
        };
        if registry
            .get(&dtarget, &dname)
            .is_ok_and(|d| !d.attrs.deleting)
            && let Err(err) = registry.delete(&dtarget, &dname, &DeleteOptions::default())
        {
            tracing::debug!(%err, dname, "foreground deletion of dependent failed");
        }
    }
}
