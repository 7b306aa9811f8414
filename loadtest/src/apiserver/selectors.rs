//! Label and field selectors with the API server's grammar: `labelSelector` strings
//! (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`, `<`), `metav1.LabelSelector` objects
//! (`matchLabels` + `matchExpressions`, as in PDB and ReplicaSet specs) and `fieldSelector`
//! strings over the fields the server registers for each kind (events by their involved
//! object, pods by node, phase or nomination, nodes by `spec.unschedulable`, …).

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::store::Attrs;

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    /// `key=value` / `key==value` / `key in (a,b)`
    In(String, Vec<String>),
    /// `key!=value` / `key notin (a,b)` (also true when the label is absent)
    NotIn(String, Vec<String>),
    /// `key`
    Exists(String),
    /// `!key`
    DoesNotExist(String),
    /// `key>n` (integer comparison)
    Gt(String, i64),
    /// `key<n`
    Lt(String, i64),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::Gt(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::Lt(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

/// A conjunction of label requirements; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    /// A `metav1.LabelSelector` of `null` selects nothing (PDB semantics); `{}` selects all.
    matches_nothing: bool,
}

impl LabelSelector {
    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.matches_nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True for the selector that selects everything.
    pub fn is_everything(&self) -> bool {
        !self.matches_nothing && self.requirements.is_empty()
    }

    /// Parses the query-string form, e.g. `app=web,tier in (a,b),!legacy`.
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut requirements = Vec::new();
        for clause in split_top_level(text) {
            let clause = clause.trim();
            if clause.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(clause).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: {clause:?} in labelSelector {text:?}"
                ))
            })?);
        }
        Ok(Self {
            requirements,
            matches_nothing: false,
        })
    }

    /// Converts a `metav1.LabelSelector` JSON object; `null`/absent selects nothing.
    pub fn from_json(selector: Option<&Value>) -> ApiResult<Self> {
        let Some(selector) = selector.filter(|s| !s.is_null()) else {
            return Ok(Self {
                requirements: Vec::new(),
                matches_nothing: true,
            });
        };
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                requirements.push(Requirement::In(
                    k.clone(),
                    vec![v.as_str().unwrap_or_default().to_string()],
                ));
            }
        }
        for expr in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = expr
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let values: Vec<String> = expr
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            let requirement = match expr.get("operator").and_then(Value::as_str) {
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::DoesNotExist(key),
                other => {
                    return Err(ApiError::bad_request(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            };
            requirements.push(requirement);
        }
        Ok(Self {
            requirements,
            matches_nothing: false,
        })
    }
}

/// Splits on commas that are not inside `( )`.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_requirement(clause: &str) -> Option<Requirement> {
    if let Some(key) = clause.strip_prefix('!') {
        return valid_key(key.trim()).then(|| Requirement::DoesNotExist(key.trim().to_string()));
    }
    for (op, set_op) in [(" notin ", false), (" in ", true)] {
        if let Some((key, rest)) = clause.split_once(op) {
            let values = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
            let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
            let key = key.trim().to_string();
            if !valid_key(&key) {
                return None;
            }
            return Some(if set_op {
                Requirement::In(key, values)
            } else {
                Requirement::NotIn(key, values)
            });
        }
    }
    if let Some((key, value)) = clause.split_once("!=") {
        return Some(Requirement::NotIn(
            checked_key(key)?,
            vec![value.trim().to_string()],
        ));
    }
    if let Some((key, value)) = clause.split_once("==").or_else(|| clause.split_once('=')) {
        return Some(Requirement::In(
            checked_key(key)?,
            vec![value.trim().to_string()],
        ));
    }
    if let Some((key, value)) = clause.split_once('>') {
        return Some(Requirement::Gt(
            checked_key(key)?,
            value.trim().parse().ok()?,
        ));
    }
    if let Some((key, value)) = clause.split_once('<') {
        return Some(Requirement::Lt(
            checked_key(key)?,
            value.trim().parse().ok()?,
        ));
    }
    valid_key(clause).then(|| Requirement::Exists(clause.to_string()))
}

