//! The writes the LaunchTemplateCache makes on an EC2NodeClass, computed purely from the
//! object as cluster state holds it and what the provider resolved: the status (a merge
//! patch that also clears fields the new status no longer has, with unchanged conditions
//! keeping their `lastTransitionTime`), the hash annotations, and the termination finalizer
//! added or removed (carrying the object's `resourceVersion`, so a concurrent change to the
//! finalizer list fails with a conflict instead of being overwritten). Each returns `None`
//! when the object already is as wanted, which keeps a steady-state reconcile write-free.

use std::collections::BTreeMap;

use kerf::api::{EC2NodeClass, EC2NodeClassStatus};
use kerf::labels;
use serde_json::{Map, Value, json};

/// Gives every condition of `new` whose type and status are unchanged from `old` its old
/// `lastTransitionTime`: a transition time records a change of status, not a re-resolution.
pub fn carry_transition_times(new: &mut EC2NodeClassStatus, old: Option<&EC2NodeClassStatus>) {
    let Some(old) = old else {
        return;
    };
    for condition in &mut new.conditions {
        if let Some(before) = old
            .conditions
            .iter()
            .find(|c| c.type_ == condition.type_ && c.status == condition.status)
        {
            condition.last_transition_time = before.last_transition_time.clone();
        }
    }
}

/// The status subresource merge patch turning `old` into `new`, or `None` when they are equal.
/// Fields `old` has and `new` lacks are set to null, so they are removed.
pub fn status_patch(new: &EC2NodeClassStatus, old: Option<&EC2NodeClassStatus>) -> Option<Value> {
    let new = to_map(new);
    let old = old.map(to_map).unwrap_or_default();
    if new == old {
        return None;
    }
    let mut patch = new;
    for key in old.keys() {
        patch.entry(key.clone()).or_insert(Value::Null);
    }
    Some(json!({ "status": patch }))
}

