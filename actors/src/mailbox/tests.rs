//! The bound holds for every sender: many concurrent senders, each on its own clone,
//! flood a mailbox whose actor is held busy. What the actor finds queued is measured on the
//! actor's side (a marker pushed past the permits lands behind everything queued), so the
//! test does not trust the permit count it checks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use super::*;
use crate::metrics::MAILBOX_DROPPED;
use crate::supervisor;

const CAPACITY: usize = 4;

#[derive(Message)]
#[rtype(result = "()")]
enum Probe {
    /// Blocks the actor's thread until the test releases it.
    Hold(Arc<Mutex<mpsc::Receiver<()>>>),
    Work(usize),
    /// Sent past the permits: records how much work was queued ahead of it.
    Marker,
}

#[derive(Default)]
struct Seen {
    work: Mutex<Vec<usize>>,
    ahead_of_marker: AtomicUsize,
    deepest: AtomicUsize,
}

struct Gated {
    depth: MailboxDepth,
    seen: Arc<Seen>,
}

impl Actor for Gated {
    type Context = Context<Self>;
}

impl Handler<Probe> for Gated {
    type Result = ();

    fn handle(&mut self, probe: Probe, _: &mut Context<Self>) {
        match probe {
            Probe::Marker => {
                let work = self.seen.work.lock().expect("not poisoned").len();
                self.seen.ahead_of_marker.store(work, Ordering::SeqCst);
            }
            Probe::Hold(gate) => {
                self.depth.taken();
                let _released = gate.lock().expect("not poisoned").recv();
            }
            Probe::Work(n) => {
                #[allow(clippy::cast_sign_loss, reason = "a depth is never negative here")]
                let depth = self.depth.current().max(0) as usize;
                self.seen.deepest.fetch_max(depth, Ordering::SeqCst);
                self.depth.taken();
                self.seen.work.lock().expect("not poisoned").push(n);
            }
        }
    }
}

fn start(name: &'static str) -> (Supervised<Gated>, MailboxDepth, Arc<Seen>) {
    let depth = MailboxDepth::new(name, CAPACITY);
    let seen = Arc::new(Seen::default());
    let (mailbox, record) = (depth.clone(), Arc::clone(&seen));
    let actor = supervisor::start(name, depth.clone(), move || {
        Some(Gated {
            depth: mailbox.clone(),
            seen: Arc::clone(&record),
        })
    });
    (actor, depth, seen)
}

