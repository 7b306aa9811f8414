//! Label selectors (`matchLabels` + `matchExpressions`) compiled once and matched against pod
//! labels, with the kube-scheduler's conventions: an empty selector selects everything, an
//! absent one selects nothing, and an operator the API server would have rejected selects
//! nothing rather than failing the whole scheduling cycle.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Expr {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    Never,
}

/// A compiled label selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Selector {
    exprs: Vec<Expr>,
    nothing: bool,
}

impl Selector {
    /// Compiles `selector`; `None` (absent) selects nothing.
    pub(crate) fn compile(selector: Option<&LabelSelector>) -> Selector {
        let Some(selector) = selector else {
            return Selector {
                exprs: Vec::new(),
                nothing: true,
            };
        };
        let mut exprs: Vec<Expr> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Expr::In(k.clone(), vec![v.clone()]))
            .collect();
        for e in selector.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            exprs.push(match e.operator.as_str() {
                "In" => Expr::In(e.key.clone(), values),
                "NotIn" => Expr::NotIn(e.key.clone(), values),
                "Exists" => Expr::Exists(e.key.clone()),
                "DoesNotExist" => Expr::DoesNotExist(e.key.clone()),
                _ => Expr::Never,
            });
        }
        Selector {
            exprs,
            nothing: false,
        }
    }

    /// Adds `key In [value]` for each of `keys` the pod carries (`matchLabelKeys`).
    pub(crate) fn with_label_keys(
        mut self,
        keys: &[String],
        labels: &BTreeMap<String, String>,
    ) -> Selector {
        for key in keys {
            if let Some(value) = labels.get(key) {
                self.exprs.push(Expr::In(key.clone(), vec![value.clone()]));
            }
        }
        self
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.exprs.iter().all(|e| expr_matches(e, labels))
    }
}

fn expr_matches(expr: &Expr, labels: &BTreeMap<String, String>) -> bool {
    match expr {
        Expr::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
        Expr::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
        Expr::Exists(key) => labels.contains_key(key),
        Expr::DoesNotExist(key) => !labels.contains_key(key),
        Expr::Never => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn absent_selects_nothing_and_empty_selects_everything() {
        assert!(!Selector::compile(None).matches(&labels(&[])));
        assert!(Selector::compile(Some(&LabelSelector::default())).matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let sel = Selector::compile(Some(&sel));
        assert!(sel.matches(&labels(&[("app", "web")])));
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!sel.matches(&labels(&[("app", "api")])));
    }

    #[test]
    fn match_label_keys_narrow_to_the_pods_values() {
        let sel = Selector::compile(Some(&LabelSelector::default()))
            .with_label_keys(&["rev".into()], &labels(&[("rev", "1")]));
        assert!(sel.matches(&labels(&[("rev", "1")])));
        assert!(!sel.matches(&labels(&[("rev", "2")])));
    }

    #[test]
    fn unknown_operators_select_nothing() {
        let sel = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: None,
            }]),
            ..LabelSelector::default()
        };
        assert!(!Selector::compile(Some(&sel)).matches(&labels(&[("a", "1")])));
    }
}
