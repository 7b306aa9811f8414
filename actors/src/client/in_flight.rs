//! A cap on the requests of one kind open at once, watches aside. kube's HTTP/1 client opens
//! one connection per request in flight and its pool keeps every one it opened (no idle
//! cap): when a kind's bucket lets its burst of 300 go at once, that is 300 connections, each
//! with its own read and write buffers (and, against a real API server, its own TLS session),
//! held long after the burst. The bucket already bounds the rate; this bounds the
//! connections, and so the memory they hold, without slowing the rate: a request holds its
//! permit for milliseconds. A watch holds a connection for as long as it runs, one per kind,
//! and takes no permit.
//!
//! A permit is held until the response's body is dropped, not when its head arrives: the
//! connection goes back to the pool only once the body is read, and a permit returned
//! earlier would let a request open another connection while that one is still busy.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use kube::Client;
use kube::client::Body;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::BoxError;

/// Requests of one kind (watches aside) open at once. A kind's bucket lets 200 a second
/// through at upstream's default; 32 at once carry that at up to 160 ms a request, past
/// which the API server, not the client, is what holds them back. Beyond it a request waits
/// here after taking its token, as it would have waited for a connection.
pub const MAX_IN_FLIGHT_REQUESTS_PER_KIND: usize = 32;

/// `client` with at most `cap` requests but watches open at once.
pub fn capped(client: Client, cap: usize) -> Client {
    let namespace = client.default_namespace().to_owned();
    let permits = Arc::new(Semaphore::new(cap));
    let send = tower::service_fn(move |request: Request<Body>| {
        let (client, permits) = (client.clone(), Arc::clone(&permits));
        async move {
            let permit = if is_watch(&request) {
                None
            } else {
                Some(permits.acquire_owned().await?)
            };
            let response = client.send(request).await?;
            Ok::<_, BoxError>(response.map(|body| Held {
                body,
                _permit: permit,
            }))
        }
    });
    Client::new(send, namespace)
}

/// A watch request (`?watch=true`), which streams for minutes.
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

/// A response body holding its request's permit until it is dropped.
struct Held {
    body: Body,
    _permit: Option<OwnedSemaphorePermit>,
}

impl HttpBody for Held {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body)
            .poll_frame(cx)
            .map_err(BoxError::from)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Response;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A server stand-in that answers each request after `delay` (watches too), counting the
    /// most it held at once.
    fn counting(most: &Arc<AtomicUsize>, delay: Duration) -> Client {
        let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::clone(most));
        let send = tower::service_fn(move |_: Request<Body>| {
            let (open, most) = (Arc::clone(&open), Arc::clone(&most));
            async move {
                most.fetch_max(open.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                open.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, BoxError>(Response::new(Body::from(b"{}".to_vec())))
            }
        });
        Client::new(send, "default")
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path)
            .body(Body::from(Vec::new()))
            .expect("a valid request")
    }

    #[tokio::test]
    async fn no_more_than_the_cap_are_open_and_every_request_is_answered() {
        let most = Arc::new(AtomicUsize::new(0));
        let client = capped(counting(&most, Duration::from_millis(2)), 8);
        let sent: Vec<_> = (0..100)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let path = format!("/api/v1/namespaces/default/pods/p{i}");
                    client
                        .request_text(
                            Request::get(path)
                                .body(Vec::new())
                                .expect("a valid request"),
                        )
                        .await
                })
            })
            .collect();
        for request in sent {
            let answered = request.await.expect("the request task does not panic");
            assert_eq!(answered.expect("answered"), "{}");
        }
        assert_eq!(
            most.load(Ordering::SeqCst),
            8,
            "the cap is reached, not passed"
        );
    }

    #[tokio::test]
    async fn an_unread_body_holds_its_permit_and_a_watch_takes_none() {
        let most = Arc::new(AtomicUsize::new(0));
        let client = capped(counting(&most, Duration::ZERO), 2);
        let held = [
            client.send(get("/api/v1/nodes")).await.expect("answered"),
            client.send(get("/api/v1/nodes")).await.expect("answered"),
        ];
        let third =
            tokio::time::timeout(Duration::from_millis(50), client.send(get("/api/v1/nodes")));
        assert!(third.await.is_err(), "two unread bodies hold both permits");
        let watch = client.send(get("/api/v1/nodes?watch=true&resourceVersion=1"));
        let watched = tokio::time::timeout(Duration::from_secs(5), watch).await;
        assert!(
            matches!(watched, Ok(Ok(_))),
            "a watch goes ahead of the cap"
        );
        drop(held);
        let fourth =
            tokio::time::timeout(Duration::from_secs(5), client.send(get("/api/v1/nodes")));
        assert!(
            matches!(fourth.await, Ok(Ok(_))),
            "a dropped body returns its permit"
        );
    }

    #[test]
    fn watches_are_told_by_their_query() {
        let watch = |path: &str| is_watch(&Request::get(path).body(()).expect("a valid request"));
        assert!(watch("/api/v1/pods?watch=true&resourceVersion=5"));
        assert!(watch("/api/v1/pods?resourceVersion=5&watch=1"));
        assert!(!watch("/api/v1/pods?resourceVersion=5"));
        assert!(!watch("/api/v1/pods?fieldSelector=watch%3Dtrue"));
        assert!(!watch("/api/v1/watchers"));
    }
}
