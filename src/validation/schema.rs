//! Structural validation against the vendored CRD schemas, as the API server does on create:
//! nulls pruned, defaults applied, then types, enums, patterns, bounds, lengths, item and
//! property counts, required fields, formats, list-type uniqueness, unknown fields, and the
//! CEL rules (through [`super::cel`]). The schemas are the CRD files kerf installs, embedded
//! at build time, so what is checked is exactly what is installed.

use super::cel::{Locus, Rule, rule_for};
use super::path::{FieldPath, Problem};
use crate::manifest::json_type;
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::LazyLock;

const NODEPOOL_CRD: &str = include_str!("../../deploy/crds/karpenter.sh_nodepools.yaml");
const NODECLAIM_CRD: &str = include_str!("../../deploy/crds/karpenter.sh_nodeclaims.yaml");
const EC2NODECLASS_CRD: &str =
    include_str!("../../deploy/crds/karpenter.k8s.aws_ec2nodeclasses.yaml");
const NODEOVERLAY_CRD: &str = include_str!("../../deploy/crds/karpenter.sh_nodeoverlays.yaml");
const CAPACITYBUFFER_CRD: &str =
    include_str!("../../deploy/crds/autoscaling.x-k8s.io_capacitybuffers.yaml");

/// The openAPIV3Schema of each Karpenter kind plus compiled patterns and CEL rules.
pub struct Schemas {
    by_kind: HashMap<&'static str, Value>,
    patterns: HashMap<String, Regex>,
    rules: HashMap<String, Rule>,
}

pub static SCHEMAS: LazyLock<Schemas> = LazyLock::new(Schemas::load);

impl Schemas {
    fn load() -> Self {
        let mut by_kind = HashMap::new();
        for (kind, text) in [
            ("NodePool", NODEPOOL_CRD),
            ("NodeClaim", NODECLAIM_CRD),
            ("EC2NodeClass", EC2NODECLASS_CRD),
            ("NodeOverlay", NODEOVERLAY_CRD),
            ("CapacityBuffer", CAPACITYBUFFER_CRD),
        ] {
            let crd: Value =
                serde_saphyr::from_str(text).expect("vendored CRDs are valid YAML (tested)");
            let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
            by_kind.insert(kind, schema);
        }
        let mut patterns = HashMap::new();
        let mut rules = HashMap::new();
        for schema in by_kind.values() {
            visit_schemas(schema, &mut |s| {
                if let Some(p) = s.get("pattern").and_then(Value::as_str) {
                    let re = Regex::new(p).expect("CRD patterns compile (tested)");
                    patterns.insert(p.to_owned(), re);
                }
                for message in rule_messages(s) {
                    if let Some(rule) = rule_for(message) {
                        rules.insert(message.to_owned(), rule);
                    }
                }
            });
        }
        Self {
            by_kind,
            patterns,
            rules,
        }
    }

    pub fn schema(&self, kind: &str) -> Option<&Value> {
        self.by_kind.get(kind)
    }

    /// Every CEL message of the vendored CRDs that has no Rust implementation.
    pub fn unimplemented_rules(&self) -> Vec<String> {
        let mut missing = Vec::new();
        for schema in self.by_kind.values() {
            visit_schemas(schema, &mut |s| {
                missing.extend(
                    rule_messages(s)
                        .filter(|m| !self.rules.contains_key(*m))
                        .map(str::to_owned),
                );
            });
        }
        missing
    }

    /// How many CEL rules the vendored CRDs carry (each counted where it appears).
    pub fn rule_count(&self) -> usize {
        let mut count = 0;
        for schema in self.by_kind.values() {
            visit_schemas(schema, &mut |s| count += rule_messages(s).count());
        }
        count
    }

    /// Applies the API server's create-time treatment to `object` (prune nulls, default) and
    /// reports every schema violation. `skip` names root fields validated elsewhere.
    pub fn validate(&self, schema: &Value, object: &mut Value, skip: &[&str]) -> Vec<Problem> {
        prune_nulls(object);
        apply_defaults(schema, object);
        let mut checker = Checker {
            schemas: self,
            problems: Vec::new(),
        };
        match object.as_object() {
            Some(map) => checker.check_object_fields(schema, map, &FieldPath::root(), skip),
            None => checker.report(
                &FieldPath::root(),
                format!("expected an object, found {}", json_type(object)),
            ),
        }
        checker.problems
    }
}

