//! Disruption controller: computes each PodDisruptionBudget's status from the pods its
//! selector matches — `expectedPods`, `currentHealthy` (Running, Ready, not terminating,
//! not already approved for eviction), `desiredHealthy` (from `minAvailable` or
//! `maxUnavailable`, integers or percentages rounded up), `disruptionsAllowed`,
//! `disruptedPods` bookkeeping and the `DisruptionAllowed` condition.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{follow, in_namespace};
use crate::apiserver::clock::parse_rfc3339;
use crate::apiserver::registry::{Registry, Sub, Target, all_objects};
use crate::apiserver::selectors::LabelSelector;
use crate::apiserver::store::{ObjKey, StoredObject};
use crate::apiserver::watch::Change;

/// An eviction approved longer ago than this without the pod going away is forgotten.
const DISRUPTED_POD_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the controller.
pub async fn run(registry: Arc<Registry>) {
    let (Ok(pdbs), Ok(pods)) = (
        registry.target("policy", "v1", "poddisruptionbudgets", None),
        registry.target("", "v1", "pods", None),
    ) else {
        return;
    };
    let (pdbs_map, pdbs_reconcile, pods_reconcile) = (pdbs.clone(), pdbs.clone(), pods.clone());
    follow(
        registry,
        pdbs,
        pods,
        move |_, change| budgets_covering(&pdbs_map, change),
        move |registry, key| reconcile(registry, &pdbs_reconcile, &pods_reconcile, key),
    )
    .await;
}

fn budgets_covering(pdbs: &Target, change: &Change) -> Vec<ObjKey> {
    let ns = &change.attrs.namespace;
    all_objects(&in_namespace(pdbs, ns))
        .into_iter()
        .filter(|pdb| {
            LabelSelector::from_json(pdb.value().pointer("/spec/selector")).is_ok_and(|s| {
                s.matches(&change.attrs.labels)
                    || change.prev.as_ref().is_some_and(|p| s.matches(&p.labels))
            })
        })
        .map(|pdb| pdb.attrs.key())
        .collect()
}

/// An int-or-percent scaled against `total`, rounding up.
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.trim().parse::<i64>().ok().map(|p| (p * total + 99) / 100),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// Expected pods: for an integer `minAvailable`, the matching pods; otherwise the scale
/// of their controllers (pods without a controller count once each).
fn expected_pods(
    registry: &Registry,
    pods: &[Arc<StoredObject>],
    integer_min_available: bool,
) -> i64 {
    if integer_min_available {
        return i64::try_from(pods.len()).unwrap_or(i64::MAX);
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for pod in pods {
        match pod.attrs.controller() {
            Some(owner) if seen.insert(owner.uid.clone()) => {
                let scale = registry
                    .locate(&owner.uid)
                    .and_then(|(gr, (ns, name))| {
                        registry
                            .target_of(&gr, &ns)
                            .and_then(|t| registry.get(&t, &name).ok())
                    })
                    .and_then(|o| o.value().pointer("/spec/replicas").and_then(Value::as_i64));
                total += scale.unwrap_or(1);
            }
            Some(_) => {}
            None => total += 1,
        }
    }
    total
}

/// Approved evictions whose pods still run, approved recently enough.
fn still_disrupted(
    pdb: &Value,
    live: &BTreeMap<&str, &StoredObject>,
    now: std::time::SystemTime,
) -> Map<String, Value> {
    pdb.pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(pod, when)| {
                    let recent = when
                        .as_str()
                        .and_then(parse_rfc3339)
                        .is_some_and(|t| t + DISRUPTED_POD_TIMEOUT > now);
                    live.contains_key(pod.as_str()) && recent
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn reconcile(registry: &Arc<Registry>, pdbs: &Target, pods: &Target, (ns, name): &ObjKey) {
    let pdbs = in_namespace(pdbs, ns);
    let Some(pdb) = registry.find(&pdbs, name) else {
        return;
    };
    let Ok(selector) = LabelSelector::from_json(pdb.value().pointer("/spec/selector")) else {
        return;
    };
    let matching: Vec<Arc<StoredObject>> = all_objects(&in_namespace(pods, ns))
        .into_iter()
        .filter(|p| selector.matches(&p.attrs.labels))
        .collect();
    let now = registry.clock.now();
    let live: BTreeMap<&str, &StoredObject> = matching
        .iter()
        .filter(|p| !p.attrs.deleting)
        .map(|p| (p.attrs.name.as_str(), &**p))
        .collect();
    let spec = pdb.value().get("spec").cloned().unwrap_or(Value::Null);
    let min_available = spec.get("minAvailable");
    let expected = expected_pods(
        registry,
        &matching
            .iter()
            .filter(|p| !p.attrs.deleting)
            .cloned()
            .collect::<Vec<_>>(),
        min_available.is_some_and(Value::is_number),
    );
    let desired = match (min_available, spec.get("maxUnavailable")) {
        (Some(min), _) => scaled(min, expected).unwrap_or(expected),
        (None, Some(max)) => (expected - scaled(max, expected).unwrap_or(0)).max(0),
        // Neither set: treated as minAvailable 1.
        (None, None) => 1,
    };
    let time = registry.now();
    let result = registry.update_with(&pdbs, name, Sub::Status, &super::as_controller_manager(), |current| {
        // Read under the budget's lock so an eviction approved meanwhile is not forgotten.
        let disrupted = still_disrupted(current, &live, now);
        let healthy = live
            .values()
            .filter(|p| p.attrs.phase == "Running" && p.attrs.ready && !disrupted.contains_key(&p.attrs.name))
            .count();
        let healthy = i64::try_from(healthy).unwrap_or(i64::MAX);
        let allowed = (healthy - desired).max(0);
        let mut next = current.clone();
        let previous = current.pointer("/status/conditions/0").cloned().unwrap_or(Value::Null);
        let condition_status = if allowed > 0 { "True" } else { "False" };
        let transition = if previous["status"] == condition_status { previous["lastTransitionTime"].clone() } else { json!(time) };
        let generation = current.pointer("/metadata/generation").cloned().unwrap_or(json!(1));
        let mut status = json!({
            "observedGeneration": generation,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": allowed,
            "conditions": [{
                "type": "DisruptionAllowed", "status": condition_status, "lastTransitionTime": transition,
                "reason": if allowed > 0 { "SufficientPods" } else { "InsufficientPods" }, "message": "",
                "observedGeneration": generation,
            }],
        });
        if !disrupted.is_empty() {
            status["disruptedPods"] = Value::Object(disrupted);
        }
        next["status"] = status;
        Ok(next)
    });
    if let Err(err) = result {
        tracing::debug!(%err, name, "pdb status update failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&json!("50%"), 3), Some(2));
        assert_eq!(scaled(&json!("10%"), 10), Some(1));
        assert_eq!(scaled(&json!(2), 10), Some(2));
        assert_eq!(scaled(&json!("3"), 10), Some(3));
        assert_eq!(scaled(&json!(null), 10), None);
    }
}
