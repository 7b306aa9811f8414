//! Deployment controller: one ReplicaSet per pod template (named after the template's
//! hash, labelled `pod-template-hash`) scaled to `spec.replicas`; ReplicaSets of older
//! templates are scaled to zero at once (so a template change behaves like the Recreate
//! strategy); replica counts and the Available condition are reported in status.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{controller_keys, follow, in_namespace};
use crate::apiserver::meta::stable_hash;
use crate::apiserver::registry::{Registry, Sub, Target};
use crate::apiserver::store::{ObjKey, StoredObject};

const HASH_LABEL: &str = "pod-template-hash";

/// Runs the controller.
pub async fn run(registry: Arc<Registry>) {
    let (Ok(deployments), Ok(replicasets)) = (
        registry.target("apps", "v1", "deployments", None),
        registry.target("apps", "v1", "replicasets", None),
    ) else {
        return;
    };
    let rs_for_reconcile = replicasets.clone();
    follow(
        registry,
        deployments.clone(),
        replicasets,
        |_, change| controller_keys(change, "Deployment"),
        move |registry, key| reconcile(registry, &deployments, &rs_for_reconcile, key),
    )
    .await;
}

fn int_at(value: &Value, pointer: &str) -> i64 {
    value.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn reconcile(
    registry: &Arc<Registry>,
    deployments: &Target,
    replicasets: &Target,
    (ns, name): &ObjKey,
) {
    let deployments = in_namespace(deployments, ns);
    let replicasets = in_namespace(replicasets, ns);
    let Some(deployment) = registry.find(&deployments, name) else {
        return;
    };
    if deployment.attrs.deleting {
        return;
    }
    let deployment_value = deployment.value();
    let desired = deployment_value
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let hash = stable_hash(
        deployment_value
            .pointer("/spec/template")
            .unwrap_or(&Value::Null),
    );
    let owned: Vec<Arc<StoredObject>> = registry
        .store
        .dependents(&deployment.attrs.uid)
        .into_iter()
        .filter(|(gr, _)| gr.group == "apps" && gr.resource == "replicasets")
        .filter_map(|(_, (_, rs))| registry.find(&replicasets, &rs))
        .filter(|rs| {
            rs.attrs
                .controller()
                .is_some_and(|o| o.uid == deployment.attrs.uid)
        })
        .collect();
    let current = owned
        .iter()
        .find(|rs| rs.attrs.labels.get(HASH_LABEL) == Some(&hash));
    match current {
        None => {
            if let Err(err) = registry.create(
                &replicasets,
                replicaset_for(&deployment_value, &hash, desired),
                &super::as_controller_manager(),
            ) {
                tracing::debug!(%err, name, "deployment replicaset creation failed");
            }
        }
        Some(rs) if int_at(&rs.value(), "/spec/replicas") != desired => {
            scale(registry, &replicasets, &rs.attrs.name, desired)
        }
        Some(_) => {}
    }
    for old in owned
        .iter()
        .filter(|rs| rs.attrs.labels.get(HASH_LABEL) != Some(&hash))
    {
        if int_at(&old.value(), "/spec/replicas") != 0 {
            scale(registry, &replicasets, &old.attrs.name, 0);
        }
    }
    update_status(registry, &deployments, &deployment, &owned, &hash, desired);
}

fn scale(registry: &Registry, replicasets: &Target, name: &str, replicas: i64) {
    let result = registry.update_with(
        replicasets,
        name,
        Sub::Main,
        &super::as_controller_manager(),
        |current| {
            let mut next = current.clone();
            next["spec"]["replicas"] = json!(replicas);
            Ok(next)
        },
    );
    if let Err(err) = result {
        tracing::debug!(%err, name, "scaling replicaset failed");
    }
}

fn update_status(
    registry: &Registry,
    deployments: &Target,
    deployment: &StoredObject,
    owned: &[Arc<StoredObject>],
    hash: &str,
    desired: i64,
) {
    let sum = |pointer: &str| {
        owned
            .iter()
            .map(|rs| int_at(&rs.value(), pointer))
            .sum::<i64>()
    };
    let updated = owned
        .iter()
        .filter(|rs| rs.attrs.labels.get(HASH_LABEL).map(String::as_str) == Some(hash))
        .map(|rs| int_at(&rs.value(), "/status/replicas"))
        .sum::<i64>();
    let available = sum("/status/availableReplicas");
    let is_available = available >= desired;
    let now = registry.now();
    let name = deployment.attrs.name.clone();
    let result = registry.update_with(deployments, &name, Sub::Status, &super::as_controller_manager(), |current| {
        let mut next = current.clone();
        let previous = current.pointer("/status/conditions/0").cloned().unwrap_or(Value::Null);
        let status_text = if is_available { "True" } else { "False" };
        let transition = if previous["status"] == status_text { previous["lastTransitionTime"].clone() } else { json!(now) };
        next["status"] = json!({
            "observedGeneration": current.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "replicas": sum("/status/replicas"),
            "updatedReplicas": updated,
            "readyReplicas": sum("/status/readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": (desired - available).max(0),
            "conditions": [{
                "type": "Available", "status": status_text, "lastTransitionTime": transition, "lastUpdateTime": transition,
                "reason": if is_available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                "message": if is_available { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." },
            }],
        });
        Ok(next)
    });
    if let Err(err) = result {
        tracing::debug!(%err, name, "deployment status update failed");
    }
}

fn replicaset_for(deployment: &Value, hash: &str, replicas: i64) -> Value {
    let name = deployment
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut template = deployment
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(json!({}));
    let mut labels: Map<String, Value> = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), json!(hash));
    template["metadata"]["labels"] = Value::Object(labels.clone());
    let mut selector = deployment
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or(json!({}));
    let mut match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    match_labels.insert(HASH_LABEL.into(), json!(hash));
    selector["matchLabels"] = Value::Object(match_labels);
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{name}-{hash}"), "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                "uid": deployment.pointer("/metadata/uid"), "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    })
}
