//! The controller's Kubernetes client, rate-limited on the client side as client-go limits
//! upstream Karpenter's: `KUBE_CLIENT_QPS` requests per second with bursts of up to
//! `KUBE_CLIENT_BURST`, per kind as controller-runtime builds a REST client per kind, so a
//! scale-up cannot flood the API server and its Node writes do not slow its NodeClaim
//! writes. Every request, watches included, takes one token from its kind's [`TokenBucket`]
//! ([`resource::budget_key`]), shared by every clone of the client, waiting when it is
//! empty; throttled requests are retried with kube's backoff, evictions excepted
//! ([`retry`]). Leader election uses a client of its own, off the budget.
//!
//! One divergence in order, not in rate: NodeClaim creates travel in a lane of their own
//! that reserves its tokens, ahead of the kind's other waiting requests, so a large round's
//! creates do not queue behind the launch and status writes of the NodeClaims created just
//! before them. The bucket is the same: the API server sees no more requests per second
//! than upstream would send.
//!
//! Behind its bucket, each kind has at most [`MAX_IN_FLIGHT_REQUESTS_PER_KIND`] requests open
//! at once, watches aside, which bounds the connections kube's HTTP/1 pool opens and keeps
//! ([`in_flight`]). Per kind, as the budget is: a kind's requests never wait for another
//! kind's (a large round's NodeClaim creates for its events and pod nominations).
//!
//! Every request runs on the process's I/O runtime ([`io`]), never on the calling actor's
//! thread, so no actor's thread owns a connection another actor's request may borrow.

mod bucket;
mod in_flight;
pub mod io;
mod resource;
mod retry;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use kube::Client;
use kube::client::ClientBuilder;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

pub use bucket::TokenBucket;
pub use in_flight::MAX_IN_FLIGHT_REQUESTS_PER_KIND;

pub use retry::except_evictions;

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("building the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("starting the I/O runtime for the Kubernetes client: {0}")]
    IoRuntime(#[from] std::io::Error),
}

/// A client for `config` that sends at most `qps` requests per second, `burst` at once, of
/// each kind, NodeClaim creates first, has at most [`MAX_IN_FLIGHT_REQUESTS_PER_KIND`] of
/// each kind open at once besides its watches ([`in_flight`]), and retries throttled
/// requests except evictions ([`retry`]); every request, its retries and its wait for a token
/// run on the I/O runtime ([`io`]).
pub fn build(mut config: kube::Config, qps: u32, burst: u32) -> Result<Client, BuildError> {
    config.default_retry = false;
    let io = io::handle()?;
    // Built inside the I/O runtime: the buffers each layer spawns a task for run there too.
    let _on_io = io.enter();
    let unlimited = ClientBuilder::try_from(config)?.build();
    Ok(io::on(
        io.clone(),
        except_evictions(per_kind(unlimited, qps, burst)),
    ))
}

/// `unlimited` behind a budget of `qps` and `burst` per kind, NodeClaim creates first.
fn per_kind(unlimited: Client, qps: u32, burst: u32) -> Client {
    let namespace = unlimited.default_namespace().to_owned();
    let kinds: Arc<Mutex<HashMap<String, Lanes>>> = Arc::default();
    let send = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let lane = {
            let mut kinds = kinds.lock().unwrap_or_else(PoisonError::into_inner);
            let lanes = kinds
                .entry(resource::budget_key(request.uri().path()))
                .or_insert_with(|| Lanes::new(&unlimited, qps, burst));
            if is_nodeclaim_create(&request) {
                lanes.first.clone()
            } else {
                lanes.behind.clone()
            }
        };
        async move { lane.send(request).await }
    });
    Client::new(send, namespace)
}

/// One kind's budget: a lane whose requests go first (NodeClaim creates) and one for the
/// others, on one bucket.
struct Lanes {
    first: Client,
    behind: Client,
}

