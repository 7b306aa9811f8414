//! API semantics on top of the store, shared by the HTTP routes, the built-in controllers
//! and the in-process handle, one file per verb: `read` (get, list with selectors and
//! pagination), `create` (generateName, uid, timestamps, namespace checks, defaulting),
//! `update` (optimistic concurrency, the status subresource split, the four patch formats,
//! server-side apply), `delete` (preconditions, finalizers, graceful pod termination,
//! propagation policies) and `pods` (binding and eviction); `validate` applies CRD
//! schemas and strict decoding for create and update alike. This module holds what they
//! share: the request target, write options and the [`Registry`] itself.

mod create;
mod delete;
mod pods;
mod read;
mod update;
mod validate;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::clock::{Clock, rfc3339};
use super::error::{ApiError, ApiResult, Reason};
use super::managed;
use super::meta::meta_mut;
use super::queue::WorkQueue;
use super::resources::{GroupResource, ResourceType, builtin_types};
use super::schema::FieldValidation;
use super::store::{
    HISTORY_WINDOW, Location, ObjKey, Retention, Store, StoredObject, TypeStore, read,
};
pub use delete::{DeleteOptions, Deleted, FOREGROUND_FINALIZER, Propagation, parse_propagation};
pub use read::{ListPage, ListQuery};
pub use update::PatchKind;

/// A pod's grace period when neither the request nor the pod names one.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// A resolved request target: resource, requested version and namespace.
#[derive(Debug, Clone)]
pub struct Target {
    /// Storage.
    pub ts: Arc<TypeStore>,
    /// Definition at resolution time.
    pub rt: Arc<ResourceType>,
    /// Requested version.
    pub version: String,
    /// Namespace from the URL (`None` for cluster-scoped or all-namespaces requests).
    pub namespace: Option<String>,
}

impl Target {
    fn key(&self, name: &str) -> ObjKey {
        (self.namespace.clone().unwrap_or_default(), name.to_string())
    }

    fn gr(&self) -> (&str, &str) {
        (&self.rt.group, &self.rt.plural)
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.rt.group, &self.rt.plural, name)
    }
}

/// Main resource or `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// The object itself: status changes are ignored when a status subresource exists.
    Main,
    /// `/status`: only status changes are kept.
    Status,
    /// Spec and status together, as the server's own subresource handlers (binding) write.
    Whole,
}

/// Query options of writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and return without persisting.
    pub dry_run: bool,
    /// `fieldManager`
    pub field_manager: Option<String>,
    /// `fieldValidation` (server default when absent).
    pub field_validation: Option<FieldValidation>,
    /// `force` (server-side apply).
    pub force: bool,
    /// The client's `User-Agent`: names the manager of a write without `fieldManager`.
    pub user_agent: Option<String>,
}

/// A successful write.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored.
    pub object: Arc<StoredObject>,
    /// It was created (201) rather than updated (200).
    pub created: bool,
    /// `Warning` headers (pruned unknown fields).
    pub warnings: Vec<String>,
}

/// Settings of the registry.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// `fieldValidation` when a request names none. Real servers default to `Warn`
    /// (prune silently but for a warning); the emulator defaults to `Strict` so that a
    /// controller writing undeclared fields fails loudly in tests.
    pub field_validation: FieldValidation,
    /// Most changes kept per resource for watches.
    pub history_capacity: usize,
    /// Changes older than this are dropped from the history (see [`Retention`]).
    pub history_window: Option<Duration>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            field_validation: FieldValidation::Strict,
            history_capacity: 200_000,
            history_window: Some(HISTORY_WINDOW),
        }
    }
}

/// Work the API server's own controllers pick up.
#[derive(Debug, Default)]
pub struct Queues {
    /// uids of removed owners (dependents to collect) or of foreground owners to re-check.
    pub gc: WorkQueue<String>,
    /// Names of namespaces being deleted.
    pub namespaces: WorkQueue<String>,
}

/// The API: storage plus the semantics of every verb.
pub struct Registry {
    /// Storage.
    pub store: Store,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Settings.
    pub config: RegistryConfig,
    /// Background work.
    pub queues: Queues,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry with the built-in resources and the bootstrap namespaces.
    pub fn new(
        clock: Arc<dyn Clock>,
        config: RegistryConfig,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Self> {
        let registry = Arc::new(Self {
            store: Store::with_retention(Retention {
                capacity: config.history_capacity,
                window: config.history_window,
                clock: Arc::clone(&clock),
            }),
            clock,
            config,
            queues: Queues::default(),
            runtime,
        });
        for rt in builtin_types() {
            registry.store.register(rt);
        }
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let created = registry.target("", "v1", "namespaces", None).and_then(|t| {
                registry.create(
                    &t,
                    json!({"metadata": {"name": ns}}),
                    &WriteOptions::default(),
                )
            });
            if let Err(err) = created {
                tracing::error!(%err, ns, "cannot create bootstrap namespace");
            }
        }
        registry
    }

