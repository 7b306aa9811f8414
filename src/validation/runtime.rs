//! The checks upstream Karpenter makes itself, beyond the CRD schema, before it uses a
//! NodePool, NodeClaim or NodeOverlay (`RuntimeValidate`; failures show as
//! `ValidationSucceeded=False`): qualified label and taint keys, label values in
//! requirements, labels in the kubelet's reserved domains, duplicate taints, and an
//! overlay's price and capacity. They run on the defaulted object.

use super::cel::items;
use super::names::{
    label_value_errors, normalized_label, qualified_name_errors, restricted_label_error,
};
use super::path::{FieldPath, Problem};
use serde_json::Value;

use crate::api::NodeOverlay;
use crate::api::nodeoverlay::{OverlayRequirement, PriceChange, RESTRICTED_RESOURCES};
use crate::labels;
use crate::requirements::Requirement;
use crate::resources::Quantity;

/// NodePool: template labels, taints and requirements.
pub fn validate_nodepool(object: &Value) -> Vec<Problem> {
    let template = FieldPath::root().child("spec").child("template");
    let mut problems = Vec::new();
    let labels = &object["spec"]["template"]["metadata"]["labels"];
    for key in labels.as_object().into_iter().flatten().map(|(k, _)| k) {
        let at = template.child("metadata").child("labels").key(key);
        for e in qualified_name_errors(key) {
            problems.push(Problem::new(&at, format!("invalid label key {key:?}: {e}")));
        }
        if let Some(e) = restricted_label_error(key) {
            problems.push(Problem::new(&at, e));
        }
    }
    let spec = &object["spec"]["template"]["spec"];
    problems.extend(validate_claim_spec(spec, &template.child("spec")));
    problems
}

/// NodeClaim: taints and requirements.
pub fn validate_nodeclaim(object: &Value) -> Vec<Problem> {
    validate_claim_spec(&object["spec"], &FieldPath::root().child("spec"))
}

fn validate_claim_spec(spec: &Value, path: &FieldPath) -> Vec<Problem> {
    let mut problems = validate_taints(spec, path);
    for (i, requirement) in items(&spec["requirements"]).iter().enumerate() {
        problems.extend(validate_requirement(
            requirement,
            &path.child("requirements").index(i),
        ));
    }
    problems
}

fn validate_taints(spec: &Value, path: &FieldPath) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for list in ["taints", "startupTaints"] {
        for (i, taint) in items(&spec[list]).iter().enumerate() {
            let at = path.child(list).index(i);
            let key = taint["key"].as_str().unwrap_or_default();
            let effect = taint["effect"].as_str().unwrap_or_default();
            for e in qualified_name_errors(key) {
                problems.push(Problem::new(
                    &at.child("key"),
                    format!("invalid taint key {key:?}: {e}"),
                ));
            }
            if seen.contains(&(key, effect)) {
                problems.push(Problem::new(
                    &at,
                    format!("duplicate taint Key/Effect pair {key}={effect}"),
                ));
            } else {
                seen.push((key, effect));
            }
        }
    }
    problems
}

fn validate_requirement(requirement: &Value, path: &FieldPath) -> Vec<Problem> {
    let mut problems = Vec::new();
    let key = requirement["key"].as_str().unwrap_or_default();
    let key_path = path.child("key");
    for e in qualified_name_errors(key) {
        problems.push(Problem::new(
            &key_path,
            format!("key {key} is not a qualified name, {e}"),
        ));
    }
    if let Some(e) = restricted_label_error(normalized_label(key)) {
        problems.push(Problem::new(&key_path, e));
    }
    for (i, value) in items(&requirement["values"]).iter().enumerate() {
        let text = value.as_str().unwrap_or_default();
        for e in label_value_errors(text) {
            problems.push(Problem::new(
                &path.child("values").index(i),
                format!("invalid value {text:?} for key {key}, {e}"),
            ));
        }
    }
    problems
}

/// NodeOverlay: upstream's runtime validation (`RuntimeValidate`), plus a readable price
/// and capacity (which the CRD schema guarantees on a served object).
pub fn validate_nodeoverlay(overlay: &NodeOverlay) -> Result<(), String> {
    let mut problems = Vec::new();
    for requirement in &overlay.spec.requirements {
        problems.extend(overlay_requirement_problems(requirement));
    }
    if let Some(change) = overlay.price_change()
        && let Err(e) = PriceChange::parse(change)
    {
        problems.push(e);
    }
    for (name, quantity) in overlay.spec.capacity.iter().flatten() {
        if RESTRICTED_RESOURCES.contains(&name.as_str()) {
            problems.push(format!("invalid resource restricted: {name}"));
        }
        if Quantity::parse(&quantity.0).is_err() {
            problems.push(format!("invalid quantity {:?} for {name}", quantity.0));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn overlay_requirement_problems(requirement: &OverlayRequirement) -> Vec<String> {
    let key = labels::normalize_label_key(&requirement.key);
    let mut problems = Vec::new();
    if let Some(e) = restricted_label_error(key) {
        problems.push(e);
    }
    for e in qualified_name_errors(key) {
        problems.push(format!("key {key} is not a qualified name, {e}"));
    }
    for value in &requirement.values {
        for e in label_value_errors(value) {
            problems.push(format!("invalid value {value} for key {key}, {e}"));
        }
    }
    if requirement.operator == crate::api::Operator::In && requirement.values.is_empty() {
        problems.push(format!(
            "key {key} with operator In must have a value defined"
        ));
    }
    if let Err(e) = overlay_requirement(requirement) {
        problems.push(e);
    }
    problems
}

pub(crate) fn overlay_requirement(requirement: &OverlayRequirement) -> Result<Requirement, String> {
    Requirement::new(
        &requirement.key,
        requirement.operator,
        &requirement.values,
        None,
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nodepool(spec: Value) -> Vec<String> {
        let object = json!({"spec": {"template": spec}});
        validate_nodepool(&object)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn flags_restricted_requirement_keys_after_normalisation() {
        let spec = json!({"spec": {"requirements": [
            {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/custom", "operator": "Exists"}
        ]}});
        let problems = nodepool(spec);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with(
            "spec.template.spec.requirements[1].key: label \"kubernetes.io/custom\" is restricted"
        ));
    }

    #[test]
    fn flags_bad_requirement_values_and_duplicate_taints() {
        let spec = json!({"spec": {
            "requirements": [{"key": "team", "operator": "In", "values": ["ok", "not ok"]}],
            "taints": [{"key": "a", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "a", "effect": "NoSchedule"}]
        }});
        let problems = nodepool(spec);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(
            problems[0],
            "spec.template.spec.startupTaints[0]: duplicate taint Key/Effect pair a=NoSchedule"
        );
        assert!(
            problems[1].starts_with(
                "spec.template.spec.requirements[0].values[1]: invalid value \"not ok\""
            )
        );
    }

    #[test]
    fn flags_template_label_keys() {
        let problems =
            nodepool(json!({"metadata": {"labels": {"k8s.io/x": "1", "ok": "1"}}, "spec": {}}));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("spec.template.metadata.labels[k8s.io/x]: label"));
    }
}
