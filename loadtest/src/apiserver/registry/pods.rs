//! The pod subresources that act on more than the pod: `binding` (the scheduler assigns a
//! node, once) and `eviction` (a delete that first charges the pod's PodDisruptionBudget,
//! refused with 429 past its budget); an eviction checks and charges its budget in one write
//! of it, so concurrent evictions never take more than the budget allows.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{DeleteOptions, ListQuery, Registry, Sub, Target, WriteOptions};
use crate::apiserver::error::{ApiError, ApiResult, Reason};
use crate::apiserver::meta::is_deleting;
use crate::apiserver::selectors::LabelSelector;
use crate::apiserver::store::StoredObject;

impl Registry {
    /// `pods/{name}/binding`: assigns the pod to a node once.
    pub fn bind(&self, t: &Target, name: &str, binding: &Value) -> ApiResult<()> {
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "",
                "Binding",
                name,
                "target.name",
                "Required value",
            ));
        }
        let now = self.now();
        self.update_with(t, name, Sub::Whole, &WriteOptions::default(), |current| {
            let assigned = current
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !assigned.is_empty() {
                return Err(ApiError::conflict(
                    "",
                    "pods",
                    name,
                    &format!("pod {name} is already assigned to node {assigned:?}"),
                ));
            }
            if is_deleting(current) {
                return Err(ApiError::conflict(
                    "",
                    "pods",
                    name,
                    "pod is being deleted, cannot be assigned to a host",
                ));
            }
            let mut pod = current.clone();
            pod["spec"]["nodeName"] = json!(node);
            let conditions = pod["status"]
                .as_object_mut()
                .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
            if let Some(Value::Array(conditions)) = conditions {
                conditions
                    .retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
                conditions.push(
                    json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now}),
                );
            }
            Ok(pod)
        })?;
        Ok(())
    }

    /// `pods/{name}/eviction`: deletes the pod unless that would violate its
    /// PodDisruptionBudget (429), accounting the disruption in the budget's status.
    pub fn evict(self: &Arc<Self>, t: &Target, name: &str, eviction: &Value) -> ApiResult<()> {
        let delete_opts = eviction
            .get("deleteOptions")
            .map(DeleteOptions::from_json)
            .transpose()?
            .unwrap_or_default();
        let pod = self.get(t, name)?;
        let phase = pod.attrs.phase.as_str();
        let exempt = pod.attrs.deleting || matches!(phase, "Succeeded" | "Failed" | "Pending" | "");
        if !exempt {
            self.charge_disruption_budget(&pod)?;
        }
        self.delete(t, name, &delete_opts)?;
        Ok(())
    }

    fn charge_disruption_budget(&self, pod: &StoredObject) -> ApiResult<()> {
        let pdbs = self.target(
            "policy",
            "v1",
            "poddisruptionbudgets",
            Some(&pod.attrs.namespace),
        )?;
        let matching: Vec<Arc<StoredObject>> = self
            .list(&pdbs, &ListQuery::default())?
            .items
            .into_iter()
            .filter(|pdb| {
                LabelSelector::from_json(pdb.value().pointer("/spec/selector"))
                    .is_ok_and(|s| s.matches(&pod.attrs.labels))
            })
            .collect();
        let pdb = match matching.as_slice() {
            [] => return Ok(()),
            [one] => one,
            _ => {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
        };
        let pdb_name = pdb.attrs.name.clone();
        let now = self.now();
        let pod_name = pod.attrs.name.clone();
        // Checked and charged in one write of the budget, under its kind's lock: evictions
        // of pods under other budgets, or none, go on meanwhile, as in kube-apiserver, whose
        // budget update is conditional on the version it checked.
        self.update_with(
            &pdbs,
            &pdb_name,
            Sub::Status,
            &WriteOptions::default(),
            |current| {
                let allowed = disruptions_allowed(&pdb_name, current)?;
                let mut next = current.clone();
                next["status"]["disruptionsAllowed"] = json!(allowed - 1);
                let disrupted = next["status"]
                    .as_object_mut()
                    .map(|s| s.entry("disruptedPods").or_insert_with(|| json!({})));
                if let Some(Value::Object(disrupted)) = disrupted {
                    disrupted.insert(pod_name.clone(), json!(now));
                }
                Ok(next)
            },
        )?;
        Ok(())
    }
}

