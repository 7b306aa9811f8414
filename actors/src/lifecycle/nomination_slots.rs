//! The write slots every nomination (and withdrawal) of [`super::nominate`] shares: one
//! pool of [`NOMINATION_CONCURRENCY`], of which unconstrained pods' writes hold at most
//! [`UNCONSTRAINED_NOMINATION_SLOTS`] and writes made at launch (for Nodes still booting) at
//! most [`LAUNCH_NOMINATION_SLOTS`], so placement-constrained pods and registering Nodes,
//! which a pod waits on, go first.
//!
//! Writes wait in [`Line`]s, one per NodeClaim's pods of one class, not one waiter per
//! pod: a large scale-up queues a nomination for every planned pod at once (twenty thousand
//! at 20k pods), and a waiter per pod would hold a few hundred bytes for each. A line keeps
//! its place: the slots freed go, in the order the lines were opened, to the first line
//! whose class and step may hold one more, until it has had a slot for each of its pods; so
//! a NodeClaim's pods are written before those of a NodeClaim that asked later. The lines
//! take [`Turn`]s: one-per-node pods' lines first, then the other registrations' (and
//! withdrawals'), and the lines for Nodes still booting last.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use kerf::pods;
use kerf::pods::LeanPod;

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

/// Which shares a slot of `class` at `step` counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shares {
    launch: bool,
    unconstrained: bool,
}

impl Shares {
    fn of(class: Class, step: Step) -> Self {
        Self {
            launch: step == Step::Launch && class != Class::OnePerNode,
            unconstrained: class == Class::Unconstrained,
        }
    }
}

/// The order the lines are served in; within a turn, the order they were opened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// A one-per-node pod shares its planned Node with no peer: until it is nominated,
    /// kube-scheduler may give that Node to a peer or fill its room with other pods, and
    /// the pod then needs a NodeClaim of its own (see `pods::is_one_per_node`). One write
    /// keeps a Node's worth of room, so these go before the registrations opened earlier.
    OnePerNode,
    /// Registrations and withdrawals: a Node's `unregistered` taint waits on them.
    Registering,
    /// Writes for Nodes still booting, which no pod waits on yet.
    Booting,
}

impl Turn {
    const ORDER: [Self; 3] = [Self::OnePerNode, Self::Registering, Self::Booting];

    fn of(class: Class, shares: Shares) -> Self {
        if class == Class::OnePerNode {
            Self::OnePerNode
        } else if shares.launch {
            Self::Booting
        } else {
            Self::Registering
        }
    }
}

/// The write slots every launch's and registration's nominations (and withdrawals) share.
pub struct Slots {
    queue: Mutex<Queue>,
}

struct Queue {
    free: Free,
    /// The open lines by number, which is the order they were opened in.
    lines: BTreeMap<u64, Waiting>,
    next_line: u64,
}

/// A line's place in the queue.
struct Waiting {
    shares: Shares,
    turn: Turn,
    /// Slots still to be given to it.
    wanted: usize,
    /// Slots given to it that it has not taken yet.
    given: usize,
    waker: Option<Waker>,
}

/// Free slots of the pool, and of each limited share.
struct Free {
    all: usize,
    unconstrained: usize,
    launch: usize,
}

impl Free {
    fn may_take(&self, shares: Shares) -> bool {
        self.all > 0
            && (!shares.launch || self.launch > 0)
            && (!shares.unconstrained || self.unconstrained > 0)
    }

    fn take(&mut self, shares: Shares) {
        self.all -= 1;
        self.launch -= usize::from(shares.launch);
        self.unconstrained -= usize::from(shares.unconstrained);
    }

    fn put_back(&mut self, shares: Shares, count: usize) {
        self.all += count;
        self.launch += count * usize::from(shares.launch);
        self.unconstrained += count * usize::from(shares.unconstrained);
    }
}

impl Default for Slots {
    fn default() -> Self {
        Self {
            queue: Mutex::new(Queue {
                free: Free {
                    all: NOMINATION_CONCURRENCY,
                    unconstrained: UNCONSTRAINED_NOMINATION_SLOTS,
                    launch: LAUNCH_NOMINATION_SLOTS,
                },
                lines: BTreeMap::new(),
                next_line: 0,
            }),
        }
    }
}

