//! An in-memory interruption queue with SQS's semantics where the controller depends on
//! them: a receive returns up to ten visible messages, waiting up to twenty seconds for the
//! first; a received message is invisible for a visibility timeout and is delivered again
//! if it was not deleted by then; deleting needs the receipt of the latest delivery. It
//! implements kerf's [`InterruptionQueue`], so the simulated cluster's interruptions go
//! through the same parser and handler as SQS messages do.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kerf::cloudprovider::BoxFuture;
use kerf::interruption::{
    InterruptionQueue, MAX_MESSAGES_PER_RECEIVE, QueueError, QueueMessage, RECEIVE_WAIT,
};
use tokio::sync::Notify;
use tokio::time::Instant;

/// SQS's default visibility timeout.
pub const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);

/// The queue.
pub struct MemoryQueue {
    name: String,
    visibility: Duration,
    wait: Duration,
    state: Mutex<State>,
    arrived: Notify,
}

#[derive(Default)]
struct State {
    next_id: u64,
    messages: BTreeMap<u64, Stored>,
    sent: u64,
    deleted: u64,
}

struct Stored {
    body: String,
    visible_at: Instant,
    deliveries: u32,
}

impl MemoryQueue {
    /// A queue named `name` with SQS's default visibility timeout and long poll.
    pub fn new(name: &str) -> Self {
        Self::with_timing(name, DEFAULT_VISIBILITY_TIMEOUT, RECEIVE_WAIT)
    }

    /// A queue redelivering after `visibility` and long-polling for `wait`.
    pub fn with_timing(name: &str, visibility: Duration, wait: Duration) -> Self {
        Self {
            name: name.to_owned(),
            visibility,
            wait,
            state: Mutex::default(),
            arrived: Notify::new(),
        }
    }

    /// Sends one message body.
    pub fn send(&self, body: String) {
        {
            let mut state = self.lock();
            let id = state.next_id;
            state.next_id += 1;
            state.sent += 1;
            state.messages.insert(
                id,
                Stored {
                    body,
                    visible_at: Instant::now(),
                    deliveries: 0,
                },
            );
        }
        self.arrived.notify_waiters();
    }

    /// Messages sent and not deleted (visible or in flight).
    pub fn len(&self) -> usize {
        self.lock().messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages sent so far.
    pub fn sent(&self) -> u64 {
        self.lock().sent
    }

    /// Messages deleted so far.
    pub fn deleted(&self) -> u64 {
        self.lock().deleted
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the visible messages (up to the batch size), or says when the next becomes
    /// visible.
    fn take(&self) -> Result<Vec<QueueMessage>, Option<Instant>> {
        let now = Instant::now();
        let mut state = self.lock();
        let mut taken = Vec::new();
        let mut next = None::<Instant>;
        for (id, stored) in &mut state.messages {
            if taken.len() == MAX_MESSAGES_PER_RECEIVE {
                break;
            }
            if stored.visible_at > now {
                next = Some(next.map_or(stored.visible_at, |n| n.min(stored.visible_at)));
                continue;
            }
            stored.visible_at = now + self.visibility;
            stored.deliveries += 1;
            taken.push(QueueMessage {
                id: id.to_string(),
                receipt: format!("{id}/{}", stored.deliveries),
                body: stored.body.clone(),
            });
        }
        if taken.is_empty() {
            Err(next)
        } else {
            Ok(taken)
        }
    }

    async fn receive_within(&self) -> Vec<QueueMessage> {
        let deadline = Instant::now() + self.wait;
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let until = match self.take() {
                Ok(messages) => return messages,
                Err(next) => next.map_or(deadline, |n| n.min(deadline)),
            };
            if Instant::now() >= deadline {
                return Vec::new();
            }
            tokio::select! {
                () = &mut arrived => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

impl InterruptionQueue for MemoryQueue {
    fn name(&self) -> &str {
        &self.name
    }

    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, QueueError>> {
        Box::pin(async move { Ok(self.receive_within().await) })
    }

    fn delete<'a>(&'a self, message: &'a QueueMessage) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(async move {
            let mut state = self.lock();
            let current = message.id.parse::<u64>().ok().filter(|id| {
                state
                    .messages
                    .get(id)
                    .is_some_and(|s| format!("{id}/{}", s.deliveries) == message.receipt)
            });
            // A stale receipt (the message was delivered again since) deletes nothing, as
            // SQS ignores it; the newer delivery will be handled and deleted.
            if let Some(id) = current {
                state.messages.remove(&id);
                state.deleted += 1;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VISIBILITY: Duration = Duration::from_millis(400);
    const WAIT: Duration = Duration::from_millis(150);

    #[tokio::test]
    async fn a_message_not_deleted_is_delivered_again_after_the_visibility_timeout() {
        let queue = MemoryQueue::with_timing("q", VISIBILITY, WAIT);
        queue.send("a".to_owned());
        let started = Instant::now();
        let first = queue.receive().await.expect("receives");
        assert_eq!(first.len(), 1);
        assert!(
            queue.receive().await.expect("receives").is_empty(),
            "in flight"
        );
        assert!(started.elapsed() >= WAIT, "the empty receive long-polled");
        let mut again = Vec::new();
        while again.is_empty() {
            again = queue.receive().await.expect("receives");
        }
        assert_eq!(again[0].id, first[0].id);
        assert!(
            started.elapsed() >= VISIBILITY,
            "invisible until the timeout"
        );
        queue
            .delete(&first[0])
            .await
            .expect("stale receipt is not an error");
        assert_eq!(queue.len(), 1, "a stale receipt deletes nothing");
        queue.delete(&again[0]).await.expect("deletes");
        assert!(queue.is_empty());
        assert_eq!((queue.sent(), queue.deleted()), (1, 1));
    }

    #[tokio::test]
    async fn a_waiting_receive_returns_when_a_message_arrives_and_batches_at_most_ten() {
        let queue = std::sync::Arc::new(MemoryQueue::with_timing(
            "q",
            VISIBILITY,
            Duration::from_secs(20),
        ));
        let sender = std::sync::Arc::clone(&queue);
        let started = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            for i in 0..12 {
                sender.send(i.to_string());
            }
        });
        let batch = queue.receive().await.expect("receives");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "woke on arrival"
        );
        assert!(!batch.is_empty() && batch.len() <= MAX_MESSAGES_PER_RECEIVE);
        let mut total = batch.len();
        while total < 12 {
            let next = queue.receive().await.expect("receives");
            assert!(next.len() <= MAX_MESSAGES_PER_RECEIVE);
            total += next.len();
        }
        assert_eq!(total, 12);
    }
}
