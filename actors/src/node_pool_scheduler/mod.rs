//! NodePoolSchedulers: one actor per NodePool doing the bin-packing of the pods routed to
//! it, each on its own OS thread so NodePools solve in parallel without holding up the
//! actor thread. The Provisioner prepares a round's [`Batch`] once, and [`Schedulers`]
//! fans its independent parts out — a part goes to the scheduler of its first NodePool
//! (every NodePool is in exactly one part), parts that use no NodePool go round-robin to
//! any scheduler — then gathers the outcomes and assembles the result, which is exactly the
//! sequential solve's. Each scheduler's mailbox is a bounded channel behind a mailbox
//! permit, with a waiting send; its depth is reported per NodePool
//! (`mailbox="nodepool_scheduler/<pool>"`).
//! Schedulers are started and stopped as NodePools come and go ([`Schedulers::reconcile`]);
//! the running set is published on a watch channel.
//!
//! The actor is a thread rather than an actix `SyncArbiter`: a `SyncArbiter` forwards its
//! address's messages into an unbounded queue at once, so its mailbox bound would not hold.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::join_all;
use kerf::scheduling::{Batch, Part, PartOutcome, SchedulingResult};
use tokio::sync::{oneshot, watch};

use crate::mailbox::MailboxDepth;
use crate::supervisor::Supervision;

/// A NodePool is in exactly one part of a batch and the Provisioner waits for a round's
/// parts before it starts the next round, so a scheduler receives its pool's part and,
/// at most, a few pool-less parts per round. Sends wait for room (nothing is dropped), so a
/// small mailbox only paces the fan-out; it never loses work.
pub const NODEPOOL_SCHEDULER_MAILBOX_CAPACITY: usize = 4;

/// Prefix of each scheduler's mailbox name (the depth metric's `mailbox` label).
pub const MAILBOX_NAME: &str = "nodepool_scheduler";

/// Solve one part of a batch and answer on `reply`.
struct SolvePart {
    batch: Batch,
    part: Part,
    reply: oneshot::Sender<PartOutcome>,
}

/// One NodePool's scheduler: its mailbox and its thread.
struct NodePoolScheduler {
    mailbox: Mailbox,
    thread: JoinHandle<()>,
}

/// A scheduler's sending side: the channel and the permit that bounds it.
#[derive(Clone)]
struct Mailbox {
    sender: crossbeam_channel::Sender<SolvePart>,
    depth: MailboxDepth,
}

impl NodePoolScheduler {
    fn start(pool: &str) -> std::io::Result<Self> {
        // crossbeam: the receiver is a plain thread that blocks between parts.
        let (sender, inbox) = crossbeam_channel::bounded(NODEPOOL_SCHEDULER_MAILBOX_CAPACITY);
        let depth = MailboxDepth::new(
            format!("{MAILBOX_NAME}/{pool}"),
            NODEPOOL_SCHEDULER_MAILBOX_CAPACITY,
        );
        let mailbox = Mailbox {
            sender,
            depth: depth.clone(),
        };
        let name = pool.to_owned();
        // The thread allocates for whoever starts it (the controller, in `kerf simulate`).
        let owner = kerf_heap::current();
        let supervision = Supervision::current();
        let thread = std::thread::Builder::new()
            .name(format!("nodepool-{pool}"))
            .spawn(move || {
                kerf_heap::set_current(owner);
                // Ends when the last sender is dropped: the pool is gone or the Provisioner
                // stopped.
                while let Ok(SolvePart { batch, part, reply }) = inbox.recv() {
                    // A panic costs the part (its pods are reported unsolved and planned
                    // again next round), not the scheduler: it is logged, counted, and the
                    // thread takes the next part, holding nothing from this one.
                    let solved = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        depth.taken();
                        let span = tracing::debug_span!(
                            "solve",
                            nodepool = %name,
                            pods = part.pod_count()
                        );
                        span.in_scope(|| batch.solve_part(&part))
                    }));
                    match solved {
                        // The Provisioner may have given up on the round; nothing to do then.
                        Ok(outcome) => {
                            let _ = reply.send(outcome);
                        }
                        Err(panic) => supervision.report_panic("node_pool_scheduler", &*panic),
                    }
                }
            })?;
        Ok(Self { mailbox, thread })
    }
}

