//! Bounded delivery between actors. Every actor's mailbox has a fixed capacity (a named
//! constant beside the actor), and every sender states how it behaves when that mailbox is
//! full: [`Outbox::deliver`] waits for room (backpressure: nothing is lost), while
//! [`Outbox::try_deliver`] drops the message and counts it — used only where a drop is
//! harmless because a later message or a periodic reconcile repairs it. actix's `do_send`
//! ignores capacity altogether and is not used. Depth and drops are exported as metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use actix::dev::ToEnvelope;
use actix::prelude::*;

use crate::metrics::{MAILBOX_DEPTH, MAILBOX_DROPPED};

/// Number of messages waiting in one named mailbox: senders count up on enqueue, the
/// receiving actor counts down as it takes each message.
#[derive(Clone, Debug)]
pub struct MailboxDepth {
    name: &'static str,
    count: Arc<AtomicI64>,
}

impl MailboxDepth {
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            count: Arc::new(AtomicI64::new(0)),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Messages currently queued.
    pub fn current(&self) -> i64 {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn queued(&self) {
        self.publish(self.count.fetch_add(1, Ordering::Relaxed) + 1);
    }

    /// The receiving actor took one message out of its mailbox.
    pub fn taken(&self) {
        self.publish(self.count.fetch_sub(1, Ordering::Relaxed) - 1);
    }

    fn publish(&self, depth: i64) {
        #[allow(clippy::cast_precision_loss, reason = "mailbox depths are small")]
        metrics::gauge!(MAILBOX_DEPTH, "mailbox" => self.name).set(depth as f64);
    }

    pub(crate) fn dropped(&self) {
        metrics::counter!(MAILBOX_DROPPED, "mailbox" => self.name).increment(1);
    }
}

/// Why a message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliverError {
    #[error("mailbox {0} is full; message dropped")]
    Full(&'static str),
    #[error("actor behind mailbox {0} has stopped")]
    Closed(&'static str),
}

/// A sender's handle on one actor's mailbox for one message type.
pub struct Outbox<M>
where
    M: Message + Send,
    M::Result: Send,
{
    recipient: Recipient<M>,
    depth: MailboxDepth,
}

impl<M> Clone for Outbox<M>
where
    M: Message + Send,
    M::Result: Send,
{
    fn clone(&self) -> Self {
        Self {
            recipient: self.recipient.clone(),
            depth: self.depth.clone(),
        }
    }
}

impl<M> Outbox<M>
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    /// An outbox onto `addr`, whose actor reports takes on `depth`.
    pub fn new<A>(addr: &Addr<A>, depth: MailboxDepth) -> Self
    where
        A: Actor + Handler<M>,
        A::Context: ToEnvelope<A, M>,
    {
        Self {
            recipient: addr.clone().recipient(),
            depth,
        }
    }

    /// Enqueues without waiting; a full mailbox drops the message (counted).
    pub fn try_deliver(&self, message: M) -> Result<(), DeliverError> {
        match self.recipient.try_send(message) {
            Ok(()) => {
                self.depth.queued();
                Ok(())
            }
            Err(SendError::Full(_)) => {
                self.depth.dropped();
                Err(DeliverError::Full(self.depth.name))
            }
            Err(SendError::Closed(_)) => Err(DeliverError::Closed(self.depth.name)),
        }
    }

    /// Enqueues, waiting for room, and waits for the handler's answer.
    pub async fn deliver(&self, message: M) -> Result<M::Result, DeliverError> {
        // Counted before the wait: a sender blocked on a full mailbox is backlog too.
        self.depth.queued();
        let answer = self.recipient.send(message).await;
        answer.map_err(|_| {
            self.depth.taken();
            DeliverError::Closed(self.depth.name)
        })
    }
}