impl Queue {
    /// Gives the free slots to the lines turn by turn ([`Turn::ORDER`]), within a turn in
    /// the order they were opened, each as many as its shares allow. A line passed over for
    /// a full share stays passed over: shares only fill while slots are given.
    fn give(&mut self) {
        let Self { free, lines, .. } = self;
        for turn in Turn::ORDER {
            for waiting in lines.values_mut().filter(|w| w.turn == turn) {
                if free.all == 0 {
                    return;
                }
                let mut given = 0;
                while waiting.wanted > 0 && free.may_take(waiting.shares) {
                    free.take(waiting.shares);
                    waiting.wanted -= 1;
                    given += 1;
                }
                if given > 0 {
                    waiting.given += given;
                    if let Some(waker) = waiting.waker.take() {
                        waker.wake();
                    }
                }
            }
        }
    }
}

impl Slots {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue's counts are updated whole under the lock; no panic leaves them halfway.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a line for `count` writes of `class` at `step`, behind the lines opened before.
    pub fn line(&self, class: Class, step: Step, count: usize) -> Line<'_> {
        let shares = Shares::of(class, step);
        let mut queue = self.lock();
        let number = queue.next_line;
        queue.next_line += 1;
        queue.lines.insert(
            number,
            Waiting {
                shares,
                turn: Turn::of(class, shares),
                wanted: count,
                given: 0,
                waker: None,
            },
        );
        queue.give();
        Line {
            slots: self,
            number,
            shares,
        }
    }

    /// Waits for one slot a write of `class` at `step` may hold (behind the lines opened
    /// before, within its share).
    pub async fn acquire(&self, class: Class, step: Step) -> Option<Slot<'_>> {
        self.line(class, step, 1).next().await
    }

    /// Free slots of the pool.
    #[cfg(test)]
    fn free(&self) -> usize {
        self.lock().free.all
    }

    /// Lines open.
    #[cfg(test)]
    pub(super) fn lines(&self) -> usize {
        self.lock().lines.len()
    }
}

/// A NodeClaim's writes of one class waiting for slots, in their place in the queue; closed
/// when dropped, handing back the slots it was given and did not take.
pub struct Line<'a> {
    slots: &'a Slots,
    number: u64,
    shares: Shares,
}

impl<'a> Line<'a> {
    /// The line's next slot; `None` once it has had one for each of its writes.
    pub async fn next(&mut self) -> Option<Slot<'a>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Slot<'a>>> {
        let mut queue = self.slots.lock();
        let Some(waiting) = queue.lines.get_mut(&self.number) else {
            return Poll::Ready(None);
        };
        if waiting.given > 0 {
            waiting.given -= 1;
            return Poll::Ready(Some(Slot {
                slots: self.slots,
                shares: self.shares,
            }));
        }
        if waiting.wanted == 0 {
            return Poll::Ready(None);
        }
        waiting.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        let mut queue = self.slots.lock();
        if let Some(waiting) = queue.lines.remove(&self.number)
            && waiting.given > 0
        {
            queue.free.put_back(waiting.shares, waiting.given);
            queue.give();
        }
    }
}

