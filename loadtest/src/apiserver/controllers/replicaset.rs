//! ReplicaSet controller: keeps `spec.replicas` active pods, created from the pod template
//! with its labels and a controller ownerReference, deleting surplus pods
//! unscheduled-first, then pending, then not-ready, then newest; reports replica counts.
//! Like kube-controller-manager's, it creates or deletes at most [`BURST_REPLICAS`] pods a
//! reconcile; the watch events of those bring it back for the rest, so the pods of
//! Deployments scaled together arrive interleaved, not one Deployment's whole scale-out
//! after another's.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{controller_keys, follow, in_namespace};
use crate::apiserver::registry::{DeleteOptions, Registry, Sub, Target};
use crate::apiserver::store::{EventType, ObjKey, StoredObject};
use crate::apiserver::watch::Change;

/// Pods one reconcile creates or deletes: kube-controller-manager's `burstReplicas`. A
/// scale-out's pods then reach the autoscaler as a real cluster sends them, every
/// ReplicaSet's in turn, which decides how its batches mix the Deployments' pods.
pub const BURST_REPLICAS: usize = 500;

/// Runs the controller.
pub async fn run(registry: Arc<Registry>) {
    let (Ok(replicasets), Ok(pods)) = (
        registry.target("apps", "v1", "replicasets", None),
        registry.target("", "v1", "pods", None),
    ) else {
        return;
    };
    let pods_for_reconcile = pods.clone();
    follow(
        registry,
        replicasets.clone(),
        pods,
        |_, change| {
            if moves_replica_counts(change) {
                controller_keys(change, "ReplicaSet")
            } else {
                Vec::new()
            }
        },
        move |registry, key| reconcile(registry, &replicasets, &pods_for_reconcile, key),
    )
    .await;
}

/// Whether a pod change can change what a reconcile of its ReplicaSet does or reports: a
/// pod created, deleted or handed to another owner, or one whose readiness, phase or
/// deletion changed. A reconcile reads every pod of its ReplicaSet, and most of a
/// scale-out's pod writes (bindings, the scheduler's conditions, nominations) change none
/// of these, so they need no reconcile.
fn moves_replica_counts(change: &Change) -> bool {
    let Some(prev) = change
        .prev
        .as_deref()
        .filter(|_| change.kind == EventType::Modified)
    else {
        return true;
    };
    let now = &*change.attrs;
    prev.ready != now.ready
        || prev.phase != now.phase
        || prev.deleting != now.deleting
        || prev.owners != now.owners
}

/// Pods controlled by the object with `owner_uid`.
pub(crate) fn owned_pods(
    registry: &Registry,
    pods: &Target,
    ns: &str,
    owner_uid: &str,
) -> Vec<Arc<StoredObject>> {
    let pods = in_namespace(pods, ns);
    registry
        .store
        .dependents(owner_uid)
        .into_iter()
        .filter(|(gr, _)| gr.group.is_empty() && gr.resource == "pods")
        .filter_map(|(_, (_, name))| registry.find(&pods, &name))
        .filter(|p| p.attrs.controller().is_some_and(|o| o.uid == owner_uid))
        .collect()
}

fn is_active(pod: &StoredObject) -> bool {
    !pod.attrs.deleting && !matches!(pod.attrs.phase.as_str(), "Succeeded" | "Failed")
}

