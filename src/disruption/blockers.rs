//! The candidates multi-node consolidation found blocking its search in earlier passes.
//! What holds a node in place (pods that fit nowhere else, a budget of its pods) rarely
//! changes within minutes, so the next passes try those candidates after all the others:
//! the search's first look then holds only candidates likely to consolidate, where without
//! it each pass pays again to isolate the same blockers (`around_blockers` in `methods`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a candidate found blocking is tried last: a few passes. A stale entry only costs
/// the candidate its place in the order, never a command.
pub const BLOCKER_MEMORY: Duration = Duration::from_secs(5 * 60);

/// Candidates found blocking, by name, with when. Bounded: every [`Blockers::found`] forgets
/// the entries older than [`BLOCKER_MEMORY`], so it holds at most the candidates found within
/// that window, however long the controller runs and however many nodes come and go.
#[derive(Debug, Default)]
pub struct Blockers {
    found: HashMap<String, Instant>,
}

impl Blockers {
    /// Whether `name` was found blocking within [`BLOCKER_MEMORY`] before `now`.
    pub fn recent(&self, name: &str, now: Instant) -> bool {
        self.found
            .get(name)
            .is_some_and(|at| now.saturating_duration_since(*at) < BLOCKER_MEMORY)
    }

    /// Records `name` found blocking at `now`, forgetting the entries past their memory.
    pub fn found(&mut self, name: &str, now: Instant) {
        self.found
            .retain(|_, at| now.saturating_duration_since(*at) < BLOCKER_MEMORY);
        self.found.insert(name.to_string(), now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocker_is_recent_for_its_memory_and_then_forgotten() {
        let start = Instant::now();
        let mut blockers = Blockers::default();
        blockers.found("a", start);
        assert!(blockers.recent("a", start + BLOCKER_MEMORY - Duration::from_secs(1)));
        assert!(!blockers.recent("a", start + BLOCKER_MEMORY));
        assert!(!blockers.recent("b", start));
        // Finding another past `a`'s memory drops `a`: nodes long gone are not kept.
        blockers.found("b", start + BLOCKER_MEMORY);
        assert_eq!(blockers.found.len(), 1);
        assert!(blockers.recent("b", start + BLOCKER_MEMORY));
    }

    #[test]
    fn blockers_hold_only_what_was_found_within_the_memory() {
        let start = Instant::now();
        let mut blockers = Blockers::default();
        // One blocker a second for an hour: 3,600 names, at most 300 kept.
        for second in 0..3_600u64 {
            blockers.found(
                &format!("node-{second}"),
                start + Duration::from_secs(second),
            );
        }
        assert_eq!(blockers.found.len(), BLOCKER_MEMORY.as_secs() as usize);
    }
}