fn to_map(status: &EC2NodeClassStatus) -> Map<String, Value> {
    match serde_json::to_value(status) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// The metadata merge patch setting `wanted` annotations the node class lacks or holds with
/// another value, or `None` when it carries them all.
pub fn annotations_patch(
    node_class: &EC2NodeClass,
    wanted: &BTreeMap<String, String>,
) -> Option<Value> {
    let current = node_class.metadata.annotations.as_ref();
    let changed: BTreeMap<&String, &String> = wanted
        .iter()
        .filter(|(k, v)| current.and_then(|a| a.get(*k)) != Some(*v))
        .collect();
    (!changed.is_empty()).then(|| json!({ "metadata": { "annotations": changed } }))
}

fn finalizers(node_class: &EC2NodeClass) -> Vec<String> {
    node_class.metadata.finalizers.clone().unwrap_or_default()
}

/// Whether the node class holds the termination finalizer.
pub fn has_finalizer(node_class: &EC2NodeClass) -> bool {
    finalizers(node_class)
        .iter()
        .any(|f| f == labels::EC2NODECLASS_TERMINATION_FINALIZER)
}

fn finalizers_patch(node_class: &EC2NodeClass, list: Vec<String>) -> Value {
    json!({ "metadata": {
        "finalizers": list,
        "resourceVersion": node_class.metadata.resource_version,
    }})
}

/// The patch adding the termination finalizer, or `None` when it is there.
pub fn add_finalizer_patch(node_class: &EC2NodeClass) -> Option<Value> {
    if has_finalizer(node_class) {
        return None;
    }
    let mut list = finalizers(node_class);
    list.push(labels::EC2NODECLASS_TERMINATION_FINALIZER.to_owned());
    Some(finalizers_patch(node_class, list))
}

/// The patch removing the termination finalizer, or `None` when it is not there.
pub fn remove_finalizer_patch(node_class: &EC2NodeClass) -> Option<Value> {
    if !has_finalizer(node_class) {
        return None;
    }
    let list = finalizers(node_class)
        .into_iter()
        .filter(|f| f != labels::EC2NODECLASS_TERMINATION_FINALIZER)
        .collect();
    Some(finalizers_patch(node_class, list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kerf::api::ec2nodeclass::Subnet;
    use kerf::api::{Condition, ConditionStatus};

    fn node_class(metadata: Value) -> EC2NodeClass {
        let mut meta = json!({"name": "default", "resourceVersion": "7"});
        if let (Some(m), Value::Object(extra)) = (meta.as_object_mut(), metadata) {
            m.extend(extra);
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": meta,
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}]},
        }))
        .expect("test node class parses")
    }

    fn condition(type_: &str, status: ConditionStatus, at: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status,
            observed_generation: Some(1),
            last_transition_time: Time(at.parse().expect("timestamp")),
            reason: type_.to_owned(),
            message: String::new(),
        }
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time_and_need_no_write() {
        let old = EC2NodeClassStatus {
            conditions: vec![
                condition("Ready", ConditionStatus::True, "2024-01-01T00:00:00Z"),
                condition("AMIsReady", ConditionStatus::True, "2024-01-01T00:00:00Z"),
            ],
            ..EC2NodeClassStatus::default()
        };
        let mut new = EC2NodeClassStatus {
            conditions: vec![
                condition("Ready", ConditionStatus::True, "2025-05-05T00:00:00Z"),
                condition("AMIsReady", ConditionStatus::False, "2025-05-05T00:00:00Z"),
            ],
            ..EC2NodeClassStatus::default()
        };
        carry_transition_times(&mut new, Some(&old));
        assert_eq!(
            new.conditions[0].last_transition_time,
            old.conditions[0].last_transition_time
        );
        assert_ne!(
            new.conditions[1].last_transition_time,
            old.conditions[1].last_transition_time
        );
        assert!(status_patch(&new, Some(&old)).is_some());
        assert!(status_patch(&old, Some(&old)).is_none());
    }

    #[test]
    fn fields_the_new_status_lacks_are_cleared() {
        let old = EC2NodeClassStatus {
            subnets: vec![Subnet {
                id: "subnet-1".into(),
                zone: "us-east-1a".into(),
                zone_id: None,
            }],
            instance_profile: Some("profile".into()),
            ..EC2NodeClassStatus::default()
        };
        let new = EC2NodeClassStatus {
            instance_profile: Some("profile".into()),
            ..EC2NodeClassStatus::default()
        };
        let patch = status_patch(&new, Some(&old)).expect("a change");
        assert_eq!(patch["status"]["subnets"], Value::Null);
        assert_eq!(patch["status"]["instanceProfile"], "profile");
        let first = status_patch(&new, None).expect("no status yet");
        assert_eq!(first, json!({"status": {"instanceProfile": "profile"}}));
    }

    #[test]
    fn only_missing_or_different_annotations_are_written() {
        let nc = node_class(json!({"annotations": {"a": "1", "keep": "x"}}));
        let wanted = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
        assert!(annotations_patch(&nc, &wanted).is_none());
        let wanted = BTreeMap::from([
            ("a".to_owned(), "2".to_owned()),
            ("b".to_owned(), "3".to_owned()),
        ]);
        assert_eq!(
            annotations_patch(&nc, &wanted),
            Some(json!({"metadata": {"annotations": {"a": "2", "b": "3"}}}))
        );
    }

    #[test]
    fn finalizer_patches_keep_other_finalizers_and_lock_on_the_resource_version() {
        let nc = node_class(json!({"finalizers": ["other/finalizer"]}));
        let added = add_finalizer_patch(&nc).expect("missing");
        assert_eq!(
            added,
            json!({"metadata": {"finalizers": ["other/finalizer", "karpenter.k8s.aws/termination"],
                "resourceVersion": "7"}})
        );
        assert!(remove_finalizer_patch(&nc).is_none());
        let held =
            node_class(json!({"finalizers": ["karpenter.k8s.aws/termination", "other/finalizer"]}));
        assert!(has_finalizer(&held));
        assert!(add_finalizer_patch(&held).is_none());
        assert_eq!(
            remove_finalizer_patch(&held),
            Some(json!({"metadata": {"finalizers": ["other/finalizer"], "resourceVersion": "7"}}))
        );
    }
}
