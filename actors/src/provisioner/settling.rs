//! Pods the kube-scheduler has not tried since capacity opened are left to it for a moment
//! before a round plans capacity for them. Through a large scale-up Nodes initialize one
//! after another while the kube-scheduler works through a backlog, binding whichever pods
//! come first: a round that solves a pod before the kube-scheduler has tried it against the
//! Nodes opened since sees only the room its own packing leaves, and plans a NodeClaim for a
//! pod that is bound moments later on room that was there all along. Upstream plans every pod
//! marked unschedulable, whenever it was marked; kerf leaves out of a round a pod whose latest
//! `Unschedulable` report is no later than the last time room opened (the newest NodeClaim
//! initialization, or the newest withdrawal of a nomination its pod could not use), while
//! that is within [`SETTLE_PERIOD`]. The kube-scheduler retries unschedulable pods when a
//! Node changes, and its next report brings the pod back to a round. Each pod is left out
//! for at most [`SETTLE_PERIOD`] in all, so Nodes initializing without pause cannot hold
//! back a pod that needs new capacity; one refused since, or never refused, is planned at
//! once. The `scale-out-10k` scenario exercises this.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::{Conditions, types};
use kerf::pods::{LeanPod, NOMINATION_CONDITION, PodLike};
use kerf::scheduling::SchedulingInput;

use crate::created_claims::last_refused;

/// How long a pod is left to the kube-scheduler: its longest backoff between tries of an
/// unschedulable pod (kube-scheduler's `podMaxBackoffSeconds`, 10 by default).
pub const SETTLE_PERIOD: Duration = Duration::from_secs(10);

/// The pods left out of rounds, with when each was first left out. Only the Provisioner
/// writes it, one round at a time; it holds at most the pending pods of the latest round.
#[derive(Debug, Default)]
pub struct Settling {
    since: HashMap<String, Instant>,
}

impl Settling {
    /// Takes out of `input`'s pods those refused no later than `opened` ([`last_opening`]),
    /// if `opened` is within [`SETTLE_PERIOD`] of `wall`, each for at most [`SETTLE_PERIOD`]
    /// from the round that first left it out (at `now`); returns how many.
    pub fn withhold(
        &mut self,
        input: &mut SchedulingInput,
        opened: Option<Timestamp>,
        wall: Timestamp,
        now: Instant,
    ) -> usize {
        let recent = opened.filter(|at| {
            Duration::try_from(wall.duration_since(*at)).is_ok_and(|age| age < SETTLE_PERIOD)
        });
        let Some(opened) = recent else {
            self.since.clear();
            return 0;
        };
        let mut since = HashMap::new();
        let before = input.pods.len();
        input.pods.retain(|pod| {
            if !refused_no_later_than(pod, opened) {
                return true;
            }
            let uid = pod.meta().uid.unwrap_or_default();
            let first = self.since.get(uid).copied().unwrap_or(now);
            // Kept past its period too, so the same Node opening does not start another.
            since.insert(uid.to_owned(), first);
            now.duration_since(first) >= SETTLE_PERIOD
        });
        self.since = since;
        before - input.pods.len()
    }
}

/// When room last opened for pending pods: the newest of `claims` was initialized, or kerf
/// withdrew the nomination of one of `pending` (the room the kube-scheduler kept for it on
/// its Node, which it could not use, is free for others since).
pub fn last_opening<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    pending: &[Arc<LeanPod>],
) -> Option<Timestamp> {
    let initialized = claims
        .into_iter()
        .filter_map(|claim| claim.conditions().condition(types::INITIALIZED))
        .filter(|condition| condition.is_true())
        .map(|condition| condition.last_transition_time.0);
    let withdrawn = pending.iter().filter_map(|pod| withdrawn_at(pod));
    initialized.chain(withdrawn).max()
}

/// When kerf withdrew `pod`'s nomination, if it did.
fn withdrawn_at(pod: &LeanPod) -> Option<Timestamp> {
    let condition = pod.status()?.condition(NOMINATION_CONDITION)?;
    let at = condition.last_transition_time?;
    (condition.status == "False").then_some(at)
}

