//! Actors do not block each other: the round trip to one actor (a stand-in for the NodeClaim
//! lifecycle: a handler that answers at once) while another actor computes a 10,000-pod
//! solve in its handler (a stand-in for the Provisioner's round), against the same round
//! trip when nothing else runs. Both actors are started as the daemon starts every actor
//! (`supervisor::start`, each on its own arbiter thread, behind permit-bounded mailboxes),
//! and for contrast on one shared arbiter, as every actor ran before.
//!
//! Run with `cargo bench -p kerf-actors --bench actor_latency`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use criterion::{Criterion, criterion_group};
use kerf::scheduling::testing::{benchmark_instance_types, diverse_pods, node_pool};
use kerf::scheduling::{SchedulingInput, SchedulingOptions, solve};
use kerf_actors::mailbox::{MailboxDepth, Outbox};
use kerf_actors::supervisor;

const PODS: usize = 10_000;

#[derive(Message)]
#[rtype(result = "()")]
struct Ping;

/// Answers at once.
struct Echo(MailboxDepth);

impl Actor for Echo {
    type Context = Context<Self>;
}

impl Handler<Ping> for Echo {
    type Result = ();
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) {
        self.0.taken();
    }
}

#[derive(Message)]
#[rtype(result = "usize")]
struct Solve;

/// Solves the 10k-pod input in its handler, as a round does.
struct Solver {
    depth: MailboxDepth,
    input: Arc<SchedulingInput>,
}

impl Actor for Solver {
    type Context = Context<Self>;
}

impl Handler<Solve> for Solver {
    type Result = usize;
    fn handle(&mut self, _: Solve, _: &mut Context<Self>) -> usize {
        self.depth.taken();
        solve(&self.input).map_or(0, |r| r.new_node_claims.len())
    }
}

fn input() -> Arc<SchedulingInput> {
    Arc::new(SchedulingInput {
        pods: kerf::scheduling::testing::shared(diverse_pods(PODS, 1)),
        node_pools: vec![node_pool("default", benchmark_instance_types())],
        options: SchedulingOptions {
            parallel: false,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// Where the two actors run.
#[derive(Clone, Copy)]
enum Layout {
    /// Each on its own arbiter, supervised: the daemon's layout.
    OwnThreads,
    /// Both on the calling arbiter.
    SharedThread,
}

fn start(layout: Layout, input: Arc<SchedulingInput>) -> (Outbox<Ping>, Outbox<Solve>) {
    let echo_depth = MailboxDepth::new("bench-echo", 16);
    let solver_depth = MailboxDepth::new("bench-solver", 1);
    match layout {
        Layout::OwnThreads => {
            let mailbox = echo_depth.clone();
            let echo = supervisor::start("bench-echo", echo_depth.clone(), move || {
                Some(Echo(mailbox.clone()))
            });
            let mailbox = solver_depth.clone();
            let solver = supervisor::start("bench-solver", solver_depth.clone(), move || {
                Some(Solver {
                    depth: mailbox.clone(),
                    input: Arc::clone(&input),
                })
            });
            (
                Outbox::new(&echo, echo_depth),
                Outbox::new(&solver, solver_depth),
            )
        }
        Layout::SharedThread => {
            let echo = Echo(echo_depth.clone()).start();
            let solver = Solver {
                depth: solver_depth.clone(),
                input,
            }
            .start();
            (
                Outbox::to_addr(&echo, echo_depth),
                Outbox::to_addr(&solver, solver_depth),
            )
        }
    }
}

/// Runs `body` in an actix system on a multi-threaded runtime, as the daemon runs.
fn system<F: Future<Output = ()>>(body: F) {
    let system = supervisor::system(2).expect("runtime builds");
    system.block_on(body);
}

/// Round trips to the echo actor, timed from a task off the actors' threads.
async fn round_trips(echo: &Outbox<Ping>, iterations: u64) -> Duration {
    let started = Instant::now();
    for _ in 0..iterations {
        echo.deliver(Ping).await.expect("echo alive");
    }
    started.elapsed()
}

fn bench_layout(c: &mut Criterion, name: &str, layout: Layout, busy: bool) {
    let input = input();
    c.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            let mut elapsed = Duration::ZERO;
            let input = Arc::clone(&input);
            system(async {
                let (echo, solver) = start(layout, input);
                let solving = Arc::new(AtomicBool::new(busy));
                let keep = Arc::clone(&solving);
                let rounds = tokio::spawn(async move {
                    while keep.load(Ordering::SeqCst) {
                        let _claims = solver.deliver(Solve).await;
                    }
                });
                if busy {
                    // Let the first solve start before timing.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                elapsed = tokio::spawn(async move { round_trips(&echo, iterations).await })
                    .await
                    .expect("timed");
                solving.store(false, Ordering::SeqCst);
                let _ = rounds.await;
            });
            elapsed
        });
    });
}

fn latency(c: &mut Criterion) {
    bench_layout(c, "echo/idle", Layout::OwnThreads, false);
    bench_layout(
        c,
        "echo/during_10k_solve/own_threads",
        Layout::OwnThreads,
        true,
    );
    bench_layout(
        c,
        "echo/during_10k_solve/shared_thread",
        Layout::SharedThread,
        true,
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = latency
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