fn reconcile(registry: &Arc<Registry>, replicasets: &Target, pods: &Target, (ns, name): &ObjKey) {
    let replicasets = in_namespace(replicasets, ns);
    let Some(rs) = registry.find(&replicasets, name) else {
        return;
    };
    if rs.attrs.deleting {
        return;
    }
    let desired = usize::try_from(
        rs.value()
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0),
    )
    .unwrap_or(0);
    let mut active: Vec<Arc<StoredObject>> = owned_pods(registry, pods, ns, &rs.attrs.uid)
        .into_iter()
        .filter(|p| is_active(p))
        .collect();
    let pods_ns = in_namespace(pods, ns);
    let changed = active.len() != desired;
    if active.len() < desired {
        for _ in active.len()..desired.min(active.len() + BURST_REPLICAS) {
            if let Err(err) = registry.create(
                &pods_ns,
                pod_from_template(&rs.value()),
                &super::as_controller_manager(),
            ) {
                tracing::debug!(%err, name, "replicaset pod creation failed");
                break;
            }
        }
    } else if active.len() > desired {
        active.sort_by_key(|p| deletion_rank(p));
        let surplus = (active.len() - desired).min(BURST_REPLICAS);
        for victim in &active[..surplus] {
            if let Err(err) =
                registry.delete(&pods_ns, &victim.attrs.name, &DeleteOptions::default())
            {
                tracing::debug!(%err, name, "replicaset pod deletion failed");
            }
        }
    }
    // Read again only after creating or deleting: a reconcile reads every pod of its owner.
    let observed: Vec<Arc<StoredObject>> = if changed {
        owned_pods(registry, pods, ns, &rs.attrs.uid)
            .into_iter()
            .filter(|p| is_active(p))
            .collect()
    } else {
        active
    };
    let ready = observed.iter().filter(|p| p.attrs.ready).count();
    let status = json!({
        "replicas": observed.len(),
        "fullyLabeledReplicas": observed.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": rs.value().pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
    });
    let result = registry.update_with(
        &replicasets,
        name,
        Sub::Status,
        &super::as_controller_manager(),
        |current| {
            let mut next = current.clone();
            next["status"] = status;
            Ok(next)
        },
    );
    if let Err(err) = result {
        tracing::debug!(%err, name, "replicaset status update failed");
    }
}

/// Lower ranks are deleted first.
fn deletion_rank(pod: &StoredObject) -> (bool, u8, bool, std::cmp::Reverse<String>) {
    let phase_rank = match pod.attrs.phase.as_str() {
        "Pending" | "" => 0,
        "Unknown" => 1,
        _ => 2,
    };
    let created = pod
        .value()
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    (
        !pod.attrs.node_name.is_empty(),
        phase_rank,
        pod.attrs.ready,
        std::cmp::Reverse(created),
    )
}

fn pod_from_template(rs: &Value) -> Value {
    let template = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let name = rs
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut metadata = template.get("metadata").cloned().unwrap_or(json!({}));
    metadata["generateName"] = json!(format!("{name}-"));
    metadata["ownerReferences"] = json!([{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
        "uid": rs.pointer("/metadata/uid"), "controller": true, "blockOwnerDeletion": true,
    }]);
    if let Some(m) = metadata.as_object_mut() {
        m.remove("name");
        m.remove("namespace");
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec").cloned().unwrap_or(json!({}))})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::store::Attrs;

    fn pod(node: &str, ready: bool, deleting: bool) -> Arc<Attrs> {
        let mut value = json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "rs-uid", "controller": true}]},
            "spec": {"nodeName": node},
            "status": {"phase": "Pending", "conditions": [
                {"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(Attrs::of(&value))
    }

    fn change(kind: EventType, prev: Option<Arc<Attrs>>, attrs: Arc<Attrs>) -> Change {
        Change { attrs, prev, kind }
    }

    #[test]
    fn only_changes_to_a_pods_existence_readiness_or_deletion_wake_its_replicaset() {
        let pending = pod("", false, false);
        let bound = pod("n1", false, false);
        let ready = pod("n1", true, false);
        let deleting = pod("n1", true, true);
        let modified = |prev: &Arc<Attrs>, now: &Arc<Attrs>| {
            moves_replica_counts(&change(
                EventType::Modified,
                Some(Arc::clone(prev)),
                Arc::clone(now),
            ))
        };
        assert!(!modified(&pending, &bound), "a binding");
        assert!(!modified(&bound, &bound), "a status condition");
        assert!(modified(&bound, &ready), "readiness");
        assert!(modified(&ready, &deleting), "deletion begun");
        assert!(moves_replica_counts(&change(
            EventType::Added,
            None,
            Arc::clone(&pending)
        )));
        assert!(
            moves_replica_counts(&change(
                EventType::Deleted,
                Some(Arc::clone(&bound)),
                Arc::clone(&bound)
            )),
            "a deletion carries the last attributes as both"
        );
    }
}
