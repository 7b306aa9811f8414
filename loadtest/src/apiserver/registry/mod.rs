//! API semantics on top of the store, shared by the HTTP routes, the built-in controllers
//! and the in-process handle: create (generateName, uid, timestamps, namespace checks,
//! defaulting and CRD schemas), update with optimistic concurrency, the status
//! subresource split, patches, deletion with finalizers, graceful pod termination and
//! propagation policies, binding and eviction.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::apply;
use super::clock::{Clock, rfc3339};
use super::crd;
use super::error::{ApiError, ApiResult, Reason};
use super::managed;
use super::meta::{finalizers, is_deleting, meta_mut, meta_str, new_uid, random_suffix, spec_part};
use super::patch::{json_patch, merge_patch, strategic_merge};
use super::qos;
use super::queue::WorkQueue;
use super::resources::{Behavior, GroupResource, ResourceType, builtin_types};
use super::schema::{FieldProblem, FieldValidation};
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{
    HISTORY_WINDOW, Location, ObjKey, Retention, Store, StoredObject, TypeStore, lock, read, write,
};
use super::strict;

/// Finalizer the garbage collector adds for foreground deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
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

/// PATCH body formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply)
    Apply,
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

/// `propagationPolicy`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete dependents after the owner is gone.
    #[default]
    Background,
    /// Keep the owner (with `foregroundDeletion`) until its dependents are gone.
    Foreground,
    /// Leave dependents, removing their ownerReferences to the owner.
    Orphan,
}

