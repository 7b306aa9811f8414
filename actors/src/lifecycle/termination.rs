//! The pure side of terminating a Node: the `karpenter.sh/disrupted:NoSchedule` taint that
//! keeps new pods off it, which of its pods the drain waits for and evicts now, and what an
//! eviction answer means. As upstream, the drain waits for every pod that is not finished,
//! not a mirror pod, does not tolerate the disrupted taint and is not stuck terminating
//! (deleted more than a minute past its grace period), and evicts non-critical pods before
//! `system-cluster-critical`/`system-node-critical` ones. Unlike upstream (which evicts
//! daemonset pods last), daemonset pods are left to go down with the Node.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kerf::labels;
use kerf::pods::is_owned_by as owned_by;
use kerf::taints::{disrupted_taint, toleration_tolerates};

/// Past its deletion timestamp (which includes its grace period) by more than this, a
/// terminating pod no longer holds up the drain: its kubelet is presumably gone.
pub const STUCK_TERMINATING_AFTER: Duration = Duration::from_secs(60);

/// The message of the API server's refusal to evict a pod covered by several budgets.
pub const MULTIPLE_PDBS_MESSAGE: &str = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// `node` tainted for termination: the disrupted taint (replacing a same-key taint of
/// another effect) and the label that takes it out of load balancers.
pub fn disrupting(node: &Node) -> Node {
    let mut tainted = node.clone();
    let wanted = disrupted_taint();
    let spec = tainted.spec.get_or_insert_with(Default::default);
    let taints = spec.taints.get_or_insert_with(Vec::new);
    if !taints
        .iter()
        .any(|t| t.key == wanted.key && t.effect == wanted.effect)
    {
        taints.retain(|t| t.key != wanted.key);
        taints.push(wanted);
    }
    tainted
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(
            labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS.to_owned(),
            "karpenter".to_owned(),
        );
    tainted
}

/// `finalizers` without the termination finalizer.
pub fn without_termination_finalizer(finalizers: Option<&Vec<String>>) -> Vec<String> {
    finalizers
        .into_iter()
        .flatten()
        .filter(|f| *f != labels::TERMINATION_FINALIZER)
        .cloned()
        .collect()
}

pub fn has_termination_finalizer(finalizers: Option<&Vec<String>>) -> bool {
    finalizers
        .into_iter()
        .flatten()
        .any(|f| f == labels::TERMINATION_FINALIZER)
}

/// One drain step for a Node.
#[derive(Debug, Clone, Default)]
pub struct Drain {
    /// Pods to evict now.
    pub evict: Vec<Arc<Pod>>,
    /// Pods the drain still waits for (evicted or not).
    pub waiting: usize,
}

impl Drain {
    pub fn is_done(&self) -> bool {
        self.waiting == 0
    }
}

/// The drain step for the Node `node_name` among `pods` at `now`.
pub fn plan(node_name: &str, pods: &[Arc<Pod>], now: Timestamp) -> Drain {
    let waiting: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| bound_to(p, node_name) && is_waiting_eviction(p, now))
        .collect();
    let (critical, ordinary): (Vec<&Arc<Pod>>, Vec<&Arc<Pod>>) =
        waiting.iter().partition(|p| is_critical(p));
    let group = if ordinary.is_empty() {
        critical
    } else {
        ordinary
    };
    Drain {
        evict: group
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect(),
        waiting: waiting.len(),
    }
}

fn bound_to(pod: &Pod, node_name: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name)
}

/// Whether the drain must see `pod` gone before the Node may go.
pub fn is_waiting_eviction(pod: &Pod, now: Timestamp) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
        && !owned_by(pod, "Node")
        && !owned_by(pod, "DaemonSet")
        && !tolerates_disruption(pod)
        && !is_stuck_terminating(pod, now)
}

fn tolerates_disruption(pod: &Pod) -> bool {
    let taint = disrupted_taint();
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| toleration_tolerates(t, &taint))
}

fn is_stuck_terminating(pod: &Pod, now: Timestamp) -> bool {
    pod.metadata.deletion_timestamp.as_ref().is_some_and(|t| {
        Duration::try_from(now.duration_since(t.0)).is_ok_and(|d| d > STUCK_TERMINATING_AFTER)
    })
}

fn is_critical(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c))
}

