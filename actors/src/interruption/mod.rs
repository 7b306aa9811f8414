//! The Interruption actor: reads EC2 interruption messages (spot interruption warnings,
//! rebalance recommendations, scheduled changes, instance state changes, capacity
//! reservation interruptions) from the `INTERRUPTION_QUEUE` and, as upstream's AWS
//! interruption controller, deletes the NodeClaim of an instance that is going away (the
//! termination flow drains its Node while the Provisioner replaces its pods) and marks an
//! interrupted spot offering unavailable.
//!
//! Two tasks and a bounded mailbox between them: the *poller* long-polls the queue
//! ([`kerf::interruption::InterruptionQueue`]) while this replica leads and waits when the
//! mailbox is full, so a slow API server slows the polling instead of piling messages up;
//! the *handler* handles up to [`HANDLER_PARALLELISM`] at once ([`handler`]). A message is
//! deleted once handled (or unparsable, logged and counted) and left to be redelivered when
//! handling failed; handling is idempotent, so duplicates are harmless. Both are supervised
//! ([`POLLER`], [`HANDLER`]): a panic is counted and the messages held are redelivered.

pub(crate) mod events;
mod handler;

use std::sync::Arc;
use std::time::Duration;

use std::panic::AssertUnwindSafe;

use futures::{FutureExt, StreamExt};
use kerf::interruption::{InterruptionQueue, MAX_MESSAGES_PER_RECEIVE, QueueMessage};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use handler::{Handled, Handler, HandlerDeps};

use crate::mailbox::MailboxDepth;
use crate::supervisor::{self, Supervision};

/// Upstream's controller name (logs, reconcile metrics); also the mailbox's name.
pub const CONTROLLER: &str = "interruption";

/// The supervised poller's and handlers' names in `kerf_actor_restarts_total{actor}`.
pub const POLLER: &str = "interruption_poller";
pub const HANDLER: &str = "interruption_handler";

/// Two receives' worth: the poller fetches the next batch while the handler works on the
/// previous one, and waits when both are in the mailbox. Nothing is dropped at capacity:
/// the poller waits, and what it has not received stays in the queue. The bound is a
/// [`MailboxDepth`] permit (`kerf_mailbox_depth{mailbox="interruption"}`).
pub const INTERRUPTION_MAILBOX_CAPACITY: usize = 2 * MAX_MESSAGES_PER_RECEIVE;

/// Messages handled at once (upstream parallelizes a batch 10 ways): each costs a couple
/// of API writes, and a mass spot reclaim arrives as hundreds of messages within seconds.
pub const HANDLER_PARALLELISM: usize = 10;

/// How long the poller waits after the queue failed before asking again, so a missing
/// permission or an outage logs a few errors a minute rather than spinning.
pub const RECEIVE_ERROR_BACKOFF: Duration = Duration::from_secs(5);

/// Starts the poller and the handler, each supervised; both stop on `shutdown`.
pub fn spawn(
    queue: Arc<dyn InterruptionQueue>,
    handler: Handler,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let depth = MailboxDepth::new(CONTROLLER, INTERRUPTION_MAILBOX_CAPACITY);
    spawn_with(queue, Arc::new(handler), depth, leader, shutdown)
}

/// [`spawn`] with the mailbox's depth handed in, so a test can watch it.
fn spawn_with(
    queue: Arc<dyn InterruptionQueue>,
    handler: Arc<Handler>,
    depth: MailboxDepth,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let (mailbox, inbox) = mpsc::channel(INTERRUPTION_MAILBOX_CAPACITY);
    tracing::info!(queue = queue.name(), "watching interruption queue");
    let poller = {
        let (depth, shutdown) = (depth.clone(), shutdown.clone());
        supervisor::task(POLLER, move || {
            poll(
                Arc::clone(&queue),
                Outbound {
                    mailbox: mailbox.clone(),
                    depth: depth.clone(),
                },
                leader.clone(),
                shutdown.clone(),
            )
        })
    };
    // The mailbox outlives a panicking handler loop; the next one goes on taking from it.
    let inbox = Arc::new(tokio::sync::Mutex::new(inbox));
    let handlers = supervisor::task(HANDLER, move || {
        handle_all(
            Arc::clone(&handler),
            Arc::clone(&inbox),
            depth.clone(),
            shutdown.clone(),
        )
    });
    vec![poller, handlers]
}

/// The poller's side of the mailbox: the permit bounds it, the channel carries it.
struct Outbound {
    mailbox: mpsc::Sender<QueueMessage>,
    depth: MailboxDepth,
}

impl Outbound {
    /// Waits for room, then enqueues; `false` once the handler is gone.
    async fn send(&self, message: QueueMessage) -> bool {
        self.depth.admit().await;
        self.mailbox.send(message).await.is_ok()
    }
}

/// Receives while leading, until shutdown.
async fn poll(
    queue: Arc<dyn InterruptionQueue>,
    outbound: Outbound,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        if !*leader.borrow_and_update() {
            tokio::select! {
                _ = leader.changed() => continue,
                _ = shutdown.changed() => return,
            }
        }
        let received = tokio::select! {
            received = queue.receive() => received,
            _ = shutdown.changed() => return,
        };
        let messages = match received {
            Ok(messages) => messages,
            Err(error) => {
                tracing::error!(%error, queue = queue.name(), "getting messages from queue");
                tokio::select! {
                    () = tokio::time::sleep(RECEIVE_ERROR_BACKOFF) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        for message in messages {
            tokio::select! {
                sent = outbound.send(message) => if !sent { return },
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Handles what the poller hands over, [`HANDLER_PARALLELISM`] at a time. A handler that
/// panics is reported as a panic of [`HANDLER`] (logged with its message, counted, held
/// against the restart budget) and its message, not deleted, comes back from the queue after
/// its visibility timeout; the other handlers carry on.
async fn handle_all(
    handler: Arc<Handler>,
    inbox: Arc<tokio::sync::Mutex<mpsc::Receiver<QueueMessage>>>,
    depth: MailboxDepth,
    mut shutdown: watch::Receiver<bool>,
) {
    let inbox = inbox.lock_owned().await;
    let messages = futures::stream::unfold((inbox, depth), |(mut inbox, depth)| async move {
        let message = inbox.recv().await?;
        depth.taken();
        Some((message, (inbox, depth)))
    });
    let handler = &handler;
    // Taken once here, inside the loop's supervised task, for the handlers it runs.
    let supervision = &Supervision::current();
    let work = messages.for_each_concurrent(HANDLER_PARALLELISM, |message| async move {
        let handled = AssertUnwindSafe(handler.process(&message)).catch_unwind();
        if let Err(panic) = handled.await {
            supervision.report_panic(HANDLER, &*panic);
            tracing::error!(message_id = %message.id, "interruption handler panicked; the message is left for redelivery");
        }
    });
    tokio::select! {
        () = work => {}
        _ = shutdown.changed() => {}
    }
}

#[cfg(test)]
mod tests;