/// DeleteOptions.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy`
    pub propagation: Propagation,
    /// `preconditions.uid`
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`
    pub precondition_rv: Option<String>,
    /// `dryRun=All`
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (as kube-rs and kubectl send it).
    pub fn from_json(body: &Value) -> ApiResult<Self> {
        let propagation = match body.get("propagationPolicy").and_then(Value::as_str) {
            None => match body.get("orphanDependents").and_then(Value::as_bool) {
                Some(true) => Propagation::Orphan,
                _ => Propagation::Background,
            },
            Some(p) => parse_propagation(p)?,
        };
        Ok(Self {
            grace_period_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
            propagation,
            precondition_uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            precondition_rv: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
            dry_run: body
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()),
        })
    }
}

/// Parses a `propagationPolicy` value.
pub fn parse_propagation(text: &str) -> ApiResult<Propagation> {
    match text {
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::bad_request(format!(
            "propagationPolicy {other:?} is not supported"
        ))),
    }
}

/// The result of a delete.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// Marked for deletion (finalizers or a grace period pending).
    Pending(Arc<StoredObject>),
    /// Gone; this is its final state.
    Removed(Arc<StoredObject>),
}

/// List query.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// `labelSelector`
    pub labels: LabelSelector,
    /// `fieldSelector`
    pub fields: FieldSelector,
    /// `limit` (0 = all)
    pub limit: usize,
    /// `continue`
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Matching objects in key order.
    pub items: Vec<Arc<StoredObject>>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Token for the next page.
    pub continue_token: Option<String>,
    /// Matching objects after this page.
    pub remaining: usize,
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
    eviction: Mutex<()>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn parse_continue(token: &str) -> Option<(u64, ObjKey)> {
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut parts = text.splitn(3, '\n');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_string(), parts.next()?.to_string())))
}

fn make_continue(rv: u64, key: &ObjKey) -> String {
    format!("{rv}\n{}\n{}", key.0, key.1)
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
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
            eviction: Mutex::new(()),
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

    /// GET one object.
    pub fn get(&self, t: &Target, name: &str) -> ApiResult<Arc<StoredObject>> {
        read(&t.ts.state)
            .objects
            .get(&t.key(name))
            .cloned()
            .ok_or_else(|| t.not_found(name))
    }

    /// The object, if present (no error built: for controllers' frequent misses).
    pub fn find(&self, t: &Target, name: &str) -> Option<Arc<StoredObject>> {
        read(&t.ts.state).objects.get(&t.key(name)).cloned()
    }

    /// LIST with selectors and pagination.
    pub fn list(&self, t: &Target, q: &ListQuery) -> ApiResult<ListPage> {
        let state = read(&t.ts.state);
        let (rv, after) = match q.continue_token.as_deref().filter(|c| !c.is_empty()) {
            Some(token) => {
                let (rv, key) = parse_continue(token)
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
                if rv < state.floor {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some(key))
            }
            None => (self.store.current_rv(), None),
        };
        let matches = |o: &&Arc<StoredObject>| {
            q.labels.matches(&o.attrs.labels) && q.fields.matches_stored(&o.attrs, &o.bytes)
        };
        let mut iter = state
            .range(t.namespace.as_deref(), after.as_ref())
            .filter(matches);
        let items: Vec<Arc<StoredObject>> = if q.limit == 0 {
            iter.by_ref().cloned().collect()
        } else {
            iter.by_ref().take(q.limit).cloned().collect()
        };
        let remaining = iter.count();
        let continue_token = (remaining > 0)
            .then(|| items.last().map(|o| make_continue(rv, &o.attrs.key())))
            .flatten();
        Ok(ListPage {
            items,
            rv,
            continue_token,
            remaining,
        })
    }

    fn field_validation(&self, opts: &WriteOptions) -> FieldValidation {
        opts.field_validation
            .unwrap_or(self.config.field_validation)
    }

    /// POST: creates an object.
    pub fn create(&self, t: &Target, mut body: Value, opts: &WriteOptions) -> ApiResult<Written> {
        self.check_type_meta(t, &body)?;
        let generate = meta_str(&body, "generateName").to_string();
        if meta_str(&body, "name").is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                &t.rt.group,
                &t.rt.kind,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            ));
        }
        let namespace = self.object_namespace(t, &body)?;
        if let Some(ns) = &namespace {
            self.check_namespace_open(ns)?;
        }
        let now = self.now();
        {
            let meta = meta_mut(&mut body);
            if meta
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .is_empty()
            {
                meta.insert(
                    "name".into(),
                    json!(format!("{generate}{}", random_suffix())),
                );
            }
            match &namespace {
                Some(ns) => meta.insert("namespace".into(), json!(ns)),
                None => meta.remove("namespace"),
            };
            meta.insert("uid".into(), json!(new_uid()));
            meta.insert("creationTimestamp".into(), json!(now));
            meta.insert("generation".into(), json!(1));
            for field in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ] {
                meta.remove(field);
            }
        }
        set_type_meta(&t.rt, &mut body);
        self.prepare_create(t, &mut body, &now)?;
        let warnings = self.validate(t, &mut body, opts)?;
        let key = (
            namespace.unwrap_or_default(),
            meta_str(&body, "name").to_string(),
        );
        let mut state = write(&t.ts.state);
        if state.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&t.rt.group, &t.rt.plural, &key.1));
        }
        if opts.dry_run {
            return Ok(Written {
                object: Arc::new(dry_run_object(body)),
                created: true,
                warnings,
            });
        }
        self.record_write(t, None, &mut body, Sub::Main, opts);
        let object = self.store.commit(&t.ts, &mut state, &key, Some(body));
        drop(state);
        self.after_create(t, &object)?;
        Ok(Written {
            object,
            created: true,
            warnings,
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

    fn check_type_meta(&self, t: &Target, body: &Value) -> ApiResult<()> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let kind = body.get("kind").and_then(Value::as_str).unwrap_or_default();
        if !kind.is_empty() && kind != t.rt.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                t.rt.kind
            )));
        }
        let api_version = body
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let expected = t.rt.api_version(&t.version);
        if !api_version.is_empty() && api_version != expected {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({expected})"
            )));
        }
        Ok(())
    }

    fn object_namespace(&self, t: &Target, body: &Value) -> ApiResult<Option<String>> {
        if !t.rt.namespaced {
            return Ok(None);
        }
        let in_body = meta_str(body, "namespace");
        match (t.namespace.as_deref(), in_body) {
            (Some(url), body_ns) if body_ns.is_empty() || body_ns == url => {
                Ok(Some(url.to_string()))
            }
            (Some(_), _) => Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )),
            (None, "") => Err(ApiError::bad_request(
                "a namespace is required for a namespaced resource",
            )),
            (None, body_ns) => Ok(Some(body_ns.to_string())),
        }
    }

    fn check_namespace_open(&self, ns: &str) -> ApiResult<()> {
        let target = self.target("", "v1", "namespaces", None)?;
        let existing = read(&target.ts.state)
            .objects
            .get(&(String::new(), ns.to_string()))
            .cloned();
        match existing {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(obj) if obj.attrs.deleting => Err(ApiError::new(
                Reason::Forbidden,
                format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Defaults and status resets the real strategies apply on create.
    fn prepare_create(&self, t: &Target, body: &mut Value, now: &str) -> ApiResult<()> {
        if t.rt.behavior == Behavior::CustomResourceDefinition {
            crd::resource_type_of(body)?;
            let status = crd::established_status(body, now);
            body["status"] = status;
            return Ok(());
        }
        let obj = body.as_object_mut().expect("checked to be an object");
        match t.rt.behavior {
            Behavior::Pod => {
                let spec = obj.entry("spec").or_insert_with(|| json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    spec.entry("terminationGracePeriodSeconds")
                        .or_insert(json!(DEFAULT_POD_GRACE_SECONDS));
                    spec.entry("restartPolicy").or_insert(json!("Always"));
                    spec.entry("schedulerName")
                        .or_insert(json!("default-scheduler"));
                    spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
                    spec.entry("priority").or_insert(json!(0));
                }
                let scheduled = obj
                    .get("spec")
                    .and_then(|s| s.get("nodeName"))
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                let qos = qos::qos_class(obj.get("spec").unwrap_or(&Value::Null));
                let mut status = json!({"phase": "Pending", "qosClass": qos});
                if scheduled {
                    status["conditions"] = json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]);
                }
                obj.insert("status".into(), status);
            }
            Behavior::Namespace => {
                let name = obj
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let meta = meta_mut(body);
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert("kubernetes.io/metadata.name".into(), name);
                }
                body["spec"] = json!({"finalizers": ["kubernetes"]});
                body["status"] = json!({"phase": "Active"});
            }
            Behavior::CustomResourceDefinition => {}
            Behavior::Generic => {
                if t.rt.group == "apps"
                    && matches!(
                        t.rt.plural.as_str(),
                        "deployments" | "replicasets" | "statefulsets"
                    )
                {
                    let spec = obj.entry("spec").or_insert_with(|| json!({}));
                    if let Some(spec) = spec.as_object_mut() {
                        spec.entry("replicas").or_insert(json!(1));
                    }
                }
                let resets_status = t.rt.subresources.status
                    && !matches!(
                        t.rt.kind.as_str(),
                        "Node"
                            | "PersistentVolume"
                            | "PersistentVolumeClaim"
                            | "Service"
                            | "VolumeAttachment"
                    );
                if resets_status {
                    obj.remove("status");
                }
            }
        }
        Ok(())
    }

    /// A custom resource's schema (defaults, unknown fields, value checks), or a built-in
    /// kind decoded strictly when the client asked for it ([`strict`]). The server's own
    /// default for a built-in is not applied: the controller and the simulated cluster
    /// write without asking, and their writes are the emulator's hot path.
    fn validate(
        &self,
        t: &Target,
        body: &mut Value,
        opts: &WriteOptions,
    ) -> ApiResult<Vec<String>> {
        let Some(schema) = t.rt.schemas.get(&t.version) else {
            return validate_builtin(t, body, opts.field_validation);
        };
        match schema.apply(body, self.field_validation(opts)) {
            Ok(pass) => Ok(pass
                .pruned
                .into_iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect()),
            Err(problems) => Err(schema_error(&t.rt, meta_str(body, "name"), &problems)),
        }
    }

    fn after_create(&self, t: &Target, object: &Arc<StoredObject>) -> ApiResult<()> {
        if t.rt.behavior == Behavior::CustomResourceDefinition {
            let rt = crd::resource_type_of(&object.value())?;
            self.store.register(rt);
        }
        Ok(())
    }

    /// PUT: replaces an object (or its status), rejecting a stale resourceVersion.
    pub fn replace(
        &self,
        t: &Target,
        name: &str,
        sub: Sub,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        self.check_type_meta(t, &body)?;
        let body_name = meta_str(&body, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        self.object_namespace(t, &body)?;
        self.update_with(t, name, sub, opts, |_current| Ok(body))
    }

    /// PATCH in any of the four formats.
    pub fn patch(
        &self,
        t: &Target,
        name: &str,
        sub: Sub,
        kind: PatchKind,
        patch: &Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        if kind == PatchKind::Strategic && !t.rt.strategic_merge {
            return Err(ApiError::new(
                Reason::UnsupportedMediaType,
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        if kind == PatchKind::Apply {
            return self.apply(t, name, sub, patch, opts);
        }
        self.update_with(t, name, sub, opts, |current| {
            let mut object = current.clone();
            match kind {
                PatchKind::Merge => merge_patch(&mut object, patch),
                PatchKind::Strategic => {
                    strategic_merge(&mut object, patch).map_err(ApiError::bad_request)?
                }
                PatchKind::Json => {
                    object =
                        json_patch(current, patch).map_err(|e| ApiError::new(Reason::Invalid, e))?
                }
                PatchKind::Apply => {}
            }
            // A patch that carries no resourceVersion applies to whatever is current.
            if patch.pointer("/metadata/resourceVersion").is_none() && kind != PatchKind::Json {
                meta_mut(&mut object).insert(
                    "resourceVersion".into(),
                    json!(meta_str(current, "resourceVersion")),
                );
            }
            Ok(object)
        })
    }

    fn apply(
        &self,
        t: &Target,
        name: &str,
        sub: Sub,
        applied: &Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let manager = opts.field_manager.clone().ok_or_else(|| {
            ApiError::bad_request(
                "PATCH with application/apply-patch+yaml requires a fieldManager parameter",
            )
        })?;
        self.check_type_meta(t, applied)?;
        let body_name = meta_str(applied, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let now = self.now();
        let api_version = t.rt.api_version(&t.version);
        let strategy = apply::strategy_for(&t.rt, &t.version);
        if self.get(t, name).is_err() && sub == Sub::Main {
            let mut object = applied.clone();
            meta_mut(&mut object).insert("name".into(), json!(name));
            let merged = apply::apply(
                None,
                &object,
                &manager,
                &api_version,
                &now,
                opts.force,
                &strategy,
            )?;
            let mut create_opts = opts.clone();
            create_opts.field_manager = None;
            create_opts.user_agent = None;
            match self.create(t, merged, &create_opts) {
                Err(err) if err.reason == Reason::AlreadyExists => {}
                other => return other,
            }
        }
        // The merged object carries this applier's Apply entry; no Update entry besides.
        let unrecorded = WriteOptions {
            field_manager: None,
            user_agent: None,
            ..opts.clone()
        };
        self.update_with(t, name, sub, &unrecorded, |current| {
            let mut merged = apply::apply(
                Some(current),
                applied,
                &manager,
                &api_version,
                &now,
                opts.force,
                &strategy,
            )?;
            meta_mut(&mut merged).insert(
                "resourceVersion".into(),
                json!(meta_str(current, "resourceVersion")),
            );
            Ok(merged)
        })
    }

    /// The guaranteed-update core: reads the current object, lets `mutate` produce the new
    /// one, enforces what the API server enforces, and commits if anything changed.
    pub fn update_with(
        &self,
        t: &Target,
        name: &str,
        sub: Sub,
        opts: &WriteOptions,
        mutate: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Written> {
        let key = t.key(name);
        let mut state = write(&t.ts.state);
        let current = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| t.not_found(name))?;
        let current_value = current.value();
        let mut new = mutate(&current_value)?;
        let warnings = self.prepare_update(t, sub, &current_value, &mut new, opts)?;
        if strip_rv(&new) == strip_rv(&current_value) {
            return Ok(Written {
                object: current,
                created: false,
                warnings,
            });
        }
        if opts.dry_run {
            return Ok(Written {
                object: Arc::new(dry_run_object(new)),
                created: false,
                warnings,
            });
        }
        self.record_write(t, Some(&current_value), &mut new, sub, opts);
        let finished = is_deleting(&new) && !blocks_removal(&t.rt, &new) && grace_elapsed(&new);
        let object = self
            .store
            .commit(&t.ts, &mut state, &key, (!finished).then_some(new));
        drop(state);
        if finished {
            self.after_remove(t, &object);
        } else if t.rt.behavior == Behavior::CustomResourceDefinition {
            self.store.register(crd::resource_type_of(&object.value())?);
        }
        Ok(Written {
            object,
            created: false,
            warnings,
        })
    }

    fn prepare_update(
        &self,
        t: &Target,
        sub: Sub,
        current: &Value,
        new: &mut Value,
        opts: &WriteOptions,
    ) -> ApiResult<Vec<String>> {
        let (group, plural) = t.gr();
        let name = meta_str(current, "name").to_string();
        let sent_rv = meta_str(new, "resourceVersion");
        if !sent_rv.is_empty() && sent_rv != meta_str(current, "resourceVersion") {
            return Err(ApiError::conflict(
                group,
                plural,
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        if sub == Sub::Status {
            let status = new.get("status").cloned();
            *new = current.clone();
            match status {
                Some(status) => new["status"] = status,
                None => {
                    new.as_object_mut().map(|o| o.remove("status"));
                }
            }
        } else if sub == Sub::Main && t.rt.subresources.status {
            match current.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    new.as_object_mut().map(|o| o.remove("status"));
                }
            }
        }
        // Fields only the server sets survive any update.
        let current_meta = current
            .get("metadata")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let meta = meta_mut(new);
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match current_meta.get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
        if is_deleting(current) {
            let before = finalizers(current);
            if let Some(added) = finalizers(new).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    group,
                    &t.rt.kind,
                    &name,
                    "metadata.finalizers",
                    &format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [{added:?}]"
                    ),
                ));
            }
        }
        set_type_meta(&t.rt, new);
        if t.rt.behavior == Behavior::Namespace
            && let Some(spec) = current.get("spec")
        {
            new["spec"] = spec.clone();
        }
        let warnings = self.validate(t, new, opts)?;
        if spec_part(new) != spec_part(current) {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta_mut(new).insert("generation".into(), json!(generation + 1));
        }
        Ok(warnings)
    }

    /// DELETE with grace periods, finalizers and propagation.
    pub fn delete(
        self: &Arc<Self>,
        t: &Target,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        let current = self.get(t, name)?;
        let (group, plural) = t.gr();
        if let Some(uid) = &opts.precondition_uid
            && uid != &current.attrs.uid
        {
            return Err(ApiError::conflict(
                group,
                plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    current.attrs.uid
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && rv != &current.rv.to_string()
        {
            return Err(ApiError::conflict(
                group,
                plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    current.rv
                ),
            ));
        }
        if opts.dry_run {
            return Ok(Deleted::Pending(current));
        }
        if opts.propagation == Propagation::Orphan {
            self.orphan_dependents(&current.attrs.uid);
        }
        let grace = self.grace_period(t, &current.value(), opts);
        let foreground = opts.propagation == Propagation::Foreground
            && !self.store.dependents(&current.attrs.uid).is_empty();
        let key = t.key(name);
        let mut state = write(&t.ts.state);
        let current = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| t.not_found(name))?;
        let mut object = current.value();
        let was_deleting = is_deleting(&object);
        let mut pending_finalizers = finalizers(&object);
        if foreground && !pending_finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
            pending_finalizers.push(FOREGROUND_FINALIZER.to_string());
        }
        let namespace_content =
            t.rt.behavior == Behavior::Namespace && !namespace_finalizers(&object).is_empty();
        if grace == 0 && pending_finalizers.is_empty() && !namespace_content {
            let removed = self.store.commit(&t.ts, &mut state, &key, None);
            drop(state);
            self.after_remove(t, &removed);
            return Ok(Deleted::Removed(removed));
        }
        let old_grace = object
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        if was_deleting
            && old_grace.is_some_and(|g| g <= grace)
            && pending_finalizers == finalizers(&object)
        {
            return Ok(Deleted::Pending(current));
        }
        let deadline = self.clock.now() + Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        {
            let meta = meta_mut(&mut object);
            if !was_deleting || grace > 0 {
                meta.insert("deletionTimestamp".into(), json!(rfc3339(deadline)));
            }
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            meta.insert("finalizers".into(), json!(pending_finalizers));
            if !was_deleting {
                let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
                meta.insert("generation".into(), json!(generation + 1));
            }
        }
        if namespace_content {
            object["status"] = json!({"phase": "Terminating"});
        }
        let marked = self.store.commit(&t.ts, &mut state, &key, Some(object));
        drop(state);
        if grace > 0 {
            self.schedule_termination(t, name, &marked.attrs.uid, deadline);
        }
        if foreground {
            self.queues.gc.push(marked.attrs.uid.clone());
        }
        if t.rt.behavior == Behavior::Namespace {
            self.queues.namespaces.push(name.to_string());
        }
        Ok(Deleted::Pending(marked))
    }

    /// Pods get a grace period (from the request or `terminationGracePeriodSeconds`), but
    /// none when unscheduled or already terminal, as the real pod strategy decides.
    fn grace_period(&self, t: &Target, object: &Value, opts: &DeleteOptions) -> i64 {
        if t.rt.behavior != Behavior::Pod {
            return 0;
        }
        let unscheduled = object
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty();
        let terminal = matches!(
            object.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if unscheduled || terminal {
            return 0;
        }
        opts.grace_period_seconds
            .or_else(|| {
                object
                    .pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
            .max(0)
    }

    /// After the grace period a pod is removed, as the kubelet's final delete would do;
    /// a simulated kubelet may force-delete earlier.
    fn schedule_termination(
        self: &Arc<Self>,
        t: &Target,
        name: &str,
        uid: &str,
        deadline: std::time::SystemTime,
    ) {
        let (registry, target, name, uid) = (
            Arc::downgrade(self),
            t.clone(),
            name.to_string(),
            uid.to_string(),
        );
        let sleep = self.clock.sleep_until(deadline);
        self.runtime.spawn(kerf_heap::inherit(async move {
            sleep.await;
            let Some(registry) = registry.upgrade() else {
                return;
            };
            let still_there = registry
                .get(&target, &name)
                .is_ok_and(|p| p.attrs.uid == uid && p.attrs.deleting);
            if still_there {
                let opts = DeleteOptions {
                    grace_period_seconds: Some(0),
                    precondition_uid: Some(uid),
                    ..DeleteOptions::default()
                };
                if let Err(err) = registry.delete(&target, &name, &opts)
                    && err.reason != Reason::NotFound
                    && err.reason != Reason::Conflict
                {
                    tracing::warn!(%err, name, "graceful termination failed");
                }
            }
        }));
    }

    fn after_remove(&self, t: &Target, removed: &Arc<StoredObject>) {
        self.queues.gc.push(removed.attrs.uid.clone());
        for owner in removed.attrs.owners.iter() {
            self.queues.gc.push(owner.uid.clone());
        }
        if t.rt.namespaced {
            self.queues.namespaces.push(removed.attrs.namespace.clone());
        }
        if t.rt.behavior == Behavior::CustomResourceDefinition
            && let Ok(rt) = crd::resource_type_of(&removed.value())
        {
            self.store.unregister(&rt.group_resource());
        }
    }

    fn orphan_dependents(&self, owner_uid: &str) {
        for (gr, (ns, name)) in self.store.dependents(owner_uid) {
            let Some(target) = self.target_of(&gr, &ns) else {
                continue;
            };
            let result = self.update_with(
                &target,
                &name,
                Sub::Main,
                &WriteOptions::default(),
                |current| {
                    let mut object = current.clone();
                    if let Some(refs) = object
                        .pointer_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
                    }
                    Ok(object)
                },
            );
            if let Err(err) = result {
                tracing::debug!(%err, name, "orphaning dependent failed");
            }
        }
    }

    /// DELETE on a collection: deletes every matching object.
    pub fn delete_collection(
        self: &Arc<Self>,
        t: &Target,
        q: &ListQuery,
        opts: &DeleteOptions,
    ) -> ApiResult<Vec<Arc<StoredObject>>> {
        let page = self.list(
            t,
            &ListQuery {
                limit: 0,
                continue_token: None,
                ..q.clone()
            },
        )?;
        let mut deleted = Vec::new();
        for obj in page.items {
            let target = Target {
                namespace: t.rt.namespaced.then(|| obj.attrs.namespace.clone()),
                ..t.clone()
            };
            match self.delete(&target, &obj.attrs.name, opts) {
                Ok(Deleted::Pending(o) | Deleted::Removed(o)) => deleted.push(o),
                Err(err) if err.reason == Reason::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        Ok(deleted)
    }

    /// `pods/{name}/binding`: assigns the pod to a node once.
    pub fn bind(&self, t: &Target, name: &str, binding: &Value) -> ApiResult<()> {
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "",
                "Binding",
                name,
                "target.name",
                "Required value",
            ));
        }
        let now = self.now();
        self.update_with(t, name, Sub::Whole, &WriteOptions::default(), |current| {
            let assigned = current
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !assigned.is_empty() {
                return Err(ApiError::conflict(
                    "",
                    "pods",
                    name,
                    &format!("pod {name} is already assigned to node {assigned:?}"),
                ));
            }
            if is_deleting(current) {
                return Err(ApiError::conflict(
                    "",
                    "pods",
                    name,
                    "pod is being deleted, cannot be assigned to a host",
                ));
            }
            let mut pod = current.clone();
            pod["spec"]["nodeName"] = json!(node);
            let conditions = pod["status"]
                .as_object_mut()
                .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
            if let Some(Value::Array(conditions)) = conditions {
                conditions
                    .retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
                conditions.push(
                    json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now}),
                );
            }
            Ok(pod)
        })?;
        Ok(())
    }

    /// `pods/{name}/eviction`: deletes the pod unless that would violate its
    /// PodDisruptionBudget (429), accounting the disruption in the budget's status.
    pub fn evict(self: &Arc<Self>, t: &Target, name: &str, eviction: &Value) -> ApiResult<()> {
        let delete_opts = eviction
            .get("deleteOptions")
            .map(DeleteOptions::from_json)
            .transpose()?
            .unwrap_or_default();
        let _serialised = lock(&self.eviction);
        let pod = self.get(t, name)?;
        let phase = pod.attrs.phase.as_str();
        let exempt = pod.attrs.deleting || matches!(phase, "Succeeded" | "Failed" | "Pending" | "");
        if !exempt {
            self.charge_disruption_budget(&pod)?;
        }
        self.delete(t, name, &delete_opts)?;
        Ok(())
    }

    fn charge_disruption_budget(&self, pod: &StoredObject) -> ApiResult<()> {
        let pdbs = self.target(
            "policy",
            "v1",
            "poddisruptionbudgets",
            Some(&pod.attrs.namespace),
        )?;
        let matching: Vec<Arc<StoredObject>> = self
            .list(&pdbs, &ListQuery::default())?
            .items
            .into_iter()
            .filter(|pdb| {
                LabelSelector::from_json(pdb.value().pointer("/spec/selector"))
                    .is_ok_and(|s| s.matches(&pod.attrs.labels))
            })
            .collect();
        let pdb = match matching.as_slice() {
            [] => return Ok(()),
            [one] => one,
            _ => {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
        };
        let pdb_name = pdb.attrs.name.clone();
        let pdb_value = pdb.value();
        let observed = pdb_value
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let generation = pdb_value
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let too_many = |message: String| {
            ApiError::new(
                Reason::TooManyRequests,
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
            .with_details(json!({"causes": [{"reason": "DisruptionBudget", "message": message}]}))
        };
        if observed < generation {
            return Err(too_many(format!(
                "The disruption budget {pdb_name} is still being processed by the server."
            )));
        }
        let allowed = pdb_value
            .pointer("/status/disruptionsAllowed")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if allowed <= 0 {
            let desired = pdb_value
                .pointer("/status/desiredHealthy")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let current = pdb_value
                .pointer("/status/currentHealthy")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            return Err(too_many(format!(
                "The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"
            )));
        }
        let now = self.now();
        let pod_name = pod.attrs.name.clone();
        self.update_with(
            &pdbs,
            &pdb_name,
            Sub::Status,
            &WriteOptions::default(),
            |current| {
                let mut next = current.clone();
                next["status"]["disruptionsAllowed"] = json!(allowed - 1);
                let disrupted = next["status"]
                    .as_object_mut()
                    .map(|s| s.entry("disruptedPods").or_insert_with(|| json!({})));
                if let Some(Value::Object(disrupted)) = disrupted {
                    disrupted.insert(pod_name.clone(), json!(now));
                }
                Ok(next)
            },
        )?;
        Ok(())
    }

    /// Removes a terminating namespace once the namespace controller has emptied it
    /// (what clearing `spec.finalizers` through `/finalize` does for real).
    pub fn finalize_namespace(&self, name: &str) -> ApiResult<bool> {
        let t = self.target("", "v1", "namespaces", None)?;
        let key = t.key(name);
        let mut state = write(&t.ts.state);
        let Some(current) = state.objects.get(&key).cloned() else {
            return Ok(false);
        };
        if !current.attrs.deleting || !finalizers(&current.value()).is_empty() {
            return Ok(false);
        }
        let removed = self.store.commit(&t.ts, &mut state, &key, None);
        drop(state);
        self.after_remove(&t, &removed);
        Ok(true)
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

fn strip_rv(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    copy
}

/// The namespace's `spec.finalizers` (the namespace controller's `kubernetes`).
fn namespace_finalizers(object: &Value) -> Vec<Value> {
    object
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn blocks_removal(rt: &ResourceType, object: &Value) -> bool {
    !finalizers(object).is_empty()
        || (rt.behavior == Behavior::Namespace && !namespace_finalizers(object).is_empty())
}

fn grace_elapsed(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        == 0
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

/// Strict decoding of a built-in kind: refused under `Strict`, a warning per unknown field
/// under `Warn`, as the API server does.
fn validate_builtin(
    t: &Target,
    body: &Value,
    validation: Option<FieldValidation>,
) -> ApiResult<Vec<String>> {
    let Some(validation @ (FieldValidation::Strict | FieldValidation::Warn)) = validation else {
        return Ok(Vec::new());
    };
    let unknown = strict::unknown_fields(&t.rt.group, &t.rt.kind, body);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if validation == FieldValidation::Warn {
        return Ok(unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect());
    }
    let problems: Vec<FieldProblem> = unknown.into_iter().map(FieldProblem::Unknown).collect();
    Err(schema_error(&t.rt, meta_str(body, "name"), &problems))
}

fn schema_error(rt: &ResourceType, name: &str, problems: &[FieldProblem]) -> ApiError {
    let unknown: Vec<&str> = problems
        .iter()
        .filter_map(|p| {
            if let FieldProblem::Unknown(f) = p {
                Some(f.as_str())
            } else {
                None
            }
        })
        .collect();
    if !unknown.is_empty() {
        let list: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        return ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            rt.kind, rt.storage_version(), rt.kind, list.join(", ")
        ))
        .with_details(json!({"causes": unknown.iter().map(|f| json!({"reason": "FieldValueInvalid", "message": format!("unknown field \"{f}\""), "field": f})).collect::<Vec<_>>()}));
    }
    let causes: Vec<Value> = problems
        .iter()
        .filter_map(|p| {
            if let FieldProblem::Invalid(f, m) = p {
                Some(json!({"reason": "FieldValueInvalid", "message": m, "field": f}))
            } else {
                None
            }
        })
        .collect();
    let summary: Vec<String> = problems
        .iter()
        .filter_map(|p| {
            if let FieldProblem::Invalid(f, m) = p {
                Some(format!("{f}: {m}"))
            } else {
                None
            }
        })
        .collect();
    ApiError::new(
        Reason::Invalid,
        format!(
            "{}.{} \"{name}\" is invalid: {}",
            rt.kind,
            rt.group,
            summary.join(", ")
        ),
    )
    .with_details(json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes}))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = make_continue(42, &("ns".into(), "pod-1".into()));
        assert_eq!(
            parse_continue(&token),
            Some((42, ("ns".to_string(), "pod-1".to_string())))
        );
        assert_eq!(parse_continue("zz"), None);
    }
}
