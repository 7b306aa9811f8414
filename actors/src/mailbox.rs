//! Bounded delivery between actors. Every mailbox has a fixed capacity (a named constant
//! beside its actor) enforced by a permit ([`MailboxDepth`]): a sender takes one of
//! `capacity` permits before it enqueues and the actor gives it back when it takes the
//! message, so the transport behind it never holds more than `capacity` messages whichever
//! sender, and however many clones of it, send. actix's own channel is not a bound (each
//! clone gets a slot past capacity, and a parked `Recipient::send` retries through a fresh
//! clone never refused, actix#329), so actix queues are left unbounded and the permit is
//! the only bound.
//!
//! A push holds the read side of a supervised actor's address ([`Supervised`]) and a
//! restart swaps it under the write side: a message lands in the running incarnation or is
//! refused at once with its permit returned, so no permit leaks across a restart. Every
//! sender states its behaviour at capacity: [`Outbox::deliver`] waits (nothing is lost),
//! [`Outbox::try_deliver`] drops and counts (`kerf_mailbox_dropped_total`), used only where
//! a later message or a periodic reconcile repairs the drop.

use std::sync::Arc;

use crate::supervisor::Supervised;
use actix::dev::ToEnvelope;
use actix::prelude::*;

pub(crate) mod depth;

pub use depth::{DeliverError, MailboxDepth};

/// The handler's answer to come; `Err` when it never comes (the actor stopped first).
type Answer<R> = futures::future::BoxFuture<'static, Result<R, ()>>;

/// How an outbox reaches its actor.
trait Route<M: Message + Send>: Send + Sync
where
    M::Result: Send,
{
    /// Pushes `message` into the running incarnation's mailbox (counting it in on `depth`),
    /// asking for an answer or not; the message back when that mailbox is closed.
    fn push(
        &self,
        message: M,
        answer: bool,
        depth: &MailboxDepth,
    ) -> Result<Option<Answer<M::Result>>, M>;

    /// The incarnation a push goes to now (`None`: stopped for good, or not supervised).
    fn incarnation(&self) -> Option<u64>;

    /// Waits until the incarnation is no longer `seen`.
    fn replaced(&self, seen: Option<u64>) -> futures::future::BoxFuture<'_, ()>;
}

impl<A, M> Route<M> for Supervised<A>
where
    A: Actor<Context = Context<A>> + Handler<M>,
    M: Message + Send + 'static,
    M::Result: Send,
{
    fn push(
        &self,
        message: M,
        answer: bool,
        depth: &MailboxDepth,
    ) -> Result<Option<Answer<M::Result>>, M> {
        // Counted in while the restart that would count it lost is held off.
        self.with_sender(|sender| {
            // A fresh clone is never parked (the queue behind the permit is unbounded).
            let sender = sender.clone();
            let pushed = if answer {
                sender.send(message).map(|rx| {
                    let answer: Answer<M::Result> =
                        Box::pin(async move { rx.await.map_err(|_| ()) });
                    Some(answer)
                })
            } else {
                sender.try_send(message, false).map(|()| None)
            };
            if pushed.is_ok() {
                depth.queued();
            }
            pushed.map_err(SendError::into_inner)
        })
    }

    fn incarnation(&self) -> Option<u64> {
        Supervised::incarnation(self)
    }

    fn replaced(&self, seen: Option<u64>) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(Supervised::replaced(self, seen))
    }
}

/// A plain actix address (test doubles).
struct Plain<A: Actor>(Addr<A>);

impl<A, M> Route<M> for Plain<A>
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message + Send + 'static,
    M::Result: Send,
{
    fn push(
        &self,
        message: M,
        answer: bool,
        depth: &MailboxDepth,
    ) -> Result<Option<Answer<M::Result>>, M> {
        if !self.0.connected() {
            return Err(message);
        }
        depth.queued();
        let recipient = self.0.clone().recipient();
        if answer {
            let request = recipient.send(message);
            let answer: Answer<M::Result> = Box::pin(async move { request.await.map_err(|_| ()) });
            Ok(Some(answer))
        } else {
            recipient.do_send(message);
            Ok(None)
        }
    }

    fn incarnation(&self) -> Option<u64> {
        None
    }

    fn replaced(&self, _: Option<u64>) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// A sender's handle on one actor's mailbox for one message type.
pub struct Outbox<M>
where
    M: Message + Send,
    M::Result: Send,
{
    route: Arc<dyn Route<M>>,
    depth: MailboxDepth,
}

impl<M> Clone for Outbox<M>
where
    M: Message + Send,
    M::Result: Send,
{
    fn clone(&self) -> Self {
        Self {
            route: Arc::clone(&self.route),
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
        Self {
            route: Arc::new(actor.clone()),
            depth,
        }
    }

    /// An outbox onto a plain actix address, for actors started without supervision (test
    /// doubles). The actor's actix capacity does not matter: every send goes through a fresh
    /// clone of the address, which actix never parks, so the permits stay the only bound. A
    /// closed actor refuses at once; messages it held when it stopped keep their permits
    /// (nothing restarts it to count them lost): supervise real actors.
    pub fn to_addr<A>(addr: &Addr<A>, depth: MailboxDepth) -> Self
    where
        A: Actor + Handler<M>,
        A::Context: ToEnvelope<A, M>,
    {
        Self {
            route: Arc::new(Plain(addr.clone())),
            depth,
        }
    }

    /// How many messages the mailbox holds at most.
    pub fn capacity(&self) -> usize {
        self.depth.capacity()
    }

    /// The mailbox's depth and room.
    pub fn depth(&self) -> &MailboxDepth {
        &self.depth
    }

    fn closed(&self) -> DeliverError {
        DeliverError::Closed(self.depth.name().to_string())
    }

    /// Enqueues without waiting; a full mailbox drops the message (counted), a closed or
    /// restarting one refuses it.
    pub fn try_deliver(&self, message: M) -> Result<(), DeliverError> {
        self.depth.try_reserve()?;
        match self.route.push(message, false, &self.depth) {
            Ok(_) => Ok(()),
            Err(_) => {
                self.depth.refund();
                Err(self.closed())
            }
        }
    }

    /// Waits for room and enqueues into the incarnation running then, without waiting for
    /// the handler's answer; a closed mailbox refuses at once.
    pub async fn enqueue(&self, message: M) -> Result<(), DeliverError> {
        self.depth.reserve().await;
        self.push(message, false).await.map(|_| ())
    }

    /// Waits for room, enqueues, and waits for the handler's answer. `Closed` when the
    /// actor stopped for good, or ended (panicked) before answering.
    pub async fn deliver(&self, message: M) -> Result<M::Result, DeliverError> {
        self.depth.reserve().await;
        let Some(answer) = self.push(message, true).await? else {
            return Err(self.closed());
        };
        answer.await.map_err(|()| self.closed())
    }

    /// Pushes a reserved message into the running incarnation; one that refuses it (it just
    /// ended) is followed to the next, and a stopped actor gives the permit back at once.
    async fn push(
        &self,
        mut message: M,
        answer: bool,
    ) -> Result<Option<Answer<M::Result>>, DeliverError> {
        loop {
            let seen = self.route.incarnation();
            match self.route.push(message, answer, &self.depth) {
                Ok(answer) => return Ok(answer),
                Err(refused) if seen.is_some() => {
                    message = refused;
                    self.route.replaced(seen).await;
                }
                Err(_) => {
                    self.depth.refund();
                    return Err(self.closed());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
