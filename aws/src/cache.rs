//! A small time-to-live map shared by the providers: subnets, security groups and AMIs per
//! selector, launch templates per name, SSM parameters, instance types per configuration.
//! Entries expire on read; [`TtlCache::take_expired`] hands expired entries back to callers
//! that must clean up after them (launch templates are deleted from EC2 when they expire,
//! as upstream does).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A thread-safe map whose entries live for a fixed duration after their last write.
pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, V)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live value for `key`, if any.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.lock();
        entries
            .get(key)
            .filter(|(until, _)| *until > Instant::now())
            .map(|(_, v)| v.clone())
    }

    /// The live value for `key`, with its expiry pushed back by a full TTL.
    pub fn get_and_touch(&self, key: &K) -> Option<V> {
        let mut entries = self.lock();
        let now = Instant::now();
        let entry = entries.get_mut(key).filter(|(until, _)| *until > now)?;
        entry.0 = now + self.ttl;
        Some(entry.1.clone())
    }

    pub fn insert(&self, key: K, value: V) {
        let until = Instant::now() + self.ttl;
        self.lock().insert(key, (until, value));
    }

    pub fn remove(&self, key: &K) -> Option<V> {
        self.lock().remove(key).map(|(_, v)| v)
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Removes and returns every expired entry.
    pub fn take_expired(&self) -> Vec<(K, V)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let expired: Vec<K> = entries
            .iter()
            .filter(|(_, (until, _))| *until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        expired
            .into_iter()
            .filter_map(|k| entries.remove(&k).map(|(_, v)| (k, v)))
            .collect()
    }

    /// Every live value.
    pub fn values(&self) -> Vec<V> {
        let now = Instant::now();
        self.lock()
            .values()
            .filter(|(until, _)| *until > now)
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_can_be_collected() {
        let cache = TtlCache::new(Duration::ZERO);
        cache.insert("a", 1);
        assert_eq!(cache.get(&"a"), None);
        assert_eq!(cache.take_expired(), vec![("a", 1)]);
        assert!(cache.take_expired().is_empty());

        let cache = TtlCache::new(Duration::from_secs(60));
        cache.insert("b", 2);
        assert_eq!(cache.get_and_touch(&"b"), Some(2));
        assert_eq!(cache.values(), vec![2]);
        assert_eq!(cache.remove(&"b"), Some(2));
        assert_eq!(cache.get(&"b"), None);
    }
}
