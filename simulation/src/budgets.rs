//! PodDisruptionBudgets watched through a run: a violation is a budget that met its minimum
//! and fell below it as its healthy pods dropped. The emulator refuses evictions past a
//! budget, so a violation means pods went another way — a node terminated before it was
//! drained, a pod deleted outright, a budget's status read stale — and each one is logged
//! with where the budget's pods stood, so the way can be found.

use std::collections::{BTreeMap, HashMap};

use kerf_loadtest::apiserver::Cluster;
use serde_json::Value;

/// Each budget's healthy pods at the last look, and whether it was below its minimum.
#[derive(Default)]
pub struct BudgetWatch(HashMap<String, (i64, bool)>);

impl BudgetWatch {
    /// Looks at every budget's status; returns how many violations are new, each logged at
    /// `warn` with its pods counted by state.
    pub fn observe(&mut self, cluster: &Cluster) -> u64 {
        let Ok(list) = cluster.list("policy/v1", "poddisruptionbudgets", None, "") else {
            return 0;
        };
        let mut violations = 0;
        for pdb in &list {
            let namespace = pdb["metadata"]["namespace"].as_str().unwrap_or_default();
            let budget = format!(
                "{namespace}/{}",
                pdb["metadata"]["name"].as_str().unwrap_or_default()
            );
            let healthy = pdb["status"]["currentHealthy"].as_i64().unwrap_or(0);
            let desired = pdb["status"]["desiredHealthy"].as_i64().unwrap_or(0);
            if let Some(before) = self.fell_below(&budget, healthy, desired) {
                tracing::warn!(
                    budget,
                    healthy_before = before,
                    healthy,
                    desired,
                    disrupted = pdb["status"]["disruptedPods"]
                        .as_object()
                        .map_or(0, serde_json::Map::len),
                    pods = ?pod_states(cluster, namespace, &pdb["spec"]["selector"]),
                    "a PodDisruptionBudget fell below its desired healthy pods"
                );
                violations += 1;
            }
        }
        violations
    }

    /// Records `budget`'s look; its healthy pods at the look before where this one is a
    /// violation: below `desired` now, not below before, and fewer healthy than then. A
    /// budget first seen below its minimum (still filling) is no violation.
    fn fell_below(&mut self, budget: &str, healthy: i64, desired: i64) -> Option<i64> {
        let below = healthy < desired;
        let (before, was_below) = self
            .0
            .insert(budget.to_owned(), (healthy, below))
            .unwrap_or((0, true));
        (below && !was_below && healthy < before).then_some(before)
    }
}

/// The pods a budget's `matchLabels` select, counted by state: `pending`, `deleting`,
/// `running`, `running-unready` or their phase.
fn pod_states(cluster: &Cluster, namespace: &str, selector: &Value) -> BTreeMap<String, usize> {
    let labels = selector["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut states = BTreeMap::new();
    for pod in cluster
        .list("v1", "pods", Some(namespace), &labels)
        .unwrap_or_default()
    {
        *states.entry(pod_state(&pod).to_owned()).or_default() += 1;
    }
    states
}

fn pod_state(pod: &Value) -> &str {
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return "deleting";
    }
    if pod["spec"]["nodeName"].is_null() {
        return "pending";
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or("Unknown");
    let ready = pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    match (phase, ready) {
        ("Running", true) => "running",
        ("Running", false) => "running-unready",
        (phase, _) => phase,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_violation_is_a_budget_that_met_its_minimum_falling_below_it() {
        let mut watch = BudgetWatch::default();
        // Filling: first seen below, then met, then the minimum raised with no pod lost.
        assert_eq!(watch.fell_below("a", 1, 3), None);
        assert_eq!(watch.fell_below("a", 3, 3), None);
        assert_eq!(watch.fell_below("a", 3, 4), None);
        // Met again, then a healthy pod lost past the minimum: one violation, not one per look.
        assert_eq!(watch.fell_below("a", 4, 4), None);
        assert_eq!(watch.fell_below("a", 3, 4), Some(4));
        assert_eq!(watch.fell_below("a", 2, 4), None);
        // Recovered and fallen again: a second violation. Another budget is its own.
        assert_eq!(watch.fell_below("a", 4, 4), None);
        assert_eq!(watch.fell_below("a", 3, 4), Some(4));
        assert_eq!(watch.fell_below("b", 0, 1), None);
    }

    #[test]
    fn a_pod_state_names_what_keeps_it_from_counting_as_healthy() {
        let ready = json!([{"type": "Ready", "status": "True"}]);
        let pod = |deleting: bool, node: Option<&str>, phase: &str, ready: &Value| {
            json!({
                "metadata": {"deletionTimestamp": deleting.then_some("2026-12-07T00:00:00Z")},
                "spec": {"nodeName": node},
                "status": {"phase": phase, "conditions": ready},
            })
        };
        assert_eq!(
            pod_state(&pod(true, Some("n"), "Running", &ready)),
            "deleting"
        );
        assert_eq!(
            pod_state(&pod(false, None, "Pending", &json!([]))),
            "pending"
        );
        assert_eq!(
            pod_state(&pod(false, Some("n"), "Running", &ready)),
            "running"
        );
        assert_eq!(
            pod_state(&pod(false, Some("n"), "Running", &json!([]))),
            "running-unready"
        );
        assert_eq!(
            pod_state(&pod(false, Some("n"), "Pending", &json!([]))),
            "Pending"
        );
    }
}
