//! The Interruption actor: reads EC2 interruption messages (spot interruption warnings,
//! rebalance recommendations, AWS Health scheduled changes, instance state changes,
//! capacity reservation interruptions) from the `INTERRUPTION_QUEUE` and acts on the
//! NodeClaims they name, as upstream's AWS interruption controller does: it deletes the
//! NodeClaim of an instance that is going away, so the termination flow cordons and drains
//! its Node while the provisioner launches replacements for the displaced pods, and it
//! marks an interrupted spot offering unavailable so the next solve avoids it.
//!
//! Two tasks and a bounded mailbox between them. The *poller* long-polls the queue
//! ([`kerf::interruption::InterruptionQueue`]: up to 10 messages, 20 s wait) while this
//! replica leads, and hands each message to the mailbox, waiting when it is full — so a
//! slow API server slows the polling instead of piling messages up in memory; messages not
//! yet received stay in the queue. The *handler* takes messages from the mailbox and
//! handles up to [`HANDLER_PARALLELISM`] at once ([`handler`]). A message is deleted from
//! the queue once handled, or at once when it cannot be parsed (logged and counted); a
//! message whose handling failed is left in the queue, which delivers it again after its
//! visibility timeout. Handling is idempotent — an instance without a NodeClaim, or whose
//! NodeClaim is already deleting, is left alone — so duplicate and late messages are
//! harmless.

mod events;
mod handler;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kerf::interruption::{InterruptionQueue, MAX_MESSAGES_PER_RECEIVE, QueueMessage};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use handler::{Handled, Handler, HandlerDeps};

/// Upstream's controller name (logs, reconcile metrics).
pub const CONTROLLER: &str = "interruption";

/// Two receives' worth: the poller fetches the next batch while the handler works on the
/// previous one, and waits when both are in the mailbox. Nothing is dropped at capacity:
/// the poller waits, and what it has not received stays in the queue.
pub const INTERRUPTION_MAILBOX_CAPACITY: usize = 2 * MAX_MESSAGES_PER_RECEIVE;

/// Messages handled at once (upstream parallelizes a batch 10 ways): each costs a couple
/// of API writes, and a mass spot reclaim arrives as hundreds of messages within seconds.
pub const HANDLER_PARALLELISM: usize = 10;

/// How long the poller waits after the queue failed before asking again, so a missing
/// permission or an outage logs a few errors a minute rather than spinning.
pub const RECEIVE_ERROR_BACKOFF: Duration = Duration::from_secs(5);

/// Starts the poller and the handler; both stop on `shutdown`.
pub fn spawn(
    queue: Arc<dyn InterruptionQueue>,
    handler: Handler,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let (mailbox, inbox) = mpsc::channel(INTERRUPTION_MAILBOX_CAPACITY);
    tracing::info!(queue = queue.name(), "watching interruption queue");
    vec![
        tokio::spawn(poll(Arc::clone(&queue), mailbox, leader, shutdown.clone())),
        tokio::spawn(handle_all(handler, inbox, shutdown)),
    ]
}

/// Receives while leading, until shutdown.
async fn poll(
    queue: Arc<dyn InterruptionQueue>,
    mailbox: mpsc::Sender<QueueMessage>,
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
                sent = mailbox.send(message) => if sent.is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Handles what the poller hands over, [`HANDLER_PARALLELISM`] at a time.
async fn handle_all(
    handler: Handler,
    inbox: mpsc::Receiver<QueueMessage>,
    mut shutdown: watch::Receiver<bool>,
) {
    let messages = futures::stream::unfold(inbox, |mut inbox| async move {
        inbox.recv().await.map(|message| (message, inbox))
    });
    let handler = &handler;
    let work = messages.for_each_concurrent(HANDLER_PARALLELISM, |message| async move {
        handler.process(&message).await;
    });
    tokio::select! {
        () = work => {}
        _ = shutdown.changed() => {}
    }
}
