//! `meta.k8s.io/v1` Table responses for kubectl's human-readable `get`: a name column,
//! the CRD's `additionalPrinterColumns` (the JSONPath subset they use, see [`lookup`]) or a few built-in
//! columns, and the age.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::clock::parse_rfc3339;
use super::resources::ResourceType;

/// Whether the `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn builtin_columns(rt: &ResourceType) -> Vec<(String, String)> {
    let cols: &[(&str, &str)] = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => &[("Status", ".status.phase"), ("Node", ".spec.nodeName")],
        ("", "Namespace") => &[("Status", ".status.phase")],
        ("apps", "Deployment") | ("apps", "ReplicaSet") => &[
            ("Desired", ".spec.replicas"),
            ("Ready", ".status.readyReplicas"),
        ],
        ("policy", "PodDisruptionBudget") => {
            &[("Allowed Disruptions", ".status.disruptionsAllowed")]
        }
        _ => &[],
    };
    cols.iter()
        .map(|(n, p)| (n.to_string(), p.to_string()))
        .collect()
}

/// Evaluates the JSONPath subset printer columns use: `.a.b`, keys with escaped dots
/// (`.metadata.labels.node\.kubernetes\.io/instance-type`) and one-field filters on lists
/// (`.status.conditions[?(@.type=="Ready")].status`, the first match).
fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = object;
    for segment in segments(path.trim_start_matches('.')) {
        let (key, filter) = match segment.split_once("[?(@.") {
            Some((key, filter)) => (key.to_owned(), Some(filter.trim_end_matches(")]"))),
            None => (segment, None),
        };
        if !key.is_empty() {
            current = current.get(key.as_str())?;
        }
        if let Some(filter) = filter {
            let (field, wanted) = filter.split_once("==")?;
            let wanted = wanted.trim().trim_matches('"').trim_matches('\'');
            current = current
                .as_array()?
                .iter()
                .find(|item| item.get(field.trim()).and_then(Value::as_str) == Some(wanted))?;
        }
    }
    Some(current)
}

/// `path` split at the dots that are neither escaped (`\.`) nor inside a `[...]` filter.
fn segments(path: &str) -> Vec<String> {
    let mut segments = vec![String::new()];
    let mut depth = 0usize;
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        let last = segments.last_mut().expect("never empty");
        match c {
            '\\' => last.extend(chars.next()),
            '[' => {
                depth += 1;
                last.push(c);
            }
            ']' => {
                depth = depth.saturating_sub(1);
                last.push(c);
            }
            '.' if depth == 0 => segments.push(String::new()),
            _ => last.push(c),
        }
    }
    segments
}

fn cell(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => json!("<none>"),
        Some(Value::String(s)) => json!(s),
        Some(other) => json!(other.to_string()),
    }
}

/// Kubernetes' short age format (`45s`, `12m`, `3h`, `5d`).
pub fn age(created: Option<&str>, now: SystemTime) -> String {
    let Some(created) = created.and_then(parse_rfc3339) else {
        return "<unknown>".to_string();
    };
    let secs = now
        .duration_since(created)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A Table of `objects`.
pub fn table(
    rt: &ResourceType,
    version: &str,
    objects: &[&Value],
    now: SystemTime,
    list_rv: &str,
) -> Value {
    let custom: Vec<(String, String)> = rt
        .printer_columns
        .get(version)
        .map(|cols| {
            cols.iter()
                .filter(|c| c.get("name").and_then(Value::as_str) != Some("Age"))
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or_default().to_string(),
                        c["jsonPath"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_else(|| builtin_columns(rt));
    let mut definitions = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}),
    ];
    definitions.extend(custom.iter().map(|(name, _)| json!({"name": name, "type": "string", "format": "", "description": name, "priority": 0})));
    definitions.push(
        json!({"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0}),
    );
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut cells = vec![cell(obj.pointer("/metadata/name"))];
            cells.extend(custom.iter().map(|(_, path)| cell(lookup(obj, path))));
            cells.push(json!(age(
                obj.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str),
                now
            )));
            json!({"cells": cells, "object": {
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or(Value::Null),
            }})
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": list_rv},
        "columnDefinitions": definitions, "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn printer_column_paths_with_escaped_dots_and_filters() {
        let claim = json!({
            "metadata": {"labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "status": {"conditions": [
                {"type": "Launched", "status": "True"},
                {"type": "Ready", "status": "False"}]},
        });
        let at = |p: &str| lookup(&claim, p).cloned();
        assert_eq!(
            at(r".metadata.labels.node\.kubernetes\.io/instance-type"),
            Some(json!("m5.large"))
        );
        assert_eq!(
            at(r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("False"))
        );
        assert_eq!(
            at(r#".status.conditions[?(@.type=="Drifted")].status"#),
            None
        );
        assert_eq!(
            at(".status.conditions"),
            claim["status"].get("conditions").cloned()
        );
    }

    #[test]
    fn ages_and_accept_headers() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + 3 * 86_400);
        assert_eq!(age(Some("2023-11-14T22:13:20Z"), now), "3d");
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }
}
