//! Retries of throttled requests (429, 503, 504) with kube's server-aware exponential
//! backoff — except evictions. A 429 from the eviction subresource is not throttling: it is
//! a PodDisruptionBudget saying "not now", and the drain must see it at once to back that
//! pod off, publish its event and count the answer (client-go does not retry it either,
//! as the API server sends it without `Retry-After`). kube's built-in retry layer cannot
//! tell the two apart, so the client is built without it and this layer sits on top.

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kube::client::retry::RetryPolicy;
use tower::BoxError;
use tower::retry::{Policy, RetryLayer};

/// `plain` (built with `default_retry` off) retrying what kube would retry, evictions aside.
pub fn except_evictions(plain: Client) -> Client {
    let namespace = plain.default_namespace().to_owned();
    let send = tower::service_fn(move |request: Request<Body>| {
        let client = plain.clone();
        async move { client.send(request).await.map_err(BoxError::from) }
    });
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(
            ExceptEvictions(RetryPolicy::server_retry()),
        ))
        .service(send);
    Client::new(service, namespace)
}

/// kube's policy, never applied to a `pods/{name}/eviction` request.
#[derive(Clone)]
struct ExceptEvictions(RetryPolicy);

fn is_eviction<B>(request: &Request<B>) -> bool {
    request.uri().path().ends_with("/eviction")
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ExceptEvictions {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        request: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if is_eviction(request) {
            return None;
        }
        self.0.retry(request, result)
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        if is_eviction(request) {
            return None;
        }
        <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(
            &mut self.0,
            request,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A client whose every request is answered 429 by a counting service.
    fn throttled(count: Arc<AtomicUsize>) -> Client {
        let service = tower::service_fn(move |_request: Request<Body>| {
            count.fetch_add(1, Ordering::SeqCst);
            async {
                let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":429,"reason":"TooManyRequests","message":"no"}"#;
                Ok::<_, BoxError>(
                    Response::builder()
                        .status(429)
                        .header("content-type", "application/json")
                        .body(Body::from(body.to_vec()))
                        .expect("a response"),
                )
            }
        });
        except_evictions(Client::new(service, "default"))
    }

    async fn post(client: &Client, path: &str) -> u16 {
        let request = Request::post(path).body(b"{}".to_vec()).expect("a request");
        match client.request_text(request).await {
            Err(kube::Error::Api(status)) => status.code,
            other => panic!("expected an API error, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_eviction_refused_by_a_budget_is_answered_at_once_other_429s_are_retried() {
        let count = Arc::new(AtomicUsize::new(0));
        let client = throttled(count.clone());
        assert_eq!(
            post(&client, "/api/v1/namespaces/default/pods/web/eviction").await,
            429
        );
        assert_eq!(count.load(Ordering::SeqCst), 1, "one eviction request");

        count.store(0, Ordering::SeqCst);
        assert_eq!(post(&client, "/api/v1/namespaces/default/pods").await, 429);
        assert!(
            count.load(Ordering::SeqCst) > 1,
            "a throttled create is retried"
        );
    }
}
