//! A Kubernetes API server emulator. Controllers reach it over HTTP with an ordinary
//! kubeconfig, exactly as they reach EKS; tests can also reach its storage in process
//! through [`Cluster`]. See the submodules for the semantics each part reproduces.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kerf_loadtest::apiserver::StartError> {
//! use kerf_loadtest::apiserver::{ApiServer, ServerConfig};
//! let server = ApiServer::start(ServerConfig::default()).await?;
//! server.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! server.faults().drop_watches();
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod apply;
pub mod clock;
mod controllers;
pub mod crd;
mod discovery;
pub mod error;
pub mod faults;
mod http;
pub mod kubeconfig;
mod managed;
mod meta;
mod openapi;
pub mod patch;
mod qos;
mod queue;
pub mod rbac;
pub mod registry;
pub mod resources;
pub mod schema;
pub mod selectors;
pub mod store;
mod strict;
mod table;
pub mod watch;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

pub use clock::{Clock, ManualClock, ScaledClock};
pub use controllers::BURST_REPLICAS;
pub use error::{ApiError, Reason};
pub use faults::{Faults, InjectedError, Target as FaultTarget};
pub use registry::{
    DeleteOptions, Deleted, ListQuery, PatchKind, Propagation, Registry, Sub, WriteOptions,
};
pub use schema::FieldValidation;

/// How to run the emulator.
#[derive(Clone)]
pub struct ServerConfig {
    /// Listen address; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Time source (timestamps, grace periods).
    pub clock: Arc<dyn Clock>,
    /// Most changes kept per resource for watches (older resourceVersions get 410).
    pub history_capacity: usize,
    /// Changes older than this leave the history, as kube-apiserver's watch cache drops
    /// them (`None`: only the capacity bounds it).
    pub history_window: Option<Duration>,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// `fieldValidation` when a request names none (see [`registry::RegistryConfig`]).
    pub field_validation: FieldValidation,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            clock: Arc::new(ScaledClock::default()),
            history_capacity: 200_000,
            history_window: Some(store::HISTORY_WINDOW),
            bookmark_interval: Duration::from_secs(10),
            field_validation: FieldValidation::Strict,
        }
    }
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("bind", &self.bind)
            .field("history_capacity", &self.history_capacity)
            .field("history_window", &self.history_window)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("field_validation", &self.field_validation)
            .finish_non_exhaustive()
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding the listen address failed.
    #[error("binding the API emulator to {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Writing the kubeconfig failed.
    #[error(transparent)]
    Kubeconfig(#[from] std::io::Error),
}

/// Completes once `flag` is true (or its sender is gone).
pub(crate) async fn stopped(flag: &mut signal::Receiver<bool>) {
    let _closed = flag.wait_for(|stop| *stop).await;
}

/// Entry point.
#[derive(Debug)]
pub struct ApiServer;

impl ApiServer {
    /// Binds, starts serving and starts the built-in controllers. Must run inside a
    /// multi-threaded tokio runtime.
    pub async fn start(config: ServerConfig) -> Result<RunningServer, StartError> {
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.bind,
            source,
        })?;
        let registry_config = registry::RegistryConfig {
            field_validation: config.field_validation,
            history_capacity: config.history_capacity,
            history_window: config.history_window,
        };
        let registry = Registry::new(
            config.clock.clone(),
            registry_config,
            tokio::runtime::Handle::current(),
        );
        let fault_state = Arc::new(faults::FaultState::new());
        let access = Arc::new(rbac::Access::default());
        let (shutdown_tx, shutdown_rx) = signal::channel(false);
        let requests = RequestCount::default();
        let version = discovery::ServedVersion::default();
        let app = Arc::new(http::App {
            registry: registry.clone(),
            faults: fault_state.clone(),
            address: addr.to_string(),
            bookmark_every: config.bookmark_interval,
            shutdown: shutdown_rx.clone(),
            requests: requests.clone(),
            version: version.clone(),
            access: access.clone(),
        });
        let mut tasks = controllers::spawn_all(&registry, &shutdown_rx);
        tasks.push(tokio::spawn(kerf_heap::owned(
            kerf_heap::Owner::EMULATOR,
            http::serve(listener, app, shutdown_rx),
        )));
        Ok(RunningServer {
            addr,
            version,
            access,
            registry: registry.clone(),
            faults: Faults::new(fault_state, registry),
            shutdown: shutdown_tx,
            tasks,
            requests,
        })
    }
}

/// A running emulator.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    version: discovery::ServedVersion,
    access: Arc<rbac::Access>,
    registry: Arc<Registry>,
    faults: Faults,
    shutdown: signal::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    requests: RequestCount,
}

/// The HTTP requests the emulator received so far; a cheap clone shares the count, so a
/// recorder can read it from its own task while the server runs.
#[derive(Debug, Clone, Default)]
pub struct RequestCount(Arc<AtomicU64>);

