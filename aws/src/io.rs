//! The AWS SDK's HTTP client, with every call run as a task of a given runtime. The SDK's
//! default client (hyper) spawns each connection's task, and registers its socket, on the
//! runtime of the call that opened it, and its pool then lends that connection to calls from
//! any thread: opened by CreateFleet from an actor's arbiter, a connection is read only while
//! that arbiter's thread runs its event loop, and a call that borrows it (the batcher's
//! DescribeInstances, another actor's TerminateInstances) waits while that arbiter is busy,
//! until the SDK gives the attempt up and retries over a new connection. [`on`] sends each
//! call from a task of the runtime it is given, so connections, their timers and the pool's
//! upkeep live where they are always driven; the caller only awaits the answer and reads the
//! body. The controller passes the runtime its Kubernetes requests run on
//! (`kerf_actors::client::io`). Dropping a call aborts its task, as dropping the SDK's own
//! future would: the leader fence and the SDK's operation timeouts rely on it. Everything
//! above the connection (retries, timeouts, interceptors, signing) is the SDK's, unchanged.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use aws_config::BehaviorVersion;
use aws_sdk_ec2::config::ConfigBag;
use aws_smithy_runtime::client::defaults::default_http_client_plugin_v2;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::{
    RuntimeComponents, RuntimeComponentsBuilder,
};
use aws_smithy_runtime_api::client::runtime_plugin::RuntimePlugin;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// Why the SDK's default HTTP client could not be had.
#[derive(Debug, thiserror::Error)]
#[error(
    "the AWS SDK offers no default HTTP client for behavior version {0:?} (is its \
     `default-https-client` feature off?)"
)]
pub struct NoDefaultClient(BehaviorVersion);

/// The SDK's default HTTP client (the one a client built without an HTTP client of its own
/// uses) with each call run as a task of `io`.
pub fn default_on(io: Handle) -> Result<SharedHttpClient, NoDefaultClient> {
    let version = BehaviorVersion::latest();
    let inner = default_http_client_plugin_v2(version)
        .and_then(|plugin| {
            plugin
                .runtime_components(&RuntimeComponentsBuilder::new("kerf-aws-io"))
                .http_client()
        })
        .ok_or(NoDefaultClient(version))?;
    Ok(on(io, inner))
}

/// `inner` with each call run as a task of `io`.
pub fn on(io: Handle, inner: SharedHttpClient) -> SharedHttpClient {
    SharedHttpClient::new(OnRuntime { io, inner })
}

#[derive(Debug)]
struct OnRuntime {
    io: Handle,
    inner: SharedHttpClient,
}

impl HttpClient for OnRuntime {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(Connector {
            io: self.io.clone(),
            inner: self.inner.http_connector(settings, components),
        })
    }

    fn validate_base_client_config(
        &self,
        runtime_components: &RuntimeComponentsBuilder,
        cfg: &ConfigBag,
    ) -> Result<(), BoxError> {
        self.inner
            .validate_base_client_config(runtime_components, cfg)
    }

    fn validate_final_config(
        &self,
        runtime_components: &RuntimeComponents,
        cfg: &ConfigBag,
    ) -> Result<(), BoxError> {
        self.inner.validate_final_config(runtime_components, cfg)
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

#[derive(Debug)]
struct Connector {
    io: Handle,
    inner: SharedHttpConnector,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.inner.clone();
        HttpConnectorFuture::new(Sent(
            self.io.spawn(async move { inner.call(request).await }),
        ))
    }
}

/// A call running on the I/O runtime; dropping it aborts the call.
struct Sent(JoinHandle<Result<HttpResponse, ConnectorError>>);

impl Future for Sent {
    type Output = Result<HttpResponse, ConnectorError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(answered) => answered,
            // A call that panicked, or was cancelled by its runtime shutting down, has no
            // answer to classify: it is not retried.
            Err(error) => Err(ConnectorError::other(BoxError::from(error), None)),
        })
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.0.abort();
    }
}
