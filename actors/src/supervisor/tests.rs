//! A panicking actor is restarted on a fresh mailbox, counted, and reached through the same
//! outbox; another actor keeps answering meanwhile; each runs on its own thread, allocating
//! for the owner of the thread that started it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::mailbox::{DeliverError, Outbox};
use crate::testing::restarts;

#[derive(Message)]
#[rtype(result = "usize")]
enum Ask {
    Count,
    Panic,
    Thread,
    /// 1 when the actor's thread allocates for [`TEST_OWNER`].
    Owner,
    /// 1 when a blocking thread of the actor's runtime allocates for [`TEST_OWNER`].
    BlockingOwner,
}

const TEST_OWNER: kerf_heap::Owner = kerf_heap::Owner::new(3);

fn is_test_owner() -> usize {
    usize::from(kerf_heap::current() == Some(TEST_OWNER))
}

struct Counter {
    depth: MailboxDepth,
    handled: Arc<AtomicUsize>,
    incarnation: usize,
}

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<Ask> for Counter {
    type Result = usize;

    fn handle(&mut self, ask: Ask, _: &mut Context<Self>) -> usize {
        self.depth.taken();
        match ask {
            Ask::Count => {
                self.handled.fetch_add(1, Ordering::SeqCst);
                self.incarnation
            }
            Ask::Panic => panic!("a bug in the handler"),
            Ask::Thread => thread_number(),
            Ask::Owner => is_test_owner(),
            Ask::BlockingOwner => {
                let (answer, answered) = std::sync::mpsc::channel();
                tokio::task::spawn_blocking(move || answer.send(is_test_owner()));
                answered.recv().unwrap_or(0)
            }
        }
    }
}

/// A number that differs between threads.
fn thread_number() -> usize {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::thread::current().id().hash(&mut hasher);
    #[allow(clippy::cast_possible_truncation, reason = "only compared")]
    let n = hasher.finish() as usize;
    n
}

fn counter(name: &'static str) -> (Outbox<Ask>, Arc<AtomicUsize>) {
    let depth = MailboxDepth::new(name, 8);
    let handled = Arc::new(AtomicUsize::new(0));
    let (mailbox, shared) = (depth.clone(), Arc::clone(&handled));
    let mut incarnation = 0;
    let actor = start(name, depth.clone(), move || {
        incarnation += 1;
        Some(Counter {
            depth: mailbox.clone(),
            handled: Arc::clone(&shared),
            incarnation,
        })
    });
    (Outbox::new(&actor, depth), handled)
}

fn in_system(test: impl std::future::Future<Output = ()>) {
    super::system(2).expect("runtime builds").block_on(test);
}

