//! Pod facts disruption decides on, as upstream reads them: which pods move when their node
//! goes (reschedulable), which forbid graceful disruption (`karpenter.sh/do-not-disrupt`,
//! PodDisruptionBudgets), and what evicting one costs (deletion cost and priority).

use crate::pods::PodLike;
use std::collections::HashMap;

use crate::pods::is_owned_by as owned_by;
use crate::pods::{is_active, selects};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::api::duration::Duration;
use crate::labels;

/// `controller.kubernetes.io/pod-deletion-cost`.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn is_mirror(pod: &impl PodLike) -> bool {
    owned_by(pod, "Node")
        || pod
            .meta()
            .annotations
            .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// A pod that needs a new home when its node goes: active (or a terminating StatefulSet
/// pod, whose replacement under the same name waits for it), not a DaemonSet or mirror pod.
pub fn is_reschedulable(pod: &impl PodLike) -> bool {
    (is_active(pod) || crate::pods::is_terminating_stateful(pod))
        && !owned_by(pod, "DaemonSet")
        && !is_mirror(pod)
}

/// `namespace/name`.
pub fn key(pod: &impl PodLike) -> String {
    format!(
        "{}/{}",
        pod.meta().namespace.unwrap_or("default"),
        pod.meta().name.unwrap_or_default()
    )
}

/// Whether an active pod's `karpenter.sh/do-not-disrupt` blocks disruption at `now`:
/// `"true"`, or a duration that has not yet elapsed since the pod started.
pub fn blocks_disruption(pod: &impl PodLike, now: Timestamp) -> bool {
    let Some(value) = pod
        .meta()
        .annotations
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
    else {
        return false;
    };
    if !is_active(pod) {
        return false;
    }
    if value == "true" {
        return true;
    }
    let Ok(duration) = Duration::parse(value) else {
        return false;
    };
    let started = pod
        .status()
        .and_then(|s| s.start_time)
        .or(pod.meta().creation_timestamp.map(|t| t.0));
    let Some(started) = started else {
        return true;
    };
    let elapsed = now.as_second() - started.as_second();
    elapsed < duration.as_std().as_secs() as i64
}

/// The cost of evicting one pod: 1, raised or lowered by its deletion cost and priority,
/// clamped to [-10, 10] (upstream `EvictionCost`).
pub fn eviction_cost(pod: &impl PodLike) -> f64 {
    let mut cost = 1.0;
    if let Some(deletion_cost) = pod
        .meta()
        .annotations
        .and_then(|a| a.get(POD_DELETION_COST))
        .and_then(|v| v.parse::<f64>().ok())
    {
        cost += deletion_cost / 2f64.powi(27);
    }
    if let Some(priority) = pod.spec().and_then(|s| s.priority) {
        cost += f64::from(priority) / 2f64.powi(25);
    }
    cost.clamp(-10.0, 10.0)
}

/// PDBs indexed by namespace and one of their `matchLabels` pairs, so checking a pod looks
/// at the few budgets that could select it instead of every budget in the cluster (a large
/// cluster has one per app).
#[derive(Debug, Default)]
pub struct PdbIndex<'a> {
    by_label: HashMap<(&'a str, &'a str, &'a str), Vec<&'a Pdb>>,
    /// Budgets without `matchLabels`, checked for every pod of their namespace.
    by_namespace: HashMap<&'a str, Vec<&'a Pdb>>,
}

impl<'a> PdbIndex<'a> {
    pub fn new(pdbs: &'a [Pdb]) -> PdbIndex<'a> {
        let mut index = PdbIndex::default();
        for pdb in pdbs {
            match pdb
                .selector
                .match_labels
                .as_ref()
                .and_then(|l| l.iter().next())
            {
                Some((key, value)) => index
                    .by_label
                    .entry((pdb.namespace.as_str(), key.as_str(), value.as_str()))
                    .or_default()
                    .push(pdb),
                None => index
                    .by_namespace
                    .entry(pdb.namespace.as_str())
                    .or_default()
                    .push(pdb),
            }
        }
        index
    }

    /// Every budget selecting `pod`, in input order.
    fn selecting(&self, pod: &impl PodLike) -> Vec<&'a Pdb> {
        let namespace = pod.meta().namespace.unwrap_or("default");
        let mut out: Vec<&'a Pdb> = self
            .by_namespace
            .get(namespace)
            .cloned()
            .unwrap_or_default();
        for (key, value) in pod.meta().labels.into_iter().flatten() {
            if let Some(list) = self
                .by_label
                .get(&(namespace, key.as_str(), value.as_str()))
            {
                out.extend(list.iter().copied());
            }
        }
        out.retain(|b| selects(&b.selector, pod));
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out.dedup_by(|a, b| a.key == b.key);
        out
    }

