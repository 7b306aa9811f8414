//! Supervision: every actor runs on its own actix `Arbiter` (an OS thread with its own
//! event loop), so a handler that computes for a while, or blocks, holds up only its own
//! actor — never the watch streams, the lifecycle or the other actors. The arbiter runs the
//! actor's context as a task and awaits it: a panic in a handler (or in a future the actor
//! spawned) ends that task only, and the supervisor builds the actor again from its factory
//! on a fresh mailbox, counts the restart in `kerf_actor_restarts_total{actor}` and logs the
//! panic. Messages queued at the panic are lost with the old mailbox: they are counted as
//! dropped and their room is given back ([`MailboxDepth::reset`]); a sender waiting for an
//! answer gets [`DeliverError::Closed`](crate::mailbox::DeliverError::Closed).
//!
//! Senders reach the actor through [`Supervised`], whose address the supervisor swaps on a
//! restart, so an [`Outbox`](crate::mailbox::Outbox) made before a panic delivers to the
//! restarted actor. The supervisor holds that address only weakly: when every sender is
//! gone the actor stops as any actix actor does, and its arbiter thread ends with it.

use std::sync::{Arc, RwLock, Weak};

use actix::dev::channel;
use actix::prelude::*;

use crate::mailbox::MailboxDepth;
use crate::metrics::ACTOR_RESTARTS;

/// A supervised actor's current address, shared by its senders.
pub struct Supervised<A: Actor> {
    slot: Arc<RwLock<Addr<A>>>,
}

impl<A: Actor> Clone for Supervised<A> {
    fn clone(&self) -> Self {
        Self {
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<A: Actor<Context = Context<A>>> Supervised<A> {
    /// The address of the actor's current incarnation.
    pub fn addr(&self) -> Addr<A> {
        match self.slot.read() {
            Ok(addr) => addr.clone(),
            // The lock only guards a swap of the address; a poisoned one still holds one.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Starts the actor `make()` builds on its own arbiter as actor `name`, and after a panic
/// the one it builds next; a factory that answers `None` leaves a panicked actor stopped
/// (still counted). `depth` is the actor's mailbox (reset on a restart).
pub fn start<A, F>(name: &'static str, depth: MailboxDepth, mut make: F) -> Supervised<A>
where
    A: Actor<Context = Context<A>>,
    F: FnMut() -> Option<A> + Send + 'static,
{
    let (sender, receiver) = channel::channel(0);
    let slot = Arc::new(RwLock::new(Addr::new(sender)));
    let weak = Arc::downgrade(&slot);
    let arbiter = arbiter();
    let spawned = arbiter.spawn_fn(move || {
        actix::spawn(async move {
            let mut receiver = receiver;
            while let Some(actor) = make() {
                match run(name, actor, receiver, &weak, &depth).await {
                    Some(next) => receiver = next,
                    None => break,
                }
            }
            Arbiter::current().stop();
        });
    });
    if !spawned {
        tracing::error!(
            actor = name,
            "actor arbiter stopped before the actor started"
        );
    }
    Supervised { slot }
}

/// A new arbiter whose thread, and its runtime's blocking threads, allocate for the owner the
/// calling thread allocates for (`kerf_heap`): a controller's actors count as the controller's
/// heap in `kerf simulate`, where other threads of the process stand for the cluster. Panics as
/// `Arbiter::new` does when the thread or its runtime cannot start.
fn arbiter() -> Arbiter {
    let owner = kerf_heap::current();
    Arbiter::try_with_tokio_rt(move || {
        kerf_heap::set_current(owner);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_start(move || kerf_heap::set_current(owner))
            .build()
    })
    .expect("an actor's arbiter thread and its runtime start")
}

/// Runs one incarnation; `Some(receiver)` of the next one after a panic, `None` when the
/// actor stopped or nobody can send to it any more.
async fn run<A>(
    name: &'static str,
    actor: A,
    receiver: channel::AddressReceiver<A>,
    slot: &Weak<RwLock<Addr<A>>>,
    depth: &MailboxDepth,
) -> Option<channel::AddressReceiver<A>>
where
    A: Actor<Context = Context<A>>,
{
    let context = Context::with_receiver(receiver);
    let ended = actix::spawn(context.into_future(actor)).await;
    let Err(error) = ended else { return None };
    if !error.is_panic() {
        return None;
    }
    metrics::counter!(ACTOR_RESTARTS, "actor" => name).increment(1);
    tracing::error!(
        actor = name,
        "actor panicked; restarting it on a fresh mailbox"
    );
    let slot = slot.upgrade()?;
    let (sender, receiver) = channel::channel(0);
    match slot.write() {
        Ok(mut addr) => *addr = Addr::new(sender),
        Err(poisoned) => *poisoned.into_inner() = Addr::new(sender),
    }
    depth.reset();
    Some(receiver)
}

/// How long a supervised task waits before it is built again after a panic, so a task that
/// panics at once logs once a second instead of spinning a core.
pub const TASK_RESTART_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs the tokio task `make()` builds as `name` (for tasks that are not actors: pollers
/// and loops). After a panic the restart is counted in `kerf_actor_restarts_total{actor}`
/// and logged, and the task `make()` builds next runs after [`TASK_RESTART_DELAY`]; a task
/// that returns ends the supervision. Aborting the returned handle aborts the running task.
pub fn task<F, Fut>(name: &'static str, mut make: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let running = tokio::spawn(make());
            let _abort = AbortOnDrop(running.abort_handle());
            match running.await {
                Err(error) if error.is_panic() => {
                    metrics::counter!(ACTOR_RESTARTS, "actor" => name).increment(1);
                    tracing::error!(task = name, "task panicked; restarting it");
                    tokio::time::sleep(TASK_RESTART_DELAY).await;
                }
                _ => return,
            }
        }
    })
}

/// Aborts the supervised task when its supervisor is aborted.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;

/// An actix `System` on a multi-threaded tokio runtime with `workers` worker threads: what
/// the daemon and its actors expect (actors on their own arbiters, watch streams and HTTP on
/// the workers).
pub fn system(workers: usize) -> std::io::Result<actix::SystemRunner> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    Ok(actix::System::with_tokio_rt(move || runtime))
}

/// A factory for an actor that is built once and not restarted after a panic.
pub fn once<A>(actor: A) -> impl FnMut() -> Option<A> + Send + 'static
where
    A: Send + 'static,
{
    let mut actor = Some(actor);
    move || actor.take()
}