/// The disruptions budget `name` (as `pdb` stands) allows now, at least one; 429 otherwise,
/// worded as kube-apiserver words it.
fn disruptions_allowed(name: &str, pdb: &Value) -> ApiResult<i64> {
    let number = |pointer: &str| pdb.pointer(pointer).and_then(Value::as_i64);
    let too_many = |message: String| {
        ApiError::new(
            Reason::TooManyRequests,
            "Cannot evict pod as it would violate the pod's disruption budget.",
        )
        .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": message}]}))
    };
    let observed = number("/status/observedGeneration").unwrap_or(0);
    if observed < number("/metadata/generation").unwrap_or(1) {
        return Err(too_many(format!(
            "The disruption budget {name} is still being processed by the server."
        )));
    }
    let allowed = number("/status/disruptionsAllowed").unwrap_or(0);
    if allowed <= 0 {
        let desired = number("/status/desiredHealthy").unwrap_or(0);
        let current = number("/status/currentHealthy").unwrap_or(0);
        return Err(too_many(format!(
            "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        )));
    }
    Ok(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten running pods under a budget that allows `allowed` disruptions.
    fn budgeted(registry: &Registry, allowed: i64) -> Target {
        let pods = registry
            .target("", "v1", "pods", Some("default"))
            .expect("pods");
        let opts = WriteOptions::default();
        for i in 0..10 {
            let name = format!("db-{i}");
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "db"}]}});
            registry.create(&pods, pod, &opts).expect("pod");
            registry
                .update_with(&pods, &name, Sub::Status, &opts, |current| {
                    let mut running = current.clone();
                    running["status"] = json!({"phase": "Running"});
                    Ok(running)
                })
                .expect("running");
        }
        let pdbs = registry
            .target("policy", "v1", "poddisruptionbudgets", Some("default"))
            .expect("pdbs");
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 10 - allowed, "selector": {"matchLabels": {"app": "db"}}}});
        registry.create(&pdbs, pdb, &opts).expect("pdb");
        registry
            .update_with(&pdbs, "db", Sub::Status, &opts, |current| {
                let mut counted = current.clone();
                counted["status"] = json!({"observedGeneration": 1, "disruptionsAllowed": allowed,
                    "currentHealthy": 10, "desiredHealthy": 10 - allowed, "expectedPods": 10});
                Ok(counted)
            })
            .expect("status");
        pods
    }

    #[test]
    fn concurrent_evictions_take_no_more_than_the_budget_allows() {
        let (_runtime, registry, _) = super::super::config_maps();
        let pods = budgeted(&registry, 3);
        let answers: Vec<ApiResult<()>> = std::thread::scope(|s| {
            let evictions: Vec<_> = (0..10)
                .map(|i| {
                    let (registry, pods) = (&registry, &pods);
                    s.spawn(move || registry.evict(pods, &format!("db-{i}"), &json!({})))
                })
                .collect();
            evictions
                .into_iter()
                .map(|e| e.join().expect("evicted"))
                .collect()
        });
        let evicted = answers.iter().filter(|a| a.is_ok()).count();
        let refused = answers
            .iter()
            .filter(|a| matches!(a, Err(e) if e.reason == Reason::TooManyRequests))
            .count();
        assert_eq!((evicted, refused), (3, 7), "{answers:?}");
        let pdbs = registry
            .target("policy", "v1", "poddisruptionbudgets", Some("default"))
            .expect("pdbs");
        let pdb = registry.get(&pdbs, "db").expect("pdb").value();
        assert_eq!(pdb["status"]["disruptionsAllowed"], 0, "{pdb}");
        assert_eq!(
            pdb["status"]["disruptedPods"].as_object().map(|d| d.len()),
            Some(3)
        );
    }
}
