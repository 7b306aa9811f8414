//! The three PATCH formats a controller sends: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and Kubernetes strategic merge patch. Strategic merge follows the patch
//! strategies of the built-in types: lists with a merge key (`containers` by `name`,
//! `conditions` by `type`, `ownerReferences` by `uid`, ...) merge element-wise, `finalizers`
//! merge as a set, every other list (including node `taints`, which the API marks atomic)
//! is replaced; the `$patch`, `$deleteFromPrimitiveList`, `$setElementOrder` and
//! `$retainKeys` directives are honoured.

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, everything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return;
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.shift_remove(key);
        } else {
            merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// RFC 6902 over `document`; fails (as a whole) with a message naming the failing op.
pub fn json_patch(document: &Value, operations: &Value) -> Result<Value, String> {
    let ops = operations
        .as_array()
        .ok_or("json patch must be an array of operations")?;
    let mut doc = document.clone();
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op).map_err(|e| format!("json patch operation {i} ({op}): {e}"))?;
    }
    Ok(doc)
}

fn apply_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let field = |name: &str| {
        op.get(name)
            .and_then(Value::as_str)
            .ok_or(format!("missing {name:?}"))
    };
    let path = field("path")?;
    match field("op")? {
        "add" => add(
            doc,
            path,
            op.get("value").cloned().ok_or("missing \"value\"")?,
        ),
        "remove" => remove(doc, path).map(drop),
        "replace" => {
            let value = op.get("value").cloned().ok_or("missing \"value\"")?;
            *pointer_mut(doc, path)? = value;
            Ok(())
        }
        "move" => {
            let value = remove(doc, field("from")?)?;
            add(doc, path, value)
        }
        "copy" => {
            let value = pointer_mut(doc, field("from")?)?.clone();
            add(doc, path, value)
        }
        "test" => {
            let expected = op.get("value").ok_or("missing \"value\"")?;
            if pointer_mut(doc, path)? == expected {
                Ok(())
            } else {
                Err("test failed".to_string())
            }
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

fn tokens(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| format!("path {path:?} must start with /"))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn pointer_mut<'a>(doc: &'a mut Value, path: &str) -> Result<&'a mut Value, String> {
    let mut node = doc;
    for token in tokens(path)? {
        node = match node {
            Value::Object(map) => map.get_mut(&token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("path {path:?} does not exist"))?;
    }
    Ok(node)
}

fn split_parent(path: &str) -> Result<(String, String), String> {
    let mut toks = tokens(path)?;
    let last = toks.pop().ok_or("cannot add or remove the document root")?;
    let parent = toks
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect();
    Ok((parent, last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_parent(path)?;
    match pointer_mut(doc, &parent)? {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let index = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>()
                    .map_err(|_| format!("bad index {last:?}"))?
            };
            if index > items.len() {
                return Err(format!("index {index} out of bounds"));
            }
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("parent of {path:?} is not a container")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_parent(path)?;
    match pointer_mut(doc, &parent)? {
        Value::Object(map) => map
            .shift_remove(&last)
            .ok_or_else(|| format!("path {path:?} does not exist")),
        Value::Array(items) => {
            let index = last
                .parse::<usize>()
                .map_err(|_| format!("bad index {last:?}"))?;
            if index < items.len() {
                Ok(items.remove(index))
            } else {
                Err(format!("index {index} out of bounds"))
            }
        }
        _ => Err(format!("parent of {path:?} is not a container")),
    }
}

/// How a list field merges under strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// Element-wise by this key.
    MergeKey(&'static str),
    /// Primitive list merged as a set.
    Set,
    /// Replaced as a whole.
    Atomic,
}

/// Patch strategy of the list field `key` whose parent object sits at `parent_path`.
fn list_strategy(parent_path: &[String], key: &str) -> ListStrategy {
    let in_container = parent_path.iter().any(|p| p.ends_with("ontainers"));
    match key {
        "finalizers" if parent_path.last().is_some_and(|p| p == "metadata") => ListStrategy::Set,
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims" => ListStrategy::MergeKey("name"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "ports" if in_container => ListStrategy::MergeKey("containerPort"),
        "ports" => ListStrategy::MergeKey("port"),
        "hostAliases" => ListStrategy::MergeKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        "conditions" | "addresses" => ListStrategy::MergeKey("type"),
        "ownerReferences" => ListStrategy::MergeKey("uid"),
        "podCIDRs" => ListStrategy::Set,
        _ => ListStrategy::Atomic,
    }
}

/// Applies a strategic merge patch to `target` (a built-in kind).
pub fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), String> {
    merge_object(target, patch, &mut Vec::new())
}

fn merge_object(target: &mut Value, patch: &Value, path: &mut Vec<String>) -> Result<(), String> {
    let Value::Object(patch_map) = patch else {
        *target = strip_directives(patch);
        return Ok(());
    };
    match patch_map.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = strip_directives(patch);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some(other) => return Err(format!("unknown patch type {other:?}")),
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return Ok(());
    };
    for (key, value) in patch_map {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(gone)) =
                (target_map.get_mut(field), value.as_array())
            {
                items.retain(|item| !gone.contains(item));
            }
            continue;
        }
        if key.starts_with("$setElementOrder/") || key == "$retainKeys" {
            continue;
        }
        if value.is_null() {
            target_map.shift_remove(key);
            continue;
        }
        path.push(key.clone());
        let result = merge_field(target_map, key, value, path);
        path.pop();
        result?;
    }
    if let Some(keep) = patch_map.get("$retainKeys").and_then(Value::as_array) {
        target_map.retain(|k, _| keep.iter().any(|v| v.as_str() == Some(k)));
    }
    Ok(())
}

