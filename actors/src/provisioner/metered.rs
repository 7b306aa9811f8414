//! What a provisioning round tells the metrics, under upstream's scheduler names: which pods
//! it took up and which it decided on and placed (cluster state's
//! [`crate::state::PodSchedulingTimes`]), how many it left out or could not place, and the
//! unplaced pods by the zone their own constraints allow (upstream's effective zone, read
//! here from the pod's node selector and required node affinity only: volume zones and
//! topology spreads are not intersected).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use kerf::labels;
use kerf::pods::{LeanPod, PodLike, PodRef};
use kerf::scheduling::SchedulingResult;

use crate::metrics::{
    SCHEDULER_IGNORED_PODS, SCHEDULER_PENDING_BY_ZONE, SCHEDULER_UNSCHEDULABLE_PODS,
};
use crate::state::{ClusterState, ObjectKey};

use super::SCHEDULING_CONTROLLER;

/// A round took up `pending` and left `withheld` of them out.
pub fn taken_up(state: &ClusterState, pending: &[PodRef], withheld: usize) {
    for pod in pending {
        let key = ObjectKey::new(Some(pod.namespace.as_str()), pod.name.as_str());
        state.scheduling.ack(&key);
    }
    #[allow(clippy::cast_precision_loss, reason = "pod counts are far below 2^52")]
    metrics::gauge!(SCHEDULER_IGNORED_PODS).set(withheld as f64);
}

/// A round's solve finished: every pod it placed or could not place is decided; returns the
/// unplaced pods by effective zone.
pub fn solved(state: &ClusterState, result: &SchedulingResult) -> BTreeMap<String, usize> {
    let placed = result
        .new_node_claims
        .iter()
        .flat_map(|c| &c.pods)
        .chain(result.existing_nodes.iter().flat_map(|n| &n.pods));
    for pod in placed {
        let key = ObjectKey::new(Some(&pod.namespace), &pod.name);
        state.scheduling.decided(&key, true);
    }
    let mut by_zone: BTreeMap<String, usize> = BTreeMap::new();
    for pod in result.errors.keys() {
        let key = ObjectKey::new(Some(&pod.namespace), &pod.name);
        let zone = state
            .pods
            .get(&key)
            .map_or_else(|| FLEXIBLE.to_owned(), |p| effective_zone(&p));
        state.scheduling.decided(&key, false);
        *by_zone.entry(zone).or_default() += 1;
    }
    #[allow(clippy::cast_precision_loss, reason = "pod counts are far below 2^52")]
    metrics::gauge!(SCHEDULER_UNSCHEDULABLE_PODS, "controller" => SCHEDULING_CONTROLLER)
        .set(result.errors.len() as f64);
    by_zone
}

/// Sets the unplaced pods by zone, zeroing the zones an earlier round had and this one has
/// not (`seen` keeps every zone set so far).
pub fn pending_by_zone(by_zone: &BTreeMap<String, usize>, seen: &mut HashSet<String>) {
    seen.extend(by_zone.keys().cloned());
    for zone in seen.iter() {
        let count = by_zone.get(zone).copied().unwrap_or(0);
        #[allow(clippy::cast_precision_loss, reason = "pod counts are far below 2^52")]
        metrics::gauge!(
            SCHEDULER_PENDING_BY_ZONE,
            "controller" => SCHEDULING_CONTROLLER,
            "zone" => zone.clone()
        )
        .set(count as f64);
    }
}

/// Upstream's value for a pod its constraints let run in several zones, or any.
const FLEXIBLE: &str = "flexible";
/// Upstream's value for a pod whose constraints allow no zone at all.
const NONE: &str = "none";

/// The zone `pod`'s node selector and required node affinity allow: one zone, `flexible`
/// for several or any, `none` for none.
fn effective_zone(pod: &LeanPod) -> String {
    let Some(spec) = pod.spec() else {
        return FLEXIBLE.to_owned();
    };
    let mut allowed: Option<BTreeSet<String>> = spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get(labels::ZONE))
        .map(|z| BTreeSet::from([z.clone()]));
    let terms = kerf::pods::required_node_terms(spec.affinity.as_ref());
    if !terms.is_empty() {
        // Terms are alternatives: the zones any term allows; a term without a zone
        // requirement allows any.
        let mut union = Some(BTreeSet::new());
        for term in terms {
            let zones = term
                .match_expressions
                .iter()
                .flatten()
                .filter(|e| e.key == labels::ZONE && e.operator == "In")
                .map(|e| e.values.iter().flatten().cloned().collect::<BTreeSet<_>>())
                .reduce(|a, b| a.intersection(&b).cloned().collect());
            union = match (union, zones) {
                (Some(mut acc), Some(zones)) => {
                    acc.extend(zones);
                    Some(acc)
                }
                _ => None,
            };
        }
        allowed = match (allowed, union) {
            (Some(a), Some(b)) => Some(a.intersection(&b).cloned().collect()),
            (a, b) => a.or(b),
        };
    }
    match allowed {
        None => FLEXIBLE.to_owned(),
        Some(zones) if zones.len() == 1 => zones.into_iter().next().unwrap_or_default(),
        Some(zones) if zones.is_empty() => NONE.to_owned(),
        Some(_) => FLEXIBLE.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> LeanPod {
        serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(json!({
            "metadata": {"name": "p", "namespace": "default"}, "spec": spec
        }))
        .expect("valid pod")
        .into()
    }

    fn zone_term(zones: &[&str]) -> serde_json::Value {
        json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
            "values": zones}]})
    }

    fn affinity(terms: Vec<serde_json::Value>) -> serde_json::Value {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}})
    }

    #[test]
    fn the_effective_zone_intersects_the_selector_with_the_affinitys_terms() {
        let bare = pod(json!({"containers": []}));
        assert_eq!(effective_zone(&bare), "flexible");
        let selected = pod(json!({"containers": [],
            "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}));
        assert_eq!(effective_zone(&selected), "us-east-1a");
        let two = pod(json!({"containers": [],
            "affinity": affinity(vec![zone_term(&["us-east-1a"]), zone_term(&["us-east-1b"])])}));
        assert_eq!(effective_zone(&two), "flexible");
        let narrowed = pod(json!({"containers": [],
            "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1b"},
            "affinity": affinity(vec![zone_term(&["us-east-1a", "us-east-1b"])])}));
        assert_eq!(effective_zone(&narrowed), "us-east-1b");
        let conflicting = pod(json!({"containers": [],
            "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1c"},
            "affinity": affinity(vec![zone_term(&["us-east-1a"])])}));
        assert_eq!(effective_zone(&conflicting), "none");
    }
}
