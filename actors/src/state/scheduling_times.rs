//! When the provisioner first took up each pending pod, decided on it and found it a place:
//! what upstream's cluster state keeps for its pod latency metrics (`karpenter_pods_
//! scheduling_decision_duration_seconds` and the `karpenter_pods_provisioning_…` family).
//! The Provisioner writes it each round; the scrape-time pod gauges and the PodWatcher's
//! startup tracker read it, and the tracker forgets a pod once it is running or gone, so it
//! holds an entry per pod between its first round and its start.
//!
//! That is an entry per pending pod, so each is kept small: the pod's key as a 64-bit digest
//! (randomly seeded per process), not a copy of its `namespace/name`, and its times to the
//! millisecond. Two pending pods with one digest (odds about one in 10^9 with 100,000
//! pending) would share their times, which feed only latency metrics.

use std::hash::{BuildHasher, RandomState};

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;

use super::ObjectKey;
use crate::metrics::PODS_SCHEDULING_DECISION_DURATION;

/// One pod's times (wall clock, comparable with the API's timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    /// The first round that took the pod up.
    pub acked: Timestamp,
    /// The first round that solved it, placed or not.
    pub decided: Option<Timestamp>,
    /// The first round that placed it.
    pub scheduled: Option<Timestamp>,
}

/// One pod's times as the table keeps them: milliseconds since the epoch, then since then.
#[derive(Debug, Clone, Copy)]
struct Kept {
    acked: i64,
    decided_after: Option<u32>,
    scheduled_after: Option<u32>,
}

impl Kept {
    fn new(acked: Timestamp) -> Self {
        Self {
            acked: acked.as_millisecond(),
            decided_after: None,
            scheduled_after: None,
        }
    }

    /// Milliseconds from the pod's first round to `now` (none before it, at most ~49 days).
    fn after(&self, now: Timestamp) -> u32 {
        let after = now.as_millisecond().saturating_sub(self.acked).max(0);
        u32::try_from(after).unwrap_or(u32::MAX)
    }

    fn times(&self) -> Times {
        let acked = Timestamp::from_millisecond(self.acked).unwrap_or(Timestamp::UNIX_EPOCH);
        let at = |after: Option<u32>| after.and_then(|ms| acked.checked_add(jiff_ms(ms)).ok());
        Times {
            acked,
            decided: at(self.decided_after),
            scheduled: at(self.scheduled_after),
        }
    }
}

fn jiff_ms(ms: u32) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_millis(i64::from(ms))
}

#[derive(Debug, Default)]
pub struct PodSchedulingTimes {
    times: DashMap<u64, Kept>,
    /// Seeds the keys' digests.
    keys: RandomState,
    /// The round whose solve is running, and since when.
    solving: std::sync::Mutex<Option<(u64, std::time::Instant)>>,
}

impl PodSchedulingTimes {
    /// Round `number`'s solve started.
    pub fn solve_started(&self, number: u64) {
        if let Ok(mut solving) = self.solving.lock() {
            *solving = Some((number, std::time::Instant::now()));
        }
    }

    /// The running solve ended.
    pub fn solve_ended(&self) {
        if let Ok(mut solving) = self.solving.lock() {
            *solving = None;
        }
    }

    /// The round whose solve is running, and for how long it has run.
    pub fn solving(&self) -> Option<(u64, std::time::Duration)> {
        let solving = self.solving.lock().ok()?;
        solving.map(|(number, since)| (number, since.elapsed()))
    }

    fn digest(&self, pod: &ObjectKey) -> u64 {
        self.keys.hash_one(pod)
    }

    /// A round took `pod` up (kept from its first round).
    pub fn ack(&self, pod: &ObjectKey) {
        self.times
            .entry(self.digest(pod))
            .or_insert_with(|| Kept::new(Timestamp::now()));
    }

    /// A round solved `pod`: `placed` if it found it a place. The first decision records
    /// how long it took after the pod was taken up.
    pub fn decided(&self, pod: &ObjectKey, placed: bool) {
        let now = Timestamp::now();
        let mut kept = self
            .times
            .entry(self.digest(pod))
            .or_insert_with(|| Kept::new(now));
        let after = kept.after(now);
        if kept.decided_after.is_none() {
            kept.decided_after = Some(after);
            metrics::histogram!(PODS_SCHEDULING_DECISION_DURATION)
                .record(f64::from(after) / 1000.0);
        }
        if placed && kept.scheduled_after.is_none() {
            kept.scheduled_after = Some(after);
        }
    }

    pub fn get(&self, pod: &ObjectKey) -> Option<Times> {
        self.times.get(&self.digest(pod)).map(|kept| kept.times())
    }

    /// `pod` is running or gone: nothing more is measured from its times.
    pub fn forget(&self, pod: &ObjectKey) {
        self.times.remove(&self.digest(pod));
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_round_and_the_first_placement_are_kept() {
        let times = PodSchedulingTimes::default();
        let pod = ObjectKey::new(Some("default"), "web");
        times.ack(&pod);
        let acked = times.get(&pod).expect("acked").acked;
        times.ack(&pod);
        assert_eq!(times.get(&pod).expect("kept").acked, acked);
        times.decided(&pod, false);
        let first = times.get(&pod).expect("decided");
        assert!(first.decided.is_some() && first.scheduled.is_none());
        times.decided(&pod, true);
        let placed = times.get(&pod).expect("placed");
        assert_eq!(placed.decided, first.decided, "the first decision stays");
        assert!(placed.scheduled.is_some());
        assert!(placed.acked <= placed.decided.expect("decided"));
        times.forget(&pod);
        assert!(times.is_empty());
    }

    #[test]
    fn pods_are_kept_apart_and_their_times_to_the_millisecond() {
        let times = PodSchedulingTimes::default();
        let pods: Vec<_> = (0..1000)
            .map(|i| ObjectKey::new(Some("default"), &format!("web-{i}")))
            .collect();
        for pod in &pods {
            times.ack(pod);
        }
        times.decided(&pods[7], true);
        assert_eq!(times.len(), 1000);
        assert!(pods.iter().enumerate().all(|(i, pod)| {
            let kept = times.get(pod).expect("kept");
            kept.scheduled.is_some() == (i == 7)
        }));
        assert!(times.get(&ObjectKey::new(Some("other"), "web-7")).is_none());

        let acked = Timestamp::from_millisecond(1_765_000_000_123).expect("a time");
        let mut kept = Kept::new(acked);
        kept.decided_after = Some(kept.after(acked.checked_add(jiff_ms(2_500)).expect("a time")));
        let back = kept.times();
        assert_eq!(back.acked, acked);
        assert_eq!(back.decided, acked.checked_add(jiff_ms(2_500)).ok());
        assert_eq!(
            kept.after(Timestamp::UNIX_EPOCH),
            0,
            "never before the first round"
        );
    }
}
