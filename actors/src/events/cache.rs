//! The recorder's memory of recent events, with a bounded size and per-entry expiry, used
//! twice: upstream Karpenter's de-duplication (an event whose reason and dedupe values were
//! published within its timeout is dropped) and client-go's correlation (an event identical
//! to one written within the correlation window raises that Event's `count` instead of
//! creating another object). Both are bounded like client-go's LRU (4096 entries): expired
//! entries go first, then the ones closest to expiry.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// client-go's event cache size: enough for every object one controller touches at once.
pub const CACHE_CAPACITY: usize = 4096;

/// Entries that live until an instant.
#[derive(Debug)]
pub struct ExpiringMap<K, V> {
    entries: HashMap<K, (V, Instant)>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V> ExpiringMap<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// The value of `key` if it has not expired at `now`.
    pub fn get_mut(&mut self, key: &K, now: Instant) -> Option<&mut V> {
        match self.entries.get_mut(key) {
            Some((value, expires)) if *expires > now => Some(value),
            _ => None,
        }
    }

    /// Inserts or replaces `key`, alive until `expires`.
    pub fn insert(&mut self, key: K, value: V, expires: Instant, now: Instant) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            self.entries.retain(|_, (_, at)| *at > now);
            if self.entries.len() >= self.capacity {
                self.evict_soonest();
            }
        }
        self.entries.insert(key, (value, expires));
    }

    /// Pushes the expiry of a live `key` to `expires`.
    pub fn extend(&mut self, key: &K, expires: Instant) {
        if let Some((_, at)) = self.entries.get_mut(key) {
            *at = expires;
        }
    }

    pub fn remove(&mut self, key: &K) {
        self.entries.remove(key);
    }

    fn evict_soonest(&mut self) {
        let soonest = self
            .entries
            .iter()
            .min_by_key(|(_, (_, at))| *at)
            .map(|(k, _)| k.clone());
        if let Some(key) = soonest {
            self.entries.remove(&key);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Upstream Karpenter's de-duplication: remembers each key for its timeout.
#[derive(Debug)]
pub struct Deduper {
    seen: ExpiringMap<String, ()>,
}

impl Default for Deduper {
    fn default() -> Self {
        Self {
            seen: ExpiringMap::new(CACHE_CAPACITY),
        }
    }
}

impl Deduper {
    /// Whether an event with `key` may be written now; if so, repeats are refused until
    /// `timeout` has passed (measured from this first one, as upstream's cache does).
    pub fn admit(&mut self, key: &str, timeout: Duration, now: Instant) -> bool {
        let key = key.to_owned();
        if self.seen.get_mut(&key, now).is_some() {
            return false;
        }
        self.seen.insert(key, (), now + timeout, now);
        true
    }
}

/// An Event object already written for a series of identical events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub namespace: String,
    pub name: String,
    pub count: i32,
}

/// client-go's correlation: identical events within `window` of the last one are one
/// Event object with a growing `count`.
#[derive(Debug)]
pub struct Correlator<K> {
    series: ExpiringMap<K, Series>,
    window: Duration,
}

impl<K: Eq + Hash + Clone> Correlator<K> {
    pub fn new(window: Duration) -> Self {
        Self {
            series: ExpiringMap::new(CACHE_CAPACITY),
            window,
        }
    }

    /// The series `key` continues, with its count raised for this occurrence, if one was
    /// written within the window; `None` means a new Event object must be created.
    pub fn repeat(&mut self, key: &K, now: Instant) -> Option<Series> {
        let series = self.series.get_mut(key, now)?;
        series.count = series.count.saturating_add(1);
        let repeated = series.clone();
        self.series.extend(key, now + self.window);
        Some(repeated)
    }

    /// Records the Event object written for `key`.
    pub fn written(&mut self, key: K, series: Series, now: Instant) {
        self.series.insert(key, series, now + self.window, now);
    }

    /// Forgets `key` (its Event object is gone, or could not be written).
    pub fn forget(&mut self, key: &K) {
        self.series.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_deduplicated_event_is_refused_until_its_timeout_passes() {
        let start = Instant::now();
        let mut dedupe = Deduper::default();
        assert!(dedupe.admit("failedscheduling-uid1", 5 * MINUTE, start));
        assert!(!dedupe.admit("failedscheduling-uid1", 5 * MINUTE, start + 4 * MINUTE));
        assert!(dedupe.admit("failedscheduling-uid2", 5 * MINUTE, start + 4 * MINUTE));
        // Measured from the first: a refused repeat does not extend the timeout.
        assert!(dedupe.admit("failedscheduling-uid1", 5 * MINUTE, start + 5 * MINUTE));
    }

    #[test]
    fn identical_events_within_the_window_count_on_one_series() {
        let start = Instant::now();
        let mut correlator = Correlator::new(10 * MINUTE);
        assert_eq!(correlator.repeat(&"k", start), None);
        let first = Series {
            namespace: "default".into(),
            name: "web.1".into(),
            count: 1,
        };
        correlator.written("k", first.clone(), start);
        let second = correlator
            .repeat(&"k", start + 9 * MINUTE)
            .expect("within window");
        assert_eq!((second.name.as_str(), second.count), ("web.1", 2));
        // The window runs from the last occurrence.
        let third = correlator
            .repeat(&"k", start + 18 * MINUTE)
            .expect("within window");
        assert_eq!(third.count, 3);
        assert_eq!(
            correlator.repeat(&"k", start + 29 * MINUTE),
            None,
            "expired"
        );
    }

    #[test]
    fn a_forgotten_series_starts_over() {
        let start = Instant::now();
        let mut correlator = Correlator::new(10 * MINUTE);
        let series = Series {
            namespace: "default".into(),
            name: "web.1".into(),
            count: 1,
        };
        correlator.written("k", series, start);
        correlator.forget(&"k");
        assert_eq!(correlator.repeat(&"k", start), None);
    }

    #[test]
    fn the_cache_stays_bounded_dropping_expired_then_soonest_to_expire() {
        let start = Instant::now();
        let mut map = ExpiringMap::new(2);
        map.insert("short", (), start + MINUTE, start);
        map.insert("long", (), start + 10 * MINUTE, start);
        map.insert("new", (), start + 5 * MINUTE, start);
        assert_eq!(map.len(), 2);
        assert!(map.get_mut(&"short", start).is_none(), "soonest evicted");
        assert!(map.get_mut(&"long", start).is_some());
        // Expired entries make room before live ones are evicted.
        let later = start + 6 * MINUTE;
        map.insert("newer", (), later + MINUTE, later);
        assert!(map.get_mut(&"long", later).is_some());
        assert!(map.get_mut(&"newer", later).is_some());
        assert!(!map.is_empty());
    }
}
