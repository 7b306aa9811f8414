//! Strict decoding of built-in kinds, as the API server decodes a write whose client asked
//! for `fieldValidation=Strict` (kubectl's default): a field the kind's Go type does not
//! declare is refused, named by its path (`spec.template.spec.containers[0].imagee`).
//!
//! The emulator carries no schemas for built-ins; the kind's k8s-openapi type stands in:
//! the object is decoded into it and encoded again, and every non-null field of the input
//! that the round trip lost is one the type does not declare. Maps with free keys (labels,
//! resource lists, selectors) survive the round trip whole, so only real fields are named.
//! Only writes that ask for strict validation pay for the round trip; an object the type
//! cannot decode at all is not judged here: the rest of the write path takes it.

use k8s_openapi::api::{apps, coordination, core, events, policy, rbac, storage};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The fields of `object`, a built-in `kind` of `group`, that the kind does not declare;
/// empty for kinds without a typed form here (custom resources have their schemas).
pub fn unknown_fields(group: &str, kind: &str, object: &Value) -> Vec<String> {
    let round_trip = match (group, kind) {
        ("", "Pod") => round_trip::<core::v1::Pod>,
        ("", "Node") => round_trip::<core::v1::Node>,
        ("", "Namespace") => round_trip::<core::v1::Namespace>,
        ("", "Event") => round_trip::<core::v1::Event>,
        ("", "PersistentVolume") => round_trip::<core::v1::PersistentVolume>,
        ("", "PersistentVolumeClaim") => round_trip::<core::v1::PersistentVolumeClaim>,
        ("", "ConfigMap") => round_trip::<core::v1::ConfigMap>,
        ("", "Secret") => round_trip::<core::v1::Secret>,
        ("", "ServiceAccount") => round_trip::<core::v1::ServiceAccount>,
        ("", "Service") => round_trip::<core::v1::Service>,
        ("apps", "DaemonSet") => round_trip::<apps::v1::DaemonSet>,
        ("apps", "Deployment") => round_trip::<apps::v1::Deployment>,
        ("apps", "ReplicaSet") => round_trip::<apps::v1::ReplicaSet>,
        ("apps", "StatefulSet") => round_trip::<apps::v1::StatefulSet>,
        ("policy", "PodDisruptionBudget") => round_trip::<policy::v1::PodDisruptionBudget>,
        ("storage.k8s.io", "StorageClass") => round_trip::<storage::v1::StorageClass>,
        ("storage.k8s.io", "CSINode") => round_trip::<storage::v1::CSINode>,
        ("storage.k8s.io", "VolumeAttachment") => round_trip::<storage::v1::VolumeAttachment>,
        ("coordination.k8s.io", "Lease") => round_trip::<coordination::v1::Lease>,
        ("rbac.authorization.k8s.io", "ClusterRole") => round_trip::<rbac::v1::ClusterRole>,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            round_trip::<rbac::v1::ClusterRoleBinding>
        }
        ("rbac.authorization.k8s.io", "Role") => round_trip::<rbac::v1::Role>,
        ("rbac.authorization.k8s.io", "RoleBinding") => round_trip::<rbac::v1::RoleBinding>,
        ("events.k8s.io", "Event") => round_trip::<events::v1::Event>,
        _ => return Vec::new(),
    };
    let Some(decoded) = round_trip(object) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    lost_fields(object, &decoded, &mut String::new(), &mut unknown);
    unknown
}

/// `object` decoded into `T` and encoded again; `None` when it does not decode.
fn round_trip<T: DeserializeOwned + Serialize>(object: &Value) -> Option<Value> {
    let typed: T = serde_json::from_value(object.clone()).ok()?;
    serde_json::to_value(typed).ok()
}

/// Pushes the path of every non-null field of `input` that `decoded` lacks.
fn lost_fields(input: &Value, decoded: &Value, path: &mut String, unknown: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(fields), Value::Object(kept)) => {
            for (name, value) in fields {
                if value.is_null() {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                match kept.get(name) {
                    Some(kept) => lost_fields(value, kept, path, unknown),
                    None => unknown.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Value::Array(items), Value::Array(kept)) => {
            for (index, (item, kept)) in items.iter().zip(kept).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                lost_fields(item, kept, path, unknown);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(spec: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"any.key/x": "y"}, "creationTimestamp": null},
            "spec": spec,
        })
    }

    #[test]
    fn a_field_the_kind_does_not_declare_is_named_by_its_path() {
        let object = deployment(json!({
            "replicass": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "a", "image": "nginx"},
                    {"name": "b", "imagee": "nginx", "resources": {"requests": {"cpu": "1"}}},
                ]},
            },
        }));
        assert_eq!(
            unknown_fields("apps", "Deployment", &object),
            ["spec.replicass", "spec.template.spec.containers[1].imagee"]
        );
    }

    #[test]
    fn declared_fields_free_keyed_maps_and_nulls_pass() {
        let object = deployment(json!({
            "replicas": 3,
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"a/b": "c"}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                    "containers": [{"name": "a", "image": "nginx", "securityContext": {},
                        "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}],
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                },
            },
        }));
        assert!(unknown_fields("apps", "Deployment", &object).is_empty());
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}], "resources": {"requests": {"cpu": "1"}}}});
        assert!(
            unknown_fields("", "Pod", &pod).is_empty(),
            "pod-level resources"
        );
    }

    #[test]
    fn kinds_without_a_typed_form_are_not_judged_here() {
        let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "spec": {"x": 1}});
        assert!(unknown_fields("karpenter.sh", "NodePool", &pool).is_empty());
    }
}
