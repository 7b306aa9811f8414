//! Sharing equal values among the pods that hold them: [`Interner`] hands out one `Arc` per
//! distinct value, found by a hash of the value's serialized form (or one its caller makes,
//! for values that are not serialized: the simulated kube-scheduler's pod shapes), so ten
//! thousand replicas of one Deployment hold one copy of what they have in common (their
//! spec, and their namespace, labels, annotations and owner) rather than ten thousand.
//!
//! An interner holds its values weakly: a value no pod uses any more is dropped with its
//! last pod, and its entry is swept on a later visit, so a long-running store does not keep
//! the values of every pod it ever saw.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Weak};

use serde::Serialize;

/// Values interned between two sweeps of dead entries: sweeping visits them all.
pub(super) const SWEEP_EVERY: usize = 4096;

/// One shared `Arc<T>` per distinct `T` some holder still keeps (see the module doc).
pub struct Interner<T> {
    entries: HashMap<u64, Vec<Weak<T>>>,
    since_sweep: usize,
}

// By hand: a derived `Default` would ask `T: Default`, which the map does not need.
impl<T> Default for Interner<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            since_sweep: 0,
        }
    }
}

impl<T> std::fmt::Debug for Interner<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interner")
            .field("hashes", &self.entries.len())
            .finish()
    }
}

impl<T: Serialize + PartialEq> Interner<T> {
    /// The shared value equal to `value`, made from it when nothing holds one.
    pub fn intern(&mut self, value: T) -> Arc<T> {
        self.intern_by(content_hash(&value), value)
    }
}

impl<T: PartialEq> Interner<T> {
    /// [`Interner::intern`] for values that are not serialized: `hash` is the caller's hash
    /// of `value`, equal for equal values (it may hash only some of its fields; `==` tells
    /// values of the same hash apart).
    pub fn intern_by(&mut self, hash: u64, value: T) -> Arc<T> {
        self.since_sweep += 1;
        if self.since_sweep >= SWEEP_EVERY {
            self.sweep();
        }
        let bucket = self.entries.entry(hash).or_default();
        bucket.retain(|weak| weak.strong_count() > 0);
        if let Some(shared) = bucket
            .iter()
            .filter_map(Weak::upgrade)
            .find(|shared| **shared == value)
        {
            return shared;
        }
        let shared = Arc::new(value);
        bucket.push(Arc::downgrade(&shared));
        shared
    }

    /// Distinct values something still holds.
    pub fn live(&self) -> usize {
        self.entries
            .values()
            .flatten()
            .filter(|weak| weak.strong_count() > 0)
            .count()
    }

    /// Hashes with an entry, dead or alive: what a sweep brings down to the live ones.
    #[cfg(test)]
    pub(super) fn hashes(&self) -> usize {
        self.entries.len()
    }

    fn sweep(&mut self) {
        self.since_sweep = 0;
        self.entries.retain(|_, bucket| {
            bucket.retain(|weak| weak.strong_count() > 0);
            !bucket.is_empty()
        });
    }
}

/// A hash of `value`'s serialized form: equal values serialize equally (maps are ordered).
fn content_hash(value: &impl Serialize) -> u64 {
    struct Hashing(DefaultHasher);
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hashing = Hashing(DefaultHasher::new());
    // Writing into a hasher cannot fail, and the values interned here (API types and
    // structs of them) always serialize; were one ever to fail, every such value hashes
    // alike and `==` still tells them apart.
    let _ = serde_json::to_writer(&mut hashing, value);
    hashing.0.finish()
}
