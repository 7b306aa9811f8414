//! When the provisioner first took up each pending pod, decided on it and found it a place:
//! what upstream's cluster state keeps for its pod latency metrics (`karpenter_pods_
//! scheduling_decision_duration_seconds` and the `karpenter_pods_provisioning_…` family).
//! The Provisioner writes it each round; the scrape-time pod gauges and the PodWatcher's
//! startup tracker read it, and the tracker forgets a pod once it is running or gone, so it
//! holds an entry per pod between its first round and its start.

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

#[derive(Debug, Default)]
pub struct PodSchedulingTimes {
    times: DashMap<ObjectKey, Times>,
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

    /// A round took `pod` up (kept from its first round).
    pub fn ack(&self, pod: ObjectKey) {
        self.times.entry(pod).or_insert_with(|| Times {
            acked: Timestamp::now(),
            decided: None,
            scheduled: None,
        });
    }

    /// A round solved `pod`: `placed` if it found it a place. The first decision records
    /// how long it took after the pod was taken up.
    pub fn decided(&self, pod: ObjectKey, placed: bool) {
        let now = Timestamp::now();
        let mut times = self.times.entry(pod).or_insert(Times {
            acked: now,
            decided: None,
            scheduled: None,
        });
        if times.decided.is_none() {
            times.decided = Some(now);
            let seconds = now.duration_since(times.acked).as_secs_f64().max(0.0);
            metrics::histogram!(PODS_SCHEDULING_DECISION_DURATION).record(seconds);
        }
        if placed && times.scheduled.is_none() {
            times.scheduled = Some(now);
        }
    }

    pub fn get(&self, pod: &ObjectKey) -> Option<Times> {
        self.times.get(pod).map(|t| *t)
    }

    /// `pod` is running or gone: nothing more is measured from its times.
    pub fn forget(&self, pod: &ObjectKey) {
        self.times.remove(pod);
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
        times.ack(pod.clone());
        let acked = times.get(&pod).expect("acked").acked;
        times.ack(pod.clone());
        assert_eq!(times.get(&pod).expect("kept").acked, acked);
        times.decided(pod.clone(), false);
        let first = times.get(&pod).expect("decided");
        assert!(first.decided.is_some() && first.scheduled.is_none());
        times.decided(pod.clone(), true);
        let placed = times.get(&pod).expect("placed");
        assert_eq!(placed.decided, first.decided, "the first decision stays");
        assert!(placed.scheduled.is_some());
        times.forget(&pod);
        assert!(times.is_empty());
    }
}