/// Whether the kube-scheduler's latest verdict on `pod` is `Unschedulable` and was given no
/// later than `opened`, by whole seconds (the times have no finer grain, so a report in the
/// same second may predate the Node).
fn refused_no_later_than(pod: &LeanPod, opened: Timestamp) -> bool {
    last_refused(pod).is_some_and(|at| at.as_second() <= opened.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pending pod `uid`, reported unschedulable at `at` (none: never refused).
    fn pod(uid: &str, refused_at: Option<&str>) -> Arc<LeanPod> {
        let conditions: Vec<serde_json::Value> = refused_at
            .map(|at| {
                serde_json::json!({"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "lastTransitionTime": at})
            })
            .into_iter()
            .collect();
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": conditions},
        }))
        .expect("valid pod");
        Arc::new(pod.into())
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn uids(input: &SchedulingInput) -> Vec<&str> {
        input.pods.iter().filter_map(|p| p.meta().uid).collect()
    }

    fn input() -> SchedulingInput {
        SchedulingInput {
            pods: vec![
                pod("before", Some("2026-01-01T00:00:05Z")),
                pod("same-second", Some("2026-01-01T00:00:10Z")),
                pod("after", Some("2026-01-01T00:00:11Z")),
                pod("never-refused", None),
            ],
            ..SchedulingInput::default()
        }
    }

    #[test]
    fn pods_refused_before_a_node_opened_are_left_to_the_scheduler_for_the_period() {
        let opened = at("2026-01-01T00:00:10Z");
        let mut settling = Settling::default();
        let start = Instant::now();

        let mut first = input();
        let wall = at("2026-01-01T00:00:12Z");
        assert_eq!(settling.withhold(&mut first, Some(opened), wall, start), 2);
        assert_eq!(uids(&first), ["after", "never-refused"]);

        let mut within = input();
        let later = start + SETTLE_PERIOD - Duration::from_millis(1);
        settling.withhold(&mut within, Some(opened), wall, later);
        assert_eq!(uids(&within), ["after", "never-refused"], "still settling");

        let mut past = input();
        settling.withhold(&mut past, Some(opened), wall, start + SETTLE_PERIOD);
        assert_eq!(
            uids(&past),
            ["before", "same-second", "after", "never-refused"],
            "left out for the period at most"
        );
    }

    #[test]
    fn nothing_is_left_out_once_the_newest_node_opened_a_period_ago() {
        let mut settling = Settling::default();
        let mut all = input();
        let opened = at("2026-01-01T00:00:10Z");
        let wall = opened + SETTLE_PERIOD;
        assert_eq!(
            settling.withhold(&mut all, Some(opened), wall, Instant::now()),
            0
        );
        let mut none_opened = input();
        assert_eq!(
            settling.withhold(&mut none_opened, None, wall, Instant::now()),
            0
        );
        assert_eq!(uids(&none_opened).len(), 4);
    }

    #[test]
    fn a_pod_refused_again_after_its_period_is_not_left_out_again_for_the_same_node() {
        let opened = at("2026-01-01T00:00:10Z");
        let wall = at("2026-01-01T00:00:12Z");
        let mut settling = Settling::default();
        let start = Instant::now();
        settling.withhold(&mut input(), Some(opened), wall, start);
        settling.withhold(&mut input(), Some(opened), wall, start + SETTLE_PERIOD);
        let mut again = input();
        let later = start + SETTLE_PERIOD + Duration::from_secs(1);
        assert_eq!(settling.withhold(&mut again, Some(opened), wall, later), 0);
    }

    #[test]
    fn room_opens_when_a_nodeclaim_is_initialized_or_a_nomination_withdrawn() {
        let claim = |initialized: Option<(&str, &str)>| -> NodeClaim {
            let conditions: Vec<serde_json::Value> = initialized
                .map(|(status, at)| {
                    serde_json::json!({"type": "Initialized", "status": status,
                        "lastTransitionTime": at, "reason": "", "message": ""})
                })
                .into_iter()
                .collect();
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                    "name": "default"}, "requirements": []},
                "status": {"conditions": conditions},
            }))
            .expect("valid nodeclaim")
        };
        let claims = [
            claim(Some(("True", "2026-01-01T00:00:10Z"))),
            claim(Some(("True", "2026-01-01T00:00:20Z"))),
            claim(Some(("False", "2026-01-01T00:00:30Z"))),
            claim(None),
        ];
        let pending = input().pods;
        assert_eq!(
            last_opening(&claims, &pending),
            Some(at("2026-01-01T00:00:20Z"))
        );
        let nominated = |status: &str, at: &str| -> Arc<LeanPod> {
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "default", "uid": "p"},
                "status": {"phase": "Pending", "conditions": [{"type": NOMINATION_CONDITION,
                    "status": status, "lastTransitionTime": at}]},
            }))
            .expect("valid pod");
            Arc::new(pod.into())
        };
        let still_nominated = [nominated("True", "2026-01-01T00:00:40Z")];
        assert_eq!(
            last_opening(&claims, &still_nominated),
            Some(at("2026-01-01T00:00:20Z")),
            "a nomination written opens nothing"
        );
        let withdrawn = [nominated("False", "2026-01-01T00:00:25Z")];
        assert_eq!(
            last_opening(&claims, &withdrawn),
            Some(at("2026-01-01T00:00:25Z"))
        );
    }
}
