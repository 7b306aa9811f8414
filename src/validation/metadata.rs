//! `metadata` checks the API server makes on create for every object (Karpenter's kinds are
//! cluster-scoped): a valid name, well-formed label and annotation keys and label values,
//! and no fields ObjectMeta does not have.

use super::names::{dns_subdomain_errors, label_value_errors, qualified_name_errors};
use super::path::{FieldPath, Problem};
use crate::manifest::json_type;
use serde_json::Value;

const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Problems with `metadata` (absent metadata is reported as a missing name).
pub fn validate_metadata(metadata: Option<&Value>) -> Vec<Problem> {
    let path = FieldPath::root().child("metadata");
    let mut problems = Vec::new();
    let empty = serde_json::Map::new();
    let map = match metadata {
        None => &empty,
        Some(Value::Object(map)) => map,
        Some(other) => {
            problems.push(Problem::new(
                &path,
                format!("must be of type object, not {}", json_type(other)),
            ));
            return problems;
        }
    };
    for key in map
        .keys()
        .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
    {
        problems.push(Problem::new(&path.child(key), "unknown field"));
    }
    check_name(map, &path, &mut problems);
    check_string_map(
        map.get("labels"),
        &path.child("labels"),
        true,
        &mut problems,
    );
    check_string_map(
        map.get("annotations"),
        &path.child("annotations"),
        false,
        &mut problems,
    );
    problems
}

fn check_name(map: &serde_json::Map<String, Value>, path: &FieldPath, problems: &mut Vec<Problem>) {
    match (map.get("name"), map.get("generateName")) {
        (Some(Value::String(name)), _) if !name.is_empty() => {
            for e in dns_subdomain_errors(name) {
                problems.push(Problem::new(
                    &path.child("name"),
                    format!("Invalid value: {name:?}: {e}"),
                ));
            }
        }
        (Some(Value::String(_)) | None, Some(Value::String(g))) if !g.is_empty() => {}
        (
            Some(other @ (Value::Number(_) | Value::Bool(_) | Value::Array(_) | Value::Object(_))),
            _,
        ) => {
            problems.push(Problem::new(
                &path.child("name"),
                format!("must be of type string, not {}", json_type(other)),
            ));
        }
        _ => problems.push(Problem::new(
            &path.child("name"),
            "Required value: name or generateName is required",
        )),
    }
}

fn check_string_map(
    value: Option<&Value>,
    path: &FieldPath,
    labels: bool,
    problems: &mut Vec<Problem>,
) {
    let Some(value) = value else { return };
    let Some(map) = value.as_object() else {
        problems.push(Problem::new(
            path,
            format!("must be of type object, not {}", json_type(value)),
        ));
        return;
    };
    for (key, v) in map {
        for e in qualified_name_errors(key) {
            problems.push(Problem::new(
                &path.key(key),
                format!("Invalid value: {key:?}: {e}"),
            ));
        }
        match v.as_str() {
            Some(text) if labels => {
                for e in label_value_errors(text) {
                    problems.push(Problem::new(
                        &path.key(key),
                        format!("Invalid value: {text:?}: {e}"),
                    ));
                }
            }
            Some(_) => {}
            None => problems.push(Problem::new(
                &path.key(key),
                format!("must be of type string, not {}", json_type(v)),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(v: Value) -> Vec<String> {
        validate_metadata(Some(&v))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn accepts_ordinary_metadata() {
        assert!(messages(json!({"name": "default", "labels": {"team": "a"}, "annotations": {"kubernetes.io/description": "x y"}})).is_empty());
        assert!(messages(json!({"generateName": "np-"})).is_empty());
    }

    #[test]
    fn rejects_bad_names_labels_and_fields() {
        assert_eq!(
            messages(json!({})),
            ["metadata.name: Required value: name or generateName is required"]
        );
        assert!(
            messages(json!({"name": "Default"}))[0]
                .starts_with("metadata.name: Invalid value: \"Default\"")
        );
        assert!(
            messages(json!({"name": "a", "labels": {"a": "b c"}}))[0]
                .starts_with("metadata.labels[a]: Invalid value")
        );
        assert_eq!(
            messages(json!({"name": "a", "nmae": "b"})),
            ["metadata.nmae: unknown field"]
        );
    }
}