impl Schemas {
    /// Every CEL rule of `schema` (a Karpenter CRD's openAPIV3Schema, as installed) that
    /// `object` breaks, transition rules compared with `old` (the stored object, on update)
    /// where it has the node. Rules kerf has no implementation of are skipped: this serves a
    /// server that must not refuse what it cannot judge (the API emulator).
    pub fn rule_violations(
        &self,
        schema: &Value,
        object: &Value,
        old: Option<&Value>,
    ) -> Vec<Problem> {
        let mut problems = Vec::new();
        self.walk_rules(schema, object, old, &FieldPath::root(), &mut problems);
        problems
    }

    fn walk_rules(
        &self,
        schema: &Value,
        value: &Value,
        old: Option<&Value>,
        path: &FieldPath,
        problems: &mut Vec<Problem>,
    ) {
        for message in rule_messages(schema) {
            match self.rules.get(message) {
                Some(Rule::Check(rule)) => {
                    for locus in rule(value) {
                        let at = match locus {
                            Locus::Whole => path.clone(),
                            Locus::Index(i) => path.index(i),
                            Locus::Key(k) => path.key(&k),
                        };
                        problems.push(Problem::new(&at, message));
                    }
                }
                Some(Rule::Transition(rule)) => {
                    if let Some(old) = old
                        && !rule(value, old)
                    {
                        problems.push(Problem::new(path, message));
                    }
                }
                None => {}
            }
        }
        match value {
            Value::Object(map) => {
                if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                    for (name, child) in map {
                        if let Some(sub) = props.get(name) {
                            let old = old.and_then(|o| o.get(name));
                            self.walk_rules(sub, child, old, &path.child(name), problems);
                        }
                    }
                } else if let Some(sub) =
                    schema.get("additionalProperties").filter(|s| s.is_object())
                {
                    for (key, child) in map {
                        let old = old.and_then(|o| o.get(key));
                        self.walk_rules(sub, child, old, &path.key(key), problems);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(sub) = schema.get("items") {
                    // List items are not correlated with the old list (atomic lists).
                    for (i, item) in items.iter().enumerate() {
                        self.walk_rules(sub, item, None, &path.index(i), problems);
                    }
                }
            }
            _ => {}
        }
    }
}

fn rule_messages(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("message").and_then(Value::as_str))
}

fn visit_schemas(schema: &Value, f: &mut dyn FnMut(&Value)) {
    f(schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for sub in props.values() {
            visit_schemas(sub, f);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = schema.get(key).filter(|s| s.is_object()) {
            visit_schemas(sub, f);
        }
    }
}

fn prune_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(prune_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

/// Sets every absent property that has a schema default, then defaults inside what is
/// there (including inside the defaults just set, as the API server does).
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, sub) in props {
                    if let (false, Some(default)) = (map.contains_key(name), sub.get("default")) {
                        map.insert(name.clone(), default.clone());
                    }
                    if let Some(child) = map.get_mut(name) {
                        apply_defaults(sub, child);
                    }
                }
            } else if let Some(sub) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                map.values_mut().for_each(|v| apply_defaults(sub, v));
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter_mut().for_each(|v| apply_defaults(sub, v));
            }
        }
        _ => {}
    }
}

struct Checker<'s> {
    schemas: &'s Schemas,
    problems: Vec<Problem>,
}

