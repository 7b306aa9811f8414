//! The controller's own threads in `kerf simulate`. Each replica runs as `kerf controller`
//! does — an actix `System` on a multi-threaded tokio runtime — but on threads of its own
//! (`kerf-controller-N`, workers `kerf-controller-N-worker`), apart from the simulated cluster
//! on the main runtime. Those threads, their blocking pool and every thread started from them
//! allocate as [`Owner::CONTROLLER`], so the controller's heap is told apart from the
//! simulated cluster's ([`super::memory`]).
//!
//! The daemon is started and stopped by a job sent to its System thread, where actix needs
//! it; once started it is a value the run reads from the main runtime. With debug logs on,
//! the first replica also starts a sampler (a thread whose allocations count to nobody) that
//! logs the controller's live heap and peak every [`HEAP_SAMPLE_PERIOD`] under the target
//! [`HEAP_SAMPLES`].

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kerf_actors::Daemon;
use kerf_heap::Owner;
use tokio::sync::{mpsc, oneshot};

/// Jobs waiting for the System thread: a replica gets two in its life (start, stop), so a few
/// slots never make a sender wait for long.
const JOBS_CAPACITY: usize = 4;

type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// Replicas started so far, to number their threads.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// How often the sampler reads the controller's heap: short enough to see a round's steps
/// (each takes hundreds of milliseconds in the `scale-out-10k` scenario), long enough to
/// log little.
pub const HEAP_SAMPLE_PERIOD: Duration = Duration::from_millis(100);

/// The log target of the heap samples.
pub const HEAP_SAMPLES: &str = "kerf::heap";

static SAMPLER: Once = Once::new();

/// The threads gone before the job ran (the System thread ended).
#[derive(Debug, thiserror::Error)]
#[error("the controller's threads stopped")]
pub struct Stopped;

/// One replica's System thread and runtime.
pub struct ControllerThreads {
    jobs: mpsc::Sender<Job>,
    thread: std::thread::JoinHandle<()>,
}

impl ControllerThreads {
    /// Starts the System thread and its runtime.
    pub fn start() -> std::io::Result<Self> {
        let name = format!(
            "kerf-controller-{}",
            STARTED.fetch_add(1, Ordering::Relaxed)
        );
        let (jobs, mut inbox) = mpsc::channel::<Job>(JOBS_CAPACITY);
        let (ready, started) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                kerf_heap::set_current(Some(Owner::CONTROLLER));
                let runtime = match runtime(&name) {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready.send(Err(error));
                        return;
                    }
                };
                let _ = ready.send(Ok(()));
                let system = actix::System::with_tokio_rt(move || runtime);
                system.block_on(async move {
                    while let Some(job) = inbox.recv().await {
                        actix::spawn(job());
                    }
                });
            })?;
        started
            .recv()
            .map_err(|_| std::io::Error::other("the controller thread ended at start"))??;
        SAMPLER.call_once(start_sampler);
        Ok(Self { jobs, thread })
    }

    /// Runs the future `make` builds on the System thread and returns its output.
    pub async fn run<T, F, Fut>(&self, make: F) -> Result<T, Stopped>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            Box::pin(async move {
                let _ = reply.send(make().await);
            })
        });
        self.jobs.send(job).await.map_err(|_| Stopped)?;
        answer.await.map_err(|_| Stopped)
    }

    /// Ends the System thread (tasks still running on its runtime are dropped) and waits for it.
    pub async fn stop(self) {
        drop(self.jobs);
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

/// Starts the heap sampler (see the module doc); it runs as long as the process, idle while
/// debug logs are off. A sampler that cannot start costs only the samples.
fn start_sampler() {
    let spawned = std::thread::Builder::new()
        .name("kerf-heap-sampler".to_owned())
        .spawn(|| {
            kerf_heap::set_current(None);
            let began = Instant::now();
            loop {
                std::thread::sleep(HEAP_SAMPLE_PERIOD);
                if tracing::enabled!(target: HEAP_SAMPLES, tracing::Level::DEBUG) {
                    let heap = kerf_heap::usage(Owner::CONTROLLER);
                    tracing::debug!(
                        target: HEAP_SAMPLES,
                        at_ms = began.elapsed().as_millis() as u64,
                        live_mib = heap.live_bytes >> 20,
                        peak_mib = heap.peak_bytes >> 20,
                        "controller heap"
                    );
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "the controller heap sampler did not start");
    }
}

/// The controller's runtime: tokio's defaults, its workers and blocking threads named after
/// the replica and allocating as the controller.
fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(format!("{name}-worker"))
        .on_thread_start(|| kerf_heap::set_current(Some(Owner::CONTROLLER)))
        .build()
}

/// A running controller replica on its own threads; reads go to its [`Daemon`].
pub struct Controller {
    daemon: Daemon,
    threads: ControllerThreads,
}

impl Controller {
    pub fn new(daemon: Daemon, threads: ControllerThreads) -> Self {
        Self { daemon, threads }
    }

    /// [`Daemon::stop`] on the controller's threads, then ends them.
    pub async fn stop(self) {
        let Self { daemon, threads } = self;
        let _ = threads.run(move || daemon.stop()).await;
        threads.stop().await;
    }

    /// [`Daemon::stop_within`] on the controller's threads, then ends them.
    pub async fn stop_within(self, drain: Duration) {
        let Self { daemon, threads } = self;
        let _ = threads.run(move || daemon.stop_within(drain)).await;
        threads.stop().await;
    }
}

impl Deref for Controller {
    type Target = Daemon;

    fn deref(&self) -> &Daemon {
        &self.daemon
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELD: usize = 64 << 20;

    fn controller_live() -> u64 {
        kerf_heap::usage(Owner::CONTROLLER).live_bytes
    }

    /// The thread's name and whether it allocates as the controller.
    fn here() -> (String, bool) {
        let name = std::thread::current().name().unwrap_or_default().to_owned();
        (name, kerf_heap::current() == Some(Owner::CONTROLLER))
    }

    #[test]
    fn what_runs_on_the_controller_threads_counts_as_the_controllers_heap() {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async {
            let threads = ControllerThreads::start().expect("the threads start");
            let (system, worker, blocking, counted) = threads
                .run(|| async {
                    let held = std::hint::black_box(vec![1u8; HELD]);
                    let counted = controller_live() >= HELD as u64;
                    let worker = tokio::spawn(async { here() }).await.expect("ran");
                    let blocking = tokio::task::spawn_blocking(here).await.expect("ran");
                    drop(held);
                    (here(), worker, blocking, counted)
                })
                .await
                .expect("the job ran");
            threads.stop().await;
            assert!(
                counted,
                "64 MiB held on the System thread are the controller's"
            );
            assert!(
                system.0.starts_with("kerf-controller-") && system.1,
                "{system:?}"
            );
            assert!(worker.0.ends_with("-worker") && worker.1, "{worker:?}");
            assert!(blocking.1, "{blocking:?}");
            // Held on this thread, which stands for the simulated cluster: not counted.
            let before = controller_live();
            let held = std::hint::black_box(vec![1u8; HELD]);
            assert!(controller_live() < before + HELD as u64);
            drop(held);
        });
    }
}
