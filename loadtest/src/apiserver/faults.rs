//! Fault injection for resilience tests: cut every open watch, fail a fraction of resource
//! requests with 500 or 429 (+ `Retry-After`), fail the next N requests of one method on one
//! resource (a status write), add latency, and compact history so that
//! resuming a watch from an old resourceVersion gets 410 Gone. Discovery and `/version`
//! are never failed, so clients can always connect. A client that names itself in the
//! [`CLIENT_HEADER`] header can be partitioned away (its resource requests hang and are
//! never applied, as if lost on the network), or its requests to Leases alone delayed (a
//! leader whose renewals stall while its other writes go through), and its mutating requests
//! are logged, so a test can tell which replica wrote what, and when.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use tokio::time::Instant;

use rand::Rng;
use tokio::sync::watch;

use super::error::{ApiError, Reason};
use super::registry::Registry;
use super::store::lock;

/// The request header a test client names itself in (see the module doc).
pub const CLIENT_HEADER: &str = "x-emulator-client";

/// A mutating request a named client made: when it reached the store, and what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    pub at: Instant,
    pub method: Method,
    pub path: String,
}

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
    partitioned: Mutex<HashSet<String>>,
    /// Latency added to each named client's requests to Leases.
    lease_delays: Mutex<HashMap<String, Duration>>,
    mutations: Mutex<Vec<(String, Mutation)>>,
}

impl FaultState {
    pub(crate) fn new() -> Self {
        let (drops, _) = watch::channel(0);
        Self {
            settings: Mutex::new(Settings::default()),
            drops,
            injected: AtomicU64::new(0),
            partitioned: Mutex::new(HashSet::new()),
            lease_delays: Mutex::new(HashMap::new()),
            mutations: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn is_partitioned(&self, client: &str) -> bool {
        lock(&self.partitioned).contains(client)
    }

    /// The latency `client`'s requests to Leases get, if any.
    pub(crate) fn lease_delay(&self, client: &str) -> Option<Duration> {
        lock(&self.lease_delays).get(client).copied()
    }

    pub(crate) fn record_mutation(&self, client: &str, method: &Method, path: &str) {
        let mutation = Mutation {
            at: Instant::now(),
            method: method.clone(),
            path: path.to_owned(),
        };
        lock(&self.mutations).push((client.to_owned(), mutation));
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

    /// Cuts `client` off: its resource requests from now on hang and are never applied.
    pub fn partition(&self, client: &str) {
        lock(&self.state.partitioned).insert(client.to_owned());
    }

    /// Lets `client`'s new requests through again (the ones that hung stay lost).
    pub fn heal(&self, client: &str) {
        lock(&self.state.partitioned).remove(client);
    }

    /// Delays every request `client` makes to a Lease by `latency` (its other requests are
    /// served as usual), until [`Self::undelay_leases`].
    pub fn delay_leases(&self, client: &str, latency: Duration) {
        lock(&self.state.lease_delays).insert(client.to_owned(), latency);
    }

    /// Ends [`Self::delay_leases`] for `client` (requests already waiting finish their wait).
    pub fn undelay_leases(&self, client: &str) {
        lock(&self.state.lease_delays).remove(client);
    }

    /// The mutating requests `client` made that reached the store, in order.
    pub fn mutations_from(&self, client: &str) -> Vec<Mutation> {
        lock(&self.state.mutations)
            .iter()
            .filter(|(from, _)| from == client)
            .map(|(_, m)| m.clone())
            .collect()
    }

    /// How many requests have been failed on purpose so far.
    pub fn injected_failures(&self) -> u64 {
        self.state.injected.load(Ordering::Relaxed)
    }
}
