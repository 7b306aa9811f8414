//! Label selectors over pods, as the API server's `labels.Selector` matches them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::PodLike;

/// Whether `selector` selects `pod`: every `matchLabels` pair and `matchExpressions` entry
/// holds (an empty selector selects every pod, as for PDBs); an unknown operator selects
/// nothing.
pub fn selects(selector: &LabelSelector, pod: &impl PodLike) -> bool {
    let empty = std::collections::BTreeMap::new();
    let labels = pod.meta().labels.unwrap_or(&empty);
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}
