//! Which NodeClaims have a launch running right now, shared with the termination drainer.
//! Upstream runs launch and finalization in one controller, so a NodeClaim deleted while
//! its CreateFleet is in flight is finalized only after the call returns; with the two in
//! separate actors, the drainer asks this set instead and waits, so it never releases a
//! NodeClaim whose instance is about to appear (and would leak until garbage collection).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Clone, Debug, Default)]
pub struct Launching(Arc<Mutex<HashSet<String>>>);

impl Launching {
    /// Marks `nodeclaim`'s launch as running until the returned guard is dropped.
    pub fn start(&self, nodeclaim: &str) -> LaunchGuard {
        self.set().insert(nodeclaim.to_owned());
        LaunchGuard {
            launching: self.clone(),
            nodeclaim: nodeclaim.to_owned(),
        }
    }

    pub fn contains(&self, nodeclaim: &str) -> bool {
        self.set().contains(nodeclaim)
    }

    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // A set of names: a panic elsewhere cannot leave it torn.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Ends a launch's mark however the launch ends.
pub struct LaunchGuard {
    launching: Launching,
    nodeclaim: String,
}

impl Drop for LaunchGuard {
    fn drop(&mut self) {
        self.launching.set().remove(&self.nodeclaim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_is_marked_while_its_guard_lives() {
        let launching = Launching::default();
        let guard = launching.start("a");
        assert!(launching.contains("a") && !launching.contains("b"));
        drop(guard);
        assert!(!launching.contains("a"));
    }
}