/// A held write slot, handed back (to the lines waiting) when dropped.
pub struct Slot<'a> {
    slots: &'a Slots,
    shares: Shares,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut queue = self.slots.lock();
        queue.free.put_back(self.shares, 1);
        queue.give();
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

    /// The slots `take` gives until it gives none (at most one more than the pool holds).
    fn taken<'a>(take: impl FnMut() -> Option<Slot<'a>>) -> Vec<Slot<'a>> {
        std::iter::from_fn(take)
            .take(NOMINATION_CONCURRENCY + 1)
            .collect()
    }

    /// Takes every slot `class` may at `step`, without waiting.
    fn take_all(slots: &Slots, class: Class, step: Step) -> Vec<Slot<'_>> {
        taken(|| try_take_at(slots, class, step))
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

    /// Takes every slot `line` was given so far, without waiting.
    fn take_given<'a>(line: &mut Line<'a>) -> Vec<Slot<'a>> {
        taken(|| futures::FutureExt::now_or_never(line.next()).flatten())
    }

    #[test]
    fn slots_go_to_the_lines_in_the_order_they_were_opened() {
        let slots = Slots::default();
        let held = take_all(&slots, Class::Constrained, Step::Registration);
        assert_eq!(held.len(), NOMINATION_CONCURRENCY);
        let mut first = slots.line(Class::Constrained, Step::Registration, 3);
        let mut second = slots.line(Class::Constrained, Step::Registration, 3);
        assert!(take_given(&mut first).is_empty() && take_given(&mut second).is_empty());
        let mut held = held.into_iter();
        held.by_ref().take(4).for_each(drop);
        let (a, b) = (take_given(&mut first), take_given(&mut second));
        assert_eq!(
            (a.len(), b.len()),
            (3, 1),
            "the first line is served whole first"
        );
        drop(a);
        assert_eq!(take_given(&mut second).len(), 2);
        assert!(
            futures::FutureExt::now_or_never(second.next()).is_some_and(|s| s.is_none()),
            "a line that had a slot for each write is done"
        );
    }

    #[test]
    fn a_closed_line_hands_back_the_slots_it_did_not_take() {
        let slots = Slots::default();
        let mut line = slots.line(Class::Constrained, Step::Registration, 40);
        let taken = futures::FutureExt::now_or_never(line.next()).flatten();
        assert!(taken.is_some());
        assert_eq!(slots.free(), 0, "given every slot");
        let waiting = slots.line(Class::Constrained, Step::Registration, 1);
        drop(line);
        assert_eq!(
            slots.free(),
            NOMINATION_CONCURRENCY - 2,
            "one taken, one to the next line"
        );
        drop((taken, waiting));
        assert_eq!(slots.free(), NOMINATION_CONCURRENCY);
    }

    #[test]
    fn a_line_held_to_its_share_does_not_hold_back_later_lines() {
        let slots = Slots::default();
        let unconstrained = take_all(&slots, Class::Unconstrained, Step::Registration);
        let mut more = slots.line(Class::Unconstrained, Step::Registration, 2);
        let mut constrained = slots.line(Class::Constrained, Step::Registration, 2);
        assert!(take_given(&mut more).is_empty(), "the share is full");
        assert_eq!(take_given(&mut constrained).len(), 2);
        drop(unconstrained);
        assert_eq!(take_given(&mut more).len(), 2);
    }

    #[test]
    fn a_freed_slot_goes_to_a_one_per_node_line_before_older_lines() {
        for step in [Step::Registration, Step::Launch] {
            let slots = Slots::default();
            let held = take_all(&slots, Class::Constrained, Step::Registration);
            let mut registering = slots.line(Class::Constrained, Step::Registration, 3);
            let mut booting = slots.line(Class::Constrained, Step::Launch, 3);
            let mut alone = slots.line(Class::OnePerNode, step, 2);
            let mut held = held.into_iter();
            held.by_ref().take(3).for_each(drop);
            let nominated = take_given(&mut alone);
            assert_eq!(
                nominated.len(),
                2,
                "the one-per-node pods go first ({step:?})"
            );
            assert_eq!(
                take_given(&mut registering).len(),
                1,
                "then the registration"
            );
            assert!(take_given(&mut booting).is_empty());
        }
    }

    #[test]
    fn a_freed_slot_goes_to_a_registration_before_an_older_launch_line() {
        let slots = Slots::default();
        let held = take_all(&slots, Class::Constrained, Step::Registration);
        let mut booting = slots.line(Class::Constrained, Step::Launch, 2);
        let mut registering = slots.line(Class::Constrained, Step::Registration, 2);
        let mut held = held.into_iter();
        held.by_ref().take(2).for_each(drop);
        let registered = take_given(&mut registering);
        assert_eq!(registered.len(), 2, "the registration goes first");
        assert!(take_given(&mut booting).is_empty());
        held.by_ref().take(1).for_each(drop);
        let booted = take_given(&mut booting);
        assert_eq!(booted.len(), 1, "then the Node still booting");
    }
}
