//! `meta.k8s.io/v1` Table responses for kubectl's human-readable `get`: for a custom
//! resource, a name column and its CRD's `additionalPrinterColumns` (the JSONPath subset they
//! use, see [`lookup`]; `date` columns as ages; `priority` kept, so `-o wide` shows the rest);
//! for built-in kinds the columns the real server's printers compute ([`builtin`]). Rows
//! carry the object's metadata, the whole object or nothing, as `includeObject` asks
//! (kubectl's `--sort-by` sorts on whole objects).

mod builtin;

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

/// Evaluates the JSONPath subset printer columns use: `.a.b`, keys with escaped dots
/// (`.metadata.labels.node\.kubernetes\.io/instance-type`) and one-field filters on lists
/// (`.status.conditions[?(@.type=="Ready")].status`, the first match).
pub(crate) fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
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

/// What each row carries besides its cells (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Include {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object, which `kubectl get --sort-by` sorts on.
    Object,
}

impl Include {
    /// From the query parameter's value (anything else: the default).
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// A Table of `objects`.
pub fn table(
    rt: &ResourceType,
    version: &str,
    objects: &[&Value],
    now: SystemTime,
    list_rv: &str,
    include: Include,
) -> Value {
    let columns = match rt.printer_columns.get(version) {
        Some(declared) => crd_columns(declared),
        None => builtin::columns(rt),
    };
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.kind, "format": c.format,
                "description": c.name, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells: Vec<Value> = columns.iter().map(|c| c.cell(obj, now)).collect();
            let mut row = json!({"cells": cells});
            match include {
                Include::None => {}
                Include::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj.get("metadata").cloned().unwrap_or(Value::Null),
                    });
                }
                Include::Object => row["object"] = (*obj).clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": list_rv},
        "columnDefinitions": definitions, "rows": rows,
    })
}

/// Where a column's cell comes from.
pub(crate) enum Source {
    /// A printer-column JSONPath.
    Path(String),
    /// The age of the timestamp at this JSONPath (printer columns of `type: date`).
    AgeAt(String),
    /// Computed from the object as the real server's printers compute it.
    Computed(fn(&Value, SystemTime) -> Value),
}

/// One column of a Table.
pub(crate) struct Column {
    pub name: String,
    /// `string`, `integer`, `date`, ...
    pub kind: String,
    /// `name` for the object's name column.
    pub format: String,
    /// 0: always shown; 1 and up: with `-o wide` only.
    pub priority: u64,
    pub source: Source,
}

impl Column {
    pub(crate) fn computed(
        name: &str,
        priority: u64,
        compute: fn(&Value, SystemTime) -> Value,
    ) -> Self {
        Self {
            name: name.to_owned(),
            kind: "string".to_owned(),
            format: String::new(),
            priority,
            source: Source::Computed(compute),
        }
    }

    fn cell(&self, object: &Value, now: SystemTime) -> Value {
        match &self.source {
            Source::Path(path) => match lookup(object, path) {
                None | Some(Value::Null) => json!("<none>"),
                Some(Value::String(s)) => json!(s),
                Some(other) => json!(other.to_string()),
            },
            Source::AgeAt(path) => json!(age(lookup(object, path).and_then(Value::as_str), now)),
            Source::Computed(compute) => compute(object, now),
        }
    }
}

/// The name column, then a CRD's `additionalPrinterColumns` as declared (dates as ages).
fn crd_columns(declared: &[Value]) -> Vec<Column> {
    let mut columns = vec![builtin::name()];
    columns.extend(declared.iter().map(|c| {
        let text = |key: &str| c.get(key).and_then(Value::as_str).unwrap_or_default();
        let path = text("jsonPath").to_owned();
        let kind = text("type");
        Column {
            name: text("name").to_owned(),
            kind: kind.to_owned(),
            format: text("format").to_owned(),
            priority: c.get("priority").and_then(Value::as_u64).unwrap_or(0),
            source: if kind == "date" {
                Source::AgeAt(path)
            } else {
                Source::Path(path)
            },
        }
    }));
    columns
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
