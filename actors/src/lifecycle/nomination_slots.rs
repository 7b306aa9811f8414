//! The write slots every nomination (and withdrawal) of [`super::nominate`] shares: one
//! pool of [`NOMINATION_CONCURRENCY`], of which unconstrained pods' writes hold at most
//! [`UNCONSTRAINED_NOMINATION_SLOTS`] and writes made at launch (for Nodes still booting) at
//! most [`LAUNCH_NOMINATION_SLOTS`], so placement-constrained pods and registering Nodes,
//! which a pod waits on, go first. Permits are taken in one fixed order, so no two writes
//! each hold what the other waits for.

use kerf::pods;
use kerf::pods::LeanPod;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Nomination writes in flight at once, across every launched and registering Node: at the
/// pods kind's default budget (200 writes per second), enough to keep it busy at a few
/// milliseconds per write.
pub const NOMINATION_CONCURRENCY: usize = 16;

/// Of [`NOMINATION_CONCURRENCY`], the slots unconstrained pods' nominations may hold at
/// once: when both wait, three quarters of the writes go to placement-constrained pods.
pub const UNCONSTRAINED_NOMINATION_SLOTS: usize = 4;

/// Of [`NOMINATION_CONCURRENCY`], the slots nominations written at launch may hold at once:
/// they are for Nodes still booting, and a registration's writes (for a Node about to take
/// pods) must not queue behind thousands of them. Registrations and withdrawals have the
/// rest. One-per-node pods' writes are not held to it (see the module doc).
pub const LAUNCH_NOMINATION_SLOTS: usize = 4;

/// The lifecycle step that nominates: at launch nothing waits for the writes (registration
/// writes what they left); at registration the Node's taint does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Launch,
    Registration,
}

/// Which share of the write slots a nomination waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A placement-constrained pod that takes a node of its own: not held to
    /// [`LAUNCH_NOMINATION_SLOTS`] at launch.
    OnePerNode,
    Constrained,
    /// Limited to [`UNCONSTRAINED_NOMINATION_SLOTS`] of the slots.
    Unconstrained,
}

impl Class {
    pub(super) fn of(pod: &LeanPod) -> Self {
        if pods::is_one_per_node(pod) {
            Self::OnePerNode
        } else if pods::is_placement_constrained(pod) {
            Self::Constrained
        } else {
            Self::Unconstrained
        }
    }
}

/// The write slots every launch's and registration's nominations (and withdrawals) share.
pub struct Slots {
    all: Semaphore,
    unconstrained: Semaphore,
    launch: Semaphore,
}

/// A held write slot.
pub struct Slot<'a> {
    _launch: Option<SemaphorePermit<'a>>,
    _unconstrained: Option<SemaphorePermit<'a>>,
    _slot: SemaphorePermit<'a>,
}

impl Default for Slots {
    fn default() -> Self {
        Self {
            all: Semaphore::new(NOMINATION_CONCURRENCY),
            unconstrained: Semaphore::new(UNCONSTRAINED_NOMINATION_SLOTS),
            launch: Semaphore::new(LAUNCH_NOMINATION_SLOTS),
        }
    }
}

impl Slots {
    /// Waits for a slot a write of `class` at `step` may hold (in the order asked, within
    /// its share).
    pub async fn acquire(&self, class: Class, step: Step) -> Option<Slot<'_>> {
        // Always in this order (launch, unconstrained, all), so no two writes each hold what
        // the other waits for.
        let launch = match (step, class) {
            (Step::Registration, _) | (Step::Launch, Class::OnePerNode) => None,
            (Step::Launch, _) => Some(self.launch.acquire().await.ok()?),
        };
        let unconstrained = match class {
            Class::OnePerNode | Class::Constrained => None,
            Class::Unconstrained => Some(self.unconstrained.acquire().await.ok()?),
        };
        Some(Slot {
            _launch: launch,
            _unconstrained: unconstrained,
            _slot: self.all.acquire().await.ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tries to take a slot of `class` without waiting (a zero-time poll of `acquire`).
    fn try_take(slots: &Slots, class: Class) -> Option<Slot<'_>> {
        try_take_at(slots, class, Step::Registration)
    }

    fn try_take_at(slots: &Slots, class: Class, step: Step) -> Option<Slot<'_>> {
        futures::FutureExt::now_or_never(slots.acquire(class, step)).flatten()
    }

    /// Takes every slot `class` may at `step`, without waiting.
    fn take_all(slots: &Slots, class: Class, step: Step) -> Vec<Slot<'_>> {
        std::iter::from_fn(|| try_take_at(slots, class, step))
            .take(NOMINATION_CONCURRENCY + 1)
            .collect()
    }

    #[test]
    fn unconstrained_writes_hold_at_most_their_share_and_constrained_ones_the_rest() {
        let slots = Slots::default();
        let unconstrained = take_all(&slots, Class::Unconstrained, Step::Registration);
        assert_eq!(unconstrained.len(), UNCONSTRAINED_NOMINATION_SLOTS);
        let constrained = take_all(&slots, Class::Constrained, Step::Registration);
        assert_eq!(
            constrained.len(),
            NOMINATION_CONCURRENCY - UNCONSTRAINED_NOMINATION_SLOTS
        );
        assert!(try_take(&slots, Class::Constrained).is_none(), "bounded");
        drop(unconstrained);
        assert!(try_take(&slots, Class::Constrained).is_some());
    }

    #[test]
    fn constrained_writes_may_hold_every_slot() {
        for class in [Class::Constrained, Class::OnePerNode] {
            let slots = Slots::default();
            let held = take_all(&slots, class, Step::Registration);
            assert_eq!(held.len(), NOMINATION_CONCURRENCY, "{class:?}");
            assert!(try_take(&slots, Class::Unconstrained).is_none());
        }
    }

    #[test]
    fn writes_for_nodes_still_booting_leave_registrations_the_rest_of_the_slots() {
        let slots = Slots::default();
        let launching = take_all(&slots, Class::Constrained, Step::Launch);
        assert_eq!(launching.len(), LAUNCH_NOMINATION_SLOTS);
        let registering = take_all(&slots, Class::Constrained, Step::Registration);
        assert_eq!(
            registering.len(),
            NOMINATION_CONCURRENCY - LAUNCH_NOMINATION_SLOTS
        );
        drop(registering);
        assert!(
            try_take_at(&slots, Class::Unconstrained, Step::Launch).is_none(),
            "launch writes hold their share at most"
        );
    }

    #[test]
    fn one_per_node_writes_at_launch_are_not_held_to_the_launch_share() {
        let slots = Slots::default();
        let others = take_all(&slots, Class::Constrained, Step::Launch);
        assert_eq!(others.len(), LAUNCH_NOMINATION_SLOTS);
        let one_per_node = take_all(&slots, Class::OnePerNode, Step::Launch);
        assert_eq!(
            one_per_node.len(),
            NOMINATION_CONCURRENCY - LAUNCH_NOMINATION_SLOTS,
            "every slot the other launch writes left"
        );
    }
}
