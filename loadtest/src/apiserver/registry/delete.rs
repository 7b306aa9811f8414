//! DELETE: preconditions (uid, resourceVersion), dry runs, propagation (orphan dependents,
//! foreground with the `foregroundDeletion` finalizer, background), then either removal or a
//! deletionTimestamp while finalizers or a pod's grace period are pending; a pod past its
//! grace is removed as the kubelet's final delete would. Also DELETE on a collection and the
//! namespace `/finalize` step that removes an emptied namespace.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{DEFAULT_POD_GRACE_SECONDS, ListQuery, Registry, Sub, Target, WriteOptions};
use crate::apiserver::clock::rfc3339;
use crate::apiserver::crd;
use crate::apiserver::error::{ApiError, ApiResult, Reason};
use crate::apiserver::meta::{finalizers, is_deleting, meta_mut};
use crate::apiserver::resources::{Behavior, ResourceType};
use crate::apiserver::store::{StoredObject, write};

/// Finalizer the garbage collector adds for foreground deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

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

impl Registry {
    /// DELETE with grace periods, finalizers and propagation. The preconditions are checked
    /// twice: first on the object as read, so a request that fails them orphans nothing,
    /// then against the object under the type's write lock (`delete_locked`),
    /// so a write in between is seen and answered 409 rather than deleted over.
    pub fn delete(
        self: &Arc<Self>,
        t: &Target,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        let current = self.get(t, name)?;
        check_preconditions(t, name, opts, &current)?;
        if opts.dry_run {
            return Ok(Deleted::Pending(current));
        }
        if opts.propagation == Propagation::Orphan {
            self.orphan_dependents(&current.attrs.uid);
        }
        let foreground = opts.propagation == Propagation::Foreground
            && !self.store.dependents(&current.attrs.uid).is_empty();
        #[cfg(test)]
        tests::between_read_and_lock();
        self.delete_locked(t, name, opts, foreground)
    }

    /// The step of [`Registry::delete`] under the type's write lock: the preconditions
    /// against the object as stored now, then its removal, or its deletionTimestamp while
    /// finalizers (with `foregroundDeletion` when `foreground`) or a grace period are pending.
    fn delete_locked(
        self: &Arc<Self>,
        t: &Target,
        name: &str,
        opts: &DeleteOptions,
        foreground: bool,
    ) -> ApiResult<Deleted> {
        let key = t.key(name);
        let mut state = write(&t.ts.state);
        let current = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| t.not_found(name))?;
        check_preconditions(t, name, opts, &current)?;
        let mut object = current.value();
        let grace = self.grace_period(t, &object, opts);
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

    pub(super) fn after_remove(&self, t: &Target, removed: &Arc<StoredObject>) {
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
}

/// 409 Conflict when `opts` names a uid or resourceVersion that `current` does not have.
fn check_preconditions(
    t: &Target,
    name: &str,
    opts: &DeleteOptions,
    current: &StoredObject,
) -> ApiResult<()> {
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
    Ok(())
}

/// The namespace's `spec.finalizers` (the namespace controller's `kubernetes`).
fn namespace_finalizers(object: &Value) -> Vec<Value> {
    object
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub(super) fn blocks_removal(rt: &ResourceType, object: &Value) -> bool {
    !finalizers(object).is_empty()
        || (rt.behavior == Behavior::Namespace && !namespace_finalizers(object).is_empty())
}

pub(super) fn grace_elapsed(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        == 0
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::apiserver::registry::PatchKind;

    thread_local! {
        /// A write made between [`Registry::delete`]'s first read and its lock: where a
        /// concurrent request's write can land in a running server, made deterministic.
        static BETWEEN_READ_AND_LOCK: RefCell<Option<Box<dyn FnOnce()>>> =
            const { RefCell::new(None) };
    }

    pub(super) fn between_read_and_lock() {
        if let Some(write) = BETWEEN_READ_AND_LOCK.with(|hook| hook.borrow_mut().take()) {
            write();
        }
    }

    fn race(write: impl FnOnce() + 'static) {
        BETWEEN_READ_AND_LOCK.with(|hook| *hook.borrow_mut() = Some(Box::new(write)));
    }

    /// A registry with a ConfigMap `default/c`, and its target.
    fn with_config_map() -> (tokio::runtime::Runtime, Arc<Registry>, Target) {
        let (runtime, registry, t) = crate::apiserver::registry::config_maps();
        registry
            .create(
                &t,
                json!({"metadata": {"name": "c"}, "data": {"v": "1"}}),
                &WriteOptions::default(),
            )
            .expect("created");
        (runtime, registry, t)
    }

    #[test]
    fn a_resource_version_precondition_sees_an_update_that_raced_the_delete() {
        let (_runtime, registry, t) = with_config_map();
        let read_rv = registry.get(&t, "c").expect("present").rv.to_string();
        let (racing, target) = (Arc::clone(&registry), t.clone());
        race(move || {
            racing
                .patch(
                    &target,
                    "c",
                    Sub::Main,
                    PatchKind::Merge,
                    &json!({"data": {"v": "2"}}),
                    &WriteOptions::default(),
                )
                .expect("the racing update");
        });
        let stale = DeleteOptions {
            precondition_rv: Some(read_rv.clone()),
            ..DeleteOptions::default()
        };
        let refused = registry
            .delete(&t, "c", &stale)
            .expect_err("the precondition names the version the update replaced");
        assert_eq!(refused.reason, Reason::Conflict, "{refused}");
        let kept = registry
            .get(&t, "c")
            .expect("the updated object is not deleted");
        assert_eq!(kept.value()["data"]["v"], "2");
        let current = DeleteOptions {
            precondition_rv: Some(kept.rv.to_string()),
            ..DeleteOptions::default()
        };
        assert!(matches!(
            registry.delete(&t, "c", &current),
            Ok(Deleted::Removed(_))
        ));
        assert!(registry.find(&t, "c").is_none());
    }

    #[test]
    fn a_uid_precondition_sees_a_recreation_that_raced_the_delete() {
        let (_runtime, registry, t) = with_config_map();
        let read_uid = registry.get(&t, "c").expect("present").attrs.uid.clone();
        let (racing, target) = (Arc::clone(&registry), t.clone());
        race(move || {
            racing
                .delete(&target, "c", &DeleteOptions::default())
                .expect("the racing delete");
            racing
                .create(
                    &target,
                    json!({"metadata": {"name": "c"}, "data": {"v": "new"}}),
                    &WriteOptions::default(),
                )
                .expect("the racing create");
        });
        let of_the_old = DeleteOptions {
            precondition_uid: Some(read_uid.clone()),
            ..DeleteOptions::default()
        };
        let refused = registry
            .delete(&t, "c", &of_the_old)
            .expect_err("the precondition names the object that is gone");
        assert_eq!(refused.reason, Reason::Conflict, "{refused}");
        let recreated = registry
            .get(&t, "c")
            .expect("the new object is not deleted");
        assert_ne!(recreated.attrs.uid, read_uid);
        assert_eq!(recreated.value()["data"]["v"], "new");
    }
}
