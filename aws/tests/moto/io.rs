//! The controller's AWS clients send every call from a runtime of their own
//! (`kerf_aws::io`). A connection one thread's call opened is lent to other threads' calls by
//! the client's pool: those must not depend on the opener's runtime being driven, and a call
//! dropped by its caller must not reach EC2. moto's server closes every connection after one
//! answer where EC2 keeps it alive, so the first test talks to moto through [`relay`], an
//! HTTP/1.1 relay that keeps its clients' connections alive. The SDK's client builder offers
//! no bound on its pool: the test forces reuse the way the pool works, one call after another,
//! and checks it by the connection metadata the SDK captures for each call (the second call's
//! local address is the first's).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::Poll;
use std::time::Duration;

use aws_sdk_ec2::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents, SharedInterceptor};
use aws_sdk_ec2::types::Filter;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::connection::CaptureSmithyConnection;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use kerf_aws::clients::AwsClients;
use tokio::runtime::Runtime;

use crate::support::{REGION, moto, setup_clients, tag, vpc};

/// How long a call may take to be answered by moto.
const PATIENCE: Duration = Duration::from_secs(30);

/// How long the thread that opened the connection stays blocked: far longer than
/// [`PATIENCE`], so a call that needs its runtime cannot finish in time.
const BLOCKED: Duration = Duration::from_secs(120);

/// How long the opener's runtime stays driven after its call, as an actor's does between
/// messages: the pool takes a connection back in a task of the runtime its call ran on.
const SETTLE: Duration = Duration::from_millis(200);

/// Each attempt of the clients' calls, in order, with the local address of the connection
/// that answered it (none for an attempt that got no answer).
#[derive(Clone, Debug, Default)]
struct Attempts(Arc<Mutex<Vec<Option<SocketAddr>>>>);

impl Attempts {
    fn seen(&self) -> Vec<Option<SocketAddr>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Intercept for Attempts {
    fn name(&self) -> &'static str {
        "Attempts"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(None);
        Ok(())
    }

    fn read_after_transmit(
        &self,
        _context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let local = cfg
            .load::<CaptureSmithyConnection>()
            .and_then(CaptureSmithyConnection::get)
            .and_then(|connection| connection.local_addr())
            .ok_or("the SDK captured no connection for the call")?;
        if let Some(last) = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_mut()
        {
            *last = Some(local);
        }
        Ok(())
    }
}

/// The endpoint of a relay to moto that keeps its clients' connections alive, as EC2 does;
/// each request goes on to moto over a connection of its own. It runs on a thread of its own,
/// started once for this test binary.
fn relay() -> &'static str {
    static RELAY: OnceLock<(Runtime, String)> = OnceLock::new();
    &RELAY
        .get_or_init(|| {
            let moto: SocketAddr = moto()
                .endpoint()
                .trim_start_matches("http://")
                .parse()
                .expect("moto listens on an address");
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("the relay's runtime starts");
            let listener = runtime
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .expect("the relay listens");
            let endpoint = format!(
                "http://{}",
                listener.local_addr().expect("the relay's address")
            );
            runtime.spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        let forward =
                            hyper::service::service_fn(move |request| forward(request, moto));
                        // A connection that fails ends alone; the test sees its call fail.
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), forward)
                            .await;
                    });
                }
            });
            (runtime, endpoint)
        })
        .1
}

/// Sends `request` on to moto over a new connection and answers with moto's response, minus
/// its `Connection: close`.
async fn forward(
    request: hyper::Request<hyper::body::Incoming>,
    moto: SocketAddr,
) -> Result<hyper::Response<Full<Bytes>>, BoxError> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let stream = tokio::net::TcpStream::connect(moto).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let response = sender
        .send_request(hyper::Request::from_parts(parts, Full::new(body)))
        .await?;
    let (mut parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    parts.headers.remove(http::header::CONNECTION);
    Ok(hyper::Response::from_parts(parts, Full::new(body)))
}

/// A runtime on the calling thread only, as an actor's arbiter has.
fn thread_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts")
}

