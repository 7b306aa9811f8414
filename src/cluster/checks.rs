//! Structural checks of pod specs and workload selectors that the API server would make
//! before admitting them: at least one container, well-formed non-negative resource
//! quantities, and a controller selector that selects its own template. Typed decoding
//! already caught missing required fields and wrong types; these are the semantic rules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::FieldError;

/// Checks a pod spec found at `path` (`spec` for a Pod, `spec.template.spec` for a workload).
pub(crate) fn pod_spec(spec: &PodSpec, path: &str) -> Result<(), FieldError> {
    if spec.containers.is_empty() {
        return Err(FieldError::new(
            format!("{path}.containers"),
            "a pod needs at least one container",
        ));
    }
    for (group, containers) in [
        ("containers", spec.containers.as_slice()),
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
    ] {
        for (index, container) in containers.iter().enumerate() {
            self::container(container, &format!("{path}.{group}[{index}]"))?;
        }
    }
    if let Some(overhead) = &spec.overhead {
        resource_list(overhead, &format!("{path}.overhead"))?;
    }
    Ok(())
}

fn container(container: &Container, path: &str) -> Result<(), FieldError> {
    if container.name.is_empty() {
        return Err(FieldError::new(
            format!("{path}.name"),
            "a container needs a name",
        ));
    }
    let Some(resources) = &container.resources else {
        return Ok(());
    };
    if let Some(requests) = &resources.requests {
        resource_list(requests, &format!("{path}.resources.requests"))?;
    }
    if let Some(limits) = &resources.limits {
        resource_list(limits, &format!("{path}.resources.limits"))?;
    }
    requests_within_limits(resources.requests.as_ref(), resources.limits.as_ref(), path)
}