fn merge_field(
    target_map: &mut Map<String, Value>,
    key: &str,
    value: &Value,
    path: &mut Vec<String>,
) -> Result<(), String> {
    let parent = &path[..path.len() - 1];
    match (value, list_strategy(parent, key)) {
        (Value::Array(items), ListStrategy::MergeKey(merge_key)) => {
            let current = target_map
                .entry(key.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            merge_keyed_list(current, items, merge_key, path)
        }
        (Value::Array(items), ListStrategy::Set) => {
            let current = target_map
                .entry(key.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if !current.is_array() {
                *current = Value::Array(Vec::new());
            }
            if let Value::Array(existing) = current {
                for item in items {
                    if !existing.contains(item) {
                        existing.push(item.clone());
                    }
                }
            }
            Ok(())
        }
        (Value::Object(_), _) => merge_object(
            target_map.entry(key.to_string()).or_insert(Value::Null),
            value,
            path,
        ),
        _ => {
            target_map.insert(key.to_string(), strip_directives(value));
            Ok(())
        }
    }
}

fn merge_keyed_list(
    current: &mut Value,
    patch_items: &[Value],
    merge_key: &str,
    path: &mut Vec<String>,
) -> Result<(), String> {
    if patch_items
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let kept = patch_items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
        *current = Value::Array(kept);
        return Ok(());
    }
    if !current.is_array() {
        *current = Value::Array(Vec::new());
    }
    let Value::Array(existing) = current else {
        return Ok(());
    };
    for item in patch_items {
        let Some(key_value) = item.get(merge_key) else {
            return Err(format!(
                "list element {item} has no merge key {merge_key:?}"
            ));
        };
        let position = existing
            .iter()
            .position(|e| e.get(merge_key) == Some(key_value));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            existing.retain(|e| e.get(merge_key) != Some(key_value));
            continue;
        }
        match position {
            Some(i) => merge_object(&mut existing[i], item, path)?,
            None => existing.push(strip_directives(item)),
        }
    }
    Ok(())
}

/// Removes `$`-directives from a value being inserted verbatim.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// The patch key of a built-in list field: `Some(Some(key))` for keyed lists,
/// `Some(None)` for primitive sets, `None` for atomic lists (used by server-side apply).
pub fn builtin_list_key(parent_path: &[String], key: &str) -> Option<Option<&'static str>> {
    match list_strategy(parent_path, key) {
        ListStrategy::MergeKey(k) => Some(Some(k)),
        ListStrategy::Set => Some(None),
        ListStrategy::Atomic => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn json_patch_ops() {
        let doc = json!({"metadata": {"labels": {"a/b": "1"}, "finalizers": ["x", "y"]}});
        let out = json_patch(&doc, &json!([
            {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "z"},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
            {"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"},
            {"op": "move", "from": "/metadata/annotations/a~1b", "path": "/metadata/annotations/c"},
        ]))
        .expect("valid patch");
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"a/b": "2"}, "finalizers": ["y", "z"], "annotations": {"c": "2"}}})
        );
        assert!(
            json_patch(
                &doc,
                &json!([{"op": "test", "path": "/metadata/labels/a~1b", "value": "9"}])
            )
            .is_err()
        );
        assert!(json_patch(&doc, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }

    #[test]
    fn strategic_merge_uses_merge_keys() {
        let mut pod = json!({
            "metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "rs"}]},
            "spec": {"containers": [{"name": "app", "image": "v1"}, {"name": "side", "image": "s1"}], "tolerations": [{"key": "x"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}
        });
        strategic_merge(&mut pod, &json!({
            "metadata": {"finalizers": ["b", "a"], "ownerReferences": [{"uid": "2", "name": "other"}]},
            "spec": {"containers": [{"name": "app", "image": "v2"}, {"name": "side", "$patch": "delete"}], "tolerations": [{"key": "y"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("valid");
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            pod["metadata"]["ownerReferences"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(
            pod["spec"]["containers"],
            json!([{"name": "app", "image": "v2"}])
        );
        assert_eq!(pod["spec"]["tolerations"], json!([{"key": "y"}]));
        assert_eq!(
            pod["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
        );
    }

    #[test]
    fn strategic_merge_directives_and_atomic_taints() {
        let mut node = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}]}});
        strategic_merge(&mut node, &json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "$setElementOrder/finalizers": ["b"]},
            "spec": {"taints": [{"key": "k2", "effect": "NoExecute"}]}
        }))
        .expect("valid");
        assert_eq!(node["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "k2", "effect": "NoExecute"}])
        );
        strategic_merge(
            &mut node,
            &json!({"spec": {"$patch": "replace", "unschedulable": true}}),
        )
        .expect("valid");
        assert_eq!(node["spec"], json!({"unschedulable": true}));
        assert!(
            strategic_merge(
                &mut node,
                &json!({"status": {"conditions": [{"status": "True"}]}})
            )
            .is_err()
        );
    }
}
