//! Whether an existing node passes a pod's node selector and required node affinity, as the
//! kube-scheduler's NodeAffinity filter judges it: what decides which nodes' domains its
//! topology spread counts (`nodeAffinityPolicy: Honor`, the default).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec};

/// Whether node `name`, labelled `labels`, passes `spec`'s `nodeSelector` (every pair) and
/// its required node affinity (any one term: all of its expressions and fields; no terms,
/// no constraint).
pub fn admits_node(spec: &PodSpec, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let selected = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    let terms = super::required_node_terms(spec.affinity.as_ref());
    selected && (terms.is_empty() || terms.iter().any(|t| term_admits(t, name, labels)))
}

/// A term with neither expressions nor fields selects no node, as the API defines it.
fn term_admits(term: &NodeSelectorTerm, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let label = |r: &NodeSelectorRequirement| holds(r, labels.get(&r.key).map(String::as_str));
    let field = |r: &NodeSelectorRequirement| r.key == "metadata.name" && holds(r, Some(name));
    expressions.iter().all(label) && fields.iter().all(field)
}

/// Whether `requirement` holds for a label `value` (absent: `None`); an unknown operator,
/// or `Gt`/`Lt` on a value that is no integer, does not.
fn holds(requirement: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let listed = |v: &str| values.iter().any(|listed| listed == v);
    let compare = |bound: fn(i64, i64) -> bool| {
        let limit = values.first().and_then(|v| v.parse::<i64>().ok());
        let value = value.and_then(|v| v.parse::<i64>().ok());
        matches!((value, limit), (Some(v), Some(l)) if bound(v, l))
    };
    match requirement.operator.as_str() {
        "In" => value.is_some_and(listed),
        "NotIn" => !value.is_some_and(listed),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(|v, l| v > l),
        "Lt" => compare(|v, l| v < l),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).expect("valid spec")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn required(terms: serde_json::Value) -> PodSpec {
        spec(
            serde_json::json!({"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}),
        )
    }

    #[test]
    fn a_pod_without_constraints_admits_every_node() {
        assert!(admits_node(
            &spec(serde_json::json!({"containers": []})),
            "n",
            &labels(&[])
        ));
    }

    #[test]
    fn the_node_selector_needs_every_pair() {
        let pod = spec(serde_json::json!({"containers": [],
            "nodeSelector": {"zone": "a", "arch": "arm64"}}));
        assert!(admits_node(
            &pod,
            "n",
            &labels(&[("zone", "a"), ("arch", "arm64")])
        ));
        assert!(!admits_node(&pod, "n", &labels(&[("zone", "a")])));
    }

    #[test]
    fn any_required_term_admits_and_each_needs_all_its_expressions() {
        let pod = required(serde_json::json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                  {"key": "spot", "operator": "DoesNotExist"}]},
            {"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["8"]}]}
        ]));
        assert!(admits_node(&pod, "n", &labels(&[("zone", "a")])));
        assert!(!admits_node(
            &pod,
            "n",
            &labels(&[("zone", "a"), ("spot", "")])
        ));
        assert!(admits_node(
            &pod,
            "n",
            &labels(&[("zone", "b"), ("cpu", "16")])
        ));
        assert!(!admits_node(
            &pod,
            "n",
            &labels(&[("zone", "b"), ("cpu", "8")])
        ));
        assert!(
            !admits_node(&pod, "n", &labels(&[("cpu", "many")])),
            "no integer"
        );
    }

    #[test]
    fn a_field_term_names_the_node_and_an_empty_term_selects_none() {
        let pod = required(serde_json::json!([{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["old"]}]}]));
        assert!(admits_node(&pod, "new", &labels(&[])));
        assert!(!admits_node(&pod, "old", &labels(&[])));
        assert!(!admits_node(
            &required(serde_json::json!([{}])),
            "n",
            &labels(&[])
        ));
    }
}
