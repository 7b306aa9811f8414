//! At most [`MAX_IN_FLIGHT`] of the controller's requests in flight at once, watches apart.
//! client-go speaks HTTP/2 to the API server, where a connection's streams (250 by Go's
//! default) bound what is in flight on it; kube's client speaks HTTP/1.1, one request per
//! connection, so when the API server answers slowly every request the rate budget lets
//! through opens a connection of its own, with its buffers and dispatch channel (tens of KiB
//! each, hundreds of connections in a `kerf simulate --pods 20000` scale-out). A request
//! holds its permit until its response body is read to the end or dropped, since the
//! connection is busy until then. Watches hold their connection for as long as they run and
//! are sent without a permit: one per watched kind.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use kube::Client;
use kube::client::Body;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests in flight at once: one HTTP/2 connection's worth of streams at Go's default, far
/// more than the client budget needs at an API server's usual latency (200 requests per
/// second per kind at 50 ms is 10 per kind).
pub const MAX_IN_FLIGHT: usize = 250;

/// `client` with at most `limit` requests in flight, watches apart.
pub fn limited(client: Client, limit: usize) -> Client {
    let namespace = client.default_namespace().to_owned();
    let permits = Arc::new(Semaphore::new(limit));
    let send = tower::service_fn(move |request: http::Request<Body>| {
        let client = client.clone();
        let permits = Arc::clone(&permits);
        async move {
            if is_watch(&request) {
                return client.send(request).await.map(|r| r.map(Held::free));
            }
            let permit = permits
                .acquire_owned()
                .await
                .map_err(|closed| kube::Error::Service(closed.into()))?;
            let response = client.send(request).await?;
            Ok::<_, kube::Error>(response.map(|body| Held::with(body, permit)))
        }
    });
    Client::new(send, namespace)
}

fn is_watch<B>(request: &http::Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

/// A response body and the permit its request holds until the body ends or is dropped.
struct Held {
    body: Body,
    permit: Option<OwnedSemaphorePermit>,
}

impl Held {
    fn with(body: Body, permit: OwnedSemaphorePermit) -> Self {
        Self {
            body,
            permit: Some(permit),
        }
    }

    fn free(body: Body) -> Self {
        Self { body, permit: None }
    }
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = kube::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, kube::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = frame {
            self.permit = None;
        }
        frame
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A client whose server answers each request after `delay`, counting how many it is
    /// answering at once; its peak is returned by the second value.
    fn slow_server(delay: Duration) -> (Client, Arc<AtomicUsize>) {
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&peak);
        let service = tower::service_fn(move |_request: http::Request<Body>| {
            let (now, peak) = (Arc::clone(&now), Arc::clone(&peak));
            async move {
                let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(at_once, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(http::Response::new(Body::from(b"{}".to_vec())))
            }
        });
        (Client::new(service, "default"), seen)
    }

    fn get(path: &str) -> http::Request<Vec<u8>> {
        http::Request::get(path)
            .body(Vec::new())
            .expect("valid request")
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_the_limit_are_answered_at_once() {
        let (server, peak) = slow_server(Duration::from_millis(100));
        let client = limited(server, 4);
        let sends = (0..20).map(|_| client.request_text(get("/api/v1/pods/a")));
        let answers = futures::future::join_all(sends).await;
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        assert_eq!(peak.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn watches_take_no_permit() {
        let (server, peak) = slow_server(Duration::from_millis(100));
        let client = limited(server, 1);
        let sends = (0..3).map(|_| client.request_text(get("/api/v1/pods?watch=true&x=1")));
        let answers = futures::future::join_all(sends).await;
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        assert_eq!(peak.load(Ordering::SeqCst), 3, "all three at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_holds_its_permit_until_its_body_is_read() {
        let (server, _) = slow_server(Duration::from_millis(1));
        let client = limited(server, 1);
        let request = get("/api/v1/pods/a").map(Body::from);
        let unread = client.send(request).await.expect("answered");
        let second = client.request_text(get("/api/v1/pods/b"));
        let waited = tokio::time::timeout(Duration::from_secs(5), second).await;
        assert!(
            waited.is_err(),
            "the second request waits for the first body"
        );
        drop(unread);
        let second = client.request_text(get("/api/v1/pods/b"));
        assert_eq!(second.await.expect("answered once the body is gone"), "{}");
    }
}
