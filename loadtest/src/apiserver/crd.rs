//! CustomResourceDefinitions: turning a CRD object into the [`ResourceType`] it serves
//! (names, scope, served versions with their schemas, status subresource, printer columns)
//! and the status the API server's own controllers give an accepted CRD
//! (`NamesAccepted`, `Established`), which clients wait for before using the new kind.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::resources::{Behavior, ResourceType, ScalePaths, Subresources};
use super::schema::Schema;

const CRD_GROUP: &str = "apiextensions.k8s.io";

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn invalid(name: &str, field: &str, problem: &str) -> ApiError {
    ApiError::invalid(CRD_GROUP, "CustomResourceDefinition", name, field, problem)
}

/// Validates a CRD and builds the resource it serves.
pub fn resource_type_of(crd: &Value) -> ApiResult<ResourceType> {
    let name = text(crd, "/metadata/name");
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let kind = text(crd, "/spec/names/kind");
    if group.is_empty() {
        return Err(invalid(name, "spec.group", "Required value"));
    }
    if plural.is_empty() {
        return Err(invalid(name, "spec.names.plural", "Required value"));
    }
    if kind.is_empty() {
        return Err(invalid(name, "spec.names.kind", "Required value"));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            name,
            "metadata.name",
            "Invalid value: must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let namespaced = match text(crd, "/spec/scope") {
        "Namespaced" => true,
        "Cluster" => false,
        other => {
            return Err(invalid(
                name,
                "spec.scope",
                &format!(
                    "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
                ),
            ));
        }
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count()
        != 1
    {
        return Err(invalid(
            name,
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        ));
    }
    let mut served: Vec<String> = Vec::new();
    let mut schemas = HashMap::new();
    let mut printer_columns = HashMap::new();
    let mut subresources = Subresources::default();
    let mut scale_paths = ScalePaths::default();
    for version in &versions {
        let vname = text(version, "/name").to_string();
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
            schemas.insert(vname.clone(), Arc::new(Schema::new(schema.clone())));
        }
        if let Some(columns) = version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
        {
            printer_columns.insert(vname.clone(), columns.clone());
        }
        subresources.status |= version.pointer("/subresources/status").is_some();
        if let Some(scale) = version.pointer("/subresources/scale") {
            subresources.scale = true;
            let path = |field: &str| {
                scale
                    .get(field)
                    .and_then(Value::as_str)
                    .map(ScalePaths::pointer)
            };
            scale_paths = ScalePaths {
                spec_replicas: path("specReplicasPath")
                    .unwrap_or_else(|| ScalePaths::default().spec_replicas),
                status_replicas: path("statusReplicasPath")
                    .unwrap_or_else(|| ScalePaths::default().status_replicas),
                label_selector: path("labelSelectorPath"),
            };
        }
        if version.get("storage").and_then(Value::as_bool) == Some(true) {
            served.insert(0, vname);
        } else {
            served.push(vname);
        }
    }
    let strings = |pointer: &str| -> Vec<String> {
        crd.pointer(pointer)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = match text(crd, "/spec/names/singular") {
        "" => kind.to_ascii_lowercase(),
        s => s.to_string(),
    };
    Ok(ResourceType {
        group: group.to_string(),
        versions: served,
        plural: plural.to_string(),
        singular,
        kind: kind.to_string(),
        namespaced,
        short_names: strings("/spec/names/shortNames"),
        categories: strings("/spec/names/categories"),
        subresources,
        scale_paths,
        behavior: Behavior::Generic,
        strategic_merge: false,
        schemas,
        printer_columns,
    })
}

/// The status an accepted, established CRD reports.
pub fn established_status(crd: &Value, now: &str) -> Value {
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    let condition = |kind: &str, reason: &str, message: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(Value::Null),
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": storage,
    })
}

/// The upstream Karpenter CRDs, vendored in the repository (`tests/fixtures/upstream/crds`,
/// origin and licence in the README there) so the emulator's tests need nothing beside the
/// checkout.
pub fn upstream_crd_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/upstream/crds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karpenter_nodepool_crd_serves_cluster_scoped_v1_with_status() {
        let dir = upstream_crd_dir();
        let text =
            std::fs::read_to_string(dir.join("karpenter.sh_nodepools.yaml")).expect("readable CRD");
        let crd: Value = serde_saphyr::from_str(&text).expect("upstream CRD is valid YAML");
        let rt = resource_type_of(&crd).expect("upstream CRD is valid");
        assert_eq!(
            (rt.group.as_str(), rt.plural.as_str(), rt.kind.as_str()),
            ("karpenter.sh", "nodepools", "NodePool")
        );
        assert!(!rt.namespaced);
        assert_eq!(rt.versions, ["v1"]);
        assert!(rt.subresources.status);
        assert!(rt.schemas.contains_key("v1"));
    }

    #[test]
    fn rejects_a_name_that_is_not_plural_dot_group() {
        let crd = json!({"metadata": {"name": "wrong"}, "spec": {"group": "g.io", "scope": "Cluster",
            "names": {"plural": "things", "kind": "Thing"}, "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let err = resource_type_of(&crd).expect_err("bad name");
        assert!(err.message.contains("metadata.name"), "{}", err.message);
    }
}
