//! PUT and PATCH through one guaranteed-update core ([`Registry::update_with`]): under the
//! type's write lock the current object is read, mutated (replaced, merge-, JSON- or
//! strategic-merge-patched, or server-side applied), held to what the API server enforces
//! (a stale resourceVersion is 409, server-set metadata survives, `/status` keeps only the
//! status, no finalizer is added while deleting) and committed only if anything changed.

use serde_json::{Value, json};

use super::delete::{blocks_removal, grace_elapsed};
use super::{Registry, Sub, Target, WriteOptions, Written, dry_run_object, set_type_meta};
use crate::apiserver::apply;
use crate::apiserver::crd;
use crate::apiserver::error::{ApiError, ApiResult, Reason};
use crate::apiserver::meta::{finalizers, is_deleting, meta_mut, meta_str, spec_part};
use crate::apiserver::patch::{json_patch, merge_patch, strategic_merge};
use crate::apiserver::resources::Behavior;
use crate::apiserver::store::write;
use std::sync::Arc;

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

impl Registry {
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
        let warnings = self.validate(t, new, Some(current), opts)?;
        if spec_part(new) != spec_part(current) {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta_mut(new).insert("generation".into(), json!(generation + 1));
        }
        Ok(warnings)
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