impl RequestCount {
    fn add_one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests received since the server started.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl RunningServer {
    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes a kubeconfig for this server to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), std::io::Error> {
        kubeconfig::write(path, &self.url())
    }

    /// The count of HTTP requests received (all clients, discovery included).
    pub fn requests(&self) -> RequestCount {
        self.requests.clone()
    }

    /// Fault injection.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Reports Kubernetes `1.<minor>` from now on, as after a control-plane upgrade.
    pub fn set_kubernetes_minor(&self, minor: u32) {
        self.version.set_minor(minor);
    }

    /// Authentication and RBAC (off until [`rbac::Access::enforce`]).
    pub fn access(&self) -> &rbac::Access {
        &self.access
    }

    /// The grants of the roles bound to `user` that none of its requests has used so far
    /// ([`rbac::Access::unused_by`] over this server's RBAC objects).
    pub fn unused_grants(&self, user: &rbac::User) -> Vec<rbac::Grant> {
        self.access.unused_by(&self.registry, user)
    }

    /// Direct, in-process access to the API (for test setup and simulated components).
    pub fn cluster(&self) -> Cluster {
        Cluster {
            registry: self.registry.clone(),
        }
    }

    /// Stops serving, ends every watch and controller, and waits for them.
    pub async fn shutdown(self) {
        self.shutdown.send_replace(true);
        for task in self.tasks {
            let _joined = task.await;
        }
    }
}

/// The field manager of in-process writes (test set-up, `kerf simulate`'s manifests).
const IN_PROCESS_MANAGER: &str = "kerf-loadtest";

/// In-process access to the emulator's API with the same semantics as HTTP requests.
/// Resources are named by `apiVersion` (`"v1"`, `"karpenter.sh/v1"`) and plural.
#[derive(Debug, Clone)]
pub struct Cluster {
    registry: Arc<Registry>,
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

impl Cluster {
    fn target(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> Result<registry::Target, ApiError> {
        let (group, version) = split_api_version(api_version);
        self.registry.target(group, version, plural, namespace)
    }

    /// The underlying registry (for components that need the full API surface).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Creates an object; the namespace comes from `object.metadata.namespace`.
    pub fn create(
        &self,
        api_version: &str,
        plural: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        let ns = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        let t = self.target(api_version, plural, ns.as_deref())?;
        let opts = WriteOptions {
            field_manager: Some(IN_PROCESS_MANAGER.to_owned()),
            ..WriteOptions::default()
        };
        Ok(self.registry.create(&t, object, &opts)?.object.value())
    }

    /// Reads an object.
    pub fn get(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let t = self.target(api_version, plural, namespace)?;
        Ok(self.registry.get(&t, name)?.value())
    }

    /// Lists objects (all namespaces when `namespace` is `None`) matching a label selector.
    pub fn list(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<Value>, ApiError> {
        let t = self.target(api_version, plural, namespace)?;
        let query = ListQuery {
            labels: selectors::LabelSelector::parse(label_selector)?,
            ..ListQuery::default()
        };
        Ok(self
            .registry
            .list(&t, &query)?
            .items
            .iter()
            .map(|o| o.value())
            .collect())
    }

    /// Patches an object.
    pub fn patch(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        self.patch_sub(api_version, plural, namespace, name, Sub::Main, kind, patch)
    }

    /// Patches an object's status subresource.
    pub fn patch_status(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        self.patch_sub(
            api_version,
            plural,
            namespace,
            name,
            Sub::Status,
            kind,
            patch,
        )
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "private funnel of the two public patch calls"
    )]
    fn patch_sub(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
        sub: Sub,
        kind: PatchKind,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let t = self.target(api_version, plural, namespace)?;
        let opts = WriteOptions {
            field_manager: Some(IN_PROCESS_MANAGER.to_owned()),
            ..WriteOptions::default()
        };
        Ok(self
            .registry
            .patch(&t, name, sub, kind, patch, &opts)?
            .object
            .value())
    }

    /// Deletes an object.
    pub fn delete(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let t = self.target(api_version, plural, namespace)?;
        self.registry.delete(&t, name, opts)
    }

    /// Assigns a pod to a node (`pods/binding`).
    pub fn bind(&self, namespace: &str, pod: &str, node: &str) -> Result<(), ApiError> {
        let t = self.target("v1", "pods", Some(namespace))?;
        self.registry.bind(
            &t,
            pod,
            &serde_json::json!({"target": {"kind": "Node", "name": node}}),
        )
    }

    /// Creates a CRD from its YAML text (e.g. an upstream Karpenter CRD file).
    pub fn apply_crd_yaml(&self, yaml: &str) -> Result<Value, ApiError> {
        let crd: Value = serde_saphyr::from_str(yaml)
            .map_err(|e| ApiError::bad_request(format!("CRD YAML: {e}")))?;
        self.create("apiextensions.k8s.io/v1", "customresourcedefinitions", crd)
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.registry.store.current_rv()
    }
}
