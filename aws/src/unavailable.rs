//! The unavailable-offerings cache: offerings (instance type × zone × capacity type),
//! whole capacity types and subnets that recently failed to launch, skipped until their
//! entry expires (3 minutes, as upstream). The provider only talks to it through the core's
//! [`UnavailableOfferings`] trait, so the controller's OfferingCache actor can own the real
//! state; [`UnavailableOfferingsCache`] is a self-contained implementation used when no actor
//! is wired in (tests, tools). A sequence number per instance type changes whenever an entry
//! for it is added or expires, which is what instance-type caches key on to notice changes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The trait and TTL live in the core (`kerf::cloudprovider`) so the controller's
/// OfferingCache actor implements the same trait; re-exported here for this crate's callers.
pub use kerf::cloudprovider::{UNAVAILABLE_OFFERINGS_TTL, UnavailableOfferings};

/// An in-process [`UnavailableOfferings`] with expiring entries.
pub struct UnavailableOfferingsCache {
    ttl: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    offerings: HashMap<(String, String, String), Instant>,
    capacity_types: HashMap<String, Instant>,
    subnets: HashMap<String, Instant>,
    type_seq: HashMap<String, u64>,
    global_seq: u64,
}

impl Default for UnavailableOfferingsCache {
    fn default() -> Self {
        Self::new(UNAVAILABLE_OFFERINGS_TTL)
    }
}

impl UnavailableOfferingsCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            state: Mutex::new(State::default()),
        }
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.expire(Instant::now());
        f(&mut state)
    }
}

impl State {
    /// Drops expired entries, bumping the sequence numbers they affected so cached
    /// instance types recompute availability.
    fn expire(&mut self, now: Instant) {
        let mut expired_types = Vec::new();
        self.offerings.retain(|(_, it, _), until| {
            let keep = *until > now;
            if !keep {
                expired_types.push(it.clone());
            }
            keep
        });
        for it in expired_types {
            *self.type_seq.entry(it).or_default() += 1;
        }
        let before = self.capacity_types.len() + self.subnets.len();
        self.capacity_types.retain(|_, until| *until > now);
        self.subnets.retain(|_, until| *until > now);
        if self.capacity_types.len() + self.subnets.len() != before {
            self.global_seq += 1;
        }
    }
}

impl UnavailableOfferings for UnavailableOfferingsCache {
    fn is_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        subnet_ids: &[String],
    ) -> bool {
        self.with_state(|s| {
            let key = (
                capacity_type.to_owned(),
                instance_type.to_owned(),
                zone.to_owned(),
            );
            s.offerings.contains_key(&key)
                || s.capacity_types.contains_key(capacity_type)
                || (!subnet_ids.is_empty()
                    && subnet_ids.iter().all(|id| s.subnets.contains_key(id)))
        })
    }

    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, reason: &str) {
        tracing::debug!(
            instance_type,
            zone,
            capacity_type,
            reason,
            ttl_seconds = self.ttl.as_secs(),
            "removing offering from offerings"
        );
        let until = Instant::now() + self.ttl;
        self.with_state(|s| {
            let key = (
                capacity_type.to_owned(),
                instance_type.to_owned(),
                zone.to_owned(),
            );
            s.offerings.insert(key, until);
            *s.type_seq.entry(instance_type.to_owned()).or_default() += 1;
        });
    }

    fn mark_capacity_type_unavailable(&self, capacity_type: &str) {
        let until = Instant::now() + self.ttl;
        self.with_state(|s| {
            s.capacity_types.insert(capacity_type.to_owned(), until);
            s.global_seq += 1;
        });
    }

    fn mark_subnet_unavailable(&self, subnet_id: &str) {
        let until = Instant::now() + self.ttl;
        self.with_state(|s| {
            s.subnets.insert(subnet_id.to_owned(), until);
            s.global_seq += 1;
        });
    }

    fn seq_num(&self, instance_type: &str) -> u64 {
        self.with_state(|s| s.type_seq.get(instance_type).copied().unwrap_or(0) + s.global_seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offerings_are_unavailable_per_type_zone_and_capacity_type() {
        let cache = UnavailableOfferingsCache::default();
        let before = cache.seq_num("m5.large");
        cache.mark_unavailable(
            "m5.large",
            "us-east-1a",
            "spot",
            "InsufficientInstanceCapacity",
        );
        assert!(cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", "on-demand", &[]));
        assert!(!cache.is_unavailable("m5.large", "us-east-1b", "spot", &[]));
        assert!(!cache.is_unavailable("c5.large", "us-east-1a", "spot", &[]));
        assert!(cache.seq_num("m5.large") > before);
        assert_eq!(cache.seq_num("c5.large"), 0);
    }

    #[test]
    fn capacity_type_and_subnets_block_everything_they_cover() {
        let cache = UnavailableOfferingsCache::default();
        cache.mark_capacity_type_unavailable("spot");
        assert!(cache.is_unavailable("c5.large", "us-east-1c", "spot", &[]));
        assert!(!cache.is_unavailable("c5.large", "us-east-1c", "on-demand", &[]));

        cache.mark_subnet_unavailable("subnet-a");
        let one = ["subnet-a".to_owned()];
        let two = ["subnet-a".to_owned(), "subnet-b".to_owned()];
        assert!(cache.is_unavailable("c5.large", "us-east-1a", "on-demand", &one));
        assert!(!cache.is_unavailable("c5.large", "us-east-1a", "on-demand", &two));
        assert!(cache.seq_num("anything") >= 2);
    }

    #[test]
    fn entries_expire_and_bump_the_sequence() {
        let cache = UnavailableOfferingsCache::new(Duration::ZERO);
        cache.mark_unavailable("m5.large", "us-east-1a", "spot", "x");
        let seq = cache.seq_num("m5.large");
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert!(
            seq >= 2,
            "marking and expiring both change the sequence, got {seq}"
        );
    }
}
