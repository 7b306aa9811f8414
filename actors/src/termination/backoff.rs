//! Per-pod eviction backoff, as upstream's eviction queue rate-limits each pod: a pod whose
//! eviction a PodDisruptionBudget refused (429) is not asked again before its delay has
//! passed, the delay doubling per refusal from [`BASE`] up to [`MAX`]; an accepted eviction
//! forgets the pod. Keys carry the pod's UID, so a replacement under the same name starts
//! afresh. An entry goes when its pod is evicted or found gone, and the drainer's resync
//! drops the entries of pods no longer in cluster state ([`Backoffs::retain`]).
//!
//! The entries are also upstream's eviction queue: a pod is queued when a drain step first
//! asks for its eviction ([`Backoffs::enqueue`]) and leaves on success or when gone, so
//! their count is `karpenter_nodes_eviction_queue_depth`, published on every change.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::NODES_EVICTION_QUEUE_DEPTH;

/// Upstream's eviction queue base delay.
pub const BASE: Duration = Duration::from_millis(100);
/// Upstream's eviction queue maximum delay.
pub const MAX: Duration = Duration::from_secs(10);

/// A pod by namespace, name and UID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    refusals: u32,
    next: Instant,
}

#[derive(Debug, Default)]
pub struct Backoffs {
    entries: HashMap<PodKey, Entry>,
}

impl Backoffs {
    /// Whether `pod` may be asked again at `now`.
    pub fn ready(&self, pod: &PodKey, now: Instant) -> bool {
        self.entries.get(pod).is_none_or(|e| now >= e.next)
    }

    /// Records a refusal at `now`; returns the delay before the next attempt.
    /// Queues `pod` for eviction (no delay) unless it is queued already.
    pub fn enqueue(&mut self, pod: PodKey, now: Instant) {
        self.entries.entry(pod).or_insert(Entry {
            refusals: 0,
            next: now,
        });
        self.publish();
    }

    pub fn refused(&mut self, pod: PodKey, now: Instant) -> Duration {
        let entry = self.entries.entry(pod).or_insert(Entry {
            refusals: 0,
            next: now,
        });
        entry.refusals = entry.refusals.saturating_add(1);
        let delay = BASE
            .saturating_mul(2u32.saturating_pow(entry.refusals - 1))
            .min(MAX);
        entry.next = now + delay;
        self.publish();
        delay
    }

    /// Forgets `pod` (evicted, or gone).
    pub fn forget(&mut self, pod: &PodKey) {
        self.entries.remove(pod);
        self.publish();
    }

    /// Keeps only the pods for which `present` holds.
    pub fn retain(&mut self, mut present: impl FnMut(&PodKey) -> bool) {
        self.entries.retain(|k, _| present(k));
        self.publish();
    }

    /// Pods waiting for a successful eviction.
    pub fn queued(&self) -> usize {
        self.entries.len()
    }

    fn publish(&self) {
        metrics::gauge!(NODES_EVICTION_QUEUE_DEPTH).set(self.queued() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uid: &str) -> PodKey {
        PodKey {
            namespace: "default".into(),
            name: "web".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn refusals_double_the_delay_up_to_the_cap_and_an_eviction_forgets() {
        let now = Instant::now();
        let mut backoffs = Backoffs::default();
        assert!(backoffs.ready(&key("a"), now));
        let delays: Vec<Duration> = (0..9).map(|_| backoffs.refused(key("a"), now)).collect();
        assert_eq!(delays[0], BASE);
        assert_eq!(delays[1], BASE * 2);
        assert_eq!(delays[2], BASE * 4);
        assert_eq!(delays[8], MAX);
        assert!(!backoffs.ready(&key("a"), now + MAX - Duration::from_millis(1)));
        assert!(backoffs.ready(&key("a"), now + MAX));
        assert!(backoffs.ready(&key("b"), now), "another pod is not held");
        backoffs.forget(&key("a"));
        assert!(backoffs.ready(&key("a"), now));
        assert_eq!(backoffs.queued(), 0);
    }

    #[test]
    fn the_queue_holds_each_pod_from_its_first_request_until_evicted_or_gone() {
        let now = Instant::now();
        let mut backoffs = Backoffs::default();
        backoffs.enqueue(key("a"), now);
        backoffs.enqueue(key("b"), now);
        assert!(backoffs.ready(&key("a"), now), "queued, not delayed");
        backoffs.refused(key("a"), now);
        backoffs.enqueue(key("a"), now);
        assert!(
            !backoffs.ready(&key("a"), now),
            "queuing again keeps the delay"
        );
        assert_eq!(backoffs.queued(), 2);
        backoffs.forget(&key("b"));
        assert_eq!(backoffs.queued(), 1);
        backoffs.retain(|_| false);
        assert_eq!(backoffs.queued(), 0);
    }

    #[test]
    fn a_replacement_under_the_same_name_starts_afresh_and_gone_pods_are_dropped() {
        let now = Instant::now();
        let mut backoffs = Backoffs::default();
        backoffs.refused(key("old"), now);
        assert!(backoffs.ready(&key("new"), now));
        backoffs.retain(|k| k.uid != "old");
        assert_eq!(backoffs.queued(), 0);
    }
}
