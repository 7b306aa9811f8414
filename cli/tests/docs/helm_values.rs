//! The Helm values page: every leaf key of deploy/chart/values.yaml with its default, its
//! description (the `# --` comment on the key, or on the nearest parent that has one, as
//! helm-docs reads them) and what kerf does with it (the chart README's "Values" table,
//! which the chart test requires to cover every key, or its nearest parent's row).

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::reference::GENERATED;
use super::{cell, repo};

pub fn page() -> String {
    let chart = repo().join("deploy/chart");
    let text = std::fs::read_to_string(chart.join("values.yaml")).unwrap();
    let values: Value = serde_saphyr::from_str(&text).unwrap();
    let descriptions = descriptions(&text);
    let status = readme_status(&std::fs::read_to_string(chart.join("README.md")).unwrap());
    let mut leaves = Vec::new();
    collect_leaves(&values, "", &mut leaves);
    let mut out = format!(
        "{GENERATED}\n\n# Helm values\n\n\
         The chart (`deploy/chart`) takes upstream Karpenter's values keys and defaults \
         unchanged (only the image differs), so an existing Karpenter values file installs \
         kerf. \"As upstream\" means the chart renders the value as upstream's chart does.\n\n\
         | key | default | description | what kerf does |\n|---|---|---|---|\n"
    );
    for (key, default) in leaves {
        let description = ancestors(&key)
            .find_map(|k| descriptions.get(k))
            .cloned()
            .unwrap_or_default();
        writeln!(
            out,
            "| `{key}` | `{}` | {} | {} |",
            cell(&default.to_string()),
            cell(&description),
            cell(
                ancestors(&key)
                    .find_map(|k| status.get(k))
                    .map_or("", String::as_str)
            )
        )
        .unwrap();
    }
    out
}

/// Every leaf key path (`settings.featureGates.nodeRepair`) with its value, in file order.
fn collect_leaves(value: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match value.as_object() {
        Some(map) if !map.is_empty() => {
            for (key, sub) in map {
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                collect_leaves(sub, &p, out);
            }
        }
        _ => out.push((path.to_owned(), value.clone())),
    }
}

/// `a.b.c`, then `a.b`, then `a`.
fn ancestors(key: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(key), |k| k.rsplit_once('.').map(|(parent, _)| parent))
}

/// Key path → its `# --` comment (with the `#` lines that continue it).
fn descriptions(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut comment: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(rest) = trimmed.strip_prefix("# --") {
            comment = Some(rest.trim().to_owned());
            continue;
        }
        if let (Some(rest), Some(c)) = (trimmed.strip_prefix('#'), comment.as_mut()) {
            c.push(' ');
            c.push_str(rest.trim());
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            comment = None;
            continue;
        };
        if trimmed.starts_with('-') || trimmed.starts_with('#') || key.contains(' ') {
            comment = None;
            continue;
        }
        stack.retain(|(i, _)| *i < indent);
        let key = key.trim_matches('"');
        let path = stack
            .iter()
            .map(|(_, k)| k.as_str())
            .chain([key])
            .collect::<Vec<_>>()
            .join(".");
        if let Some(c) = comment.take() {
            out.insert(path, c);
        }
        stack.push((indent, key.to_owned()));
    }
    out
}

/// The chart README's "Values" table: key → what kerf does with it.
fn readme_status(readme: &str) -> HashMap<String, String> {
    readme
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("| `")?;
            let (key, status) = rest.split_once("` | ")?;
            Some((
                key.to_owned(),
                status.trim_end_matches(" |").trim().to_owned(),
            ))
        })
        .collect()
}