fn checked_key(key: &str) -> Option<String> {
    let key = key.trim();
    valid_key(key).then(|| key.to_string())
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// The fields every kind's `fieldSelector` may name.
pub const METADATA_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

/// The fields a built-in kind's `fieldSelector` may name besides [`METADATA_FIELDS`], as a
/// 1.33 API server registers them for that resource (`group`, plural); unknown fields are
/// rejected in the server's words.
pub fn selectable_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") | ("events.k8s.io", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("apps", "replicasets") => &["status.replicas"],
        _ => &[],
    }
}

/// The value a selectable field has in `object`, as the API server renders it for matching:
/// strings as they are, booleans and numbers as text, a missing boolean as `false` and any
/// other missing field as the empty string.
pub fn field_value(object: &Value, field: &str) -> String {
    let pointer = match field {
        // Events are selected by the component that reported them.
        "source" => "/source/component".to_owned(),
        _ => format!("/{}", field.replace('.', "/")),
    };
    match object.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ if matches!(field, "spec.unschedulable" | "spec.hostNetwork") => "false".to_owned(),
        _ => String::new(),
    }
}

/// One `field=value` / `field!=value` term.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses `spec.nodeName=n1,status.phase!=Succeeded`; besides [`METADATA_FIELDS`],
    /// `allowed` names the kind's selectable fields.
    pub fn parse(text: &str, allowed: &[&str]) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for clause in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let (field, value, equal) = if let Some((f, v)) = clause.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = clause.split_once("==").or_else(|| clause.split_once('='))
            {
                (f, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: {clause:?}; can't understand it"
                )));
            };
            let field = field.trim();
            if !METADATA_FIELDS.contains(&field) && !allowed.contains(&field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push(FieldTerm {
                field: field.to_string(),
                value: value.trim().to_string(),
                equal,
            });
        }
        Ok(Self { terms })
    }

    /// Whether an object whose selectable fields are given by `lookup` satisfies every term.
    pub fn matches(&self, mut lookup: impl FnMut(&str) -> String) -> bool {
        self.terms
            .iter()
            .all(|t| (lookup(&t.field) == t.value) == t.equal)
    }

    /// Whether a stored object satisfies every term: the fields its attributes carry are
    /// read from them (`attrs`, which may be an earlier version's), any other from the
    /// object's JSON (`object`), parsed at most once and only when a term needs it.
    pub fn matches_stored(&self, attrs: &Attrs, object: &[u8]) -> bool {
        let mut parsed: Option<Value> = None;
        self.matches(|field| match attrs.field(field) {
            Some(value) => value,
            None => field_value(
                parsed.get_or_insert_with(|| serde_json::from_slice(object).unwrap_or(Value::Null)),
                field,
            ),
        })
    }

    /// True when there are no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_every_operator() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5")]);
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "tier in (front, back)",
            "tier notin (db)",
            "app",
            "!legacy",
            "n>3",
            "n<6",
            "app=web,tier=front",
            "missing!=x",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).expect(s).matches(&l),
                "{s} should match"
            );
        }
        let no = [
            "app=db",
            "app!=web",
            "tier in (back)",
            "tier notin (front,x)",
            "legacy",
            "!app",
            "n>5",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).expect(s).matches(&l),
                "{s} should not match"
            );
        }
        assert!(LabelSelector::parse("").expect("empty").is_everything());
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn label_selector_objects() {
        let sel = LabelSelector::from_json(Some(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]
        })))
        .expect("valid");
        assert!(sel.matches(&labels(&[("app", "web")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(
            !LabelSelector::from_json(None)
                .expect("null")
                .matches(&labels(&[]))
        );
        assert!(
            LabelSelector::from_json(Some(&json!({})))
                .expect("empty")
                .matches(&labels(&[]))
        );
        assert!(
            LabelSelector::from_json(Some(
                &json!({"matchExpressions": [{"key": "a", "operator": "Bogus"}]})
            ))
            .is_err()
        );
    }

    #[test]
    fn field_selectors() {
        let pods = selectable_fields("", "pods");
        let sel =
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Succeeded", pods).expect("valid");
        let pod = |node: &'static str, phase: &'static str| {
            move |f: &str| match f {
                "spec.nodeName" => node.to_string(),
                "status.phase" => phase.to_string(),
                _ => String::new(),
            }
        };
        assert!(sel.matches(pod("n1", "Running")));
        assert!(!sel.matches(pod("n1", "Succeeded")));
        assert!(!sel.matches(pod("n2", "Running")));
        assert!(
            FieldSelector::parse("spec.nodeName=", pods)
                .expect("empty value")
                .matches(pod("", ""))
        );
    }

    #[test]
    fn each_kind_takes_the_fields_its_server_registers_and_refuses_others_in_its_words() {
        let events = selectable_fields("", "events");
        for field in [
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.name",
            "metadata.namespace",
        ] {
            assert!(
                FieldSelector::parse(&format!("{field}=x"), events).is_ok(),
                "{field}"
            );
        }
        let pods = selectable_fields("", "pods");
        for field in [
            "spec.schedulerName",
            "status.nominatedNodeName",
            "status.podIP",
        ] {
            assert!(FieldSelector::parse(&format!("{field}=x"), pods).is_ok());
        }
        assert!(
            FieldSelector::parse("spec.unschedulable=true", selectable_fields("", "nodes")).is_ok()
        );
        // Only metadata for a kind without fields of its own, as for custom resources.
        let crd = selectable_fields("karpenter.sh", "nodepools");
        assert!(FieldSelector::parse("metadata.name=default", crd).is_ok());
        let refused =
            FieldSelector::parse("spec.nodeName=n1", crd).expect_err("not a NodePool field");
        assert_eq!(refused.message, "field label not supported: spec.nodeName");
        assert!(FieldSelector::parse("involvedObject.name=x", pods).is_err());
    }

    #[test]
    fn fields_beyond_the_attributes_are_read_from_the_object() {
        let event = json!({
            "metadata": {"name": "e1", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n1", "uid": "u1"},
            "reason": "DisruptionBlocked",
            "source": {"component": "karpenter"},
            "type": "Normal",
        });
        let attrs = Attrs::of(&event);
        let bytes = serde_json::to_vec(&event).expect("serialises");
        let events = selectable_fields("", "events");
        let select = |text: &str| {
            FieldSelector::parse(text, events)
                .expect("valid")
                .matches_stored(&attrs, &bytes)
        };
        assert!(select(
            "involvedObject.kind=Node,involvedObject.name=n1,involvedObject.uid=u1"
        ));
        assert!(select(
            "source=karpenter,type=Normal,reason=DisruptionBlocked"
        ));
        assert!(select("metadata.name=e1,involvedObject.namespace="));
        assert!(!select("involvedObject.name=n2"));
        assert!(!select("involvedObject.kind=Node,type!=Normal"));

        let node = json!({"metadata": {"name": "n1"}, "spec": {}});
        let cordoned = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}});
        let nodes = selectable_fields("", "nodes");
        let unschedulable = FieldSelector::parse("spec.unschedulable=true", nodes).expect("valid");
        let bytes = |v: &Value| serde_json::to_vec(v).expect("serialises");
        assert!(!unschedulable.matches_stored(&Attrs::of(&node), &bytes(&node)));
        assert!(unschedulable.matches_stored(&Attrs::of(&cordoned), &bytes(&cordoned)));
        let schedulable = FieldSelector::parse("spec.unschedulable=false", nodes).expect("valid");
        assert!(schedulable.matches_stored(&Attrs::of(&node), &bytes(&node)));
    }
}