fn quoted(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn int_of(value: &Value) -> Option<i64> {
    value.as_i64()
}

impl Checker<'_> {
    fn report(&mut self, path: &FieldPath, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    fn check(&mut self, schema: &Value, value: &Value, path: &FieldPath) {
        if !self.check_type(schema, value, path) {
            return;
        }
        self.check_enum(schema, value, path);
        match value {
            Value::String(s) => self.check_string(schema, s, path),
            Value::Number(_) => self.check_number(schema, value, path),
            Value::Object(map) => self.check_map(schema, map, path),
            Value::Array(items) => self.check_array(schema, items, path),
            _ => {}
        }
        self.check_rules(schema, value, path);
    }

    fn check_type(&mut self, schema: &Value, value: &Value, path: &FieldPath) -> bool {
        let actual = json_type(value);
        let ok = if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            matches!(actual, "integer" | "string")
        } else {
            match schema.get("type").and_then(Value::as_str) {
                None => true,
                Some("number") => matches!(actual, "integer" | "number"),
                Some(expected) => expected == actual,
            }
        };
        if !ok {
            let expected = schema
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("integer or string");
            self.report(
                path,
                format!(
                    "Invalid value: {}: must be of type {expected}, not {actual}",
                    quoted(value)
                ),
            );
        }
        ok
    }

    fn check_enum(&mut self, schema: &Value, value: &Value, path: &FieldPath) {
        let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
            return;
        };
        if !allowed.contains(value) {
            let list: Vec<String> = allowed.iter().map(quoted).collect();
            self.report(
                path,
                format!(
                    "Unsupported value: {}: supported values: {}",
                    quoted(value),
                    list.join(", ")
                ),
            );
        }
    }

    fn check_string(&mut self, schema: &Value, s: &str, path: &FieldPath) {
        let chars = s.chars().count() as u64;
        if let Some(max) = schema
            .get("maxLength")
            .and_then(Value::as_u64)
            .filter(|m| chars > *m)
        {
            self.report(
                path,
                format!("Too long: may not be more than {max} characters"),
            );
        }
        if let Some(min) = schema
            .get("minLength")
            .and_then(Value::as_u64)
            .filter(|m| chars < *m)
        {
            self.report(
                path,
                format!("Invalid value: {s:?}: should be at least {min} characters long"),
            );
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            let matches = self
                .schemas
                .patterns
                .get(pattern)
                .is_some_and(|re| re.is_match(s));
            if !matches {
                self.report(
                    path,
                    format!("Invalid value: {s:?}: should match '{pattern}'"),
                );
            }
        }
        if schema.get("format").and_then(Value::as_str) == Some("date-time") && !is_rfc3339(s) {
            self.report(
                path,
                format!("Invalid value: {s:?}: must be an RFC 3339 date-time"),
            );
        }
    }

    fn check_number(&mut self, schema: &Value, value: &Value, path: &FieldPath) {
        let n = value.as_f64().unwrap_or_default();
        if let Some(min) = schema
            .get("minimum")
            .and_then(Value::as_f64)
            .filter(|m| n < *m)
        {
            self.report(
                path,
                format!("Invalid value: {value}: should be greater than or equal to {min}"),
            );
        }
        if let Some(max) = schema
            .get("maximum")
            .and_then(Value::as_f64)
            .filter(|m| n > *m)
        {
            self.report(
                path,
                format!("Invalid value: {value}: should be less than or equal to {max}"),
            );
        }
        let fits = match schema.get("format").and_then(Value::as_str) {
            Some("int32") => int_of(value).is_some_and(|i| i32::try_from(i).is_ok()),
            Some("int64") => int_of(value).is_some(),
            _ => true,
        };
        if !fits {
            self.report(
                path,
                format!("Invalid value: {value}: out of range for its format"),
            );
        }
    }

    fn check_map(&mut self, schema: &Value, map: &Map<String, Value>, path: &FieldPath) {
        let count = map.len() as u64;
        if let Some(max) = schema
            .get("maxProperties")
            .and_then(Value::as_u64)
            .filter(|m| count > *m)
        {
            self.report(
                path,
                format!("Too many: {count}: must have at most {max} items"),
            );
        }
        self.check_object_fields(schema, map, path, &[]);
    }

    fn check_object_fields(
        &mut self,
        schema: &Value,
        map: &Map<String, Value>,
        path: &FieldPath,
        skip: &[&str],
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties").filter(|s| s.is_object());
        let preserve =
            schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        for (key, child) in map {
            if skip.contains(&key.as_str()) {
                continue;
            }
            match (props.and_then(|p| p.get(key)), additional) {
                (Some(sub), _) => self.check(sub, child, &path.child(key)),
                (None, Some(sub)) => self.check(sub, child, &path.key(key)),
                (None, None) if preserve => {}
                (None, None) => self.report(&path.child(key), "unknown field"),
            }
        }
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = required.as_str() else {
                continue;
            };
            if !map.contains_key(name) && !skip.contains(&name) {
                self.report(&path.child(name), "Required value");
            }
        }
    }

    fn check_array(&mut self, schema: &Value, items: &[Value], path: &FieldPath) {
        let count = items.len() as u64;
        if let Some(max) = schema
            .get("maxItems")
            .and_then(Value::as_u64)
            .filter(|m| count > *m)
        {
            self.report(
                path,
                format!("Too many: {count}: must have at most {max} items"),
            );
        }
        if let Some(min) = schema
            .get("minItems")
            .and_then(Value::as_u64)
            .filter(|m| count < *m)
        {
            self.report(
                path,
                format!("Invalid value: {count}: should have at least {min} items"),
            );
        }
        if let Some(sub) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                self.check(sub, item, &path.index(i));
            }
        }
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => self.check_unique(items, path, |v| Some(v.clone())),
            Some("map") => {
                let keys: Vec<String> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect();
                self.check_unique(items, path, |v| {
                    Some(Value::Array(
                        keys.iter()
                            .map(|k| v.get(k).cloned().unwrap_or(Value::Null))
                            .collect(),
                    ))
                });
            }
            _ => {}
        }
    }

    fn check_unique(
        &mut self,
        items: &[Value],
        path: &FieldPath,
        identity: impl Fn(&Value) -> Option<Value>,
    ) {
        let mut seen = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(id) = identity(item) else { continue };
            if seen.contains(&id) {
                self.report(&path.index(i), format!("Duplicate value: {}", quoted(&id)));
            } else {
                seen.push(id);
            }
        }
    }

    fn check_rules(&mut self, schema: &Value, value: &Value, path: &FieldPath) {
        for message in rule_messages(schema) {
            match self.schemas.rules.get(message) {
                Some(Rule::Check(rule)) => {
                    for locus in rule(value) {
                        let at = match locus {
                            Locus::Whole => path.clone(),
                            Locus::Index(i) => path.index(i),
                            Locus::Key(k) => path.key(&k),
                        };
                        self.report(&at, message);
                    }
                }
                Some(Rule::Transition(_)) => {}
                None => self.report(path, format!("kerf cannot evaluate the rule {message:?}")),
            }
        }
    }
}

