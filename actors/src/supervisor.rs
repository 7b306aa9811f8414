//! Supervision: every actor runs on its own actix `Arbiter` (an OS thread with its own event
//! loop) and every long-running loop in a tokio task, each under a supervisor that awaits
//! it. A panic ends that actor or loop only: the supervisor logs it with the panic's message,
//! counts it in `kerf_actor_restarts_total{actor}`, waits a backoff and builds it again from
//! its factory, which rebuilds the state from the stores (and from what the daemon shares
//! across incarnations, e.g. the NodeClaimCreator's `CreatedClaims`).
//!
//! Senders reach an actor through [`Supervised`], whose address is swapped on a restart under
//! a write lock while every push holds the read lock ([`crate::mailbox`]): a message reaches
//! the running incarnation, waits in the next one's mailbox during the backoff, or is refused
//! at once with its permit returned; what the dead incarnation had queued is counted dropped.
//!
//! Each controller replica has a [`Supervision`] (its restart log, restart budget and fault
//! hooks), taken from the task-local scope the daemon starts in. An actor restarted more than
//! [`RESTART_BUDGET`] times within [`RESTART_WINDOW`] marks it exhausted: `/healthz` fails.

pub(crate) mod faults;
pub(crate) mod supervision;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use actix::dev::channel::{self, AddressSender};
use actix::prelude::*;
use tokio::sync::watch;

use crate::mailbox::depth::MailboxDepth;

pub use faults::{FAULT_ACTORS, FaultPoint, Faults, LOOP_FAULTS, UnknownActor};
use supervision::SCOPE;
pub use supervision::{
    Exhausted, MAX_RESTART_BACKOFF, RESTART_BUDGET, RESTART_WINDOW, Supervision,
    TASK_RESTART_DELAY, fault_point, panic_message,
};

/// A supervised actor's current mailbox, shared by its senders.
pub struct Supervised<A: Actor> {
    slot: Arc<Slot<A>>,
}

/// The running incarnation's sender, and which incarnation it is.
struct Slot<A: Actor> {
    sender: RwLock<AddressSender<A>>,
    /// Counts incarnations; `None` once the actor stopped for good.
    incarnation: watch::Sender<Option<u64>>,
}

impl<A: Actor> Slot<A> {
    /// Swaps in `next` (or marks the actor stopped) while no push is in progress: what the
    /// ended incarnation's mailbox held is all that is counted lost.
    fn replace(&self, next: Option<AddressSender<A>>, depth: &MailboxDepth) {
        let mut current = self.sender.write().unwrap_or_else(PoisonError::into_inner);
        depth.reset();
        let incarnation = match next {
            Some(sender) => {
                *current = sender;
                self.incarnation.borrow().map(|n| n + 1)
            }
            None => None,
        };
        self.incarnation.send_replace(incarnation);
    }
}

