//! Interruption messages: what EC2 and AWS Health tell a cluster about its instances before
//! (or as) they go away, delivered as EventBridge events into an SQS queue, and the queue
//! boundary the controller reads them through. As upstream's AWS provider, kerf reacts to a
//! spot interruption warning, a rebalance recommendation, an AWS Health scheduled change
//! for EC2, an instance state change (stopping, stopped, shutting-down, terminated) and a
//! capacity reservation interruption warning; every other event parses to
//! [`Event::NoOp`] so a queue shared with other consumers does no harm.
//!
//! The module is pure: typed messages and their parser ([`messages`]), and the
//! [`InterruptionQueue`] trait that the AWS provider implements over SQS and the simulated
//! cluster implements in memory, so both feed the same parser and handler. Example
//! messages, as EventBridge delivers them, live in `fixtures/` beside this file.

pub mod instance_status;
pub mod messages;

use crate::cloudprovider::BoxFuture;
use thiserror::Error;

pub use messages::{
    Action, Envelope, Event, Kind, Message, ParseError, capacity_reservation_interruption, parse,
    rebalance_recommendation, scheduled_change, spot_interruption, state_change,
};

/// The most messages one receive returns (SQS's own limit, and upstream's batch).
pub const MAX_MESSAGES_PER_RECEIVE: usize = 10;

/// How long one receive waits for a message before returning empty (SQS's longest long
/// poll): an idle queue costs three requests a minute.
pub const RECEIVE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// One message taken from the queue, invisible to other receivers until deleted or until
/// the queue's visibility timeout makes it visible again (redelivery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMessage {
    /// The queue's id of the message (stable across deliveries).
    pub id: String,
    /// What deletes this delivery.
    pub receipt: String,
    /// The EventBridge event, as JSON.
    pub body: String,
}

/// Why the queue could not be read or written.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum QueueError {
    #[error("receiving from interruption queue {queue}: {reason}")]
    Receive { queue: String, reason: String },
    #[error("deleting message {id} from interruption queue {queue}: {reason}")]
    Delete {
        queue: String,
        id: String,
        reason: String,
    },
}

/// The queue interruption messages arrive on: SQS in a real cluster, memory in the
/// simulated one. Shared as `Arc<dyn InterruptionQueue>`; safe to call concurrently.
pub trait InterruptionQueue: Send + Sync {
    /// The queue's name, for logs and errors.
    fn name(&self) -> &str;

    /// Up to [`MAX_MESSAGES_PER_RECEIVE`] messages, waiting up to [`RECEIVE_WAIT`] for the
    /// first; empty when none arrived.
    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, QueueError>>;

    /// Removes a handled message for good. Deleting a message twice, or one whose receipt
    /// expired, is not an error the caller can act on, so implementations report it only
    /// when the queue itself failed.
    fn delete<'a>(&'a self, message: &'a QueueMessage) -> BoxFuture<'a, Result<(), QueueError>>;
}
