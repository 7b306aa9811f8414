//! Decoding a manifest object straight into the part of it kerf reads. A `kubectl get -o
//! yaml` dump is mostly bookkeeping no decision looks at — `managedFields`, container
//! statuses, node image lists, environment variables, probes, the contents of projected and
//! ConfigMap volumes — often several times the size of the rest. The seeds here walk the
//! parser's events and skip those subtrees without building them, so an object's memory
//! is what the planner and the validator read, however it was dumped.
//!
//! What is skipped is chosen by field path, not by kind (the kind may come after the fields
//! in a hand-written manifest), and only names that no Karpenter object uses at those places
//! are skipped, so `kerf validate` sees NodePools, NodeClaims and EC2NodeClasses whole.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Where in an object a value sits, which decides what inside it is skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Level {
    /// An object's top level.
    Root,
    /// `metadata`: `managedFields` is skipped.
    Metadata,
    /// Top-level `status`: per-container statuses and node image and volume lists are skipped.
    Status,
    /// Anything else: kept, except inside container and volume lists.
    Any,
    /// A `containers`, `initContainers` or `ephemeralContainers` list.
    Containers,
    /// One container: what it runs and how it is probed is skipped; resources, ports and
    /// name are kept.
    Container,
    /// A `volumes` list.
    Volumes,
    /// One volume: the contents of file-projecting sources are emptied (the source itself is
    /// kept, so the volume still has exactly one).
    Volume,
}

const STATUS_SKIPPED: &[&str] = &[
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
    "images",
    "volumesInUse",
    "volumesAttached",
];

const CONTAINER_SKIPPED: &[&str] = &[
    "env",
    "envFrom",
    "command",
    "args",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "volumeMounts",
    "volumeDevices",
];

const VOLUME_EMPTIED: &[&str] = &["projected", "configMap", "secret", "downwardAPI"];

/// What to do with the value under `key` at `level`.
#[derive(Clone, Copy)]
pub(super) enum Field {
    Keep(Level),
    Skip,
    /// Keep the key with an empty object.
    Empty,
}

pub(super) fn field(level: Level, key: &str) -> Field {
    match (level, key) {
        (Level::Root, "metadata") => Field::Keep(Level::Metadata),
        (Level::Root, "status") => Field::Keep(Level::Status),
        (Level::Metadata, "managedFields") => Field::Skip,
        (Level::Status, key) if STATUS_SKIPPED.contains(&key) => Field::Skip,
        (Level::Container, key) if CONTAINER_SKIPPED.contains(&key) => Field::Skip,
        (Level::Volume, key) if VOLUME_EMPTIED.contains(&key) => Field::Empty,
        (_, "containers" | "initContainers" | "ephemeralContainers") => {
            Field::Keep(Level::Containers)
        }
        (_, "volumes") if level != Level::Status => Field::Keep(Level::Volumes),
        _ => Field::Keep(Level::Any),
    }
}

/// The level of a sequence's elements.
pub(super) fn element(level: Level) -> Level {
    match level {
        Level::Containers => Level::Container,
        Level::Volumes => Level::Volume,
        _ => Level::Any,
    }
}

/// A value decoded with the pruning of its level.
#[derive(Clone, Copy)]
struct Prune(Level);

/// One manifest object (or any value where an object was expected), pruned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrunedObject(pub Value);

impl<'de> de::Deserialize<'de> for PrunedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Prune(Level::Root)
            .deserialize(deserializer)
            .map(PrunedObject)
    }
}

/// Decodes the object-level fields of a map whose `key` was already read.
pub(crate) fn root_field<'de, A: MapAccess<'de>>(
    map: &mut A,
    key: &str,
) -> Result<Option<Value>, A::Error> {
    next_field(map, Level::Root, key)
}

fn next_field<'de, A: MapAccess<'de>>(
    map: &mut A,
    level: Level,
    key: &str,
) -> Result<Option<Value>, A::Error> {
    match field(level, key) {
        Field::Keep(inner) => map.next_value_seed(Prune(inner)).map(Some),
        Field::Skip => map.next_value::<IgnoredAny>().map(|_| None),
        Field::Empty => map
            .next_value::<IgnoredAny>()
            .map(|_| Some(Value::Object(Map::new()))),
    }
}

impl<'de> DeserializeSeed<'de> for Prune {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Prune {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = Prune(element(self.0));
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if let Some(value) = next_field(&mut map, self.0, &key)? {
                out.insert(key, value);
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pruned(value: Value) -> Value {
        let text = value.to_string();
        let json: PrunedObject = serde_json::from_str(&text).expect("json");
        let yaml: PrunedObject = serde_saphyr::from_str(&text).expect("yaml");
        assert_eq!(json, yaml, "JSON and YAML decode alike");
        json.0
    }

    #[test]
    fn bookkeeping_is_skipped_and_decisions_kept() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "a"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
            "spec": {
                "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
                    "command": ["x"], "livenessProbe": {"exec": {}}, "volumeMounts": [],
                    "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "initContainers": [{"name": "i", "args": ["y"], "resources": {}}],
                "volumes": [
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}],
                "containerStatuses": [{"name": "c"}]}
        });
        let expected = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "a"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
            "spec": {
                "containers": [{"name": "c", "image": "i",
                    "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "initContainers": [{"name": "i", "resources": {}}],
                "volumes": [
                    {"name": "token", "projected": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
        });
        assert_eq!(pruned(pod), expected);
    }

    #[test]
    fn workload_templates_are_pruned_like_pods() {
        let deployment = json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "c", "env": [], "resources": {"requests": {"memory": "1Gi"}}}]}}}});
        let expected = json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}]}}}});
        assert_eq!(pruned(deployment), expected);
    }

    #[test]
    fn node_image_lists_go_and_capacity_stays() {
        let node = json!({"kind": "Node", "status": {"capacity": {"cpu": "4"},
            "images": [{"names": ["a"]}], "volumesInUse": ["v"], "nodeInfo": {"architecture": "amd64"}}});
        let expected = json!({"kind": "Node", "status": {"capacity": {"cpu": "4"},
            "nodeInfo": {"architecture": "amd64"}}});
        assert_eq!(pruned(node), expected);
    }

    #[test]
    fn karpenter_objects_are_kept_whole() {
        let class = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                "userData": "x", "tags": {"a": "b"}, "metadataOptions": {"httpTokens": "required"}},
            "status": {"amis": [{"id": "ami-1"}], "conditions": []}});
        assert_eq!(pruned(class.clone()), class);
    }
}
