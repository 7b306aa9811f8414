//! The lifecycle's work queue, with controller-runtime's workqueue guarantees: a target is
//! queued at most once however often it changes, never runs twice at once, and one that
//! changes while running runs again once it finishes (it may have read the state from before
//! the change). Its length is bounded by the number of distinct targets — the NodeClaims and
//! Nodes of the cluster — not by the number of changes.

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;

#[derive(Debug)]
pub struct WorkQueue<T> {
    waiting: VecDeque<T>,
    queued: HashSet<T>,
    running: HashSet<T>,
    /// Running targets that changed meanwhile.
    dirty: HashSet<T>,
}

impl<T: Clone + Eq + Hash> Default for WorkQueue<T> {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            queued: HashSet::new(),
            running: HashSet::new(),
            dirty: HashSet::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> WorkQueue<T> {
    /// `target` changed: queue it, or mark it to run again if it is running.
    pub fn add(&mut self, target: T) {
        if self.running.contains(&target) {
            self.dirty.insert(target);
        } else if self.queued.insert(target.clone()) {
            self.waiting.push_back(target);
        }
    }

    /// The next target to run, if fewer than `limit` are running; it counts as running.
    pub fn start_next(&mut self, limit: usize) -> Option<T> {
        if self.running.len() >= limit {
            return None;
        }
        let target = self.waiting.pop_front()?;
        self.queued.remove(&target);
        self.running.insert(target.clone());
        Some(target)
    }

    /// `target` finished running; it is queued again if it changed meanwhile.
    pub fn finish(&mut self, target: &T) {
        self.running.remove(target);
        if self.dirty.remove(target) {
            self.add(target.clone());
        }
    }

    /// Drops every waiting target (running ones finish normally).
    pub fn clear_waiting(&mut self) {
        self.waiting.clear();
        self.queued.clear();
    }

    /// Targets waiting to run (client-go's workqueue depth).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    #[cfg(test)]
    fn running(&self) -> usize {
        self.running.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_queued_once_however_often_it_changes() {
        let mut queue = WorkQueue::default();
        queue.add("a");
        queue.add("b");
        queue.add("a");
        assert_eq!(queue.waiting(), 2);
        assert_eq!(queue.start_next(10), Some("a"));
        assert_eq!(queue.start_next(10), Some("b"));
        assert_eq!(queue.start_next(10), None);
    }

    #[test]
    fn a_running_target_that_changes_runs_again_after_it_finishes() {
        let mut queue = WorkQueue::default();
        queue.add("a");
        assert_eq!(queue.start_next(10), Some("a"));
        queue.add("a");
        queue.add("a");
        assert_eq!(queue.start_next(10), None, "never twice at once");
        queue.finish(&"a");
        assert_eq!(queue.start_next(10), Some("a"), "once more");
        queue.finish(&"a");
        assert_eq!(queue.start_next(10), None);
        assert_eq!(queue.running(), 0);
    }

    #[test]
    fn no_more_than_the_limit_run_at_once() {
        let mut queue = WorkQueue::default();
        for target in ["a", "b", "c"] {
            queue.add(target);
        }
        assert_eq!(queue.start_next(2), Some("a"));
        assert_eq!(queue.start_next(2), Some("b"));
        assert_eq!(queue.start_next(2), None);
        queue.finish(&"a");
        assert_eq!(queue.start_next(2), Some("c"));
    }

    #[test]
    fn clearing_drops_waiting_targets_only() {
        let mut queue = WorkQueue::default();
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.start_next(10), Some("a"));
        queue.clear_waiting();
        assert_eq!(queue.start_next(10), None);
        assert_eq!(queue.running(), 1);
        queue.add("b");
        assert_eq!(
            queue.start_next(10),
            Some("b"),
            "queued again after clearing"
        );
    }
}
