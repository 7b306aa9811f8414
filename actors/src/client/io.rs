//! The runtime the controller's Kubernetes requests run on. hyper spawns each connection's
//! task, and registers its socket, on the runtime of the request that opened it, and its pool
//! then lends that connection to requests from any thread: sent from an actor's arbiter, a
//! connection would be read only while that arbiter's thread runs its event loop, and a busy
//! or stopped arbiter would stall every request that borrowed one of its connections. Here
//! each request runs as a task of one process-wide runtime that runs nothing else, so
//! connections, their timers and the client's buffers live where they are always driven;
//! the caller only awaits the answer and reads the body. A caller that gives up aborts its
//! request's task, as dropping the request would (the fence relies on it). The controller's
//! AWS calls run on this runtime too (`kerf_aws::io`), for the same reason.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;
use tower::BoxError;

/// Worker threads of the I/O runtime: they only move bytes between sockets and callers
/// (decoding happens in the callers), so two keep up with the controller's request budget
/// and leave the cores to the actors.
pub const IO_WORKER_THREADS: usize = 2;

/// The process's I/O runtime, built on first use and never dropped.
static IO: OnceLock<Runtime> = OnceLock::new();

/// The I/O runtime's handle, building it on first use; its threads (`kerf-io`) allocate for
/// the owner the calling thread allocates for (`kerf_heap`), as an actor's arbiter does.
pub fn handle() -> std::io::Result<Handle> {
    if let Some(runtime) = IO.get() {
        return Ok(runtime.handle().clone());
    }
    let owner = kerf_heap::current();
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(IO_WORKER_THREADS)
        .thread_name("kerf-io")
        .enable_all()
        .on_thread_start(move || kerf_heap::set_current(owner))
        .build()?;
    if let Err(unused) = IO.set(built) {
        // A racing caller's runtime won; this one ran nothing, and may be dropped from async
        // code only this way.
        unused.shutdown_background();
    }
    IO.get()
        .map(|runtime| runtime.handle().clone())
        .ok_or_else(|| std::io::Error::other("the I/O runtime was not kept"))
}

/// `client` with each request sent as a task of `io`.
pub fn on(io: Handle, client: Client) -> Client {
    let namespace = client.default_namespace().to_owned();
    let send = tower::service_fn(move |request: Request<Body>| {
        let client = client.clone();
        Sent(io.spawn(async move { client.send(request).await }))
    });
    Client::new(send, namespace)
}

/// A request running on the I/O runtime; dropping it aborts the request.
struct Sent(JoinHandle<Result<Response<Body>, kube::Error>>);

impl Future for Sent {
    type Output = Result<Response<Body>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(answered) => answered.map_err(BoxError::from),
            Err(error) => Err(BoxError::from(error)),
        })
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.0.abort();
    }
}
