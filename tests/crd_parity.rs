//! Holds the Rust API types to the upstream CRD schemas: the property paths the types
//! generate (through kube's `CustomResourceExt::crd`) must be exactly the property paths of
//! the CRDs kerf installs (deploy/crds), and those must be exactly upstream's
//! (vendored in tests/fixtures/upstream/crds). A missing field or an invented one fails here.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use kerf::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use kube::CustomResourceExt;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn upstream_crds_dir() -> PathBuf {
    common::upstream_dir().join("crds")
}

fn read_crd(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every property path below the root schema: `spec.template.spec.requirements[].key`,
/// with `[]` for array items and `.*` for map values.
fn property_paths(schema: &Value) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    collect(schema, "", &mut paths);
    paths
}

fn collect(schema: &Value, path: &str, paths: &mut BTreeSet<String>) {
    let join = |suffix: &str| {
        if path.is_empty() {
            suffix.to_owned()
        } else {
            format!("{path}.{suffix}")
        }
    };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let p = join(name);
            paths.insert(p.clone());
            collect(sub, &p, paths);
        }
    }
    if let Some(items) = schema.get("items") {
        let p = format!("{path}[]");
        paths.insert(p.clone());
        collect(items, &p, paths);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        let p = join("*");
        paths.insert(p.clone());
        collect(additional, &p, paths);
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        for sub in schema
            .get(combinator)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            collect(sub, path, paths);
        }
    }
}

fn schema_of_crd(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

fn kind_of_crd(crd: &Value) -> &str {
    crd["spec"]["names"]["kind"]
        .as_str()
        .expect("CRD names a kind")
}

fn crds_in(dir: &Path) -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let crd = read_crd(p);
            (kind_of_crd(&crd).to_owned(), crd)
        })
        .collect()
}

fn generated(kind: &str) -> Value {
    let crd = match kind {
        "NodePool" => NodePool::crd(),
        "NodeClaim" => NodeClaim::crd(),
        "EC2NodeClass" => EC2NodeClass::crd(),
        "NodeOverlay" => NodeOverlay::crd(),
        "CapacityBuffer" => CapacityBuffer::crd(),
        other => panic!("no Rust type for CRD kind {other}"),
    };
    serde_json::to_value(crd).expect("CRD serialises")
}

/// The top-level fields a serialised object of `kind` carries. kube's generated schema
/// describes only spec and status; apiVersion, kind and metadata come from the root type
/// kube derives, so they are read off a serialised instance instead.
fn root_fields(kind: &str) -> BTreeSet<String> {
    let object = match kind {
        "NodePool" => serde_json::to_value(NodePool::new("x", sample_spec(kind))),
        "NodeClaim" => serde_json::to_value(NodeClaim::new("x", sample_spec(kind))),
        "EC2NodeClass" => serde_json::to_value(EC2NodeClass::new("x", sample_spec(kind))),
        "NodeOverlay" => serde_json::to_value(NodeOverlay::new("x", sample_spec(kind))),
        "CapacityBuffer" => serde_json::to_value(CapacityBuffer::new("x", sample_spec(kind))),
        other => panic!("no Rust type for CRD kind {other}"),
    }
    .expect("object serialises");
    let mut fields: BTreeSet<String> = object
        .as_object()
        .expect("object")
        .keys()
        .cloned()
        .collect();
    // status is optional and absent on a new object, but declared by the generated schema.
    fields.insert("status".to_owned());
    fields
}

fn sample_spec<T: serde::de::DeserializeOwned>(kind: &str) -> T {
    let node_class_ref = serde_json::json!({"group": "g", "kind": "k", "name": "n"});
    let spec = match kind {
        "NodePool" => {
            serde_json::json!({"template": {"spec": {"requirements": [], "nodeClassRef": node_class_ref}}})
        }
        "NodeClaim" => serde_json::json!({"requirements": [], "nodeClassRef": node_class_ref}),
        "NodeOverlay" => serde_json::json!({"requirements": []}),
        "CapacityBuffer" => serde_json::json!({}),
        _ => {
            serde_json::json!({"amiSelectorTerms": [], "subnetSelectorTerms": [], "securityGroupSelectorTerms": []})
        }
    };
    serde_json::from_value(spec).expect("minimal spec deserialises")
}

fn assert_same_paths(
    kind: &str,
    what: &str,
    expected: &BTreeSet<String>,
    actual: &BTreeSet<String>,
) {
    let missing: Vec<_> = expected.difference(actual).collect();
    let invented: Vec<_> = actual.difference(expected).collect();
    assert!(
        missing.is_empty() && invented.is_empty(),
        "{kind}: {what}\n  missing: {missing:#?}\n  invented: {invented:#?}"
    );
}

#[test]
fn rust_types_cover_every_property_of_the_installed_crds() {
    let crds = crds_in(&workspace_root().join("deploy/crds"));
    assert_eq!(
        crds.len(),
        5,
        "deploy/crds holds the three Karpenter CRDs, NodeOverlay and CapacityBuffer"
    );
    for (kind, crd) in &crds {
        let expected = property_paths(schema_of_crd(crd));
        let mut actual = property_paths(schema_of_crd(&generated(kind)));
        actual.extend(root_fields(kind));
        assert!(expected.len() > 20, "{kind}: schema has properties");
        assert_same_paths(kind, "Rust types vs deploy/crds", &expected, &actual);
    }
}

#[test]
fn installed_crds_match_upstream() {
    let ours = crds_in(&workspace_root().join("deploy/crds"));
    let upstream = crds_in(&upstream_crds_dir());
    let kinds = |c: &[(String, Value)]| c.iter().map(|(k, _)| k.clone()).collect::<BTreeSet<_>>();
    assert_eq!(kinds(&ours), kinds(&upstream));
    for (kind, crd) in &ours {
        let (_, theirs) = upstream
            .iter()
            .find(|(k, _)| k == kind)
            .expect("same kinds");
        assert_same_paths(
            kind,
            "deploy/crds vs upstream",
            &property_paths(schema_of_crd(theirs)),
            &property_paths(schema_of_crd(crd)),
        );
    }
}

#[test]
fn generated_crds_carry_upstream_names_and_scope() {
    for (kind, crd) in crds_in(&workspace_root().join("deploy/crds")) {
        let ours = generated(&kind);
        for field in ["group", "scope"] {
            assert_eq!(
                ours["spec"][field], crd["spec"][field],
                "{kind}: spec.{field}"
            );
        }
        // listKind is left out: kube omits it and the API server defaults it to `<kind>List`.
        for field in ["kind", "plural", "singular", "shortNames", "categories"] {
            assert_eq!(
                ours["spec"]["names"][field], crd["spec"]["names"][field],
                "{kind}: names.{field}"
            );
        }
        assert_eq!(
            ours["spec"]["versions"][0]["name"], crd["spec"]["versions"][0]["name"],
            "{kind}: served version"
        );
    }
}

#[test]
fn path_extraction_sees_items_maps_and_combinators() {
    let schema = serde_json::json!({"properties": {
        "a": {"type": "array", "items": {"properties": {"b": {"type": "string"}}}},
        "m": {"additionalProperties": {"anyOf": [{"properties": {"x": {}}}]}}
    }});
    let paths: Vec<_> = property_paths(&schema).into_iter().collect();
    assert_eq!(paths, ["a", "a[]", "a[].b", "m", "m.*", "m.*.x"]);
}
