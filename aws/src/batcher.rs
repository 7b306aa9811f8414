//! Request batching for EC2 calls made once per NodeClaim (TerminateInstances,
//! DescribeInstances). Requests with the same key that arrive within an idle window are
//! executed together, as upstream: a batch closes when no request joined it for the idle
//! time (100 ms), when it is the maximum age (1 s) or when it is full. CreateFleet is not
//! batched: each launch carries its own NodeClaim tag and client token (see `fleet`). One
//! background task per batcher owns the open batches and is fed over a bounded channel;
//! callers await their own result. Every batcher's task and the batches it executes run on
//! one runtime of their own, on a dedicated thread started once ([`runtime`]), so no caller's
//! runtime (an actor's arbiter, a test's) takes them down when it ends; the calls' HTTP
//! connections live where the clients send from ([`crate::io`]). A task that panicked is
//! started again by the next request; a batch that panicked answers its callers with an
//! error; both are reported where the batcher was built ([`report_panics_with`]): the
//! controller's supervision scope, which logs the panic's message, counts it and holds it
//! against the restart budget.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kerf::panics::message as panic_message;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Mailbox size of a batcher's task; callers wait when it is full.
const MAILBOX: usize = 1024;

/// The name of the batchers' thread.
pub const THREAD_NAME: &str = "kerf-aws-batcher";

/// `kerf_actor_restarts_total{actor}`'s label for a batcher task or batch that panicked.
pub const RESTART_LABEL: &str = "aws_batcher";

/// Requests per executed batch (label `batcher`: the batched call).
pub const BATCHER_BATCH_SIZE: &str = "karpenter_cloudprovider_batcher_batch_size";
/// Time from a batch's first request until it was executed (label `batcher`).
pub const BATCHER_BATCH_TIME: &str = "karpenter_cloudprovider_batcher_batch_time_seconds";

/// The batchers' runtime: one worker thread, started on first use and never stopped. Its
/// work is waiting on EC2, so one thread serves every batcher.
pub fn runtime() -> &'static tokio::runtime::Handle {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name(THREAD_NAME)
                .enable_all()
                .build()
                .expect("the AWS batchers' thread and runtime start")
        })
        .handle()
}