    /// The emulated time as `metav1.Time`.
    pub fn now(&self) -> String {
        rfc3339(self.clock.now())
    }

    /// Resolves `group/version/plural` (404 when not served).
    pub fn target(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> ApiResult<Target> {
        let ts = self
            .store
            .get(&GroupResource::new(group, plural))
            .ok_or_else(|| {
                ApiError::new(
                    Reason::NotFound,
                    "the server could not find the requested resource",
                )
            })?;
        let rt = ts.resource_type();
        if !rt.serves(version) {
            return Err(ApiError::new(
                Reason::NotFound,
                "the server could not find the requested resource",
            ));
        }
        let namespace = if rt.namespaced {
            namespace.map(str::to_string)
        } else {
            None
        };
        Ok(Target {
            ts,
            rt,
            version: version.to_string(),
            namespace,
        })
    }

    /// Resolves a resource by its storage location (for controllers and the collector).
    pub fn target_of(&self, gr: &GroupResource, namespace: &str) -> Option<Target> {
        let ts = self.store.get(gr)?;
        let rt = ts.resource_type();
        let version = rt.storage_version().to_string();
        let namespace = rt.namespaced.then(|| namespace.to_string());
        Some(Target {
            ts,
            rt,
            version,
            namespace,
        })
    }

    /// Records a plain write in the object's managedFields (see [`managed`]); a write
    /// whose manager is unknown (no `fieldManager`, no User-Agent) is not recorded.
    fn record_write(
        &self,
        t: &Target,
        previous: Option<&Value>,
        new: &mut Value,
        sub: Sub,
        opts: &WriteOptions,
    ) {
        let Some(manager) =
            managed::manager_of(opts.field_manager.as_deref(), opts.user_agent.as_deref())
        else {
            return;
        };
        // A PUT without managedFields keeps the ones stored, as on a real server.
        if let Some(kept) = previous.and_then(|p| p.pointer("/metadata/managedFields"))
            && new.pointer("/metadata/managedFields").is_none()
        {
            meta_mut(new).insert("managedFields".into(), kept.clone());
        }
        let api_version = t.rt.api_version(&t.version);
        let time = self.now();
        let write = managed::Write {
            manager: &manager,
            api_version: &api_version,
            time: &time,
            subresource: (sub == Sub::Status).then_some("status"),
        };
        managed::record(previous, new, &write);
    }

    /// Where the object with `uid` lives.
    pub fn locate(&self, uid: &str) -> Option<Location> {
        self.store.locate(uid)
    }
}

fn set_type_meta(rt: &ResourceType, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            json!(rt.api_version(rt.storage_version())),
        );
        map.insert("kind".into(), json!(rt.kind));
    }
}

fn dry_run_object(value: Value) -> StoredObject {
    let bytes = bytes::Bytes::from(
        serde_json::to_vec(&value).expect("a serde_json::Value always serialises"),
    );
    let attrs = Arc::new(super::store::Attrs::of(&value));
    StoredObject {
        bytes,
        attrs,
        rv: 0,
    }
}

/// Lists every object of a resource in a namespace (all when `None`); for controllers.
pub fn all_objects(t: &Target) -> Vec<Arc<StoredObject>> {
    read(&t.ts.state)
        .range(t.namespace.as_deref(), None)
        .cloned()
        .collect()
}

/// The `metadata` map of an object, for read-only inspection.
pub fn metadata(object: &Value) -> Map<String, Value> {
    object
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// A registry on a manual clock serving ConfigMaps in `default`, and their target, for the
/// registry's own tests; the runtime it answers watches on must outlive it.
#[cfg(test)]
fn config_maps() -> (tokio::runtime::Runtime, Arc<Registry>, Target) {
    config_maps_on(Arc::new(crate::apiserver::clock::ManualClock::default()))
}

/// [`config_maps`] on `clock`, which the test moves.
#[cfg(test)]
fn config_maps_on(
    clock: Arc<crate::apiserver::clock::ManualClock>,
) -> (tokio::runtime::Runtime, Arc<Registry>, Target) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let registry = Registry::new(clock, RegistryConfig::default(), runtime.handle().clone());
    let t = registry
        .target("", "v1", "configmaps", Some("default"))
        .expect("configmaps are served");
    (runtime, registry, t)
}
