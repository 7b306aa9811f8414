//! Server-side apply (`application/apply-patch+yaml`): the applied configuration is merged
//! into the live object (maps recursively; lists by their merge keys — the built-in patch
//! keys, or a CRD schema's `x-kubernetes-list-type: map`/`set` — atomic lists replaced),
//! and fields this manager applied before but left out now are removed unless another
//! applier also owns them. Ownership is recorded in `metadata.managedFields` (FieldsV1), so
//! re-applying a smaller configuration shrinks the object as on a real server. Conflicts
//! are detected between appliers only (fields written by plain updates are not tracked):
//! without `force`, changing a value another applier owns is a 409.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult, Reason};
use super::resources::ResourceType;
use super::schema::Schema;

/// How a list merges under apply.
#[derive(Debug, Clone, PartialEq)]
pub enum ListKind {
    /// Elements identified by these key fields.
    Keyed(Vec<String>),
    /// Primitive values identified by themselves.
    Set,
    /// Replaced whole.
    Atomic,
}

/// Where list semantics come from.
#[derive(Debug, Clone)]
pub enum Lists {
    /// Built-in kinds: their strategic-merge patch keys.
    Builtin,
    /// Custom resources: the version's schema.
    Schema(Option<Arc<Schema>>),
}

/// The list semantics for a resource version.
pub fn strategy_for(rt: &ResourceType, version: &str) -> Lists {
    if rt.strategic_merge {
        Lists::Builtin
    } else {
        Lists::Schema(rt.schemas.get(version).cloned())
    }
}

impl Lists {
    fn kind(&self, path: &[String]) -> ListKind {
        match self {
            Lists::Builtin => {
                let Some((key, parent)) = path.split_last() else {
                    return ListKind::Atomic;
                };
                match super::patch::builtin_list_key(parent, key) {
                    Some(Some(k)) => ListKind::Keyed(vec![k.to_string()]),
                    Some(None) => ListKind::Set,
                    None => ListKind::Atomic,
                }
            }
            Lists::Schema(None) => ListKind::Atomic,
            Lists::Schema(Some(schema)) => schema_list_kind(schema.root(), path),
        }
    }
}

