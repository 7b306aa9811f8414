//! One controller replica's supervision scope ([`Supervision`]): its restart log, its
//! restart budget and its fault hooks, taken from the task-local scope the daemon starts a
//! replica in (the process's own outside any). The supervisor records each panic here and
//! waits the backoff this answers; past [`RESTART_BUDGET`] restarts within
//! [`RESTART_WINDOW`] the scope is exhausted and `/healthz` fails. Mailboxes and loops look
//! up their fault hook here ([`fault_point`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::faults::Faults;
use crate::metrics::ACTOR_RESTARTS;

pub use kerf::panics::message as panic_message;

/// An actor or loop that panics more often than this within [`RESTART_WINDOW`] is crash-looping
/// on something a restart does not fix (a poisoned object in the cluster, a bug on a hot path):
/// the process is marked unhealthy so Kubernetes restarts the pod and the failure shows in its
/// restart count. Five leaves room for a burst of unrelated transient panics.
pub const RESTART_BUDGET: usize = 5;

/// The window [`RESTART_BUDGET`] counts restarts in: long enough that a crash loop with the
/// largest backoff ([`MAX_RESTART_BACKOFF`]) still exceeds the budget within it.
pub const RESTART_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The first restart's delay; each further restart within [`RESTART_WINDOW`] doubles it, so
/// an actor that panics at once logs a few times instead of spinning a core.
pub const TASK_RESTART_DELAY: Duration = Duration::from_secs(1);

/// The longest delay between two restarts.
pub const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);

/// Which actor exhausted the restart budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    pub actor: &'static str,
    /// Restarts within [`RESTART_WINDOW`] when the budget ran out.
    pub restarts: usize,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "actor {} restarted {} times within {}s (budget {RESTART_BUDGET})",
            self.actor,
            self.restarts,
            RESTART_WINDOW.as_secs()
        )
    }
}

/// One controller replica's supervision: its restart log, whether the budget is exhausted,
/// and its fault-injection hooks. Cheap to clone.
#[derive(Clone)]
pub struct Supervision {
    inner: Arc<Inner>,
}

struct Inner {
    restarts: Mutex<HashMap<&'static str, VecDeque<Instant>>>,
    /// How many times each supervised loop ([`super::task`]) was built: 1 until it panics.
    loops: Mutex<BTreeMap<&'static str, u32>>,
    exhausted: watch::Sender<Option<Exhausted>>,
    backoff: Duration,
    faults: Faults,
}

tokio::task_local! {
    pub(super) static SCOPE: Supervision;
}

/// The scope of whatever runs outside any replica's (the binary's single controller).
static PROCESS: LazyLock<Supervision> = LazyLock::new(Supervision::new);

impl Default for Supervision {
    fn default() -> Self {
        Self::new()
    }
}

impl Supervision {
    /// A fresh scope restarting after [`TASK_RESTART_DELAY`], doubling.
    pub fn new() -> Self {
        Self::with_backoff(TASK_RESTART_DELAY)
    }