/// The API server refuses a request above its own limit.
fn requests_within_limits(
    requests: Option<&BTreeMap<String, Quantity>>,
    limits: Option<&BTreeMap<String, Quantity>>,
    path: &str,
) -> Result<(), FieldError> {
    let (Some(requests), Some(limits)) = (requests, limits) else {
        return Ok(());
    };
    for (name, request) in requests {
        let Some(limit) = limits.get(name) else {
            continue;
        };
        // Both were parsed by `resource_list` already.
        let (Ok(request_value), Ok(limit_value)) = (
            super::quantity::non_negative(&request.0),
            super::quantity::non_negative(&limit.0),
        ) else {
            continue;
        };
        if request_value > limit_value {
            return Err(FieldError::new(
                format!("{path}.resources.requests.{name}"),
                format!(
                    "{:?} must be less than or equal to {name} limit of {:?}",
                    request.0, limit.0
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn resource_list(
    list: &BTreeMap<String, Quantity>,
    path: &str,
) -> Result<(), FieldError> {
    for (name, quantity) in list {
        let field = format!("{path}.{name}");
        if name.is_empty() {
            return Err(FieldError::new(field, "a resource needs a name"));
        }
        super::quantity::non_negative(&quantity.0)
            .map_err(|message| FieldError::new(field, message))?;
    }
    Ok(())
}

/// The API server refuses a controller whose selector does not select its own pod
/// template: it would never see the pods it creates.
pub(crate) fn selector_selects_template(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
    selector_path: &str,
    labels_path: &str,
) -> Result<(), FieldError> {
    if selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
    {
        return Err(FieldError::new(
            selector_path,
            "empty selector is invalid for a workload",
        ));
    }
    if !selector_matches(selector, labels, selector_path)? {
        return Err(FieldError::new(
            labels_path,
            "`selector` does not match template `labels`",
        ));
    }
    Ok(())
}

/// Whether a label selector selects `labels`; an unknown operator is an error at
/// `path.matchExpressions[i].operator`.
pub(crate) fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
    path: &str,
) -> Result<bool, FieldError> {
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    let mut expressions_match = true;
    for (index, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let value = labels.get(&expression.key);
        let values = expression.values.as_deref().unwrap_or_default();
        let matched = match expression.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err(FieldError::new(
                    format!("{path}.matchExpressions[{index}].operator"),
                    format!(
                        "unsupported operator {other:?}: expected In, NotIn, Exists or DoesNotExist"
                    ),
                ));
            }
        };
        expressions_match &= matched;
    }
    Ok(labels_match && expressions_match)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn spec_with_request(name: &str, value: &str) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "app".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([(name.to_string(), Quantity(value.into()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_without_containers_is_rejected() {
        let error = pod_spec(&PodSpec::default(), "spec").expect_err("no containers");
        assert_eq!(error.path, "spec.containers");
    }

    #[test]
    fn a_malformed_quantity_names_its_field() {
        let error =
            pod_spec(&spec_with_request("cpu", "1x"), "spec.template.spec").expect_err("1x");
        assert_eq!(
            error.path,
            "spec.template.spec.containers[0].resources.requests.cpu"
        );
        assert!(error.message.contains("1x"), "{}", error.message);
    }

    #[test]
    fn a_negative_quantity_is_rejected() {
        let error = pod_spec(&spec_with_request("memory", "-1Gi"), "spec").expect_err("negative");
        assert!(
            error.message.contains("greater than or equal to 0"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_request_above_its_limit_is_rejected() {
        let mut spec = spec_with_request("cpu", "2");
        let resources = spec.containers[0].resources.as_mut().expect("resources");
        resources.limits = Some(BTreeMap::from([(
            "cpu".to_string(),
            Quantity("1500m".into()),
        )]));
        let error = pod_spec(&spec, "spec").expect_err("2 > 1500m");
        assert_eq!(error.path, "spec.containers[0].resources.requests.cpu");
        assert!(error.message.contains("limit"), "{}", error.message);
        resources_limit(&mut spec, "2000m");
        pod_spec(&spec, "spec").expect("equal is fine");
    }

    fn resources_limit(spec: &mut PodSpec, value: &str) {
        let resources = spec.containers[0].resources.as_mut().expect("resources");
        resources.limits = Some(BTreeMap::from([(
            "cpu".to_string(),
            Quantity(value.into()),
        )]));
    }

    #[test]
    fn well_formed_quantities_pass() {
        for value in ["1", "250m", "1.5", "512Mi", "1e3", "2G", ".5"] {
            pod_spec(&spec_with_request("cpu", value), "spec").expect("valid quantity");
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_must_select_the_template() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            ..Default::default()
        };
        selector_selects_template(
            &selector,
            &labels(&[("app", "web"), ("tier", "x")]),
            "s",
            "l",
        )
        .expect("selects");
        let error = selector_selects_template(&selector, &labels(&[("app", "api")]), "s", "l")
            .expect_err("does not select");
        assert_eq!(error.path, "l");
        let error = selector_selects_template(&LabelSelector::default(), &labels(&[]), "s", "l")
            .expect_err("empty");
        assert_eq!(error.path, "s");
    }

    #[test]
    fn selector_expressions_follow_kubernetes_semantics() {
        let expression = |key: &str, operator: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let selector = LabelSelector {
            match_expressions: Some(vec![
                expression("app", "In", &["web", "api"]),
                expression("tier", "NotIn", &["db"]),
                expression("team", "Exists", &[]),
                expression("legacy", "DoesNotExist", &[]),
            ]),
            ..Default::default()
        };
        let matches = |pairs| selector_matches(&selector, &labels(pairs), "s").expect("valid");
        assert!(matches(&[("app", "api"), ("team", "a")]));
        assert!(!matches(&[("app", "api"), ("team", "a"), ("tier", "db")]));
        assert!(!matches(&[("app", "api")]));
        assert!(!matches(&[("app", "api"), ("team", "a"), ("legacy", "1")]));
        let bad = LabelSelector {
            match_expressions: Some(vec![expression("app", "Like", &[])]),
            ..Default::default()
        };
        let error = selector_matches(&bad, &labels(&[]), "spec.selector").expect_err("operator");
        assert_eq!(error.path, "spec.selector.matchExpressions[0].operator");
    }
}
