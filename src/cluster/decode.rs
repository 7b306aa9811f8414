//! Typed decoding of one manifest object with the failing field's path kept, so that a
//! structural problem (a missing template, a string where a number belongs) is reported the
//! way `kubectl apply` would: naming the field, not a byte offset in a file.

use serde::de::DeserializeOwned;

use super::FieldError;

/// Decodes `value` into `T`, turning serde's error into a [`FieldError`] whose path is the
/// dotted field path (`spec.template.spec.containers[0].resources`).
pub(crate) fn decode<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let message = error.into_inner().to_string();
        field_error(&path, &message)
    })
}

/// serde names a missing field in its message and points at the parent object; users think
/// of the missing field itself, so its name moves into the path.
fn field_error(path: &str, message: &str) -> FieldError {
    let parent = if path == "." { "" } else { path };
    if let Some(field) = missing_field_name(message) {
        let path = if parent.is_empty() {
            field.to_string()
        } else {
            format!("{parent}.{field}")
        };
        return FieldError::new(path, "required field is missing");
    }
    let path = if parent.is_empty() { "(root)" } else { parent };
    FieldError::new(path, message)
}

fn missing_field_name(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        spec: Inner,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        template: String,
    }

    #[test]
    fn missing_required_field_is_named_in_the_path() {
        let error = decode::<Outer>(json!({"spec": {}})).expect_err("template is required");
        assert_eq!(error.path, "spec.template");
        assert_eq!(error.message, "required field is missing");
        let error = decode::<Outer>(json!({})).expect_err("spec is required");
        assert_eq!(error.path, "spec");
    }

    #[test]
    fn wrong_type_points_at_the_field() {
        let value = json!({"metadata": {"name": "web"},
            "spec": {"replicas": "three", "selector": {}, "template": {}}});
        let error = decode::<Deployment>(value).expect_err("replicas is an integer");
        assert_eq!(error.path, "spec.replicas");
        assert!(error.message.contains("invalid type"), "{}", error.message);
    }

    #[test]
    fn sequence_positions_appear_in_the_path() {
        let value = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": "x"}]}]}});
        let error = decode::<k8s_openapi::api::core::v1::Pod>(value).expect_err("port is a number");
        assert_eq!(error.path, "spec.containers[1].ports[0].containerPort");
    }
}