impl<A: Actor> Clone for Supervised<A> {
    fn clone(&self) -> Self {
        Self {
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<A: Actor<Context = Context<A>>> Supervised<A> {
    /// The address of the actor's current incarnation (sends through it bypass the permit).
    pub fn addr(&self) -> Addr<A> {
        Addr::new(self.with_sender(AddressSender::clone))
    }

    /// Runs `push` with the current incarnation's sender, holding off a restart meanwhile:
    /// what `push` enqueues is either taken by this incarnation or counted lost by the
    /// restart, never both ([`crate::mailbox`]).
    pub(crate) fn with_sender<R>(&self, push: impl FnOnce(&AddressSender<A>) -> R) -> R {
        // The lock only guards a swap of the sender; a poisoned one still holds one.
        push(
            &self
                .slot
                .sender
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The running incarnation (`None` once stopped for good).
    pub(crate) fn incarnation(&self) -> Option<u64> {
        *self.slot.incarnation.borrow()
    }

    /// Waits until the incarnation is no longer `seen`: the one that refused a push has
    /// been replaced (or the actor stopped for good). The wait spans only the moment between
    /// an incarnation's end and its supervisor noticing it.
    pub(crate) async fn replaced(&self, seen: Option<u64>) {
        let mut incarnation = self.slot.incarnation.subscribe();
        let _ = incarnation
            .wait_for(|now| *now != seen || now.is_none())
            .await;
    }
}

/// Starts the actor `make()` builds on its own arbiter as actor `name`, and after a panic
/// (and a backoff, messages waiting meanwhile in the next incarnation's mailbox) the one it
/// builds next; a factory that answers `None` leaves the actor stopped (sends are then
/// refused at once), and one that panics is a panic of the actor. `depth` is the actor's
/// mailbox.
pub fn start<A, F>(name: &'static str, depth: MailboxDepth, make: F) -> Supervised<A>
where
    A: Actor<Context = Context<A>>,
    F: FnMut() -> Option<A> + Send + 'static,
{
    let (slot, supervise) = supervised(name, depth, make);
    let arbiter = arbiter();
    let spawned = arbiter.spawn_fn(move || {
        actix::spawn(async move {
            supervise().await;
            Arbiter::current().stop();
        });
    });
    if !spawned {
        tracing::error!(
            actor = name,
            "actor arbiter stopped before the actor started"
        );
    }
    slot
}

/// [`start`] on the calling arbiter's thread instead of a thread of its own, for an actor
/// whose handlers only record (the OfferingCache): supervised alike, and on the caller's
/// clock (tests on paused time).
pub fn start_here<A, F>(name: &'static str, depth: MailboxDepth, make: F) -> Supervised<A>
where
    A: Actor<Context = Context<A>>,
    F: FnMut() -> Option<A> + Send + 'static,
{
    let (slot, supervise) = supervised(name, depth, make);
    actix::spawn(supervise());
    slot
}

/// The actor's shared address, and what makes the future that runs and restarts it (on the
/// thread that will run it: an actor need not be `Send`).
fn supervised<A, F>(
    name: &'static str,
    depth: MailboxDepth,
    mut make: F,
) -> (
    Supervised<A>,
    impl FnOnce() -> Box<dyn Future<Output = ()> + Unpin> + Send + 'static,
)
where
    A: Actor<Context = Context<A>>,
    F: FnMut() -> Option<A> + Send + 'static,
{
    let supervision = Supervision::current();
    let (sender, receiver) = channel::channel(0);
    let slot = Arc::new(Slot {
        sender: RwLock::new(sender),
        incarnation: watch::channel(Some(0)).0,
    });
    let weak = Arc::downgrade(&slot);
    let scope = supervision.clone();
    let supervise = move || -> Box<dyn Future<Output = ()> + Unpin> {
        Box::new(Box::pin(SCOPE.scope(scope, async move {
            // However the supervision ends (even with its arbiter), senders stop waiting.
            let _stopped = StopOnDrop(weak.clone(), depth.clone());
            let mut receiver = receiver;
            loop {
                // A factory that panics is a panic of its actor: reported, and tried again
                // after the backoff while messages wait in the mailbox.
                let actor = match std::panic::catch_unwind(AssertUnwindSafe(&mut make)) {
                    Ok(Some(actor)) => actor,
                    Ok(None) => break,
                    Err(panic) => {
                        factory_panicked(&supervision, name, panic).await;
                        continue;
                    }
                };
                match run(name, actor, receiver, &weak, &depth, &supervision).await {
                    Some((next, delay)) => {
                        receiver = next;
                        tokio::time::sleep(delay).await;
                    }
                    None => break,
                }
            }
        })))
    };
    (Supervised { slot }, supervise)
}

/// Marks the actor stopped for good when its supervision ends.
struct StopOnDrop<A: Actor>(Weak<Slot<A>>, MailboxDepth);

impl<A: Actor> Drop for StopOnDrop<A> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.upgrade() {
            slot.replace(None, &self.1);
        } else {
            self.1.reset();
        }
    }
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

/// Runs one incarnation; after a panic, the next one's receiver (already installed, so
/// messages wait in it) and the backoff to wait; `None` when the actor stopped or nobody can
/// send to it any more.
async fn run<A>(
    name: &'static str,
    actor: A,
    receiver: channel::AddressReceiver<A>,
    slot: &Weak<Slot<A>>,
    depth: &MailboxDepth,
    supervision: &Supervision,
) -> Option<(channel::AddressReceiver<A>, Duration)>
where
    A: Actor<Context = Context<A>>,
{
    let context = Context::with_receiver(receiver);
    // The context's task drops its receiver when it ends, panicking or not: from then on a
    // push to this incarnation is refused, and waits for the next one ([`Supervised::replaced`]).
    let ended = actix::spawn(SCOPE.scope(supervision.clone(), context.into_future(actor))).await;
    let panic = match ended {
        Err(error) if error.is_panic() => error.into_panic(),
        // Stopped: `StopOnDrop` refuses what comes next.
        _ => return None,
    };
    let delay = supervision.panicked(name, "actor", &panic_message(&*panic));
    let slot = slot.upgrade()?;
    let (sender, receiver) = channel::channel(0);
    slot.replace(Some(sender), depth);
    Some((receiver, delay))
}

/// Runs the tokio task `make()` builds as `name` (for loops that are not actors: pollers,
/// watches, reconcile loops). After a panic it is logged with its message, counted in
/// `kerf_actor_restarts_total{actor}`, and the task `make()` builds next runs after the
/// backoff (a panic of `make` itself alike); a task that returns ends the supervision.
/// Aborting the returned handle aborts the running task. A fault armed for `name`
/// ([`LOOP_FAULTS`]) panics it where it waits.
pub fn task<F, Fut>(name: &'static str, mut make: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let supervision = Supervision::current();
    tokio::spawn(async move {
        loop {
            // A factory that panics is a panic of its loop: reported, and tried again after
            // the backoff.
            let made =
                std::panic::catch_unwind(AssertUnwindSafe(|| supervision.sync_scope(&mut make)));
            let next = match made {
                Ok(next) => next,
                Err(panic) => {
                    factory_panicked(&supervision, name, panic).await;
                    continue;
                }
            };
            supervision.built(name);
            let scope = supervision.clone();
            let guarded = async move {
                tokio::select! {
                    () = next => {}
                    () = scope.faults().interrupted(name) => {
                        panic!("injected fault: {name} panics where it waits")
                    }
                }
            };
            let running = tokio::spawn(SCOPE.scope(supervision.clone(), guarded));
            let _abort = AbortOnDrop(running.abort_handle());
            match running.await {
                Err(error) if error.is_panic() => {
                    let panic = error.into_panic();
                    let delay = supervision.panicked(name, "task", &panic_message(&*panic));
                    tokio::time::sleep(delay).await;
                }
                _ => return,
            }
        }
    })
}

/// Spawns a one-shot task on the current actor's thread (its `LocalSet`) whose panic is
/// logged and counted as `name`'s instead of lost with a detached handle. It is not rebuilt:
/// use it for work a reconcile redoes.
pub fn spawn_local_reported<F>(name: &'static str, future: F)
where
    F: Future<Output = ()> + 'static,
{
    let supervision = Supervision::current();
    let running = actix::spawn(SCOPE.scope(supervision.clone(), future));
    actix::spawn(async move {
        if let Err(error) = running.await
            && error.is_panic()
        {
            supervision.report_panic(name, &*error.into_panic());
        }
    });
}

/// Reports a panic of `name`'s factory as a panic of `name` (logged with its message,
/// counted, held against the restart budget) and waits the backoff before the next build.
async fn factory_panicked(
    supervision: &Supervision,
    name: &'static str,
    panic: Box<dyn std::any::Any + Send>,
) {
    let delay = supervision.panicked(name, "factory", &panic_message(&*panic));
    tokio::time::sleep(delay).await;
}

/// Describes why a task (a `spawn_blocking` computation, say) ended without its answer,
/// for its caller's log or error. A panic is first reported as `name`'s in the current
/// scope: logged with its message, counted, and held against the restart budget.
pub fn report_join_error(name: &'static str, error: tokio::task::JoinError) -> String {
    if error.is_panic() {
        let panic = error.into_panic();
        Supervision::current().report_panic(name, &*panic);
        format!("panicked: {}", panic_message(&*panic))
    } else {
        error.to_string()
    }
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

/// A factory for an actor that is built once and not restarted after a panic (test doubles).
pub fn once<A>(actor: A) -> impl FnMut() -> Option<A> + Send + 'static
where
    A: Send + 'static,
{
    let mut actor = Some(actor);
    move || actor.take()
}

/// A factory that starts `first`, then after each panic an actor `rebuild` makes from it
/// (`rebuild` keeps what must survive a restart and rebuilds the rest from the stores).
pub fn rebuilding<A>(first: A, rebuild: fn(&A) -> A) -> impl FnMut() -> Option<A> + Send + 'static
where
    A: Send + 'static,
{
    let template = rebuild(&first);
    let mut first = Some(first);
    move || Some(first.take().unwrap_or_else(|| rebuild(&template)))
}