fn schema_list_kind(root: &Value, path: &[String]) -> ListKind {
    let mut node = root;
    for key in path {
        if node.get("type").and_then(Value::as_str) == Some("array") {
            node = node.get("items").unwrap_or(&Value::Null);
        }
        node = match node.pointer(&format!(
            "/properties/{}",
            key.replace('~', "~0").replace('/', "~1")
        )) {
            Some(n) => n,
            None => match node.get("additionalProperties") {
                Some(n) if n.is_object() => n,
                _ => return ListKind::Atomic,
            },
        };
    }
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => ListKind::Keyed(
            node.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Some("set") => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

const SERVER_META: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
];

fn skipped(path: &[String], key: &str) -> bool {
    (path.is_empty() && matches!(key, "apiVersion" | "kind"))
        || (path.len() == 1
            && path[0] == "metadata"
            && (SERVER_META.contains(&key) || key.starts_with("deletion")))
}

fn element_key(element: &Value, keys: &[String]) -> String {
    let mut id = Map::new();
    for key in keys {
        id.insert(
            key.clone(),
            element.get(key).cloned().unwrap_or(Value::Null),
        );
    }
    format!("k:{}", Value::Object(id))
}

/// The FieldsV1 set of the fields `config` sets.
fn field_set(config: &Value, path: &mut Vec<String>, lists: &Lists) -> Map<String, Value> {
    let mut set = Map::new();
    let Some(map) = config.as_object() else {
        return set;
    };
    for (key, value) in map {
        if skipped(path, key) {
            continue;
        }
        path.push(key.clone());
        let child = match value {
            Value::Object(o) if !o.is_empty() => field_set(value, path, lists),
            Value::Array(items) => match lists.kind(path) {
                ListKind::Keyed(keys) => items
                    .iter()
                    .map(|e| {
                        (
                            element_key(e, &keys),
                            Value::Object(field_set(e, path, lists)),
                        )
                    })
                    .collect(),
                ListKind::Set => items
                    .iter()
                    .map(|e| (format!("v:{e}"), json!({})))
                    .collect(),
                ListKind::Atomic => Map::new(),
            },
            _ => Map::new(),
        };
        path.pop();
        set.insert(format!("f:{key}"), Value::Object(child));
    }
    set
}

/// Merges `applied` into `live`.
fn merge(live: &mut Value, applied: &Value, path: &mut Vec<String>, lists: &Lists) {
    let Some(applied_map) = applied.as_object() else {
        *live = applied.clone();
        return;
    };
    if !live.is_object() {
        *live = Value::Object(Map::new());
    }
    let Some(live_map) = live.as_object_mut() else {
        return;
    };
    for (key, value) in applied_map {
        if skipped(path, key) && !(path.len() == 1 && matches!(key.as_str(), "name" | "namespace"))
        {
            continue;
        }
        if value.is_null() {
            live_map.shift_remove(key);
            continue;
        }
        path.push(key.clone());
        let slot = live_map.entry(key.clone()).or_insert(Value::Null);
        match (value, lists.kind(path)) {
            (Value::Object(_), _) => merge(slot, value, path, lists),
            (Value::Array(items), ListKind::Keyed(keys)) => {
                if !slot.is_array() {
                    *slot = json!([]);
                }
                if let Some(existing) = slot.as_array_mut() {
                    for item in items {
                        let id = element_key(item, &keys);
                        match existing.iter_mut().find(|e| element_key(e, &keys) == id) {
                            Some(e) => merge(e, item, path, lists),
                            None => existing.push(item.clone()),
                        }
                    }
                }
            }
            (Value::Array(items), ListKind::Set) => {
                if !slot.is_array() {
                    *slot = json!([]);
                }
                if let Some(existing) = slot.as_array_mut() {
                    for item in items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                }
            }
            _ => *slot = value.clone(),
        }
        path.pop();
    }
}

fn owned_by_any(others: &[&Map<String, Value>], key: &str) -> bool {
    others.iter().any(|o| o.contains_key(key))
}

fn children<'a>(others: &[&'a Map<String, Value>], key: &str) -> Vec<&'a Map<String, Value>> {
    others
        .iter()
        .filter_map(|o| o.get(key).and_then(Value::as_object))
        .collect()
}

/// Removes from `live` what `old` owned, `new` no longer sets and no one else owns.
fn remove_stale(
    live: &mut Value,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    others: &[&Map<String, Value>],
    keys: Option<&[String]>,
) {
    let empty = Map::new();
    for (entry, old_child) in old {
        let old_child = old_child.as_object().unwrap_or(&empty);
        let new_child = new.get(entry).and_then(Value::as_object);
        let other_children = children(others, entry);
        let drop_whole = new_child.is_none() && !owned_by_any(others, entry);
        let new_child = new_child.unwrap_or(&empty);
        if let Some(field) = entry.strip_prefix("f:") {
            let Some(map) = live.as_object_mut() else {
                continue;
            };
            if drop_whole {
                map.shift_remove(field);
            } else if let Some(child) = map.get_mut(field) {
                let element_keys = old_child
                    .keys()
                    .find_map(|k| k.strip_prefix("k:"))
                    .and_then(|j| serde_json::from_str::<Map<String, Value>>(j).ok())
                    .map(|m| m.keys().cloned().collect::<Vec<_>>());
                remove_stale(
                    child,
                    old_child,
                    new_child,
                    &other_children,
                    element_keys.as_deref(),
                );
            }
        } else if let Some(id) = entry.strip_prefix("k:") {
            let (Some(items), Some(keys)) = (live.as_array_mut(), keys) else {
                continue;
            };
            let id = format!("k:{id}");
            if drop_whole {
                items.retain(|e| element_key(e, keys) != id);
            } else if let Some(element) = items.iter_mut().find(|e| element_key(e, keys) == id) {
                remove_stale(element, old_child, new_child, &other_children, None);
            }
        } else if let Some(value) = entry.strip_prefix("v:") {
            let (Some(items), Ok(value)) =
                (live.as_array_mut(), serde_json::from_str::<Value>(value))
            else {
                continue;
            };
            if drop_whole {
                items.retain(|e| *e != value);
            }
        }
    }
}

