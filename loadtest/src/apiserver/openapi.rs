//! OpenAPI v3 as kubectl reads it: `/openapi/v3` lists one document per served
//! group-version, and `/openapi/v3/api/v1` or `/openapi/v3/apis/<group>/<version>` is that
//! document, built from the resources served at the request (a new CRD shows at once).
//!
//! kubectl validates `apply`/`create` input by asking whether the kind's PATCH takes the
//! `fieldValidation` parameter; when it does, kubectl leaves validation to the server
//! ([`super::schema`]). So every path carries its operations with
//! `x-kubernetes-group-version-kind`, and writes list `fieldValidation`.
//!
//! A custom resource's schema is its CRD's `openAPIV3Schema` (`kubectl explain` works on
//! NodePools); a built-in kind's is an open object, as the emulator has no built-in field
//! schemas, and for that reason its PATCH does not advertise strategic merge, so kubectl
//! computes such patches from its compiled-in types. `/openapi/v2` is not served.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::resources::ResourceType;

/// The URL prefix of the v3 documents.
const V3: &str = "/openapi/v3";

/// `group/version` as the document's path key: `api/v1` for core, `apis/<g>/<v>` else.
fn path_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per served group-version.
pub fn index(types: &[Arc<ResourceType>]) -> Value {
    let mut paths = Map::new();
    for rt in types {
        for version in &rt.versions {
            let key = path_key(&rt.group, version);
            let url = format!("{V3}/{key}");
            paths.insert(key, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// The document at `/openapi/v3/<key>` (`key` as in [`index`]), or `None` when nothing is
/// served there.
pub fn document(types: &[Arc<ResourceType>], key: &str) -> Option<Value> {
    let (group, version) = match key.split('/').collect::<Vec<_>>().as_slice() {
        ["api", version] => ("", *version),
        ["apis", group, version] => (*group, *version),
        _ => return None,
    };
    let served: Vec<&Arc<ResourceType>> = types
        .iter()
        .filter(|rt| rt.group == group && rt.serves(version))
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for rt in served {
        let name = component_name(rt, version);
        schemas.insert(name.clone(), component(rt, version));
        for (path, item) in resource_paths(rt, version, &name) {
            paths.insert(path, item);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kerf API emulator)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The component's name as a real server spells it: `io.k8s.api.apps.v1.Deployment` for
/// built-ins, the reversed group for custom resources (`sh.karpenter.v1.NodePool`).
fn component_name(rt: &ResourceType, version: &str) -> String {
    if is_custom(rt) {
        let reversed: Vec<&str> = rt.group.split('.').rev().collect();
        return format!("{}.{version}.{}", reversed.join("."), rt.kind);
    }
    let package = match rt.group.as_str() {
        "" => "core",
        group => group.split('.').next().unwrap_or(group),
    };
    format!("io.k8s.api.{package}.{version}.{}", rt.kind)
}

fn is_custom(rt: &ResourceType) -> bool {
    !rt.schemas.is_empty()
}

fn gvk(rt: &ResourceType, version: &str) -> Value {
    json!({"group": rt.group, "version": version, "kind": rt.kind})
}

/// The kind's schema, tagged with its group-version-kind (how `kubectl explain` finds it).
fn component(rt: &ResourceType, version: &str) -> Value {
    let mut schema = match rt.schemas.get(version) {
        Some(schema) => schema.root().clone(),
        None => json!({
            "type": "object",
            "description": format!("{} (the emulator publishes no field schema for built-in kinds)", rt.kind),
            "x-kubernetes-preserve-unknown-fields": true,
        }),
    };
    if let Some(object) = schema.as_object_mut() {
        object.insert(
            "x-kubernetes-group-version-kind".to_owned(),
            json!([gvk(rt, version)]),
        );
    }
    schema
}

/// A query parameter of a write.
fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string"}, "uniqueItems": true})
}

fn write_parameters() -> Vec<Value> {
    vec![
        query("dryRun", "All: do not persist the change."),
        query("fieldManager", "The actor making the change."),
        query(
            "fieldValidation",
            "Ignore, Warn or Strict: what to do with unknown or duplicate fields.",
        ),
    ]
}

/// One operation of `rt`'s paths.
fn operation(
    rt: &ResourceType,
    version: &str,
    action: &str,
    schema_ref: &Value,
    body: Option<&[&str]>,
) -> Value {
    let mut op = json!({
        "operationId": format!("{action}{}", rt.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(rt, version),
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": schema_ref}}}},
    });
    if let Some(content_types) = body {
        let content: Map<String, Value> = content_types
            .iter()
            .map(|t| ((*t).to_owned(), json!({"schema": schema_ref})))
            .collect();
        op["requestBody"] = json!({"required": true, "content": content});
        let mut parameters = write_parameters();
        if action == "patch" {
            parameters.push(query("force", "Apply: take over conflicting fields."));
        }
        op["parameters"] = json!(parameters);
    }
    op
}

/// The collection, item and status paths of `rt` at `version`.
fn resource_paths(rt: &ResourceType, version: &str, component: &str) -> Vec<(String, Value)> {
    let prefix = format!("/{}", path_key(&rt.group, version));
    let collection = if rt.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", rt.plural)
    } else {
        format!("{prefix}/{}", rt.plural)
    };
    let path_param = |name: &str| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}, "uniqueItems": true});
    let scope: Vec<Value> = if rt.namespaced {
        vec![path_param("namespace")]
    } else {
        Vec::new()
    };
    let mut item_params = scope.clone();
    item_params.push(path_param("name"));
    let schema_ref = json!({"$ref": format!("#/components/schemas/{component}")});
    // Strategic merge is left out on purpose: see the module comment.
    let patch_types: &[&str] = &[
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    let json_body: &[&str] = &["application/json", "application/yaml"];
    let op =
        |action: &str, body: Option<&[&str]>| operation(rt, version, action, &schema_ref, body);
    let item = json!({
        "parameters": item_params,
        "get": op("get", None),
        "put": op("put", Some(json_body)),
        "patch": op("patch", Some(patch_types)),
        "delete": op("delete", None),
    });
    let mut paths = vec![
        (
            collection.clone(),
            json!({"parameters": scope, "get": op("list", None), "post": op("post", Some(json_body))}),
        ),
        (format!("{collection}/{{name}}"), item.clone()),
    ];
    if rt.subresources.status {
        let mut status = item;
        if let Some(object) = status.as_object_mut() {
            object.remove("delete");
        }
        paths.push((format!("{collection}/{{name}}/status"), status));
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::crd::{resource_type_of, upstream_crd_dir};
    use crate::apiserver::resources::builtin_types;

    fn served() -> Vec<Arc<ResourceType>> {
        let text = std::fs::read_to_string(upstream_crd_dir().join("karpenter.sh_nodepools.yaml"))
            .expect("CRD readable");
        let crd: Value = serde_saphyr::from_str(&text).expect("CRD parses");
        let mut types: Vec<Arc<ResourceType>> = builtin_types().into_iter().map(Arc::new).collect();
        types.push(Arc::new(resource_type_of(&crd).expect("CRD converts")));
        types
    }

    /// The PATCH operation of `kind` in `doc`, as kubectl's field-validation check finds it.
    fn patch_of<'a>(doc: &'a Value, kind: &str) -> &'a Value {
        doc["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(_, item)| item.get("patch"))
            .find(|op| op["x-kubernetes-group-version-kind"]["kind"] == kind)
            .expect("a PATCH for the kind")
    }

    fn takes_field_validation(op: &Value) -> bool {
        op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
    }

    #[test]
    fn every_served_group_version_is_indexed_and_its_writes_take_field_validation() {
        let types = served();
        let index = index(&types);
        for key in ["api/v1", "apis/apps/v1", "apis/karpenter.sh/v1"] {
            assert_eq!(
                index["paths"][key]["serverRelativeURL"],
                format!("/openapi/v3/{key}")
            );
        }
        let apps = document(&types, "apis/apps/v1").expect("apps/v1 served");
        let deployments = patch_of(&apps, "Deployment");
        assert!(takes_field_validation(deployments));
        assert!(
            deployments["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_none(),
            "no field schema for built-ins, so kubectl must use its own types for SMP"
        );
        assert!(
            apps["paths"]
                .get("/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
                .is_some()
        );
        assert!(document(&types, "apis/apps/v9").is_none());
        assert!(document(&types, "nonsense").is_none());
    }

    #[test]
    fn a_custom_resource_is_described_by_its_crd_schema() {
        let types = served();
        let doc = document(&types, "apis/karpenter.sh/v1").expect("karpenter.sh/v1 served");
        assert!(takes_field_validation(patch_of(&doc, "NodePool")));
        assert!(
            doc["paths"]
                .get("/apis/karpenter.sh/v1/nodepools/{name}/status")
                .is_some()
        );
        let schema = &doc["components"]["schemas"]["sh.karpenter.v1.NodePool"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"],
            json!([{"group": "karpenter.sh", "version": "v1", "kind": "NodePool"}])
        );
        assert!(
            schema["properties"]["spec"]["properties"]["disruption"]["properties"]
                .get("consolidationPolicy")
                .is_some()
        );
    }
}
