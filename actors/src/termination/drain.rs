//! The pure side of draining a Node, as upstream Karpenter's terminator decides it. A pod
//! the drain *waits for* is one that is not finished, does not tolerate the
//! `karpenter.sh/disrupted:NoSchedule` taint, is not a mirror pod and is not stuck
//! terminating (deleted more than a minute past its grace period) — daemonset pods and
//! `karpenter.sh/do-not-disrupt` pods included: the Node waits for them. A pod the drain
//! *evicts* is one of those that is also not terminating already and not do-not-disrupt;
//! they go in upstream's order, one group per step: non-critical non-daemon pods, then
//! non-critical daemon pods, then critical (`system-cluster-critical`,
//! `system-node-critical`) non-daemon pods, then critical daemon pods. Once the
//! NodeClaim's termination timestamp is near, a waiting pod is *deleted* instead (past its
//! PDB and do-not-disrupt) with the time left as its grace period, as soon as that time is
//! shorter than its own `terminationGracePeriodSeconds`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::labels;
use kerf::pods::is_owned_by;
use kerf::pods::{LeanPod, PodLike};
use kerf::taints::{disrupted_taint, toleration_tolerates};

/// Past its deletion timestamp (which includes its grace period) by more than this, a
/// terminating pod no longer holds up the drain: its kubelet is presumably gone.
pub const STUCK_TERMINATING_AFTER: Duration = Duration::from_secs(60);

/// The grace period Kubernetes gives a pod that does not set one.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The eviction groups, in the order they are drained: non-critical non-daemon pods,
/// non-critical daemon pods, critical non-daemon pods, critical daemon pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Ordinary,
    Daemon,
    Critical,
    CriticalDaemon,
}

/// One drain step for a Node.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// Pods to delete now, each with the grace period (seconds) it gets.
    pub delete: Vec<(Arc<LeanPod>, i64)>,
    /// Pods to evict now: the first non-empty group.
    pub evict: Vec<Arc<LeanPod>>,
    /// Pods the drain still waits for (evicted, deleted or not).
    pub waiting: usize,
}

impl Step {
    pub fn is_done(&self) -> bool {
        self.waiting == 0
    }
}

/// The drain step for the Node `node_name` among `pods` at `now`; `termination` is the
/// NodeClaim's termination timestamp, if it has one.
pub fn plan(
    node_name: &str,
    pods: &[Arc<LeanPod>],
    now: Timestamp,
    termination: Option<Timestamp>,
) -> Step {
    let on_node: Vec<&Arc<LeanPod>> = pods
        .iter()
        .filter(|p| bound_to(p, node_name) && is_waiting_eviction(p, now))
        .collect();
    let delete: Vec<(Arc<LeanPod>, i64)> = on_node
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .filter_map(|p| Some(((*p).clone(), forced_grace(p, now, termination?)?)))
        .collect();
    let mut evictable: Vec<(Group, &Arc<LeanPod>)> = on_node
        .iter()
        .filter(|p| is_evictable(p) && !delete.iter().any(|(d, _)| Arc::ptr_eq(d, p)))
        .map(|p| (group(p), *p))
        .collect();
    evictable.sort_by_key(|(g, _)| *g);
    let first = evictable.first().map(|(g, _)| *g);
    Step {
        evict: evictable
            .into_iter()
            .filter(|(g, _)| Some(*g) == first)
            .map(|(_, p)| p.clone())
            .collect(),
        delete,
        waiting: on_node.len(),
    }
}

/// The grace period `pod` is deleted with now, if the termination timestamp is closer than
/// its own grace period: the seconds left until that timestamp (never negative).
fn forced_grace(pod: &LeanPod, now: Timestamp, termination: Timestamp) -> Option<i64> {
    let own = pod
        .spec()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS);
    let left = termination.as_second() - now.as_second();
    (left < own).then_some(left.max(0))
}

pub fn bound_to(pod: &LeanPod, node_name: &str) -> bool {
    pod.node_name() == Some(node_name)
}

/// Whether the drain must see `pod` gone before the Node may go (upstream's
/// `IsWaitingEviction`).
pub fn is_waiting_eviction(pod: &LeanPod, now: Timestamp) -> bool {
    !is_terminal(pod) && is_drainable(pod, now)
}

/// Whether the drain is responsible for `pod` at all (upstream's `IsDrainable`): a pod
/// tolerating the disrupted taint, a mirror pod or one stuck terminating is not.
pub fn is_drainable(pod: &LeanPod, now: Timestamp) -> bool {
    !tolerates_disruption(pod) && !is_owned_by(pod, "Node") && !is_stuck_terminating(pod, now)
}

/// Whether the drain may ask the eviction API to remove `pod` now.
pub fn is_evictable(pod: &LeanPod) -> bool {
    !is_terminal(pod)
        && pod.meta().deletion_timestamp.is_none()
        && !tolerates_disruption(pod)
        && !is_owned_by(pod, "Node")
        && !has_do_not_disrupt(pod)
}

