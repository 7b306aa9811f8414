//! One mailbox's bound ([`MailboxDepth`]): `capacity` permits a sender takes before it
//! enqueues and the receiving actor gives back when it takes the message, the depth gauge
//! and drop counter they publish, and the actor's fault hook checked on every take. The
//! senders' side that pushes through it is [`super::Outbox`]; the supervisor resets it
//! when an actor restarts on an empty mailbox.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::Semaphore;

use crate::metrics::{MAILBOX_DEPTH, MAILBOX_DROPPED};
use crate::supervisor::faults::FaultPoint;
use crate::supervisor::supervision::Supervision;

/// One mailbox's bound and its depth: shared by its senders and its receiving actor.
#[derive(Clone, Debug)]
pub struct MailboxDepth {
    name: Arc<str>,
    capacity: usize,
    permits: Arc<Semaphore>,
    count: Arc<AtomicI64>,
    /// The fault-injection hook checked on every take ([`crate::supervisor::Faults`]).
    fault: FaultPoint,
}

impl MailboxDepth {
    /// A mailbox named `name` (the metrics' `mailbox` label) holding at most `capacity`
    /// messages.
    pub fn new(name: impl Into<Arc<str>>, capacity: usize) -> Self {
        let name = name.into();
        Self {
            fault: Supervision::current().faults().for_mailbox(&name),
            name,
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
        self.reserve().await;
        self.queued();
    }

    /// Counts one message in if there is room; otherwise counts a drop and refuses.
    pub fn try_admit(&self) -> Result<(), DeliverError> {
        self.try_reserve()?;
        self.queued();
        Ok(())
    }

    /// Waits for room without counting a message in yet ([`Self::queued`] once pushed, or
    /// [`Self::refund`]).
    pub(super) async fn reserve(&self) {
        // Released by `taken`, when the actor takes the message. The semaphore is never
        // closed, so the acquire only ends with a permit.
        if let Ok(permit) = self.permits.acquire().await {
            permit.forget();
        }
    }

    /// [`Self::reserve`] if there is room; otherwise counts a drop and refuses.
    pub(super) fn try_reserve(&self) -> Result<(), DeliverError> {
        match self.permits.try_acquire() {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(_) => {
                metrics::counter!(MAILBOX_DROPPED, "mailbox" => self.name.to_string()).increment(1);
                Err(DeliverError::Full(self.name.to_string()))
            }
        }
    }

    /// A reserved message was pushed into the mailbox.
    pub(super) fn queued(&self) {
        self.publish(self.count.fetch_add(1, Ordering::Relaxed) + 1);
    }

    /// A reserved message was refused by a closed mailbox: its room is given back at once.
    pub(super) fn refund(&self) {
        self.permits.add_permits(1);
    }

    /// Room free now (tests check no permit leaked).
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// The receiving actor took one message out of its mailbox: its room is free again.
    /// Panics here if a fault is armed for this actor (a test and simulation hook), after
    /// the room is given back.
    pub fn taken(&self) {
        self.publish(self.count.fetch_sub(1, Ordering::Relaxed) - 1);
        self.permits.add_permits(1);
        self.fault.check();
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