    /// Why the PDBs refuse evicting `pod`, if they do: more than one selects it (the eviction
    /// API refuses such pods), or the one that does allows no disruption now.
    pub fn block(&self, pod: &impl PodLike) -> Option<String> {
        if !is_active(pod) || is_mirror(pod) {
            return None;
        }
        match self.selecting(pod).as_slice() {
            [] => None,
            [pdb] if pdb.disruptions_allowed > 0 => None,
            [pdb] => Some(format!(
                "PodDisruptionBudget {} allows no disruption now (pod {})",
                pdb.key,
                key(pod)
            )),
            many => Some(format!(
                "pod {} is selected by more than one PodDisruptionBudget ({}), so it cannot be evicted",
                key(pod),
                many.iter()
                    .map(|b| b.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}

/// A PodDisruptionBudget reduced to what an eviction check needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Pdb {
    /// `namespace/name`.
    pub key: String,
    pub namespace: String,
    pub selector: LabelSelector,
    /// Evictions the budget allows now (`status.disruptionsAllowed`).
    pub disruptions_allowed: i32,
}

impl Pdb {
    /// From the API object: `status.disruptionsAllowed` when the status is given, else what
    /// the disruption controller would compute with every selected running pod healthy and
    /// expected (`pods` are all pods of the input).
    pub fn from_api(pdb: &PodDisruptionBudget, pods: impl Iterator<Item = impl PodLike>) -> Pdb {
        let namespace = pdb
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = pdb.metadata.name.clone().unwrap_or_default();
        let spec = pdb.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        let allowed = match pdb.status.as_ref() {
            Some(status) => status.disruptions_allowed,
            None => {
                let selected = pods
                    .filter(|p| p.meta().namespace.unwrap_or("default") == namespace)
                    .filter(|p| crate::pods::is_active(p) && selects(&selector, p))
                    .count() as i32;
                computed_allowance(
                    spec.min_available.as_ref(),
                    spec.max_unavailable.as_ref(),
                    selected,
                )
            }
        };
        Pdb {
            key: format!("{namespace}/{name}"),
            namespace,
            selector,
            disruptions_allowed: allowed,
        }
    }
}

/// The disruption controller's arithmetic with `healthy == expected == selected`.
fn computed_allowance(
    min_available: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    selected: i32,
) -> i32 {
    let scaled = |value: &IntOrString, round_up: bool| match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(text) => {
            let percent: f64 = text.trim_end_matches('%').parse().unwrap_or(0.0);
            let exact = percent * f64::from(selected) / 100.0;
            (if round_up {
                exact.ceil()
            } else {
                exact.floor()
            }) as i32
        }
    };
    let allowed = match (max_unavailable, min_available) {
        (Some(max), _) => scaled(max, true),
        (None, Some(min)) => selected - scaled(min, true),
        // Neither: the API server defaults minAvailable to 1.
        (None, None) => selected - 1,
    };
    allowed.max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_allowance_follows_the_disruption_controller() {
        let int = IntOrString::Int;
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(computed_allowance(Some(&int(2)), None, 3), 1);
        assert_eq!(computed_allowance(Some(&int(3)), None, 3), 0);
        assert_eq!(computed_allowance(None, Some(&int(1)), 3), 1);
        // (minAvailable, maxUnavailable, selected pods)
        assert_eq!(computed_allowance(Some(&pct("50%")), None, 3), 1);
        assert_eq!(computed_allowance(None, Some(&pct("50%")), 3), 2);
        assert_eq!(computed_allowance(None, None, 1), 0);
    }
}