#[test]
fn a_panicking_actor_is_restarted_counted_and_the_others_keep_running() {
    in_system(async {
        crate::metrics::handle();
        let (flaky, _) = counter("supervisor-test-flaky");
        let (steady, steady_handled) = counter("supervisor-test-steady");
        assert_eq!(flaky.deliver(Ask::Count).await, Ok(1));
        let before = restarts("supervisor-test-flaky");

        let panicked = flaky.deliver(Ask::Panic).await;
        assert!(
            matches!(panicked, Err(DeliverError::Closed(_))),
            "{panicked:?}"
        );
        assert_eq!(
            steady.deliver(Ask::Count).await,
            Ok(1),
            "the other actor runs"
        );

        // The same outbox reaches the second incarnation.
        let mut answer = flaky.deliver(Ask::Count).await;
        for _ in 0..100 {
            if answer.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            answer = flaky.deliver(Ask::Count).await;
        }
        assert_eq!(answer, Ok(2), "restarted as a fresh incarnation");
        assert_eq!(restarts("supervisor-test-flaky") - before, 1);
        assert_eq!(steady_handled.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn each_actor_runs_on_its_own_thread() {
    in_system(async {
        let (a, _) = counter("supervisor-test-a");
        let (b, _) = counter("supervisor-test-b");
        let a = a.deliver(Ask::Thread).await.expect("answered");
        let b = b.deliver(Ask::Thread).await.expect("answered");
        assert_ne!(a, b);
        assert_ne!(a, thread_number());
    });
}

#[test]
fn an_actor_and_its_blocking_threads_allocate_for_the_owner_that_started_it() {
    in_system(async {
        kerf_heap::set_current(Some(TEST_OWNER));
        let (actor, _) = counter("supervisor-test-owner");
        kerf_heap::set_current(None);
        assert_eq!(actor.deliver(Ask::Owner).await, Ok(1));
        assert_eq!(actor.deliver(Ask::BlockingOwner).await, Ok(1));
        let (untagged, _) = counter("supervisor-test-no-owner");
        assert_eq!(untagged.deliver(Ask::Owner).await, Ok(0));
    });
}

/// Sets its flag when dropped: the task holding it has ended.
struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_supervised_task_is_rebuilt_after_a_panic_and_aborted_with_its_supervisor() {
    crate::metrics::handle();
    let before = restarts("supervisor-test-task");
    let built = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handle = {
        let (built, ended) = (Arc::clone(&built), Arc::clone(&ended));
        task("supervisor-test-task", move || {
            let first = built.fetch_add(1, Ordering::SeqCst) == 0;
            let guard = SetOnDrop(Arc::clone(&ended));
            async move {
                assert!(!first, "a bug in the first incarnation");
                let _guard = guard;
                std::future::pending::<()>().await;
            }
        })
    };
    let deadline = tokio::time::Instant::now() + TASK_RESTART_DELAY * 5;
    while built.load(Ordering::SeqCst) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "never rebuilt");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(restarts("supervisor-test-task"), before + 1);
    ended.store(false, Ordering::SeqCst);
    handle.abort();
    let _ = handle.await;
    for _ in 0..100 {
        if ended.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the running task outlived its aborted supervisor");
}

#[test]
fn a_panics_message_is_extracted_from_its_payload() {
    let literal: Box<dyn std::any::Any + Send> = Box::new("a literal");
    let formatted: Box<dyn std::any::Any + Send> = Box::new(format!("formatted {}", 1));
    let other: Box<dyn std::any::Any + Send> = Box::new(7_u8);
    assert_eq!(panic_message(&*literal), "a literal");
    assert_eq!(panic_message(&*formatted), "formatted 1");
    assert_eq!(panic_message(&*other), "(a panic without a message)");
}

/// A counter in a scope of its own, restarting after `backoff`.
fn scoped_counter(scope: &Supervision, name: &'static str) -> (Outbox<Ask>, Arc<AtomicUsize>) {
    scope.sync_scope(|| counter(name))
}

#[test]
fn an_armed_fault_panics_the_next_messages_then_the_actor_answers_again() {
    in_system(async {
        crate::metrics::handle();
        let scope = Supervision::with_backoff(Duration::from_millis(5));
        // A mailbox named as a fault actor is hooked; the fault is armed in this scope only.
        let (batcher, handled) = scoped_counter(&scope, "batcher");
        let before = restarts("batcher");
        scope.faults().arm("batcher", 2).expect("a known actor");
        assert!(scope.faults().arm("no-such-actor", 1).is_err());
        // A send that lands in a dying mailbox is refused too; neither is lost silently.
        let mut answer = batcher.deliver(Ask::Count).await;
        for _ in 0..10 {
            if answer.is_ok() {
                break;
            }
            assert!(matches!(answer, Err(DeliverError::Closed(_))), "{answer:?}");
            answer = batcher.deliver(Ask::Count).await;
        }
        assert_eq!(answer, Ok(3), "answered by the third incarnation");
        assert_eq!(restarts("batcher") - before, 2);
        assert_eq!(handled.load(Ordering::SeqCst), 1);
        assert_eq!(scope.faults().remaining("batcher"), 0);
        assert!(scope.exhausted().borrow().is_none(), "within the budget");
    });
}

#[test]
fn past_the_restart_budget_the_scope_is_exhausted_and_the_actor_still_restarts() {
    in_system(async {
        crate::metrics::handle();
        let scope = Supervision::with_backoff(Duration::from_millis(1));
        let (flaky, _) = scoped_counter(&scope, "supervisor-test-budget");
        let before = restarts("supervisor-test-budget");
        while restarts("supervisor-test-budget") - before <= RESTART_BUDGET as u64 {
            assert!(
                scope.exhausted().borrow().is_none(),
                "exhausted within the budget"
            );
            let panicked = flaky.deliver(Ask::Panic).await;
            assert!(matches!(panicked, Err(DeliverError::Closed(_))));
            // The restart is counted once the supervisor has seen the panic.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let exhausted = scope.exhausted().borrow().clone().expect("exhausted");
        assert_eq!(exhausted.actor, "supervisor-test-budget");
        assert_eq!(exhausted.restarts, RESTART_BUDGET + 1);
        // Another scope (another replica in `kerf simulate`) is unaffected.
        assert!(Supervision::new().exhausted().borrow().is_none());
        let mut answer = flaky.deliver(Ask::Count).await;
        for _ in 0..10 {
            if answer.is_ok() {
                break;
            }
            answer = flaky.deliver(Ask::Count).await;
        }
        assert_eq!(
            answer,
            Ok(RESTART_BUDGET + 2),
            "still restarted, after a longer backoff"
        );
    });
}

#[tokio::test]
async fn a_reported_one_shot_panic_is_counted_without_rebuilding() {
    crate::metrics::handle();
    let scope = Supervision::with_backoff(Duration::from_millis(1));
    let local = tokio::task::LocalSet::new();
    let before = restarts("supervisor-test-one-shot");
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    local
        .run_until(scope.scope(async move {
            spawn_local_reported("supervisor-test-one-shot", async move {
                counted.fetch_add(1, Ordering::SeqCst);
                panic!("a bug in a detached task");
            });
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
        }))
        .await;
    assert_eq!(ran.load(Ordering::SeqCst), 1, "run once, not rebuilt");
    assert_eq!(restarts("supervisor-test-one-shot") - before, 1);
}

#[tokio::test]
async fn a_panicking_blocking_task_is_reported_with_its_message() {
    let scope = Supervision::with_backoff(Duration::from_millis(1));
    let described = scope
        .scope(async {
            let error = tokio::task::spawn_blocking(|| -> u32 { panic!("a bug in a pass") })
                .await
                .expect_err("the blocking task panicked");
            report_join_error("supervisor-test-blocking", error)
        })
        .await;
    assert_eq!(described, "panicked: a bug in a pass");
    assert_eq!(scope.recent_restarts("supervisor-test-blocking"), 1);
}

#[test]
fn an_actor_whose_factory_panics_is_built_again_and_answers() {
    in_system(async {
        let scope = Supervision::with_backoff(Duration::from_millis(1));
        let name = "supervisor-test-actor-factory";
        let depth = MailboxDepth::new(name, 8);
        let handled = Arc::new(AtomicUsize::new(0));
        let (mailbox, shared) = (depth.clone(), Arc::clone(&handled));
        let mut calls = 0;
        let actor = scope.sync_scope(|| {
            start(name, depth.clone(), move || {
                calls += 1;
                assert!(calls > 1, "a bug in the factory");
                Some(Counter {
                    depth: mailbox.clone(),
                    handled: Arc::clone(&shared),
                    incarnation: calls,
                })
            })
        });
        let outbox = Outbox::new(&actor, depth);
        assert_eq!(
            outbox.deliver(Ask::Count).await,
            Ok(2),
            "waited in the mailbox for the second build"
        );
        assert_eq!(scope.recent_restarts(name), 1);
    });
}

#[tokio::test]
async fn a_loop_whose_factory_panics_is_built_again() {
    let scope = Supervision::with_backoff(Duration::from_millis(1));
    let name = "supervisor-test-loop-factory";
    let (ran, mut running) = tokio::sync::watch::channel(false);
    let mut calls = 0;
    let handle = scope.sync_scope(|| {
        task(name, move || {
            calls += 1;
            assert!(calls > 1, "a bug in the factory");
            let ran = ran.clone();
            async move {
                ran.send_replace(true);
                std::future::pending::<()>().await;
            }
        })
    });
    tokio::time::timeout(Duration::from_secs(5), running.wait_for(|r| *r))
        .await
        .expect("built again after the factory's panic")
        .expect("the loop holds the sender");
    assert_eq!(scope.recent_restarts(name), 1);
    assert_eq!(
        scope.loops().get(name),
        Some(&1),
        "built once, after the panic"
    );
    handle.abort();
}
