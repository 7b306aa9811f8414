//! Structural OpenAPI v3 schemas of CustomResourceDefinitions, applied as the API server
//! does on every write of a custom resource: null pruning, `default`s (recursively, inside
//! objects, arrays and maps, and inside inserted defaults), unknown-field handling
//! (`x-kubernetes-preserve-unknown-fields` keeps them; otherwise rejected under strict field
//! validation or pruned), and the cheap value checks (type, enum, required, bounds).
//! CEL rules and `pattern`s are not evaluated.

use serde_json::{Map, Value};

/// How unknown fields are treated (the `fieldValidation` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Reject the request (400) naming the field.
    Strict,
    /// Drop the field and warn.
    Warn,
    /// Drop the field silently.
    Ignore,
}

/// A problem found in an object, naming the field by its path (`spec.template.spec.x`).
#[derive(Debug, Clone, PartialEq)]
pub enum FieldProblem {
    /// A field the schema does not declare (strict validation).
    Unknown(String),
    /// A declared field with a bad value: (path, message).
    Invalid(String, String),
}

/// The outcome of a successful pass: names of pruned unknown fields (for `Warning` headers).
#[derive(Debug, Default)]
pub struct Pass {
    /// Unknown fields that were dropped.
    pub pruned: Vec<String>,
}

/// A version's `openAPIV3Schema`.
#[derive(Debug, Clone)]
pub struct Schema {
    root: Value,
}

impl Schema {
    /// Wraps a CRD version's `schema.openAPIV3Schema`.
    pub fn new(root: Value) -> Self {
        Self { root }
    }

    /// The raw schema.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// Defaults `object` in place and checks it; `apiVersion`, `kind` and `metadata` at the
    /// top level are the API server's business, not the schema's.
    pub fn apply(
        &self,
        object: &mut Value,
        mode: FieldValidation,
    ) -> Result<Pass, Vec<FieldProblem>> {
        let mut walk = Walk {
            mode,
            pass: Pass::default(),
            problems: Vec::new(),
        };
        walk.node(&self.root, object, "", true);
        if walk.problems.is_empty() {
            Ok(walk.pass)
        } else {
            Err(walk.problems)
        }
    }
}

struct Walk {
    mode: FieldValidation,
    pass: Pass,
    problems: Vec<FieldProblem>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

impl Walk {
    fn invalid(&mut self, path: &str, message: String) {
        self.problems
            .push(FieldProblem::Invalid(path.to_string(), message));
    }

    fn node(&mut self, schema: &Value, value: &mut Value, path: &str, top: bool) {
        if !self.type_ok(schema, value, path) {
            return;
        }
        self.check_enum_and_bounds(schema, value, path);
        match value {
            Value::Object(map) => self.object(schema, map, path, top),
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter_mut().enumerate() {
                        self.node(item_schema, item, &format!("{path}[{i}]"), false);
                    }
                }
            }
            _ => {}
        }
    }

    fn type_ok(&mut self, schema: &Value, value: &Value, path: &str) -> bool {
        if value.is_null() && flag(schema, "nullable") {
            return true;
        }
        if flag(schema, "x-kubernetes-int-or-string") {
            if value.is_string() || value.is_i64() || value.is_u64() {
                return true;
            }
            self.invalid(
                path,
                format!("Invalid value: {value}: {path} in body must be of type int-or-string"),
            );
            return false;
        }
        let Some(expected) = schema.get("type").and_then(Value::as_str) else {
            return true;
        };
        let ok = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !ok {
            let got = match value {
                Value::Null => "null",
                Value::Bool(_) => "boolean",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            };
            self.invalid(
                path,
                format!(
                    "Invalid value: \"{got}\": {path} in body must be of type {expected}: \"{got}\""
                ),
            );
        }
        ok
    }

    fn check_enum_and_bounds(&mut self, schema: &Value, value: &Value, path: &str) {
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            self.invalid(
                path,
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    list.join(", ")
                ),
            );
        }
        let bound = |name: &str| schema.get(name).and_then(Value::as_f64);
        if let Some(n) = value.as_f64() {
            if bound("minimum").is_some_and(|min| n < min) {
                self.invalid(
                    path,
                    format!(
                        "Invalid value: {n}: {path} in body should be greater than or equal to {}",
                        schema["minimum"]
                    ),
                );
            }
            if bound("maximum").is_some_and(|max| n > max) {
                self.invalid(
                    path,
                    format!(
                        "Invalid value: {n}: {path} in body should be less than or equal to {}",
                        schema["maximum"]
                    ),
                );
            }
        }
        let len = match value {
            Value::String(s) => Some(s.chars().count()),
            Value::Array(a) => Some(a.len()),
            Value::Object(o) => Some(o.len()),
            _ => None,
        };
        if let Some(len) = len {
            let len = len as f64;
            for (name, too_long) in [
                ("maxLength", true),
                ("maxItems", true),
                ("maxProperties", true),
                ("minLength", false),
                ("minItems", false),
                ("minProperties", false),
            ] {
                if let Some(limit) = bound(name)
                    && ((too_long && len > limit) || (!too_long && len < limit))
                {
                    self.invalid(
                        path,
                        format!("Invalid value: {value}: {path} in body violates {name} {limit}"),
                    );
                }
            }
        }
    }

    fn object(&mut self, schema: &Value, map: &mut Map<String, Value>, path: &str, top: bool) {
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields")
            || additional.is_some_and(|a| a.as_bool() == Some(true));
        let embedded = flag(schema, "x-kubernetes-embedded-resource");
        let is_meta =
            |key: &str| (top || embedded) && matches!(key, "apiVersion" | "kind" | "metadata");

        // Nulls of non-nullable fields are pruned before defaulting, as the server does.
        map.retain(|key, v| {
            !v.is_null()
                || is_meta(key)
                || sub_schema(properties, additional, key).is_some_and(|s| flag(s, "nullable"))
        });
        if let Some(properties) = properties {
            for (key, prop) in properties {
                if !map.contains_key(key)
                    && let Some(default) = prop.get("default")
                {
                    map.insert(key.clone(), default.clone());
                }
            }
        }
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            if is_meta(&key) {
                continue;
            }
            let child_path = join(path, &key);
            match sub_schema(properties, additional, &key) {
                Some(child) => {
                    if let Some(v) = map.get_mut(&key) {
                        self.node(child, v, &child_path, false);
                    }
                }
                None if preserve => {}
                None => self.unknown(map, &key, child_path),
            }
        }
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = required.as_str()
                && !map.contains_key(name)
            {
                self.invalid(&join(path, name), "Required value".to_string());
            }
        }
    }

    fn unknown(&mut self, map: &mut Map<String, Value>, key: &str, path: String) {
        match self.mode {
            FieldValidation::Strict => self.problems.push(FieldProblem::Unknown(path)),
            FieldValidation::Warn => {
                map.shift_remove(key);
                self.pass.pruned.push(path);
            }
            FieldValidation::Ignore => {
                map.shift_remove(key);
            }
        }
    }
}