#[test]
fn a_call_is_answered_while_the_thread_that_opened_its_connection_is_blocked() {
    let endpoint = relay();
    // The I/O runtime, as the controller's: driven by threads of its own.
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("the I/O runtime starts");
    let attempts = Attempts::default();
    let clients = io
        .block_on(AwsClients::for_endpoint_on(
            io.handle().clone(),
            endpoint,
            REGION,
            &[SharedInterceptor::new(attempts.clone())],
        ))
        .expect("clients");
    let (opened_tx, opened) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let opener = std::thread::spawn({
        let clients = clients.clone();
        move || {
            let runtime = thread_runtime();
            let answered = runtime.block_on(async {
                let answered = clients.ec2.describe_availability_zones().send().await;
                tokio::time::sleep(SETTLE).await;
                answered
            });
            let _ = opened_tx.send(answered.map(|_| ()));
            // The thread blocks, as an actor busy with a long synchronous step would: its
            // runtime, and every task on it, is kept but not driven.
            let _ = released.recv_timeout(BLOCKED);
            drop(runtime);
        }
    });
    opened
        .recv()
        .expect("the opener reports")
        .expect("the first call opens the pool's connection");
    let borrower = std::thread::spawn(move || {
        thread_runtime().block_on(async {
            tokio::time::timeout(PATIENCE, clients.ec2.describe_availability_zones().send()).await
        })
    });
    let answered = borrower.join().expect("the borrower's thread ends");
    let _ = release.send(());
    opener.join().expect("the opener's thread ends");
    answered
        .expect("answered while the thread that opened the connection is blocked")
        .expect("DescribeAvailabilityZones");
    // Had the borrowed connection needed the blocked thread, the second call's first attempt
    // would have stalled until the SDK gave up on it and retried over a new connection.
    let seen = attempts.seen();
    let opened = seen[0].expect("the first call's attempt was answered");
    assert_eq!(
        seen,
        [Some(opened), Some(opened)],
        "the second call was answered at its first attempt, over the connection the first \
         opened (an attempt without an address got no answer)"
    );
}

#[test]
fn a_dropped_call_is_cancelled_before_it_reaches_ec2() {
    let endpoint = moto().endpoint().to_owned();
    // The I/O runtime: on no thread of its own, so it runs only when this test drives it.
    let io = thread_runtime();
    let caller = thread_runtime();
    let (clients, vpc) = caller.block_on(async {
        let clients = AwsClients::for_endpoint_on(io.handle().clone(), &endpoint, REGION, &[])
            .await
            .expect("clients");
        (clients, vpc().await)
    });
    assert_eq!(io.metrics().num_alive_tasks(), 0, "nothing runs on I/O yet");
    caller.block_on(async {
        let mut call = std::pin::pin!(
            clients
                .ec2
                .create_tags()
                .resources(&vpc)
                .tags(tag("dropped", "true"))
                .send()
        );
        // Poll the call until it is a task of the I/O runtime, then drop it.
        std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
            Poll::Ready(answered) => panic!("answered by a runtime nobody drives: {answered:?}"),
            Poll::Pending if io.metrics().num_alive_tasks() == 1 => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        })
        .await;
    });
    // Run the I/O runtime until nothing runs on it: an aborted task ends at once; had the
    // dropped call run, it would end once moto answered it and closed its connection.
    io.block_on(async {
        tokio::time::timeout(PATIENCE, async {
            while io.metrics().num_alive_tasks() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the dropped call's task ended");
    });
    io.block_on(
        clients
            .ec2
            .create_tags()
            .resources(&vpc)
            .tags(tag("sent", "true"))
            .send(),
    )
    .expect("a call that is not dropped is answered once I/O runs");
    let tags = caller.block_on(async {
        setup_clients()
            .await
            .ec2
            .describe_tags()
            .filters(Filter::builder().name("resource-id").values(&vpc).build())
            .send()
            .await
            .expect("DescribeTags")
    });
    let keys: Vec<&str> = tags.tags().iter().filter_map(|t| t.key()).collect();
    assert_eq!(keys, ["sent"], "only the call not dropped reached EC2");
}
