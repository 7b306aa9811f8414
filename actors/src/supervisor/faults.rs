//! Fault injection, a test and simulation hook: `kerf simulate`'s `actor-panic` scenario
//! fault and the supervision tests arm an actor's counter, and the actor panics on each of
//! its next that many messages (or passes, for loops). Each actor checks its counter where
//! it takes a message ([`crate::mailbox::MailboxDepth::taken`] or
//! [`super::supervision::fault_point`]): one relaxed atomic load while nothing is armed. The
//! other supervised loops ([`LOOP_FAULTS`]) take no message: their supervisor panics them
//! wherever they wait as soon as a fault is armed ([`Faults::interrupted`]), woken by a watch
//! channel rather than by polling. Counters are per replica ([`Supervision`]).
//!
//! [`Supervision`]: super::supervision::Supervision

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::watch;

/// The actors and loops a fault can be armed in, named as their folders under `actors/src`,
/// and `orchestrator_command`: the task one disruption command runs in, whose panic is
/// reported rather than rebuilt.
pub const FAULT_ACTORS: &[&str] = &[
    "batcher",
    "provisioner",
    "node_pool_scheduler",
    "nodeclaim_creator",
    "lifecycle",
    "termination",
    "offering_cache",
    "launch_template_cache",
    "tagging",
    "disruption",
    "orchestrator",
    "orchestrator_command",
    "events",
    "interruption",
];

/// The supervised loops that check no fault of their own (named as their
/// [`super::task`]): an armed fault panics them wherever they wait, mid-pass or idle.
pub const LOOP_FAULTS: &[&str] = &[
    "pod_watcher",
    "retrigger",
    "nomination_lapse",
    "nodeclaim_disruption",
    "expiration",
    "nodepool_status",
    "garbage_collection",
    "capacity_type",
    "node_repair",
    "launch_template_cache_sweep",
    "tagging_sweep",
    "shutdown_gate",
    "interruption_poller",
    "interruption.instancestatus",
    "probe_server",
    "metrics_server",
    "storage_advice",
    "aws_upkeep",
    "kubernetes_version",
    "static_capacity",
    "nodeoverlay",
    "capacitybuffer",
];

/// A name outside [`FAULT_ACTORS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no actor named {0:?} can panic on purpose (known: {known})", known = FAULT_ACTORS.join(", "))]
pub struct UnknownActor(pub String);

/// One replica's armed faults, a counter per actor and loop.
#[derive(Debug)]
pub struct Faults {
    counters: Vec<(&'static str, FaultPoint)>,
    /// Bumped by every [`Faults::arm`]: wakes the loops waiting in [`Faults::interrupted`].
    armed: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            counters: FAULT_ACTORS
                .iter()
                .chain(LOOP_FAULTS)
                .map(|name| (*name, FaultPoint::armed_with(name)))
                .collect(),
            armed: watch::channel(0).0,
        }
    }
}

impl Faults {
    /// Makes `actor` panic on each of its next `count` messages (in addition to any armed).
    pub fn arm(&self, actor: &str, count: u32) -> Result<(), UnknownActor> {
        let point = self
            .point(actor)
            .ok_or_else(|| UnknownActor(actor.to_owned()))?;
        if let Some(counter) = &point.counter {
            counter.fetch_add(count, Ordering::Relaxed);
        }
        self.armed
            .send_modify(|armed| *armed = armed.wrapping_add(1));
        Ok(())
    }

    /// Resolves when a fault armed for the loop `name` is consumed here; pending for ever
    /// for a name outside [`LOOP_FAULTS`] (those check their own points).
    pub async fn interrupted(&self, name: &str) {
        let point = LOOP_FAULTS
            .contains(&name)
            .then(|| self.point(name))
            .flatten();
        let Some(point) = point else {
            return std::future::pending().await;
        };
        let mut armed = self.armed.subscribe();
        while !point.consume() {
            if armed.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Panics still armed for `actor` (0 for an unknown name).
    pub fn remaining(&self, actor: &str) -> u32 {
        self.point(actor)
            .and_then(|p| p.counter)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The point of mailbox `mailbox`: enabled when the mailbox is named as a fault actor
    /// (`tagger` is `tagging`'s, `nodepool_scheduler/<pool>` the `node_pool_scheduler`'s).
    pub fn for_mailbox(&self, mailbox: &str) -> FaultPoint {
        let actor = match mailbox {
            "tagger" => "tagging",
            m if m.starts_with("nodepool_scheduler/") => "node_pool_scheduler",
            m => m,
        };
        self.point(actor).unwrap_or_default()
    }

    /// The hook `actor` checks; `None` for a name outside [`FAULT_ACTORS`] and
    /// [`LOOP_FAULTS`]. Scenario files written before the NodeClaim creator had its name may
    /// still call it `launcher`.
    pub fn point(&self, actor: &str) -> Option<FaultPoint> {
        let actor = match actor {
            "launcher" => "nodeclaim_creator",
            name => name,
        };
        self.counters
            .iter()
            .find(|(name, _)| *name == actor)
            .map(|(_, point)| point.clone())
    }
}

/// Where one actor checks for an armed fault. Cheap to clone; a disabled point never panics.
#[derive(Debug, Clone, Default)]
pub struct FaultPoint {
    name: &'static str,
    counter: Option<Arc<AtomicU32>>,
}

impl FaultPoint {
    fn armed_with(name: &'static str) -> Self {
        Self {
            name,
            counter: Some(Arc::new(AtomicU32::new(0))),
        }
    }

    /// Panics if a fault is armed here, consuming it.
    pub fn check(&self) {
        if self.consume() {
            panic!("injected fault: {} panics on this message", self.name);
        }
    }

    /// Consumes one armed fault; whether there was one.
    fn consume(&self) -> bool {
        let Some(counter) = &self.counter else {
            return false;
        };
        counter.load(Ordering::Relaxed) > 0
            && counter
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodeclaim_creator_is_still_armed_by_its_former_name() {
        let faults = Faults::default();
        faults
            .arm("launcher", 2)
            .expect("the former name is accepted");
        assert_eq!(faults.remaining("nodeclaim_creator"), 2);
        assert!(faults.arm("no_such_actor", 1).is_err());
    }
}