/// Where a batcher's task or batch that panicked is reported: called with the batcher's name
/// and the panic's payload.
pub type PanicReport = Arc<dyn Fn(&'static str, &(dyn Any + Send)) + Send + Sync>;

/// Makes the [`PanicReport`] of a batcher being built, on the thread building it.
pub type CapturePanicReport = fn() -> PanicReport;

static CAPTURE: OnceLock<CapturePanicReport> = OnceLock::new();

/// Sets how each batcher built from now on captures where its panics go: `capture` runs in
/// [`Batcher::new`], so it can take the building task's supervision scope, which the
/// batchers' own runtime does not have. Set once per process; answers `false` (and changes
/// nothing) when it was set already. Until then panics are logged and counted only.
pub fn report_panics_with(capture: CapturePanicReport) -> bool {
    CAPTURE.set(capture).is_ok()
}

/// Logs a panic with its message and counts it in `kerf_actor_restarts_total`: the report
/// of a batcher built before [`report_panics_with`] (tests, tools).
fn log_and_count() -> PanicReport {
    Arc::new(|what, payload| {
        metrics::counter!("kerf_actor_restarts_total", "actor" => RESTART_LABEL).increment(1);
        tracing::error!(
            batcher = what,
            panic = panic_message(payload),
            "AWS request batcher panicked"
        );
    })
}

/// Spawns `task` on the batchers' runtime; a panic is reported to `report`, not lost.
fn spawn_reported(
    what: &'static str,
    report: &PanicReport,
    task: impl Future<Output = ()> + Send + 'static,
) {
    let running = runtime().spawn(task);
    let report = Arc::clone(report);
    runtime().spawn(async move {
        if let Err(error) = running.await
            && error.is_panic()
        {
            report(what, &*error.into_panic());
        }
    });
}

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs one batch: all requests that share `key`, in arrival order; must answer one result
/// per request, in the same order.
pub type Executor<K, Req, Resp> = Arc<dyn Fn(K, Vec<Req>) -> BoxFuture<Vec<Resp>> + Send + Sync>;

/// Timing of a batcher.
#[derive(Clone, Copy, Debug)]
pub struct BatchWindow {
    pub name: &'static str,
    pub idle: Duration,
    pub max_wait: Duration,
    pub max_items: usize,
}

pub const TERMINATE_INSTANCES_WINDOW: BatchWindow = BatchWindow {
    name: "terminate_instances",
    idle: Duration::from_millis(100),
    max_wait: Duration::from_secs(1),
    max_items: 500,
};

pub const DESCRIBE_INSTANCES_WINDOW: BatchWindow = BatchWindow {
    name: "describe_instances",
    idle: Duration::from_millis(100),
    max_wait: Duration::from_secs(1),
    max_items: 500,
};

/// A request could not be answered by its batch.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("the {0} batch ended without a result for this request")]
    NoResult(&'static str),
}

struct Item<K, Req, Resp> {
    key: K,
    request: Req,
    reply: oneshot::Sender<Resp>,
}

/// Batches requests by key.
pub struct Batcher<K, Req, Resp> {
    window: BatchWindow,
    executor: Executor<K, Req, Resp>,
    sender: Mutex<Option<mpsc::Sender<Item<K, Req, Resp>>>>,
    report: PanicReport,
}

impl<K, Req, Resp> Batcher<K, Req, Resp>
where
    K: Eq + Hash + Clone + Send + 'static,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    /// A batcher whose panics are reported where [`report_panics_with`] says, captured now.
    pub fn new(window: BatchWindow, executor: Executor<K, Req, Resp>) -> Self {
        let report = CAPTURE
            .get()
            .map_or_else(log_and_count, |capture| capture());
        Self {
            window,
            executor,
            sender: Mutex::new(None),
            report,
        }
    }

    /// Reports this batcher's panics to `report` instead.
    pub fn reporting(mut self, report: PanicReport) -> Self {
        self.report = report;
        self
    }

    /// Adds a request to the open batch for `key` and waits for its result.
    pub async fn add(&self, key: K, request: Req) -> Result<Resp, BatchError> {
        let (reply, answer) = oneshot::channel();
        let mut item = Item {
            key,
            request,
            reply,
        };
        for _ in 0..2 {
            let sender = self.sender();
            match sender.send(item).await {
                Ok(()) => {
                    return answer
                        .await
                        .map_err(|_| BatchError::NoResult(self.window.name));
                }
                // The task's runtime is gone: start a new task and try once more.
                Err(mpsc::error::SendError(returned)) => {
                    item = returned;
                    self.lock_sender().take();
                }
            }
        }
        Err(BatchError::NoResult(self.window.name))
    }

    fn lock_sender(&self) -> std::sync::MutexGuard<'_, Option<mpsc::Sender<Item<K, Req, Resp>>>> {
        self.sender.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sender(&self) -> mpsc::Sender<Item<K, Req, Resp>> {
        let mut slot = self.lock_sender();
        if let Some(sender) = slot.as_ref().filter(|s| !s.is_closed()) {
            return sender.clone();
        }
        let (tx, rx) = mpsc::channel(MAILBOX);
        spawn_reported(
            self.window.name,
            &self.report,
            run(
                self.window,
                self.executor.clone(),
                Arc::clone(&self.report),
                rx,
            ),
        );
        *slot = Some(tx.clone());
        tx
    }
}

struct Open<Req, Resp> {
    first: Instant,
    last: Instant,
    items: Vec<(Req, oneshot::Sender<Resp>)>,
}

impl<Req, Resp> Open<Req, Resp> {
    fn deadline(&self, window: &BatchWindow) -> Instant {
        (self.last + window.idle).min(self.first + window.max_wait)
    }
}

async fn run<K, Req, Resp>(
    window: BatchWindow,
    executor: Executor<K, Req, Resp>,
    report: PanicReport,
    mut inbox: mpsc::Receiver<Item<K, Req, Resp>>,
) where
    K: Eq + Hash + Clone + Send + 'static,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    let mut open: HashMap<K, Open<Req, Resp>> = HashMap::new();
    loop {
        let next_deadline = open.values().map(|b| b.deadline(&window)).min();
        let received = match next_deadline {
            Some(deadline) => tokio::select! {
                item = inbox.recv() => Some(item),
                () = tokio::time::sleep_until(deadline) => None,
            },
            None => Some(inbox.recv().await),
        };
        match received {
            Some(None) if open.is_empty() => return,
            Some(None) => {}
            Some(Some(item)) => {
                let now = Instant::now();
                let batch = open.entry(item.key.clone()).or_insert_with(|| Open {
                    first: now,
                    last: now,
                    items: Vec::new(),
                });
                batch.last = now;
                batch.items.push((item.request, item.reply));
            }
            None => {}
        }
        let now = Instant::now();
        let due: Vec<K> = open
            .iter()
            .filter(|(_, b)| b.deadline(&window) <= now || b.items.len() >= window.max_items)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some(batch) = open.remove(&key) {
                spawn_reported(
                    window.name,
                    &report,
                    execute(window, executor.clone(), key, batch),
                );
            }
        }
    }
}

