//! The fence: the controller's Kubernetes client refuses to mutate while this replica does
//! not lead. Every mutating request (anything but GET, HEAD and OPTIONS) is refused up front
//! when leadership is not held, and one in flight is abandoned the moment leadership is lost
//! — so a leader that stepped down at its renew deadline (its renewals stalled, say) cannot
//! create, patch or delete anything afterwards, whatever actor or task was mid-way, while a
//! new leader takes over. Reads and watches are never fenced: a standby keeps its cluster
//! state warm. Lease writes go through leader election's own client, not this one.
//!
//! This is the in-process counterpart of controller-runtime's exit on a lost lease: kerf
//! stops mutating instead of exiting, so an embedding process (`kerf simulate`, tests)
//! survives a leader change.

use std::future::Future;
use std::pin::Pin;

use http::{Method, Request, Response};
use kerf::cloudprovider::CloudProviderError;
use kube::Client;
use kube::client::Body;
use tokio::sync::watch;

/// Why a request was not sent.
#[derive(Debug, thiserror::Error)]
pub enum Fenced {
    #[error("{0} {1} refused: this replica does not hold the leader lease")]
    NotLeader(Method, String),
    #[error("{0} {1} abandoned: this replica lost the leader lease while it was in flight")]
    LostLeadership(Method, String),
}

/// Whether `error` (or one it was caused by) is a write a fence refused or abandoned — this
/// one or the cloud's ([`super::FencedCloudProvider`]): this replica does not lead, so what
/// it was writing is the next leader's to write.
pub fn is_fenced(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| {
        e.is::<Fenced>()
            || e.downcast_ref::<CloudProviderError>()
                .is_some_and(CloudProviderError::is_not_leader)
    })
}

/// `client`, fenced by `leader` (true while this replica leads).
pub fn fenced(client: Client, leader: watch::Receiver<bool>) -> Client {
    let namespace = client.default_namespace().to_owned();
    let service = tower::service_fn(move |request: Request<Body>| {
        send(client.clone(), leader.clone(), request)
    });
    Client::new(service, namespace)
}

type Sent = Pin<Box<dyn Future<Output = Result<Response<Body>, tower::BoxError>> + Send>>;

fn send(client: Client, mut leader: watch::Receiver<bool>, request: Request<Body>) -> Sent {
    Box::pin(async move {
        if !mutates(request.method()) {
            return Ok(client.send(request).await?);
        }
        let (method, path) = (request.method().clone(), request.uri().path().to_owned());
        if !*leader.borrow_and_update() {
            metrics::counter!(crate::metrics::FENCED_REQUESTS, "client" => "kubernetes")
                .increment(1);
            return Err(Fenced::NotLeader(method, path).into());
        }
        tokio::select! {
            response = client.send(request) => Ok(response?),
            _ = leader.wait_for(|leading| !*leading) => {
                metrics::counter!(crate::metrics::FENCED_REQUESTS, "client" => "kubernetes").increment(1);
                Err(Fenced::LostLeadership(method, path).into())
            }
        }
    })
}

fn mutates(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_write_is_told_apart_from_other_failures() {
        let answer = tower::service_fn(|_: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Body::from(b"{}".to_vec())))
        });
        let (_leading, leader) = watch::channel(false);
        let client = fenced(Client::new(answer, "default"), leader);
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
        let refused = api
            .delete("web-1", &Default::default())
            .await
            .expect_err("a standby may not delete");
        assert!(is_fenced(&refused), "{refused}");
        let other = kube::Error::Service("connection reset".into());
        assert!(!is_fenced(&other));
    }
}