/// The running schedulers, by NodePool name.
pub struct Schedulers {
    running: BTreeMap<String, NodePoolScheduler>,
    published: Arc<watch::Sender<Vec<String>>>,
    /// Where the next pool-less part goes.
    next_any: usize,
}

impl Schedulers {
    /// No schedulers yet; the names of the running ones are published on `published`.
    pub fn new(published: Arc<watch::Sender<Vec<String>>>) -> Self {
        published.send_replace(Vec::new());
        Self {
            running: BTreeMap::new(),
            published,
            next_any: 0,
        }
    }

    /// NodePools with a running scheduler, sorted.
    pub fn names(&self) -> Vec<String> {
        self.running.keys().cloned().collect()
    }

    /// Starts a scheduler for every pool in `pools` without one (or whose thread ended),
    /// and stops the schedulers of pools no longer there. A stopping scheduler finishes
    /// the part it is solving; it is not waited for.
    pub fn reconcile<'a>(&mut self, pools: impl IntoIterator<Item = &'a str>) {
        let wanted: std::collections::BTreeSet<&str> = pools.into_iter().collect();
        let before = self.names();
        self.running
            .retain(|name, s| wanted.contains(name.as_str()) && !s.thread.is_finished());
        for pool in wanted {
            if self.running.contains_key(pool) {
                continue;
            }
            match NodePoolScheduler::start(pool) {
                Ok(scheduler) => {
                    self.running.insert(pool.to_owned(), scheduler);
                }
                Err(error) => {
                    tracing::error!(nodepool = pool, %error, "starting nodepool scheduler");
                }
            }
        }
        let after = self.names();
        if after != before {
            tracing::debug!(nodepools = ?after, "nodepool schedulers");
            self.published.send_replace(after);
        }
    }

    /// Solves `batch`: every part on its scheduler (a part whose scheduler is not running,
    /// or a pool-less part when none runs, is solved here), then the outcomes assembled. The returned future owns
    /// what it needs, so the caller may await it off its own state.
    pub fn solve(&mut self, batch: &Batch) -> impl Future<Output = SchedulingResult> + use<> {
        let mut inline = Vec::new();
        let mut routed = Vec::new();
        for part in batch.parts() {
            match self.route(part) {
                Some(mailbox) => {
                    let (reply, answer) = oneshot::channel();
                    let message = SolvePart {
                        batch: batch.clone(),
                        part: part.clone(),
                        reply,
                    };
                    routed.push((mailbox, message, answer));
                }
                None => inline.push(batch.solve_part(part)),
            }
        }
        let batch = batch.clone();
        async move {
            let sends = routed.into_iter().map(|(mailbox, message, answer)| {
                async move {
                    mailbox.depth.admit().await;
                    // The channel holds as many as the permits: with one, there is room.
                    if mailbox.sender.try_send(message).is_err() {
                        return None;
                    }
                    // A scheduler that died mid-solve drops the reply: its part's pods are
                    // reported unsolved by `assemble`.
                    answer.await.ok()
                }
            });
            let mut outcomes: Vec<PartOutcome> =
                join_all(sends).await.into_iter().flatten().collect();
            outcomes.extend(inline);
            batch.assemble(outcomes)
        }
    }

    /// The mailbox of the scheduler that solves `part`.
    fn route(&mut self, part: &Part) -> Option<Mailbox> {
        if let Some(first) = part.node_pools().first() {
            return self.running.get(first).map(|s| s.mailbox.clone());
        }
        if self.running.is_empty() {
            return None;
        }
        let index = self.next_any % self.running.len();
        self.next_any = self.next_any.wrapping_add(1);
        self.running.values().nth(index).map(|s| s.mailbox.clone())
    }
}

#[cfg(test)]
mod tests;
