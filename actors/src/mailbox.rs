//! Bounded delivery between actors. Every actor's mailbox has a fixed capacity (a named
//! constant beside the actor), enforced by a permit: a sender takes one of `capacity`
//! permits before it enqueues, and the receiving actor gives it back when it takes the
//! message ([`MailboxDepth::taken`]). The transport behind the permit (actix's channel, or a
//! tokio channel of the same capacity) therefore never holds more than `capacity` messages,
//! whichever sender and however many clones of it send.
//!
//! actix's own channel is not a bound: every `Addr`/`Recipient` clone gets a slot past
//! capacity, the message is pushed even when the mailbox is full (only the sender is
//! parked afterwards), and a parked `Recipient::send` retries through a fresh clone that is
//! never refused (actix#329). So actors' actix queues are left unbounded (see
//! [`crate::supervisor`], which starts every actor) and the permit is the only bound.
//!
//! Every sender states how it behaves at capacity: [`Outbox::deliver`] waits for a permit
//! (nothing is lost), [`Outbox::try_deliver`] drops the message and counts it
//! (`kerf_mailbox_dropped_total`) — used only where a later message or a periodic
//! reconcile repairs the drop. `kerf_mailbox_depth` is the number of permits held: the
//! messages waiting in the mailbox, never more than its capacity.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use actix::dev::ToEnvelope;
use actix::prelude::*;
use tokio::sync::Semaphore;

use crate::metrics::{MAILBOX_DEPTH, MAILBOX_DROPPED};
use crate::supervisor::Supervised;

/// One mailbox's bound and its depth: shared by its senders and its receiving actor.
#[derive(Clone, Debug)]
pub struct MailboxDepth {
    name: Arc<str>,
    capacity: usize,
    permits: Arc<Semaphore>,
    count: Arc<AtomicI64>,
}

impl MailboxDepth {
    /// A mailbox named `name` (the metrics' `mailbox` label) holding at most `capacity`
    /// messages.
    pub fn new(name: impl Into<Arc<str>>, capacity: usize) -> Self {
        Self {
            name: name.into(),
            capacity,
            permits: Arc::new(Semaphore::new(capacity)),
            count: Arc::new(AtomicI64::new(0)),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Messages currently queued.
    pub fn current(&self) -> i64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Waits for room, then counts one message in. The caller must enqueue it.
    pub async fn admit(&self) {
        // Released by `taken`, when the actor takes the message. The semaphore is never
        // closed, so the acquire only ends with a permit.
        if let Ok(permit) = self.permits.acquire().await {
            permit.forget();
        }
        self.queued();
    }

    /// Counts one message in if there is room; otherwise counts a drop and refuses.
    pub fn try_admit(&self) -> Result<(), DeliverError> {
        match self.permits.try_acquire() {
            Ok(permit) => {
                permit.forget();
                self.queued();
                Ok(())
            }
            Err(_) => {
                metrics::counter!(MAILBOX_DROPPED, "mailbox" => self.name.to_string()).increment(1);
                Err(DeliverError::Full(self.name.to_string()))
            }
        }
    }

    fn queued(&self) {
        self.publish(self.count.fetch_add(1, Ordering::Relaxed) + 1);
    }

    /// The receiving actor took one message out of its mailbox: its room is free again.
    pub fn taken(&self) {
        self.publish(self.count.fetch_sub(1, Ordering::Relaxed) - 1);
        self.permits.add_permits(1);
    }

    /// The mailbox was replaced by an empty one (its actor restarted after a panic): what
    /// was queued is lost, counted as dropped, and its room given back.
    pub fn reset(&self) {
        let lost = self.count.swap(0, Ordering::Relaxed).max(0);
        self.publish(0);
        #[allow(clippy::cast_sign_loss, reason = "clamped at zero above")]
        let lost = lost as u64;
        metrics::counter!(MAILBOX_DROPPED, "mailbox" => self.name.to_string()).increment(lost);
        #[allow(clippy::cast_possible_truncation, reason = "at most the capacity")]
        self.permits.add_permits(lost as usize);
    }

    fn publish(&self, depth: i64) {
        #[allow(clippy::cast_precision_loss, reason = "mailbox depths are small")]
        metrics::gauge!(MAILBOX_DEPTH, "mailbox" => self.name.to_string()).set(depth as f64);
    }
}

/// Why a message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliverError {
    #[error("mailbox {0} is full; message dropped")]
    Full(String),
    #[error("actor behind mailbox {0} has stopped")]
    Closed(String),
}

/// A sender's handle on one actor's mailbox for one message type.
pub struct Outbox<M>
where
    M: Message + Send,
    M::Result: Send,
{
    recipient: Arc<dyn Fn() -> Recipient<M> + Send + Sync>,
    depth: MailboxDepth,
}

impl<M> Clone for Outbox<M>
where
    M: Message + Send,
    M::Result: Send,
{
    fn clone(&self) -> Self {
        Self {
            recipient: Arc::clone(&self.recipient),
            depth: self.depth.clone(),
        }
    }
}

impl<M> Outbox<M>
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    /// An outbox onto the supervised actor `actor` (whichever incarnation is running),
    /// which reports takes on `depth`.
    pub fn new<A>(actor: &Supervised<A>, depth: MailboxDepth) -> Self
    where
        A: Actor<Context = Context<A>> + Handler<M>,
    {
        let actor = actor.clone();
        Self {
            recipient: Arc::new(move || actor.addr().recipient()),
            depth,
        }
    }

    /// An outbox onto a plain actix address, for actors started without supervision (test
    /// doubles). Its actix queue must be unbounded (`set_mailbox_capacity(0)`), or actix's
    /// own parking adds to the wait.
    pub fn to_addr<A>(addr: &Addr<A>, depth: MailboxDepth) -> Self
    where
        A: Actor + Handler<M>,
        A::Context: ToEnvelope<A, M>,
    {
        let addr = addr.clone();
        Self {
            recipient: Arc::new(move || addr.clone().recipient()),
            depth,
        }
    }

    /// How many messages the mailbox holds at most.
    pub fn capacity(&self) -> usize {
        self.depth.capacity
    }

    /// Enqueues without waiting; a full mailbox drops the message (counted).
    pub fn try_deliver(&self, message: M) -> Result<(), DeliverError> {
        let recipient = (self.recipient)();
        if !recipient.connected() {
            return Err(DeliverError::Closed(self.depth.name.to_string()));
        }
        self.depth.try_admit()?;
        // The actix queue behind the permit is unbounded: it never refuses for fullness.
        recipient.do_send(message);
        Ok(())
    }

    /// Waits for room and enqueues, without waiting for the handler's answer.
    pub async fn enqueue(&self, message: M) -> Result<(), DeliverError> {
        let recipient = (self.recipient)();
        if !recipient.connected() {
            return Err(DeliverError::Closed(self.depth.name.to_string()));
        }
        self.depth.admit().await;
        recipient.do_send(message);
        Ok(())
    }

    /// Waits for room, enqueues, and waits for the handler's answer.
    pub async fn deliver(&self, message: M) -> Result<M::Result, DeliverError> {
        self.depth.admit().await;
        // `send` pushes at once (the queue is unbounded); awaiting only waits for the answer.
        let answer = (self.recipient)().send(message).await;
        // A stopped actor's mailbox is gone with its room; nothing to give back.
        answer.map_err(|_| DeliverError::Closed(self.depth.name.to_string()))
    }
}

#[cfg(test)]
mod tests;
