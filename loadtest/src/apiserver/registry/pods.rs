//! The pod subresources that act on more than the pod: `binding` (the scheduler assigns a
//! node, once) and `eviction` (a delete that first charges the pod's PodDisruptionBudget,
//! refused with 429 past its budget); an eviction charges the budget and deletes under the
//! registry's eviction lock, one eviction at a time.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{DeleteOptions, ListQuery, Registry, Sub, Target, WriteOptions};
use crate::apiserver::error::{ApiError, ApiResult, Reason};
use crate::apiserver::meta::is_deleting;
use crate::apiserver::selectors::LabelSelector;
use crate::apiserver::store::{StoredObject, lock};

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
        let _serialised = lock(&self.eviction);
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
        let pdb_value = pdb.value();
        let observed = pdb_value
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let generation = pdb_value
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let too_many = |message: String| {
            ApiError::new(
                Reason::TooManyRequests,
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
            .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": message}]}))
        };
        if observed < generation {
            return Err(too_many(format!(
                "The disruption budget {pdb_name} is still being processed by the server."
            )));
        }
        let allowed = pdb_value
            .pointer("/status/disruptionsAllowed")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if allowed <= 0 {
            let desired = pdb_value
                .pointer("/status/desiredHealthy")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let current = pdb_value
                .pointer("/status/currentHealthy")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            return Err(too_many(format!(
                "The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"
            )));
        }
        let now = self.now();
        let pod_name = pod.attrs.name.clone();
        self.update_with(
            &pdbs,
            &pdb_name,
            Sub::Status,
            &WriteOptions::default(),
            |current| {
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
