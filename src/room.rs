//! Hash tables that give back the room a burst left them. A `HashMap` never shrinks on its
//! own: one that held every pod of a 20,000-pod scale-up keeps a table for 20,000 entries for
//! as long as the process runs, after the pods have bound and left it; the pod-form cache's
//! table for `kerf simulate --pods 20000` is 2.1 MB of the controller's heap
//! (`--heap-profile`). Tables that fill with a burst and drain after it call
//! [`GiveBackRoom::give_back_room`] when they drain.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// Below this capacity a table keeps its room: shrinking it would save too little to pay
/// for the rehash, and a table that small refills at once.
const KEPT_CAPACITY: usize = 1024;

/// A table that can shrink to the room its entries need.
pub trait GiveBackRoom {
    /// Shrinks the table to twice its length when its capacity is over four times its
    /// length (and over [`KEPT_CAPACITY`]): the room a burst left, not the room it grows
    /// into between bursts. The check is two loads; the rehash runs only when the table
    /// has drained to a quarter, so it costs its entries once per drain.
    fn give_back_room(&mut self);
}

fn is_spare(capacity: usize, len: usize) -> bool {
    capacity > KEPT_CAPACITY && capacity / 4 > len
}

impl<K: Eq + Hash, V, S: BuildHasher> GiveBackRoom for HashMap<K, V, S> {
    fn give_back_room(&mut self) {
        if is_spare(self.capacity(), self.len()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

impl<K: Eq + Hash, S: BuildHasher> GiveBackRoom for HashSet<K, S> {
    fn give_back_room(&mut self) {
        if is_spare(self.capacity(), self.len()) {
            self.shrink_to(self.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_table_gives_back_its_room_and_a_full_one_keeps_it() {
        let mut map: HashMap<u32, u32> = (0..20_000).map(|i| (i, i)).collect();
        let full = map.capacity();
        map.give_back_room();
        assert_eq!(map.capacity(), full, "a full table keeps its room");
        map.retain(|k, _| *k < 10);
        map.give_back_room();
        assert!(map.capacity() <= KEPT_CAPACITY, "{} left", map.capacity());
        assert_eq!(map.len(), 10);
        assert!((0..10).all(|k| map.get(&k) == Some(&k)), "entries survive");

        let mut set: HashSet<u32> = (0..20_000).collect();
        set.retain(|k| *k < 3_000);
        set.give_back_room();
        assert!(set.capacity() < 8_000, "{} left", set.capacity());
        assert!(set.capacity() >= 3_000);
    }

    #[test]
    fn a_small_table_keeps_its_room() {
        let mut set: HashSet<u32> = (0..500).collect();
        let capacity = set.capacity();
        set.clear();
        set.give_back_room();
        assert_eq!(set.capacity(), capacity);
    }
}