impl Lanes {
    fn new(unlimited: &Client, qps: u32, burst: u32) -> Self {
        let limit = RateLimitLayer::new(qps, burst);
        let capped = in_flight::capped(unlimited.clone(), MAX_IN_FLIGHT_REQUESTS_PER_KIND);
        Self {
            first: through(&limit.first(), capped.clone()),
            behind: through(&limit, capped),
        }
    }
}

fn is_nodeclaim_create<B>(request: &http::Request<B>) -> bool {
    request.method() == http::Method::POST
        && request.uri().path().trim_end_matches('/') == NODECLAIMS_PATH
}

/// The shortest wait before a request behind reserved tokens looks again.
const MIN_RECHECK: Duration = Duration::from_millis(1);

/// The collection NodeClaims are created in.
const NODECLAIMS_PATH: &str = "/apis/karpenter.sh/v1/nodeclaims";

/// `client` with each request taking a token of `limit` first.
fn through(limit: &RateLimitLayer, client: Client) -> Client {
    let namespace = client.default_namespace().to_owned();
    let send = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let client = client.clone();
        async move { client.send(request).await }
    });
    Client::new(limit.layer(send), namespace)
}

/// Wraps a service in [`RateLimited`], all wrapped services sharing one bucket.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
    lane: Lane,
}

/// How a request waits for its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// Reserves the next token, as client-go's limiter does.
    First,
    /// Takes a token only once none is reserved ahead: gives way to [`Lane::First`].
    Behind,
}

impl RateLimitLayer {
    pub fn new(qps: u32, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst, Instant::now()))),
            lane: Lane::Behind,
        }
    }

    /// A layer on the same bucket whose requests go ahead of this one's.
    pub fn first(&self) -> Self {
        Self {
            bucket: Arc::clone(&self.bucket),
            lane: Lane::First,
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: Arc::clone(&self.bucket),
            lane: self.lane,
            permit: Permit::None,
        }
    }
}

/// A service that is ready only once it holds a token for its next request.
#[derive(Debug)]
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    lane: Lane,
    permit: Permit,
}

#[derive(Debug)]
enum Permit {
    None,
    /// A token was reserved ([`Lane::First`]) and becomes usable when the sleep ends, or
    /// ([`Lane::Behind`]) one is looked for again then.
    Waiting(Pin<Box<Sleep>>),
    Held,
}

impl<S: Clone> Clone for RateLimited<S> {
    /// A clone shares the bucket but not the permit: each request takes its own token.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            bucket: Arc::clone(&self.bucket),
            lane: self.lane,
            permit: Permit::None,
        }
    }
}