pub fn has_do_not_disrupt(pod: &LeanPod) -> bool {
    pod.meta()
        .annotations
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
        .is_some_and(|v| v == "true")
}

fn is_terminal(pod: &LeanPod) -> bool {
    let phase = pod.status().and_then(|s| s.phase);
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn tolerates_disruption(pod: &LeanPod) -> bool {
    let taint = disrupted_taint();
    pod.spec()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| toleration_tolerates(t, &taint))
}

fn is_stuck_terminating(pod: &LeanPod, now: Timestamp) -> bool {
    pod.meta().deletion_timestamp.is_some_and(|t| {
        Duration::try_from(now.duration_since(t.0)).is_ok_and(|d| d > STUCK_TERMINATING_AFTER)
    })
}

pub fn group(pod: &LeanPod) -> Group {
    let critical = pod
        .spec()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c));
    match (critical, is_owned_by(pod, "DaemonSet")) {
        (false, false) => Group::Ordinary,
        (false, true) => Group::Daemon,
        (true, false) => Group::Critical,
        (true, true) => Group::CriticalDaemon,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::termination::testing::{at, pod};
    use serde_json::json;

    fn names(pods: &[Arc<LeanPod>]) -> Vec<String> {
        pods.iter()
            .map(|p| p.meta().name.unwrap_or_default().to_owned())
            .collect()
    }

    fn daemon() -> serde_json::Value {
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]}})
    }

    fn critical(extra: serde_json::Value) -> serde_json::Value {
        let mut value = json!({"spec": {"priorityClassName": "system-node-critical"}});
        crate::termination::testing::merge(&mut value, extra);
        value
    }

    #[test]
    fn the_drain_skips_pods_that_are_not_its_to_wait_for() {
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
                "tolerant",
                json!({"spec": {"tolerations": [
                {"key": "karpenter.sh/disrupted", "operator": "Exists"}]}}),
            ),
        ];
        let step = plan("n1", &pods, at(0), None);
        assert_eq!(names(&step.evict), ["web"]);
        assert_eq!(step.waiting, 1);
    }

    #[test]
    fn groups_drain_in_upstreams_order_one_group_per_step() {
        let mut pods = vec![
            pod("critical-daemon", critical(daemon())),
            pod("critical", critical(json!({}))),
            pod("daemon", daemon()),
            pod("web", json!({})),
        ];
        let mut order = Vec::new();
        loop {
            let step = plan("n1", &pods, at(0), None);
            if step.is_done() {
                break;
            }
            let evicted = names(&step.evict);
            pods.retain(|p| !evicted.contains(&p.meta().name.unwrap_or_default().to_owned()));
            order.push(evicted);
        }
        assert_eq!(
            order,
            [["web"], ["daemon"], ["critical"], ["critical-daemon"]]
        );
    }

    #[test]
    fn terminating_pods_are_awaited_not_evicted_again_until_stuck() {
        let terminating = pod(
            "terminating",
            json!({"metadata": {"deletionTimestamp": at(0).to_string()}}),
        );
        let step = plan("n1", std::slice::from_ref(&terminating), at(30), None);
        assert!(step.evict.is_empty());
        assert_eq!(step.waiting, 1);
        assert!(plan("n1", &[terminating], at(61), None).is_done());
    }

    #[test]
    fn do_not_disrupt_pods_are_waited_for_but_never_evicted() {
        let pods = vec![pod(
            "precious",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
        )];
        let step = plan("n1", &pods, at(0), None);
        assert!(step.evict.is_empty() && step.delete.is_empty());
        assert_eq!(step.waiting, 1);
    }

    #[test]
    fn near_the_termination_timestamp_pods_are_deleted_with_the_time_left() {
        let pods = vec![
            pod(
                "precious",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                       "spec": {"terminationGracePeriodSeconds": 60}}),
            ),
            pod("web", json!({})),
        ];
        // 100 s left: more than either pod's grace period, nothing is forced.
        let early = plan("n1", &pods, at(0), Some(at(100)));
        assert!(early.delete.is_empty());
        assert_eq!(names(&early.evict), ["web"]);
        // 40 s left: less than the 60 s the precious pod needs, more than the default 30 s.
        let close = plan("n1", &pods, at(60), Some(at(100)));
        let deleted: Vec<(String, i64)> = close
            .delete
            .iter()
            .map(|(p, g)| (p.meta().name.unwrap_or_default().to_owned(), *g))
            .collect();
        assert_eq!(deleted, [("precious".to_owned(), 40)]);
        // Past it: everything left goes with no grace at all.
        let past = plan("n1", &pods, at(200), Some(at(100)));
        assert_eq!(past.delete.len(), 2);
        assert!(past.delete.iter().all(|(_, g)| *g == 0));
        assert!(past.evict.is_empty(), "deleted, not evicted as well");
    }
}