/// Leaf paths of a field set (for conflict messages).
fn leaves(set: &Map<String, Value>, prefix: &str, out: &mut Vec<String>) {
    for (entry, child) in set {
        let name = entry
            .strip_prefix("f:")
            .map(|f| format!("{prefix}.{f}"))
            .unwrap_or_else(|| format!("{prefix}[{}]", &entry[2..]));
        match child.as_object() {
            Some(c) if !c.is_empty() => leaves(c, &name, out),
            _ => out.push(name),
        }
    }
}

fn intersect(a: &Map<String, Value>, b: &Map<String, Value>) -> Map<String, Value> {
    let empty = Map::new();
    a.iter()
        .filter_map(|(k, va)| {
            let vb = b.get(k)?;
            let (ca, cb) = (
                va.as_object().unwrap_or(&empty),
                vb.as_object().unwrap_or(&empty),
            );
            if ca.is_empty() || cb.is_empty() {
                return Some((k.clone(), json!({})));
            }
            let inner = intersect(ca, cb);
            (!inner.is_empty()).then(|| (k.clone(), Value::Object(inner)))
        })
        .collect()
}

/// Applies `applied` for `manager` to `live` (absent when creating) and returns the result.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    now: &str,
    force: bool,
    lists: &Lists,
) -> ApiResult<Value> {
    let mut result = live.cloned().unwrap_or_else(|| json!({}));
    let managed: Vec<Value> = result
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_apply = |e: &Value| e.get("operation").and_then(Value::as_str) == Some("Apply");
    let is_mine =
        |e: &Value| e.get("manager").and_then(Value::as_str) == Some(manager) && is_apply(e);
    let fields = |e: &Value| {
        e.get("fieldsV1")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let old_set = managed
        .iter()
        .find(|e| is_mine(e))
        .map(fields)
        .unwrap_or_default();
    // Plain writes' Update entries stay as they are (see the module doc).
    let other_sets: Vec<(String, Map<String, Value>)> = managed
        .iter()
        .filter(|e| is_apply(e) && !is_mine(e))
        .map(|e| {
            (
                e.get("manager")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                fields(e),
            )
        })
        .collect();
    let new_set = field_set(applied, &mut Vec::new(), lists);
    if !force && let Some(live) = live {
        let mut conflicts = Vec::new();
        for (other, set) in &other_sets {
            let shared = intersect(&new_set, set);
            let mut paths = Vec::new();
            leaves(&shared, "", &mut paths);
            let mut probe = live.clone();
            merge(&mut probe, applied, &mut Vec::new(), lists);
            if !paths.is_empty() && strip_managed(&probe) != strip_managed(live) {
                conflicts.extend(
                    paths
                        .into_iter()
                        .map(|p| format!("conflict with \"{other}\": {p}")),
                );
            }
        }
        if !conflicts.is_empty() {
            return Err(ApiError::new(
                Reason::Conflict,
                format!(
                    "Apply failed with {} conflict(s): {}",
                    conflicts.len(),
                    conflicts.join(", ")
                ),
            ));
        }
    }
    merge(&mut result, applied, &mut Vec::new(), lists);
    let others: Vec<&Map<String, Value>> = other_sets.iter().map(|(_, s)| s).collect();
    remove_stale(&mut result, &old_set, &new_set, &others, None);
    let mut entries: Vec<Value> = managed.into_iter().filter(|e| !is_mine(e)).collect();
    if force {
        // Forcing takes ownership: other appliers lose the fields this apply sets.
        for entry in entries.iter_mut().filter(|e| is_apply(e)) {
            if let Some(set) = entry.get_mut("fieldsV1").and_then(Value::as_object_mut) {
                subtract(set, &new_set);
            }
        }
    }
    entries.push(json!({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": new_set}));
    super::meta::meta_mut(&mut result).insert("managedFields".into(), Value::Array(entries));
    Ok(result)
}

fn subtract(set: &mut Map<String, Value>, taken: &Map<String, Value>) {
    let keys: Vec<String> = set.keys().cloned().collect();
    for key in keys {
        let Some(taken_child) = taken.get(&key).and_then(Value::as_object) else {
            continue;
        };
        let leaf = taken_child.is_empty();
        let child_empty = match set.get_mut(&key).and_then(Value::as_object_mut) {
            Some(child) if !leaf => {
                subtract(child, taken_child);
                child.is_empty()
            }
            _ => true,
        };
        if leaf || child_empty {
            set.shift_remove(&key);
        }
    }
}

fn strip_managed(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_as(
        live: Option<&Value>,
        applied: Value,
        manager: &str,
        force: bool,
    ) -> ApiResult<Value> {
        apply(
            live,
            &applied,
            manager,
            "v1",
            "2024-01-01T00:00:00Z",
            force,
            &Lists::Builtin,
        )
    }

    #[test]
    fn reapplying_less_removes_what_this_manager_dropped() {
        let live = json!({"metadata": {"name": "n", "labels": {"keep": "1"}}});
        let first = apply_as(Some(&live), json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"taints": [{"key": "x"}]}}), "me", false).expect("first apply");
        assert_eq!(
            first["metadata"]["labels"],
            json!({"keep": "1", "a": "1", "b": "2"})
        );
        let second = apply_as(
            Some(&first),
            json!({"metadata": {"labels": {"a": "1"}}}),
            "me",
            false,
        )
        .expect("second apply");
        assert_eq!(second["metadata"]["labels"], json!({"keep": "1", "a": "1"}));
        assert!(second.get("spec").and_then(|s| s.get("taints")).is_none());
    }

    #[test]
    fn keyed_lists_merge_and_shared_fields_survive() {
        let live = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let a = apply_as(
            Some(&live),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            "a",
            false,
        )
        .expect("a");
        let b = apply_as(
            Some(&a),
            json!({"status": {"conditions": [{"type": "Healthy", "status": "True"}]}}),
            "b",
            false,
        )
        .expect("b");
        assert_eq!(b["status"]["conditions"].as_array().map(Vec::len), Some(2));
        let conflict = apply_as(
            Some(&b),
            json!({"status": {"conditions": [{"type": "Healthy", "status": "False"}]}}),
            "a",
            false,
        )
        .expect_err("b owns Healthy");
        assert_eq!(conflict.reason, Reason::Conflict);
        assert!(
            conflict.message.contains("conflict with \"b\""),
            "{}",
            conflict.message
        );
        let forced = apply_as(
            Some(&b),
            json!({"status": {"conditions": [{"type": "Healthy", "status": "False"}]}}),
            "a",
            true,
        )
        .expect("forced");
        let healthy = forced["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Healthy"))
            .cloned();
        assert_eq!(healthy.map(|c| c["status"].clone()), Some(json!("False")));
    }

    #[test]
    fn schema_list_types_drive_crd_merges() {
        let schema = Schema::new(
            json!({"type": "object", "properties": {"status": {"type": "object", "properties": {
                "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}}
            }}}}),
        );
        let lists = Lists::Schema(Some(Arc::new(schema)));
        let live = json!({"status": {"conditions": [{"type": "A", "status": "True"}]}});
        let out = apply(
            Some(&live),
            &json!({"status": {"conditions": [{"type": "B", "status": "True"}]}}),
            "m",
            "v1",
            "t",
            false,
            &lists,
        )
        .expect("apply");
        assert_eq!(
            out["status"]["conditions"].as_array().map(Vec::len),
            Some(2)
        );
    }
}