impl<S> RateLimited<S> {
    /// A token now, or how long to wait: for a reserved one ([`Lane::First`]), or before
    /// looking again ([`Lane::Behind`]).
    fn take(&self, now: Instant) -> Result<(), Duration> {
        let mut bucket = self
            .bucket
            .lock()
            // The bucket is plain numbers: a panic elsewhere cannot leave it torn.
            .unwrap_or_else(PoisonError::into_inner);
        match self.lane {
            Lane::First => match bucket.reserve(now) {
                wait if wait.is_zero() => Ok(()),
                wait => Err(wait),
            },
            Lane::Behind if bucket.try_take(now) => Ok(()),
            // At least a timer tick, so a rounding error cannot spin.
            Lane::Behind => Err(bucket.until_available(now).max(MIN_RECHECK)),
        }
    }
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        loop {
            match &mut self.permit {
                Permit::None => {
                    self.permit = match self.take(Instant::now()) {
                        Ok(()) => Permit::Held,
                        Err(wait) => Permit::Waiting(Box::pin(tokio::time::sleep(wait))),
                    };
                }
                Permit::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    self.permit = match self.lane {
                        Lane::First => Permit::Held,
                        Lane::Behind => Permit::None,
                    };
                }
                Permit::Held => return self.inner.poll_ready(cx),
            }
        }
    }

    fn call(&mut self, request: R) -> Self::Future {
        // tower's contract: `call` follows a ready `poll_ready`, which left a token held.
        self.permit = Permit::None;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::time::Duration;
    use tower::ServiceExt;

    /// Sends `n` requests one after another; returns when each was sent, from the start.
    async fn send_times(layer: &RateLimitLayer, n: usize) -> Vec<Duration> {
        let start = Instant::now();
        let mut service = layer.layer(tower::service_fn(move |()| async move {
            Ok::<_, Infallible>(start.elapsed())
        }));
        let mut sent = Vec::new();
        for _ in 0..n {
            let ready = service.ready().await.expect("infallible");
            sent.push(ready.call(()).await.expect("infallible"));
        }
        sent
    }

    fn millis(times: &[Duration]) -> Vec<u64> {
        times
            .iter()
            .map(|t| u64::try_from(t.as_millis()).expect("test durations are short"))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn requests_beyond_the_burst_are_spaced_by_the_rate() {
        let layer = RateLimitLayer::new(10, 3);
        let sent = millis(&send_times(&layer, 6).await);
        assert_eq!(&sent[..3], &[0, 0, 0], "the burst goes at once: {sent:?}");
        // Then one every 100 ms (tokio timers have millisecond resolution).
        for (i, at) in sent[3..].iter().enumerate() {
            let expected = 100 * (i as u64 + 1);
            assert!(
                (expected..=expected + 2).contains(at),
                "request {} at {at} ms, expected {expected} ms: {sent:?}",
                i + 3
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn services_from_one_layer_share_the_bucket() {
        let layer = RateLimitLayer::new(1, 2);
        let first = millis(&send_times(&layer, 2).await);
        assert_eq!(first, vec![0, 0]);
        // The second service finds the bucket the first emptied.
        let second = millis(&send_times(&layer, 1).await);
        assert!((1000..=1002).contains(&second[0]), "{second:?}");
    }

    /// The requests a [`recording`] client was sent: method, path, millis since start.
    type Sent = Arc<Mutex<Vec<(http::Method, String, u64)>>>;

    /// A client answering every request at once, recording it.
    fn recording(start: Instant, sent: &Sent) -> Client {
        let record = Arc::clone(sent);
        let answer = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let at = u64::try_from(start.elapsed().as_millis()).expect("short");
            record.lock().expect("not poisoned").push((
                request.method().clone(),
                request.uri().path().to_owned(),
                at,
            ));
            async {
                Ok::<_, Infallible>(http::Response::new(kube::client::Body::from(
                    b"{}".to_vec(),
                )))
            }
        });
        Client::new(answer, "default")
    }

    fn request(method: http::Method, path: &str) -> http::Request<Vec<u8>> {
        http::Request::builder()
            .method(method)
            .uri(path)
            .body(b"{}".to_vec())
            .expect("request")
    }

    #[tokio::test(start_paused = true)]
    async fn nodeclaim_creates_go_ahead_of_requests_already_waiting() {
        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let client = per_kind(recording(start, &sent), 10, 1);
        // A backlog of status writes, the first taking the only token...
        let mut waiting = Vec::new();
        for _ in 0..4 {
            let client = client.clone();
            let patch = request(
                http::Method::PATCH,
                "/apis/karpenter.sh/v1/nodeclaims/a/status",
            );
            waiting.push(tokio::spawn(
                async move { client.request_text(patch).await },
            ));
        }
        // Every write is on its way, the first sent, the rest waiting for a token.
        tokio::time::sleep(Duration::from_millis(10)).await;
        // ...then a round's creates.
        for _ in 0..3 {
            let create = request(http::Method::POST, NODECLAIMS_PATH);
            client.request_text(create).await.expect("answered");
        }
        for patch in waiting {
            patch.await.expect("joined").expect("answered");
        }
        let order = sent.lock().expect("not poisoned").clone();
        let methods: Vec<&str> = order.iter().map(|(m, _, _)| m.as_str()).collect();
        assert_eq!(
            methods,
            ["PATCH", "POST", "POST", "POST", "PATCH", "PATCH", "PATCH"],
            "{order:?}"
        );
        // The budget is unchanged: one request per 100 ms after the burst.
        for (i, (_, _, at)) in order.iter().enumerate() {
            let expected = 100 * i as u64;
            assert!(
                (expected..=expected + 3).contains(at),
                "request {i} at {at} ms: {order:?}"
            );
        }
    }

    #[tokio::test]
    async fn one_kinds_open_requests_do_not_hold_back_another_kinds() {
        // Pods' requests are held open until the test ends; every other kind's answer at once.
        let held = Arc::new(tokio::sync::Notify::new());
        let server = {
            let held = Arc::clone(&held);
            tower::service_fn(move |request: http::Request<kube::client::Body>| {
                let held = Arc::clone(&held);
                async move {
                    if request
                        .uri()
                        .path()
                        .starts_with("/api/v1/namespaces/default/pods")
                    {
                        held.notified().await;
                    }
                    let answer = http::Response::new(kube::client::Body::from(b"{}".to_vec()));
                    Ok::<_, Infallible>(answer)
                }
            })
        };
        let client = per_kind(Client::new(server, "default"), 10_000, 10_000);
        let pods: Vec<_> = (0..MAX_IN_FLIGHT_REQUESTS_PER_KIND + 8)
            .map(|i| {
                let client = client.clone();
                let path = format!("/api/v1/namespaces/default/pods/p{i}");
                tokio::spawn(async move {
                    client
                        .request_text(request(http::Method::PATCH, &path))
                        .await
                })
            })
            .collect();
        tokio::task::yield_now().await;
        let create = request(http::Method::POST, NODECLAIMS_PATH);
        let answered = tokio::time::timeout(Duration::from_secs(5), client.request_text(create));
        assert!(
            matches!(answered.await, Ok(Ok(_))),
            "a NodeClaim create goes while every pod permit is held"
        );
        held.notify_waiters();
        for pod in pods {
            pod.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_kind_spends_a_budget_of_its_own() {
        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let client = per_kind(recording(start, &sent), 10, 1);
        let nodeclaim_status = "/apis/karpenter.sh/v1/nodeclaims/a/status";
        let nodeclaim = "/apis/karpenter.sh/v1/nodeclaims/b";
        let node = "/api/v1/nodes/n";
        let eviction = "/api/v1/namespaces/default/pods/p/eviction";
        for path in [nodeclaim_status, node, eviction, nodeclaim] {
            let patch = request(http::Method::PATCH, path);
            client.request_text(patch).await.expect("answered");
        }
        let at: HashMap<String, u64> = sent
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(_, path, at)| (path.clone(), *at))
            .collect();
        // Each kind's first request takes its own bucket's only token...
        for path in [nodeclaim_status, node, eviction] {
            assert_eq!(at[path], 0, "{path}: {at:?}");
        }
        // ...and a NodeClaim's object waits for the token its status took.
        assert!((100..=102).contains(&at[nodeclaim]), "{at:?}");
    }

    #[test]
    fn only_nodeclaim_creates_take_the_first_lane() {
        let get = request(http::Method::GET, NODECLAIMS_PATH);
        let create_pod = request(http::Method::POST, "/api/v1/namespaces/a/pods");
        let create = request(
            http::Method::POST,
            "/apis/karpenter.sh/v1/nodeclaims?fieldManager=x",
        );
        assert!(is_nodeclaim_create(&create));
        assert!(!is_nodeclaim_create(&get));
        assert!(!is_nodeclaim_create(&create_pod));
    }

    #[tokio::test]
    async fn a_client_builds_from_a_config() {
        let uri: http::Uri = "https://127.0.0.1:6443".parse().expect("valid uri");
        let client = build(kube::Config::new(uri), 200, 300).expect("client builds");
        assert_eq!(client.default_namespace(), "default");
    }
}
