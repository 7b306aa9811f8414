//! Patches computed from an object as read and the object as wanted: the JSON merge patch
//! (RFC 7386) between the two, carrying the read `resourceVersion` so the API server applies
//! it only to that version (optimistic locking). Lists such as taints, finalizers and
//! conditions are replaced whole by a merge patch, which is safe only under that lock: a
//! concurrent writer makes the patch fail with 409, and the next reconcile starts over from
//! the newer object.

use serde::Serialize;
use serde_json::{Map, Value};

/// The merge patch turning `old` into `new`; `None` when they are equal.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return Some(new.clone());
    };
    let mut patch = Map::new();
    for (key, value) in new {
        match old.get(key) {
            Some(previous) => {
                if let Some(change) = merge_diff(previous, value) {
                    patch.insert(key.clone(), change);
                }
            }
            None => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    Some(Value::Object(patch))
}

/// The merge patch from `read` to `wanted`, locked to `read`'s resourceVersion; `None`
/// when nothing changes.
pub fn locked<K: Serialize>(read: &K, wanted: &K, resource_version: Option<&str>) -> Option<Value> {
    let read = serde_json::to_value(read).ok()?;
    let wanted = serde_json::to_value(wanted).ok()?;
    let mut patch = merge_diff(&read, &wanted)?;
    if let (Some(version), Value::Object(fields)) = (resource_version, &mut patch) {
        let metadata = fields
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(metadata) = metadata {
            metadata.insert("resourceVersion".to_owned(), Value::from(version));
        }
    }
    Some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
    use serde_json::json;

    #[test]
    fn equal_documents_need_no_patch() {
        let doc = json!({"a": 1, "b": {"c": [1, 2]}});
        assert_eq!(merge_diff(&doc, &doc), None);
    }

    #[test]
    fn changes_additions_and_removals_are_minimal() {
        let old = json!({"keep": 1, "change": {"x": 1, "y": 2}, "drop": true, "list": [1, 2]});
        let new = json!({"keep": 1, "change": {"x": 1, "y": 3}, "add": "v", "list": [2]});
        let patch = merge_diff(&old, &new).expect("a patch");
        assert_eq!(
            patch,
            json!({"change": {"y": 3}, "add": "v", "list": [2], "drop": null})
        );
        // Applying the patch to the old document yields the new one.
        let mut applied = old.clone();
        apply(&mut applied, &patch);
        assert_eq!(applied, new);
    }

    fn apply(target: &mut Value, patch: &Value) {
        match (target, patch) {
            (Value::Object(t), Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.shift_remove(k);
                    } else {
                        apply(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            (t, p) => *t = p.clone(),
        }
    }

    #[test]
    fn locked_patches_carry_the_read_resource_version() {
        let read = Node {
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: "a".into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                }]),
                ..NodeSpec::default()
            }),
            ..Node::default()
        };
        let mut wanted = read.clone();
        wanted.spec.as_mut().expect("spec").taints = Some(Vec::new());
        let patch = locked(&read, &wanted, Some("42")).expect("a patch");
        assert_eq!(
            patch,
            json!({"spec": {"taints": []}, "metadata": {"resourceVersion": "42"}})
        );
        assert_eq!(locked(&read, &read, Some("42")), None);
    }
}
