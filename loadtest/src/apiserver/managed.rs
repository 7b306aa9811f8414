//! `metadata.managedFields` for plain writes (create, update, patch), as the real server
//! keeps them: each write is recorded under its field manager (`fieldManager`, else the
//! client's User-Agent up to the first `/`, as the real server derives it) with
//! `operation: Update`, the `apiVersion`, the time, the `subresource` (`status`) and the
//! FieldsV1 set of the fields it changed; fields a manager takes over leave the other
//! Update managers' sets, and a set left empty drops its entry. Server-side apply keeps its
//! own `Apply` entries (see [`super::apply`]). Lists are owned whole (no per-item keys):
//! enough for clients that read who wrote what and for objects to carry the bytes a real
//! server's do.

use serde_json::{Map, Value, json};

/// Metadata the server sets itself; no manager owns it.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
];

/// The manager a write is recorded under: `fieldManager`, else the User-Agent's product.
pub(crate) fn manager_of(field_manager: Option<&str>, user_agent: Option<&str>) -> Option<String> {
    field_manager
        .or_else(|| user_agent.and_then(|agent| agent.split('/').next()))
        .map(str::trim)
        .filter(|manager| !manager.is_empty())
        .map(str::to_owned)
}

/// One write to record.
pub(crate) struct Write<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
    /// `Some("status")` for a status write.
    pub subresource: Option<&'a str>,
}

/// Records `write` in `new`'s managedFields: the fields that differ from `previous` (all of
/// them on create).
pub(crate) fn record(previous: Option<&Value>, new: &mut Value, write: &Write<'_>) {
    let mut changed = diff(previous.unwrap_or(&Value::Null), new);
    if let Some(meta) = changed.get_mut("f:metadata").and_then(Value::as_object_mut) {
        for field in SERVER_METADATA {
            meta.shift_remove(&format!("f:{field}"));
        }
        if meta.is_empty() {
            changed.shift_remove("f:metadata");
        }
    }
    for key in ["f:apiVersion", "f:kind"] {
        changed.shift_remove(key);
    }
    if changed.is_empty() {
        return;
    }
    let mut entries: Vec<Value> = new
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_mine = |e: &Value| {
        e["manager"] == write.manager
            && e["operation"] == "Update"
            && e.get("subresource").and_then(Value::as_str) == write.subresource
    };
    let mut mine = entries
        .iter()
        .find(|e| is_mine(e))
        .and_then(|e| e["fieldsV1"].as_object().cloned())
        .unwrap_or_default();
    entries.retain(|e| !is_mine(e));
    for entry in &mut entries {
        if entry["operation"] == "Update"
            && let Some(set) = entry.get_mut("fieldsV1").and_then(Value::as_object_mut)
        {
            subtract(set, &changed);
        }
    }
    entries.retain(|e| e["fieldsV1"].as_object().is_none_or(|set| !set.is_empty()));
    union(&mut mine, changed);
    let mut entry = json!({"manager": write.manager, "operation": "Update",
        "apiVersion": write.api_version, "time": write.time,
        "fieldsType": "FieldsV1", "fieldsV1": mine});
    if let Some(subresource) = write.subresource {
        entry["subresource"] = json!(subresource);
    }
    entries.push(entry);
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

/// The FieldsV1 set of what `new` has that `old` has not, or has with another value.
fn diff(old: &Value, new: &Value) -> Map<String, Value> {
    let mut set = Map::new();
    let Some(fields) = new.as_object() else {
        return set;
    };
    for (key, value) in fields {
        let before = old.get(key);
        if before == Some(value) {
            continue;
        }
        let child = match (before, value) {
            (Some(before @ Value::Object(_)), Value::Object(_)) => diff(before, value),
            (_, Value::Object(_)) => diff(&Value::Null, value),
            _ => Map::new(),
        };
        set.insert(format!("f:{key}"), Value::Object(child));
    }
    set
}

/// Removes from `set` the leaves of `taken` (a node left without children goes too).
fn subtract(set: &mut Map<String, Value>, taken: &Map<String, Value>) {
    for (key, taken_child) in taken {
        let Some(Value::Object(child)) = set.get_mut(key) else {
            continue;
        };
        let taken_child = taken_child.as_object().cloned().unwrap_or_default();
        if !taken_child.is_empty() && !child.is_empty() {
            subtract(child, &taken_child);
            if !child.is_empty() {
                continue;
            }
        }
        set.shift_remove(key);
    }
}

fn union(set: &mut Map<String, Value>, more: Map<String, Value>) {
    for (key, value) in more {
        match (set.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(more)) => union(existing, more),
            (_, value) => {
                set.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write<'a>(manager: &'a str, subresource: Option<&'a str>) -> Write<'a> {
        Write {
            manager,
            api_version: "v1",
            time: "2026-01-01T00:00:00Z",
            subresource,
        }
    }

    fn managers(object: &Value) -> Vec<(String, Value)> {
        object["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap_or_default().to_owned(),
                    e["fieldsV1"].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn each_manager_owns_what_it_wrote_last() {
        let created = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "u", "labels": {"a": "1"}},
            "spec": {"providerID": "aws:///x/i-1"}});
        let mut node = created.clone();
        record(None, &mut node, &write("kerf", None));
        assert_eq!(
            managers(&node),
            [(
                "kerf".to_owned(),
                json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:providerID": {}}})
            )]
        );

        let before = node.clone();
        node["status"] =
            json!({"conditions": [{"type": "Ready"}], "nodeInfo": {"kubeletVersion": "v1.33"}});
        record(Some(&before), &mut node, &write("kubelet", Some("status")));
        let before = node.clone();
        node["metadata"]["labels"]["a"] = json!("2");
        record(Some(&before), &mut node, &write("kubectl-label", None));

        let entries = &node["metadata"]["managedFields"];
        assert_eq!(entries[0]["manager"], "kerf");
        assert_eq!(
            entries[0]["fieldsV1"],
            json!({"f:spec": {"f:providerID": {}}}),
            "the label moved"
        );
        assert_eq!(entries[1]["manager"], "kubelet");
        assert_eq!(entries[1]["subresource"], "status");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:status": {"f:conditions": {}, "f:nodeInfo": {"f:kubeletVersion": {}}}})
        );
        assert_eq!(
            entries[2]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:a": {}}}})
        );

        let before = node.clone();
        node["spec"]["providerID"] = json!("aws:///x/i-2");
        record(Some(&before), &mut node, &write("other", None));
        let names: Vec<String> = managers(&node).into_iter().map(|(m, _)| m).collect();
        assert_eq!(
            names,
            ["kubelet", "kubectl-label", "other"],
            "kerf owns nothing left"
        );
    }

    #[test]
    fn an_unchanged_write_records_nothing_and_the_agent_names_the_manager() {
        let mut object = json!({"metadata": {"name": "x", "resourceVersion": "5"}});
        let before = object.clone();
        object["metadata"]["resourceVersion"] = json!("6");
        record(Some(&before), &mut object, &write("m", None));
        assert!(object["metadata"].get("managedFields").is_none());
        assert_eq!(
            manager_of(None, Some("kubelet/v1.33.0 (linux/amd64)")).as_deref(),
            Some("kubelet")
        );
        assert_eq!(
            manager_of(Some("kerf"), Some("kubectl/v1.32")).as_deref(),
            Some("kerf")
        );
        assert_eq!(manager_of(None, Some("")), None);
    }
}
