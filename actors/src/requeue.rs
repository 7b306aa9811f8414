//! The loop shared by the state-driven reconcilers (NodeClaim disruption conditions,
//! expiration, NodePool status): a pass reads cluster state, writes what differs, and says
//! when it next has something to do (upstream's `RequeueAfter`); a watch event wakes it
//! earlier. Upstream reconciles one object per event; a pass over every object costs a
//! snapshot walk instead of a work queue and is idempotent, so a lost write or a restart is
//! repaired by the next pass.
//!
//! Wake-ups go through a [`Trigger`] (`tokio::sync::Notify`): it holds at most one pending
//! wake-up however many events fire, so a burst of watch events costs one pass, never a
//! queue. Passes are at least [`MIN_GAP`] apart, which bounds the writes a pod storm causes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::pod_watcher::Subscriber;
use crate::state::ClusterState;

/// The shortest time between two passes: watch events arriving faster coalesce.
pub const MIN_GAP: Duration = Duration::from_millis(500);
/// The longest sleep of a pass that has nothing scheduled, so time-driven changes nobody
/// announces (a NodeClass resolving, a clock crossing a threshold computed elsewhere) are
/// still seen.
pub const MAX_SLEEP: Duration = Duration::from_secs(30);

/// Wakes a loop early; cloning shares the one pending wake-up.
#[derive(Clone, Debug, Default)]
pub struct Trigger(Arc<Notify>);

impl Trigger {
    pub fn fire(&self) {
        self.0.notify_one();
    }
}

/// A watch subscriber that fires every one of `triggers` on any change of its kind.
pub fn on_change<K>(triggers: &[&Trigger]) -> Subscriber<K> {
    let triggers: Vec<Trigger> = triggers.iter().map(|t| (*t).clone()).collect();
    Box::new(move |_, _| triggers.iter().for_each(Trigger::fire))
}

/// Runs `pass` while this replica leads, from the moment cluster state has synced until
/// `shutdown`. `pass` returns when it wants to run again (capped at [`MAX_SLEEP`]).
pub async fn run<F, Fut>(
    state: Arc<ClusterState>,
    trigger: Trigger,
    leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Duration>,
{
    tokio::select! {
        () = state.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    loop {
        let next = if *leader.borrow() {
            pass().await.min(MAX_SLEEP)
        } else {
            MAX_SLEEP
        };
        tokio::select! {
            () = tokio::time::sleep(next) => {}
            () = trigger.0.notified() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        tokio::select! {
            () = tokio::time::sleep(MIN_GAP) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_triggers_costs_one_pass() {
        let trigger = Trigger::default();
        for _ in 0..1000 {
            trigger.fire();
        }
        // One stored permit: the first wait returns at once, the second does not.
        tokio::time::timeout(Duration::from_millis(1), trigger.0.notified())
            .await
            .expect("one wake-up is pending");
        assert!(
            tokio::time::timeout(Duration::from_millis(1), trigger.0.notified())
                .await
                .is_err(),
            "a thousand fires left more than one wake-up"
        );
    }
}