/// Holds the actor: answers once its handler is blocked.
async fn hold(out: &Outbox<Probe>) -> mpsc::Sender<()> {
    let (release, gate) = mpsc::channel();
    out.enqueue(Probe::Hold(Arc::new(Mutex::new(gate))))
        .await
        .expect("actor alive");
    // Taken (and its room given back) just before the handler blocks.
    for _ in 0..500 {
        if out.depth.current() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    release
}

fn dropped(name: &str) -> u64 {
    crate::testing::counter(&format!("{MAILBOX_DROPPED}{{mailbox=\"{name}\"}}"))
}

fn in_system(test: impl std::future::Future<Output = ()>) {
    supervisor::system(2)
        .expect("runtime builds")
        .block_on(test);
}

#[test]
fn waiting_senders_on_many_clones_hold_the_bound_and_lose_nothing() {
    in_system(async {
        let (actor, depth, seen) = start("mailbox-test-deliver");
        let out = Outbox::new(&actor, depth.clone());
        let release = hold(&out).await;
        let senders: Vec<_> = (0..16)
            .map(|s| {
                // Half share one outbox's clones, half make their own: neither gets a slot.
                let out = if s % 2 == 0 {
                    out.clone()
                } else {
                    Outbox::new(&actor, depth.clone())
                };
                tokio::spawn(async move {
                    for i in 0..25 {
                        out.deliver(Probe::Work(s * 100 + i))
                            .await
                            .expect("delivered");
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(depth.current(), i64::try_from(CAPACITY).expect("small"));
        // Behind everything queued while the actor is held.
        actor.addr().do_send(Probe::Marker);
        release.send(()).expect("actor held");
        for sender in senders {
            sender.await.expect("sender finished");
        }
        let work = seen.work.lock().expect("not poisoned").clone();
        assert_eq!(work.len(), 16 * 25, "every waiting send was delivered");
        assert_eq!(seen.ahead_of_marker.load(Ordering::SeqCst), CAPACITY);
        assert!(seen.deepest.load(Ordering::SeqCst) <= CAPACITY);
        assert_eq!(depth.current(), 0);
        drop(release);
    });
}

#[test]
fn refused_sends_on_many_clones_are_dropped_and_counted() {
    in_system(async {
        let name = "mailbox-test-try";
        let (actor, depth, seen) = start(name);
        let out = Outbox::new(&actor, depth.clone());
        let release = hold(&out).await;
        let before = dropped(name);
        let accepted = (0..64)
            .filter(|n| {
                Outbox::new(&actor, depth.clone())
                    .try_deliver(Probe::Work(*n))
                    .is_ok()
            })
            .count();
        assert_eq!(accepted, CAPACITY);
        assert_eq!(dropped(name) - before, 64 - CAPACITY as u64);
        release.send(()).expect("actor held");
        // Room again once the actor took what was queued.
        for _ in 0..100 {
            if depth.current() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        out.try_deliver(Probe::Work(999)).expect("room again");
        out.deliver(Probe::Work(1000)).await.expect("delivered");
        let work = seen.work.lock().expect("not poisoned").clone();
        assert_eq!(work.len(), CAPACITY + 2);
    });
}

#[test]
fn permits_bound_a_mailbox_shared_by_concurrent_admits() {
    in_system(async {
        let depth = MailboxDepth::new("mailbox-test-admit", CAPACITY);
        let taken = Arc::new(AtomicUsize::new(0));
        let admitted = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (depth, admitted) = (depth.clone(), Arc::clone(&admitted));
                tokio::spawn(async move {
                    for _ in 0..50 {
                        depth.admit().await;
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        // A slow receiver: every admitted message waits until it is taken.
        while taken.load(Ordering::SeqCst) < 400 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let queued = admitted.load(Ordering::SeqCst) - taken.load(Ordering::SeqCst);
            assert!(queued <= CAPACITY, "{queued} queued");
            if queued > 0 {
                depth.taken();
                taken.fetch_add(1, Ordering::SeqCst);
            }
        }
        for task in tasks {
            task.await.expect("admitted all");
        }
    });
}

/// A numbered message; the actor panics on the ones marked.
#[derive(Message)]
#[rtype(result = "usize")]
struct Numbered {
    n: usize,
    panic: bool,
}

struct Flaky {
    depth: MailboxDepth,
    handled: Arc<Mutex<Vec<usize>>>,
}

impl Actor for Flaky {
    type Context = Context<Self>;
}

impl Handler<Numbered> for Flaky {
    type Result = usize;

    fn handle(&mut self, message: Numbered, _: &mut Context<Self>) -> usize {
        self.depth.taken();
        assert!(!message.panic, "message {} is a bug", message.n);
        self.handled.lock().expect("not poisoned").push(message.n);
        message.n
    }
}

/// An actor that panics on the marked messages and, after `lives` incarnations, is not
/// built again (it dies).
fn flaky(
    name: &'static str,
    lives: usize,
) -> (Supervised<Flaky>, MailboxDepth, Arc<Mutex<Vec<usize>>>) {
    let depth = MailboxDepth::new(name, CAPACITY);
    let handled = Arc::new(Mutex::new(Vec::new()));
    let (mailbox, record) = (depth.clone(), Arc::clone(&handled));
    let mut built = 0;
    let actor = supervisor::start(name, depth.clone(), move || {
        built += 1;
        (built <= lives).then(|| Flaky {
            depth: mailbox.clone(),
            handled: Arc::clone(&record),
        })
    });
    (actor, depth, handled)
}

fn in_scope(test: impl std::future::Future<Output = ()>) {
    let scope = supervisor::Supervision::with_backoff(Duration::from_millis(5));
    in_system(async move {
        tokio::time::timeout(Duration::from_secs(30), scope.scope(test))
            .await
            .expect("no sender wedged");
    });
}

#[test]
fn a_thousand_sends_across_restarts_and_a_death_leak_no_permit() {
    in_scope(async {
        let (actor, depth, handled) = flaky("mailbox-test-restarts", 3);
        let out = Outbox::new(&actor, depth.clone());
        let sequence = Arc::new(AtomicUsize::new(0));
        let senders: Vec<_> = (0..10)
            .map(|_| {
                let (out, sequence) = (out.clone(), Arc::clone(&sequence));
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    for _ in 0..100 {
                        let n = sequence.fetch_add(1, Ordering::SeqCst);
                        // Three panics: two restarts, then the third incarnation dies for good.
                        let panic = [250, 500, 750].contains(&n);
                        answers.push((n, out.deliver(Numbered { n, panic }).await));
                    }
                    answers
                })
            })
            .collect();
        let mut delivered = Vec::new();
        let mut refused = 0;
        for sender in senders {
            for (n, answer) in sender.await.expect("sender finished") {
                match answer {
                    Ok(m) => {
                        assert_eq!(m, n);
                        delivered.push(n);
                    }
                    Err(DeliverError::Closed(_)) => refused += 1,
                    Err(other) => panic!("{n}: {other:?}"),
                }
            }
        }
        let mut handled = handled.lock().expect("not poisoned").clone();
        handled.sort_unstable();
        delivered.sort_unstable();
        assert_eq!(delivered.len() + refused, 1000, "every send answered");
        assert_eq!(handled, delivered, "delivered exactly what was handled");
        assert!(refused >= 3, "the panicking messages are refused");
        assert!(
            refused > 3,
            "the sends after the death are refused, not stuck: {refused}"
        );
        assert_eq!(depth.current(), 0);
        assert_eq!(depth.available(), CAPACITY, "no permit leaked");
        // Dead: refused at once, room given back.
        let dead = out.deliver(Numbered { n: 0, panic: false }).await;
        assert!(matches!(dead, Err(DeliverError::Closed(_))), "{dead:?}");
        assert!(matches!(
            out.try_deliver(Numbered { n: 0, panic: false }),
            Err(DeliverError::Closed(_))
        ));
        assert_eq!(depth.available(), CAPACITY);
    });
}

#[test]
fn enqueued_messages_are_taken_or_counted_dropped_across_a_restart() {
    in_scope(async {
        crate::metrics::handle();
        let name = "mailbox-test-enqueue-restart";
        let (actor, depth, handled) = flaky(name, 2);
        let out = Outbox::new(&actor, depth.clone());
        let before = dropped(name);
        let mut accepted = 0;
        for n in 0..200 {
            let sent = out.enqueue(Numbered { n, panic: n == 100 }).await;
            accepted += usize::from(sent.is_ok());
        }
        // The panicking message itself was taken; what queued behind it was lost or taken
        // by the next incarnation. The actor's thread counts a take before it records the
        // message, and a restart empties the depth before it counts the loss: wait for the
        // records, not the depth.
        let settled = || {
            let handled = handled.lock().expect("not poisoned").len();
            let lost = usize::try_from(dropped(name) - before).expect("small");
            (handled, lost)
        };
        for _ in 0..2500 {
            let (handled, lost) = settled();
            if depth.current() == 0 && handled + 1 + lost >= accepted {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (handled, lost) = settled();
        assert_eq!(accepted, 200, "a restarting actor's mailbox accepts");
        assert_eq!(
            handled + 1 + lost,
            accepted,
            "taken, panicked on or counted lost"
        );
        assert_eq!(depth.available(), CAPACITY, "no permit leaked");
    });
}