/// RFC 3339 date-time as Kubernetes accepts it (`2024-01-02T03:04:05Z`, fractional seconds
/// and numeric offsets allowed).
fn is_rfc3339(s: &str) -> bool {
    serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>(Value::String(
        s.to_owned(),
    ))
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_crd_rule_has_an_implementation() {
        // 45 on EC2NodeClass, 10 on NodeClaim, 19 on NodePool, 7 on NodeOverlay, 2 on
        // CapacityBuffer: a change upstream shows here.
        assert_eq!(SCHEMAS.rule_count(), 83);
        assert_eq!(SCHEMAS.unimplemented_rules(), Vec::<String>::new());
    }

    #[test]
    fn allowed_aws_labels_match_every_crd_rule() {
        use std::collections::BTreeSet;
        let expected: BTreeSet<&str> = super::super::names::KARPENTER_AWS_ALLOWED
            .into_iter()
            .collect();
        let mut seen = 0;
        for schema in SCHEMAS.by_kind.values() {
            visit_schemas(schema, &mut |s| {
                for rule in s
                    .get("x-kubernetes-validations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if rule["message"] != r#"label domain "karpenter.k8s.aws" is restricted"# {
                        continue;
                    }
                    let text = rule["rule"].as_str().unwrap();
                    let list = &text[text.find('[').unwrap() + 1..text.find(']').unwrap()];
                    let listed: BTreeSet<&str> = list
                        .split(',')
                        .map(|x| x.trim().trim_matches('"'))
                        .collect();
                    assert_eq!(listed, expected);
                    seen += 1;
                }
            });
        }
        assert_eq!(
            seen, 3,
            "NodePool requirements and labels, NodeClaim requirements"
        );
    }

    #[test]
    fn every_crd_pattern_compiles() {
        assert!(SCHEMAS.patterns.len() >= 10);
    }

    #[test]
    fn defaults_apply_recursively() {
        let schema = SCHEMAS.schema("NodePool").unwrap();
        let mut object = json!({"spec": {"template": {"spec": {}}}});
        apply_defaults(schema, &mut object);
        assert_eq!(
            object["spec"]["disruption"],
            json!({"consolidateAfter": "0s", "budgets": [{"nodes": "10%"}], "consolidationPolicy": "WhenEmptyOrUnderutilized"})
        );
        assert_eq!(object["spec"]["template"]["spec"]["expireAfter"], "720h");
    }

    #[test]
    fn rfc3339() {
        assert!(is_rfc3339("2024-01-02T03:04:05Z"));
        assert!(is_rfc3339("2024-01-02T03:04:05.5+02:00"));
        assert!(!is_rfc3339("yesterday"));
    }
}
