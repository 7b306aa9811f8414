//! Creating the simulation's objects in the API emulator, as `kubectl create` would: each
//! object goes to the resource the emulator serves for its apiVersion and kind, namespaced
//! objects without a namespace land in `default`, and missing namespaces are created first.
//! Deployments, ReplicaSets and DaemonSets are created as they are (the emulator's
//! controllers and the simulated kubelets make their pods); StatefulSets and Jobs, which
//! nothing in the simulated cluster runs, are replaced by the pods (and claims) their
//! controllers would create, expanded exactly as `kerf plan` expands them. Nodes and
//! NodeClaims are skipped: in a simulation they come from the controller and simulated EC2.

use std::collections::BTreeSet;

use kerf::cluster::inventory::Inventory;
use kerf::manifest::Object;
use kerf::pods::PodLike;
use kerf_loadtest::apiserver::{ApiError, Cluster, Reason};
use serde_json::{Value, json};

/// Why an object could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{source_ref}: {object}: the API emulator refused it: {error}")]
    Refused {
        source_ref: String,
        object: String,
        error: Box<ApiError>,
    },
    #[error("{source_ref}: {object}: cannot encode the expanded {what}: {error}")]
    Encode {
        source_ref: String,
        object: String,
        what: &'static str,
        error: serde_json::Error,
    },
}

/// Kinds whose controllers the simulated cluster lacks: their pods are created instead.
const EXPANDED: [&str; 2] = ["StatefulSet", "Job"];

/// Kinds the simulation makes itself.
const SKIPPED: [&str; 2] = ["Node", "NodeClaim"];

/// Creates `objects` in order; returns notes for the user about objects left out.
pub fn apply(
    cluster: &Cluster,
    objects: &[Object],
    inventory: &Inventory,
) -> Result<Vec<String>, ApplyError> {
    let mut notes = Vec::new();
    let mut namespaces = existing_namespaces(cluster);
    for object in objects {
        let refused = |error: ApiError| ApplyError::Refused {
            source_ref: object.source.to_string(),
            object: object.display_name(),
            error: Box::new(error),
        };
        if SKIPPED.contains(&object.kind.as_str()) {
            notes.push(format!(
                "{}: {}: skipped (the simulated EC2 and kubelets make nodes)",
                object.source,
                object.display_name()
            ));
            continue;
        }
        if EXPANDED.contains(&object.kind.as_str()) {
            create_expanded(cluster, object, inventory, &mut namespaces)?;
            continue;
        }
        let Some(resource) = resource_of(cluster, object) else {
            notes.push(format!(
                "{}: {}: skipped (the API emulator does not serve {})",
                object.source,
                object.display_name(),
                object.api_version
            ));
            continue;
        };
        let mut value = object.value.clone();
        if resource.namespaced {
            let namespace = object.namespace.clone().unwrap_or_else(|| "default".into());
            ensure_namespace(cluster, &namespace, &mut namespaces).map_err(refused)?;
            value["metadata"]["namespace"] = json!(namespace);
        }
        if object.kind == "Pod" {
            strip_owners(&mut value);
        }
        match cluster.create(&object.api_version, &resource.plural, value) {
            Ok(_) => {
                if object.kind == "Namespace"
                    && let Some(name) = &object.name
                {
                    namespaces.insert(name.clone());
                }
            }
            // A namespace may already exist (default, kube-system) or have been created
            // for an earlier object; creating it again is not a problem.
            Err(error) if object.kind == "Namespace" && error.reason == Reason::AlreadyExists => {}
            Err(error) => return Err(refused(error)),
        }
    }
    Ok(notes)
}

/// Where the emulator serves a kind.
struct Resource {
    plural: String,
    namespaced: bool,
}

fn resource_of(cluster: &Cluster, object: &Object) -> Option<Resource> {
    let version = object
        .api_version
        .rsplit_once('/')
        .map_or(object.api_version.as_str(), |(_, v)| v);
    cluster
        .registry()
        .store
        .all()
        .iter()
        .map(|ts| ts.resource_type())
        .find(|rt| rt.group == object.group() && rt.kind == object.kind && rt.serves(version))
        .map(|rt| Resource {
            plural: rt.plural.clone(),
            namespaced: rt.namespaced,
        })
}

fn existing_namespaces(cluster: &Cluster) -> BTreeSet<String> {
    cluster
        .list("v1", "namespaces", None, "")
        .unwrap_or_default()
        .iter()
        .filter_map(|ns| ns["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

fn ensure_namespace(
    cluster: &Cluster,
    namespace: &str,
    known: &mut BTreeSet<String>,
) -> Result<(), ApiError> {
    if known.contains(namespace) {
        return Ok(());
    }
    match cluster.create(
        "v1",
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
    ) {
        Ok(_) => {}
        Err(error) if error.reason == Reason::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    known.insert(namespace.to_owned());
    Ok(())
}

/// Owner references in manifests point at objects (and uids) this cluster does not have.
fn strip_owners(pod: &mut Value) {
    if let Some(metadata) = pod["metadata"].as_object_mut() {
        metadata.shift_remove("ownerReferences");
        metadata.shift_remove("uid");
        metadata.shift_remove("resourceVersion");
    }
}

/// Creates the pods (and volume claims) a StatefulSet or Job would create.
fn create_expanded(
    cluster: &Cluster,
    object: &Object,
    inventory: &Inventory,
    namespaces: &mut BTreeSet<String>,
) -> Result<(), ApplyError> {
    let namespace = object.namespace.clone().unwrap_or_else(|| "default".into());
    let refused = |error: ApiError| ApplyError::Refused {
        source_ref: object.source.to_string(),
        object: object.display_name(),
        error: Box::new(error),
    };
    let encode = |what: &'static str| {
        move |error| ApplyError::Encode {
            source_ref: object.source.to_string(),
            object: object.display_name(),
            what,
            error,
        }
    };
    ensure_namespace(cluster, &namespace, namespaces).map_err(refused)?;
    let owned =
        inventory.pods.iter().filter(|pod| {
            pod.meta().namespace.unwrap_or("default") == namespace
                && pod.meta().owner_references.iter().any(|o| {
                    o.kind == object.kind && Some(o.name.as_str()) == object.name.as_deref()
                })
        });
    for pod in owned {
        let mut value = serde_json::to_value(pod.to_pod()).map_err(encode("pod"))?;
        strip_owners(&mut value);
        cluster.create("v1", "pods", value).map_err(refused)?;
    }
    if object.kind == "StatefulSet" {
        let prefix_of =
            |template: &str| format!("{template}-{}-", object.name.as_deref().unwrap_or_default());
        let templates: Vec<String> = object.value["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["metadata"]["name"].as_str().map(prefix_of))
            .collect();
        let claims = inventory.claims.iter().filter(|claim| {
            claim.metadata.namespace.as_deref().unwrap_or("default") == namespace
                && claim
                    .metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| templates.iter().any(|p| n.starts_with(p.as_str())))
        });
        for claim in claims {
            let mut value = serde_json::to_value(claim).map_err(encode("claim"))?;
            strip_owners(&mut value);
            cluster
                .create("v1", "persistentvolumeclaims", value)
                .map_err(refused)?;
        }
    }
    Ok(())
}
