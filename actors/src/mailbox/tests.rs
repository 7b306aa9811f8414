//! The bound holds for every sender: many concurrent senders, each on its own clone,
//! flood a mailbox whose actor is held busy. What the actor finds queued is measured on the
//! actor's side (a marker pushed past the permits lands behind everything queued), so the
//! test does not trust the permit count it checks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use super::*;
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
