//! The controller's Kubernetes client, rate-limited on the client side as client-go limits
//! upstream Karpenter's: `KUBE_CLIENT_QPS` requests per second with bursts of up to
//! `KUBE_CLIENT_BURST`, so a scale-up of thousands of pods cannot flood the API server (which
//! would answer with 429s and starve every other controller). The limit is a tower layer on
//! kube's default service stack: every request, watches included, takes one token from a
//! [`TokenBucket`] shared by all clones of the client, waiting for it when the bucket is
//! empty. kube's client funnels requests through one buffered service, so waiting requests
//! are served in order. Throttled requests are retried with kube's backoff, evictions
//! excepted ([`retry`]).

mod bucket;
mod retry;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use kube::Client;
use kube::client::ClientBuilder;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

pub use bucket::TokenBucket;

pub use retry::except_evictions;

/// A client for `config` that sends at most `qps` requests per second, `burst` at once, and
/// retries throttled requests except evictions ([`retry`]).
pub fn build(mut config: kube::Config, qps: u32, burst: u32) -> Result<Client, kube::Error> {
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config)?;
    let plain = builder.with_layer(&RateLimitLayer::new(qps, burst)).build();
    Ok(except_evictions(plain))
}

/// `client` behind a rate limit of its own (`qps` requests per second, `burst` at once),
/// for a class of requests kept off the budget the controller's other requests share.
pub fn limited(client: Client, qps: u32, burst: u32) -> Client {
    let namespace = client.default_namespace().to_owned();
    let send = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let client = client.clone();
        async move { client.send(request).await }
    });
    Client::new(RateLimitLayer::new(qps, burst).layer(send), namespace)
}

/// Wraps a service in [`RateLimited`], all wrapped services sharing one bucket.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    pub fn new(qps: u32, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst, Instant::now()))),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: Arc::clone(&self.bucket),
            permit: Permit::None,
        }
    }
}

/// A service that is ready only once it holds a token for its next request.
#[derive(Debug)]
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    permit: Permit,
}

#[derive(Debug)]
enum Permit {
    None,
    /// A token was reserved; it becomes usable when the sleep ends.
    Waiting(Pin<Box<Sleep>>),
    Held,
}

impl<S: Clone> Clone for RateLimited<S> {
    /// A clone shares the bucket but not the permit: each request takes its own token.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            bucket: Arc::clone(&self.bucket),
            permit: Permit::None,
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
                    let wait = self
                        .bucket
                        .lock()
                        // The bucket is plain numbers: a panic elsewhere cannot leave it torn.
                        .unwrap_or_else(PoisonError::into_inner)
                        .reserve(Instant::now());
                    self.permit = if wait.is_zero() {
                        Permit::Held
                    } else {
                        Permit::Waiting(Box::pin(tokio::time::sleep(wait)))
                    };
                }
                Permit::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    self.permit = Permit::Held;
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

    #[tokio::test(start_paused = true)]
    async fn a_limited_client_holds_its_requests_to_its_own_rate() {
        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&sent);
        let answer = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            record
                .lock()
                .expect("not poisoned")
                .push(u64::try_from(start.elapsed().as_millis()).expect("short"));
            async {
                Ok::<_, Infallible>(http::Response::new(kube::client::Body::from(
                    b"{}".to_vec(),
                )))
            }
        });
        let unlimited = Client::new(answer, "default");
        let own = limited(unlimited, 10, 2);
        assert_eq!(own.default_namespace(), "default");
        for _ in 0..4 {
            let get = http::Request::get("/api")
                .body(Vec::new())
                .expect("request");
            own.request_text(get).await.expect("answered");
        }
        let at = sent.lock().expect("not poisoned").clone();
        assert_eq!(&at[..2], &[0, 0], "the burst goes at once: {at:?}");
        assert!((100..=102).contains(&at[2]), "{at:?}");
        assert!((200..=204).contains(&at[3]), "{at:?}");
    }

    #[tokio::test]
    async fn a_client_builds_from_a_config() {
        let uri: http::Uri = "https://127.0.0.1:6443".parse().expect("valid uri");
        let client = build(kube::Config::new(uri), 200, 300).expect("client builds");
        assert_eq!(client.default_namespace(), "default");
    }
}
