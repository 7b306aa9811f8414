//! Fault injection for resilience tests: cut every open watch, fail a fraction of resource
//! requests with 500 or 429 (+ `Retry-After`), fail the next N requests of one method on one
//! resource (a status write), add latency, and compact history so that
//! resuming a watch from an old resourceVersion gets 410 Gone. Discovery and `/version`
//! are never failed, so clients can always connect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;

use super::error::{ApiError, Reason};
use super::registry::Registry;
use super::store::lock;

/// The error injected into failed requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedError {
    /// 500 InternalError.
    ServerError,
    /// 429 TooManyRequests with `Retry-After`.
    TooManyRequests {
        /// Seconds in `Retry-After`.
        retry_after_secs: u64,
    },
}

#[derive(Debug, Default)]
struct Settings {
    failure: Option<(f64, InjectedError)>,
    latency: Duration,
    /// Requests to fail by what they target, each counted down.
    targeted: Vec<(Target, u32)>,
}

/// Requests of one method on one kind of resource (and subresource, `status` or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `GET`, `POST`, `PATCH`, `PUT`, `DELETE`.
    pub method: String,
    /// The resource's plural, e.g. `nodeclaims`.
    pub plural: String,
    pub subresource: Option<String>,
}

/// Shared fault state; the server consults it on every request.
#[derive(Debug)]
pub struct FaultState {
    settings: Mutex<Settings>,
    drops: watch::Sender<u64>,
    injected: AtomicU64,
}

impl FaultState {
    pub(crate) fn new() -> Self {
        let (drops, _) = watch::channel(0);
        Self {
            settings: Mutex::new(Settings::default()),
            drops,
            injected: AtomicU64::new(0),
        }
    }

    /// Watches end when this changes.
    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.drops.subscribe()
    }

    /// The error a request aimed at `target` is failed with, if one is due.
    pub(crate) fn targeted(&self, target: &Target) -> Option<ApiError> {
        let mut settings = lock(&self.settings);
        let (_, left) = settings
            .targeted
            .iter_mut()
            .find(|(t, left)| t == target && *left > 0)?;
        *left -= 1;
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(ApiError::internal("injected fault: internal error"))
    }

    /// The latency to add and, by chance, the error to answer with.
    pub(crate) fn roll(&self) -> (Duration, Option<ApiError>) {
        let settings = lock(&self.settings);
        let error = settings.failure.and_then(|(fraction, kind)| {
            (rand::rng().random::<f64>() < fraction).then(|| {
                self.injected.fetch_add(1, Ordering::Relaxed);
                match kind {
                    InjectedError::ServerError => {
                        ApiError::internal("injected fault: internal error")
                    }
                    InjectedError::TooManyRequests { retry_after_secs } => {
                        let mut err = ApiError::new(
                            Reason::TooManyRequests,
                            "injected fault: too many requests, please try again later",
                        );
                        err.retry_after = Some(retry_after_secs);
                        err
                    }
                }
            })
        });
        (settings.latency, error)
    }
}

/// Handle to inject faults into a running server.
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<FaultState>,
    registry: Arc<Registry>,
}

impl Faults {
    pub(crate) fn new(state: Arc<FaultState>, registry: Arc<Registry>) -> Self {
        Self { state, registry }
    }

    /// Ends every open watch stream now (clients see a clean end of stream and re-watch).
    pub fn drop_watches(&self) {
        self.state.drops.send_modify(|epoch| *epoch += 1);
    }

    /// Fails `fraction` (0.0–1.0) of resource requests with `error`.
    pub fn fail_requests(&self, fraction: f64, error: InjectedError) {
        lock(&self.state.settings).failure = Some((fraction.clamp(0.0, 1.0), error));
    }

    /// Fails the next `count` requests aimed at `target` with 500 (e.g. a NodeClaim's status
    /// write, `PATCH nodeclaims/status`), whatever else is set.
    pub fn fail_next(&self, target: Target, count: u32) {
        lock(&self.state.settings).targeted.push((target, count));
    }

    /// Stops failing requests.
    pub fn stop_failing(&self) {
        lock(&self.state.settings).failure = None;
    }

    /// Adds `latency` before every resource request is served.
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state.settings).latency = latency;
    }

    /// Drops all watch history: a watch or continue token from before now gets 410 Gone.
    pub fn compact(&self) {
        for ts in self.registry.store.all() {
            ts.compact();
        }
    }

    /// Removes failures and latency.
    pub fn clear(&self) {
        *lock(&self.state.settings) = Settings::default();
    }

    /// How many requests have been failed on purpose so far.
    pub fn injected_failures(&self) -> u64 {
        self.state.injected.load(Ordering::Relaxed)
    }
}