async fn execute<K, Req, Resp>(
    window: BatchWindow,
    executor: Executor<K, Req, Resp>,
    key: K,
    batch: Open<Req, Resp>,
) {
    let size = batch.items.len();
    metrics::histogram!(BATCHER_BATCH_SIZE, "batcher" => window.name).record(size as f64);
    metrics::histogram!(BATCHER_BATCH_TIME, "batcher" => window.name)
        .record(batch.first.elapsed().as_secs_f64());
    let (requests, replies): (Vec<Req>, Vec<oneshot::Sender<Resp>>) =
        batch.items.into_iter().unzip();
    let results = executor(key, requests).await;
    for (reply, result) in replies.into_iter().zip(results) {
        // A caller that gave up no longer wants its result.
        let _ = reply.send(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting_batcher(
        calls: Arc<AtomicUsize>,
        idle: Duration,
        max_items: usize,
    ) -> Arc<Batcher<String, u32, (usize, u32)>> {
        let executor: Executor<String, u32, (usize, u32)> =
            Arc::new(move |_key, reqs: Vec<u32>| {
                let calls = calls.clone();
                Box::pin(async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let n = reqs.len();
                    reqs.into_iter().map(|r| (n, r * 10)).collect()
                })
            });
        let window = BatchWindow {
            name: "test",
            idle,
            max_wait: idle,
            max_items,
        };
        Arc::new(Batcher::new(window, executor))
    }

    // Batches close on size here (the idle time is far away), so the grouping does not
    // depend on scheduling.
    #[tokio::test]
    async fn requests_with_one_key_share_a_call_and_keys_never_mix() {
        let calls = Arc::new(AtomicUsize::new(0));
        let b = counting_batcher(calls.clone(), Duration::from_secs(60), 2);
        let tasks: Vec<_> = [("k", 1), ("other", 5), ("k", 2), ("other", 6)]
            .into_iter()
            .map(|(key, i)| {
                let b = b.clone();
                tokio::spawn(async move { b.add(key.to_owned(), i).await })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap().unwrap());
        }
        assert_eq!(results, [(2, 10), (2, 50), (2, 20), (2, 60)]);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_lone_request_runs_after_the_idle_time() {
        let calls = Arc::new(AtomicUsize::new(0));
        let b = counting_batcher(calls.clone(), Duration::from_millis(5), 10);
        assert_eq!(b.add("k".into(), 3).await, Ok((1, 30)));
        assert_eq!(b.add("k".into(), 4).await, Ok((1, 40)));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_batch_executes_on_its_own_thread_after_the_first_callers_runtime_is_gone() {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&threads);
        let executor: Executor<(), u32, u32> = Arc::new(move |_, requests: Vec<u32>| {
            let name = std::thread::current().name().map(str::to_owned);
            seen.lock().expect("not poisoned").push(name);
            Box::pin(async move { requests.into_iter().map(|r| r + 1).collect() })
        });
        let b = Arc::new(Batcher::new(
            BatchWindow {
                idle: Duration::from_millis(1),
                ..TERMINATE_INSTANCES_WINDOW
            },
            executor,
        ));
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        assert_eq!(first.block_on(b.add((), 1)), Ok(2));
        drop(first);
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        assert_eq!(second.block_on(b.add((), 2)), Ok(3));
        let threads = threads.lock().expect("not poisoned").clone();
        assert_eq!(threads, vec![Some(THREAD_NAME.to_owned()); 2]);
    }

    #[tokio::test]
    async fn a_panicking_batch_answers_with_an_error_and_the_next_one_runs() {
        let executor: Executor<(), u32, u32> = Arc::new(|_, requests: Vec<u32>| {
            assert!(!requests.contains(&0), "a bug in the executor");
            Box::pin(async move { requests })
        });
        let reported = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&reported);
        let b = Batcher::new(
            BatchWindow {
                idle: Duration::from_millis(1),
                ..TERMINATE_INSTANCES_WINDOW
            },
            executor,
        )
        .reporting(Arc::new(move |what, payload| {
            seen.lock()
                .expect("not poisoned")
                .push((what, panic_message(payload)));
        }));
        assert_eq!(
            b.add((), 0).await,
            Err(BatchError::NoResult("terminate_instances"))
        );
        assert_eq!(b.add((), 7).await, Ok(7));
        // The report follows the batch's end on the batchers' runtime.
        for _ in 0..500 {
            if !reported.lock().expect("not poisoned").is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            *reported.lock().expect("not poisoned"),
            [("terminate_instances", "a bug in the executor".to_owned())],
            "reported once, with its message"
        );
    }

    #[tokio::test]
    async fn missing_results_are_errors() {
        let executor: Executor<(), u32, u32> = Arc::new(|_, _| Box::pin(async { Vec::new() }));
        let b = Batcher::new(
            BatchWindow {
                idle: Duration::from_millis(1),
                ..TERMINATE_INSTANCES_WINDOW
            },
            executor,
        );
        assert_eq!(
            b.add((), 1).await,
            Err(BatchError::NoResult("terminate_instances"))
        );
    }
}