fn sub_schema<'a>(
    properties: Option<&'a Map<String, Value>>,
    additional: Option<&'a Value>,
    key: &str,
) -> Option<&'a Value> {
    properties
        .and_then(|p| p.get(key))
        .or_else(|| additional.filter(|a| a.is_object()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::new(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "default": {},
                    "properties": {
                        "weight": {"type": "integer", "maximum": 100},
                        "policy": {"type": "string", "default": "WhenEmpty", "enum": ["WhenEmpty", "WhenUnderutilized"]},
                        "budgets": {
                            "type": "array",
                            "default": [{"nodes": "10%"}],
                            "items": {"type": "object", "properties": {
                                "nodes": {"type": "string", "default": "10%"},
                                "reasons": {"type": "array", "items": {"type": "string"}}
                            }, "required": ["nodes"]}
                        },
                        "limits": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "opt": {"type": "string", "nullable": true}
                    }
                },
                "status": {"type": "object"}
            }
        }))
    }

    #[test]
    fn applies_defaults_recursively() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"}});
        schema()
            .apply(&mut obj, FieldValidation::Strict)
            .expect("valid");
        assert_eq!(obj["spec"]["policy"], "WhenEmpty");
        assert_eq!(obj["spec"]["budgets"], json!([{"nodes": "10%"}]));
        let mut obj = json!({"spec": {"budgets": [{}, {"nodes": "5"}]}});
        schema()
            .apply(&mut obj, FieldValidation::Strict)
            .expect("valid");
        assert_eq!(
            obj["spec"]["budgets"],
            json!([{"nodes": "10%"}, {"nodes": "5"}])
        );
    }

    #[test]
    fn rejects_or_prunes_unknown_fields() {
        let mut obj = json!({"spec": {"bogus": 1, "free": {"anything": true}, "limits": {"cpu": "10", "memory": 5}}});
        let problems = schema()
            .apply(&mut obj.clone(), FieldValidation::Strict)
            .expect_err("unknown field");
        assert_eq!(
            problems,
            vec![FieldProblem::Unknown("spec.bogus".to_string())]
        );
        let pass = schema()
            .apply(&mut obj, FieldValidation::Warn)
            .expect("pruned");
        assert_eq!(pass.pruned, vec!["spec.bogus".to_string()]);
        assert!(obj["spec"].get("bogus").is_none());
        assert_eq!(obj["spec"]["free"]["anything"], true);
    }

    #[test]
    fn checks_types_enums_bounds_and_required() {
        let cases = [
            (json!({"spec": {"weight": "heavy"}}), "spec.weight"),
            (json!({"spec": {"weight": 101}}), "spec.weight"),
            (json!({"spec": {"policy": "Sometimes"}}), "spec.policy"),
            (
                json!({"spec": {"limits": {"cpu": true}}}),
                "spec.limits.cpu",
            ),
            (
                json!({"spec": {"budgets": [{"reasons": [1]}]}}),
                "spec.budgets[0].reasons[0]",
            ),
        ];
        for (mut obj, field) in cases {
            let problems = schema()
                .apply(&mut obj, FieldValidation::Strict)
                .expect_err(field);
            assert!(
                matches!(&problems[0], FieldProblem::Invalid(p, _) if p == field),
                "{problems:?}"
            );
        }
        let mut obj = json!({"spec": {"opt": null, "weight": null}});
        schema()
            .apply(&mut obj, FieldValidation::Strict)
            .expect("nulls are fine");
        assert!(obj["spec"]["opt"].is_null() && obj["spec"].get("opt").is_some());
        assert!(obj["spec"].get("weight").is_none());
    }
}
