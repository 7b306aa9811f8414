//! The controller's own HTTP endpoints, on the two ports upstream uses: `/metrics`
//! (Prometheus text: the recorder's metrics, then those computed from cluster state) on
//! `METRICS_PORT`, and `/healthz` (the process serves and no actor exhausted its restart
//! budget, [`crate::supervisor`]) and `/readyz` (cluster state has synced) on
//! `HEALTH_PROBE_PORT`; beside `/metrics`, `/explain` (JSON, read-only: what only this
//! replica knows, for `kerf explain`, [`explain`]). Plain HTTP/1 over hyper; each accept loop
//! is supervised.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::state::ClusterState;
use crate::supervisor::{self, Exhausted, Supervision};

pub mod explain;
mod metrics;

pub use explain::ExplainSources;

/// A response body: whole, or streamed (`/metrics`, [`metrics`]).
type Body = UnsyncBoxBody<Bytes, BodyError>;

/// Why a streamed body ended early; hyper then ends the response with an error.
type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// What the metrics port serves from.
#[derive(Clone)]
pub struct Served {
    pub state: Arc<ClusterState>,
    pub explain: Arc<ExplainSources>,
    /// Whether the metrics computed from cluster state are served
    /// (`DISABLE_CLUSTER_STATE_OBSERVABILITY` unset).
    pub observability: bool,
    /// The instance types rounds plan with, once the launching actors start.
    pub instance_types: Arc<std::sync::OnceLock<crate::instance_types::InstanceTypeCache>>,
}

/// Which endpoints a listener answers.
#[derive(Clone)]
enum Endpoints {
    Metrics(Served),
    Probes(Arc<ClusterState>, watch::Receiver<Option<Exhausted>>),
}

/// Binds `addr` and serves `/metrics` and `/explain` until shutdown; returns the bound
/// address.
pub async fn serve_metrics(
    addr: SocketAddr,
    served: Served,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    serve("metrics_server", addr, Endpoints::Metrics(served), shutdown).await
}

/// Binds `addr` and serves `/healthz` (failing once `health` names an actor past its
/// restart budget) and `/readyz` until shutdown.
pub async fn serve_probes(
    addr: SocketAddr,
    state: Arc<ClusterState>,
    health: watch::Receiver<Option<Exhausted>>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    serve(
        "probe_server",
        addr,
        Endpoints::Probes(state, health),
        shutdown,
    )
    .await
}

async fn serve(
    name: &'static str,
    addr: SocketAddr,
    endpoints: Endpoints,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = Arc::new(TcpListener::bind(addr).await?);
    let bound = listener.local_addr()?;
    let task = supervisor::task(name, move || {
        accept(
            name,
            Arc::clone(&listener),
            endpoints.clone(),
            shutdown.clone(),
        )
    });
    Ok((bound, task))
}

/// Serves each connection `listener` accepts until shutdown. A connection whose answer
/// panics is reported as a panic of `name` (logged with its message, counted, held against
/// the restart budget); the others and the accept loop carry on.
async fn accept(
    name: &'static str,
    listener: Arc<TcpListener>,
    endpoints: Endpoints,
    mut shutdown: watch::Receiver<bool>,
) {
    // The connections' tasks run outside the loop's scope: each carries it.
    let supervision = Supervision::current();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let (endpoints, supervision) = (endpoints.clone(), supervision.clone());
        let answering = supervision.clone();
        tokio::spawn(connection(name, supervision, stream, move |req| {
            answer(req, endpoints.clone(), name, answering.clone())
        }));
    }
}

/// Serves one connection with `answer`. A panic while answering is reported as `name`'s in
/// `supervision` (logged with its message, counted, held against the restart budget): a
/// connection shares nothing mutable with the others, so what the panic leaves behind ends
/// with it. A client hanging up mid-request is not our problem to report.
async fn connection<F, Fut>(
    name: &'static str,
    supervision: Supervision,
    stream: TcpStream,
    answer: F,
) where
    F: Fn(Request<Incoming>) -> Fut,
    Fut: Future<Output = Result<Response<Body>, Infallible>>,
{
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service_fn(answer));
    if let Err(panic) = AssertUnwindSafe(served).catch_unwind().await {
        supervision.report_panic(name, &*panic);
    }
}

/// The answer to `req`; `name` and `supervision` are the connection's, for a panic while
/// streaming `/metrics`.
async fn answer(
    req: Request<Incoming>,
    endpoints: Endpoints,
    name: &'static str,
    supervision: Supervision,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path();
    let (status, body) = match (&endpoints, path) {
        (Endpoints::Metrics(served), "/metrics") => {
            let body = metrics::body(served.clone(), name, supervision);
            return Ok(respond(StatusCode::OK, "text/plain; version=0.0.4", body));
        }
        (Endpoints::Metrics(served), kerf::explain::controller::PATH) => {
            match serde_json::to_string(&served.explain.state(&served.state)) {
                Ok(json) => (StatusCode::OK, json),
                Err(error) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("encoding the answer: {error}"),
                ),
            }
        }
        (Endpoints::Probes(_, health), "/healthz") => match &*health.borrow() {
            None => (StatusCode::OK, "ok".to_string()),
            Some(exhausted) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("restart budget exhausted: {exhausted}"),
            ),
        },
        (Endpoints::Probes(state, _), "/readyz") if state.synced() => {
            (StatusCode::OK, "ok".to_string())
        }
        (Endpoints::Probes(..), "/readyz") => (
            StatusCode::SERVICE_UNAVAILABLE,
            "cluster state not synced".to_string(),
        ),
        _ => (StatusCode::NOT_FOUND, "not found".to_string()),
    };
    let content_type = match (&endpoints, status) {
        (Endpoints::Metrics(..), StatusCode::OK) if path == kerf::explain::controller::PATH => {
            "application/json"
        }
        (Endpoints::Metrics(..), _) => "text/plain; version=0.0.4",
        _ => "text/plain",
    };
    let body = Full::new(Bytes::from(body)).map_err(|never| match never {});
    Ok(respond(status, content_type, body.boxed_unsync()))
}

fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(body)
        .expect("status and a static header always build a response")
}

#[cfg(test)]
mod tests;