/// What an eviction request's answer means for the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evicted {
    /// The API server accepted the eviction; the pod is terminating.
    Accepted,
    /// The pod is gone (404) or is another pod by now (409, UID precondition).
    Gone,
    /// A PodDisruptionBudget forbids it for now (429, or several budgets): retry later.
    Blocked,
    /// Any other failure.
    Failed,
}

/// Reads an eviction error's status code and message.
pub fn eviction_answer(code: u16, message: &str) -> Evicted {
    match code {
        200..=299 => Evicted::Accepted,
        404 | 409 => Evicted::Gone,
        429 => Evicted::Blocked,
        _ if message == MULTIPLE_PDBS_MESSAGE => Evicted::Blocked,
        _ => Evicted::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).expect("valid")
    }

    fn pod(name: &str, extra: serde_json::Value) -> Arc<Pod> {
        let mut base = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        });
        merge(&mut base, extra);
        Arc::new(serde_json::from_value(base).expect("valid pod"))
    }

    fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
        match (base, extra) {
            (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
                for (k, v) in e {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, e) => *b = e,
        }
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn the_drain_skips_pods_that_go_down_with_the_node() {
        let pods = vec![
            pod("web", json!({})),
            pod("other-node", json!({"spec": {"nodeName": "n2"}})),
            pod("done", json!({"status": {"phase": "Succeeded"}})),
            pod(
                "mirror",
                json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}]}}),
            ),
            pod(
                "daemon",
                json!({"metadata": {"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]}}),
            ),
            pod(
                "tolerant",
                json!({"spec": {"tolerations": [
                {"key": "karpenter.sh/disrupted", "operator": "Exists"}]}}),
            ),
        ];
        let drain = plan("n1", &pods, at(0));
        assert_eq!(names(&drain.evict), ["web"]);
        assert_eq!(drain.waiting, 1);
    }

    #[test]
    fn terminating_pods_are_awaited_not_evicted_again_until_stuck() {
        let terminating = pod(
            "terminating",
            json!({"metadata": {"deletionTimestamp": at(0).to_string()}}),
        );
        let drain = plan("n1", std::slice::from_ref(&terminating), at(30));
        assert!(drain.evict.is_empty());
        assert_eq!(drain.waiting, 1);
        assert!(plan("n1", &[terminating], at(61)).is_done());
    }

    #[test]
    fn critical_pods_are_evicted_after_the_others() {
        let pods = vec![
            pod(
                "dns",
                json!({"spec": {"priorityClassName": "system-cluster-critical"}}),
            ),
            pod("web", json!({})),
        ];
        let drain = plan("n1", &pods, at(0));
        assert_eq!(names(&drain.evict), ["web"]);
        assert_eq!(drain.waiting, 2);
        let later = plan("n1", &pods[..1], at(0));
        assert_eq!(names(&later.evict), ["dns"]);
    }

    #[test]
    fn tainting_is_idempotent_and_replaces_another_effect() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                                {"key": "other", "effect": "NoSchedule"}]}
        }))
        .expect("valid node");
        let tainted = disrupting(&node);
        let taints = tainted
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .expect("taints");
        let listed: Vec<String> = taints.iter().map(kerf::taints::format_taint).collect();
        assert_eq!(
            listed,
            ["other:NoSchedule", "karpenter.sh/disrupted:NoSchedule"]
        );
        assert_eq!(
            tainted.metadata.labels.as_ref().expect("labels")
                [labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS],
            "karpenter"
        );
        assert_eq!(disrupting(&tainted), tainted);
    }

    #[test]
    fn eviction_answers() {
        assert_eq!(eviction_answer(201, ""), Evicted::Accepted);
        assert_eq!(eviction_answer(404, "not found"), Evicted::Gone);
        assert_eq!(eviction_answer(409, "uid mismatch"), Evicted::Gone);
        assert_eq!(eviction_answer(429, "budget"), Evicted::Blocked);
        assert_eq!(
            eviction_answer(500, MULTIPLE_PDBS_MESSAGE),
            Evicted::Blocked
        );
        assert_eq!(eviction_answer(500, "etcd down"), Evicted::Failed);
    }

    #[test]
    fn finalizer_helpers() {
        let finalizers = vec!["other".to_owned(), labels::TERMINATION_FINALIZER.to_owned()];
        assert!(has_termination_finalizer(Some(&finalizers)));
        assert_eq!(without_termination_finalizer(Some(&finalizers)), ["other"]);
        assert!(!has_termination_finalizer(None));
    }
}