    /// A fresh scope whose first restart waits `backoff` (tests shorten it).
    pub fn with_backoff(backoff: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                restarts: Mutex::new(HashMap::new()),
                loops: Mutex::new(BTreeMap::new()),
                exhausted: watch::channel(None).0,
                backoff,
                faults: Faults::default(),
            }),
        }
    }

    /// The scope of the running task, or the process's outside any.
    pub fn current() -> Self {
        SCOPE
            .try_with(Clone::clone)
            .unwrap_or_else(|_| PROCESS.clone())
    }

    /// Runs `future` with this scope: the actors and loops it starts are supervised here.
    pub async fn scope<F: Future>(&self, future: F) -> F::Output {
        SCOPE.scope(self.clone(), future).await
    }

    /// Runs `f` with this scope (for starts outside an async context).
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        SCOPE.sync_scope(self.clone(), f)
    }

    /// Set once an actor exhausts the restart budget; never cleared.
    pub fn exhausted(&self) -> watch::Receiver<Option<Exhausted>> {
        self.inner.exhausted.subscribe()
    }

    /// Every loop started under this scope with [`super::task`], and how many times each was
    /// built (1, plus one per restart).
    pub fn loops(&self) -> BTreeMap<&'static str, u32> {
        self.inner
            .loops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn built(&self, name: &'static str) {
        let mut loops = self
            .inner
            .loops
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *loops.entry(name).or_default() += 1;
    }

    /// The fault-injection hooks of this replica (tests and `kerf simulate` only).
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// Records a panic of `actor`: logs it, counts it, and answers how long to wait before
    /// building it again. Marks the scope exhausted past the budget.
    pub(crate) fn panicked(&self, actor: &'static str, kind: &str, message: &str) -> Duration {
        self.restarting(actor, kind, Some(message))
    }

    /// Records that `actor` returned while it should have run until shutdown (an election
    /// that ended): logged, counted and held against the budget with the backoff a panic
    /// gets, since a loop that keeps returning at once is crash-looping all the same.
    pub(crate) fn returned(&self, actor: &'static str, kind: &str) -> Duration {
        self.restarting(actor, kind, None)
    }

    /// Counts a restart of `actor` (`panic` its message, `None` for a return), logs it, and
    /// answers the backoff; marks the scope exhausted past the budget.
    fn restarting(&self, actor: &'static str, kind: &str, panic: Option<&str>) -> Duration {
        metrics::counter!(ACTOR_RESTARTS, "actor" => actor).increment(1);
        let now = Instant::now();
        let recent = {
            let mut log = self
                .inner
                .restarts
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let times = log.entry(actor).or_default();
            while times
                .front()
                .is_some_and(|t| now.duration_since(*t) > RESTART_WINDOW)
            {
                times.pop_front();
            }
            times.push_back(now);
            times.len()
        };
        let exponent = u32::try_from(recent.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(16);
        let delay = self
            .inner
            .backoff
            .saturating_mul(2u32.saturating_pow(exponent))
            .min(MAX_RESTART_BACKOFF.max(self.inner.backoff));
        let backoff_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        match panic {
            Some(message) => tracing::error!(
                actor,
                kind,
                panic = message,
                restarts_in_window = recent,
                backoff_ms,
                "{kind} panicked; restarting it"
            ),
            None => tracing::error!(
                actor,
                kind,
                restarts_in_window = recent,
                backoff_ms,
                "{kind} ended before shutdown; restarting it"
            ),
        }
        if recent > RESTART_BUDGET {
            let exhausted = Exhausted {
                actor,
                restarts: recent,
            };
            let first = self.inner.exhausted.send_if_modified(|current| {
                if current.is_some() {
                    return false;
                }
                *current = Some(exhausted.clone());
                true
            });
            if first {
                tracing::error!(%exhausted, "restart budget exhausted; the process is unhealthy");
            }
        }
        delay
    }

    /// Reports a panic of a one-shot task that is not rebuilt (its work is redone by a
    /// reconcile): logged and counted like a restart.
    pub fn report_panic(&self, actor: &'static str, payload: &(dyn std::any::Any + Send)) {
        self.panicked(actor, "task", &panic_message(payload));
    }

    /// How many panics of `actor` this scope recorded within [`RESTART_WINDOW`]: what its
    /// restart budget is counted against.
    pub fn recent_restarts(&self, actor: &str) -> usize {
        let now = Instant::now();
        self.inner
            .restarts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(actor)
            .map_or(0, |times| {
                times
                    .iter()
                    .filter(|t| now.duration_since(**t) <= RESTART_WINDOW)
                    .count()
            })
    }
}

/// Checks the fault armed for `actor` in the current task's supervision scope (loops that
/// take no mailbox message call it once per pass or command).
pub fn fault_point(actor: &'static str) {
    if let Some(point) = Supervision::current().faults().point(actor) {
        point.check();
    }
}
