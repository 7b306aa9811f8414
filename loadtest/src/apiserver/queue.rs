//! A deduplicating work queue, as Kubernetes controllers use: a key queued many times
//! before a worker gets to it is handled once. Producers never block; the queue is bounded
//! by the number of distinct keys (objects), not by the number of events.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;

use tokio::sync::Notify;

use super::store::lock;

/// Deduplicating FIFO of keys with an async batch pop.
#[derive(Debug)]
pub struct WorkQueue<K> {
    items: Mutex<(VecDeque<K>, HashSet<K>)>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash> Default for WorkQueue<K> {
    fn default() -> Self {
        Self {
            items: Mutex::new((VecDeque::new(), HashSet::new())),
            notify: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    /// Queues `key` unless it is already waiting.
    pub fn push(&self, key: K) {
        let mut items = lock(&self.items);
        if items.1.insert(key.clone()) {
            items.0.push_back(key);
            drop(items);
            self.notify.notify_one();
        }
    }

    /// Waits for at least one key and takes every queued key.
    pub async fn pop_all(&self) -> Vec<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut items = lock(&self.items);
                if !items.0.is_empty() {
                    items.1.clear();
                    return items.0.drain(..).collect();
                }
            }
            notified.await;
        }
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        lock(&self.items).0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn deduplicates_waiting_keys() {
        let queue = WorkQueue::default();
        queue.push("a");
        queue.push("b");
        queue.push("a");
        assert_eq!(queue.pop_all().await, ["a", "b"]);
        assert!(queue.is_empty());
        queue.push("a");
        assert_eq!(queue.pop_all().await, ["a"]);
    }
}
