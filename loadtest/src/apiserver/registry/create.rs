//! POST: a new object gets its name (from `generateName`), uid, timestamps and generation,
//! its namespace checked against the URL and refused while the namespace terminates, the
//! defaults and status resets the real strategies apply (pods, namespaces, apps workloads,
//! CRDs, which also start being served), then its schema ([`super::validate`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    DEFAULT_POD_GRACE_SECONDS, Registry, Sub, Target, WriteOptions, Written, dry_run_object,
    set_type_meta,
};
use crate::apiserver::crd;
use crate::apiserver::error::{ApiError, ApiResult, Reason};
use crate::apiserver::meta::{meta_mut, meta_str, new_uid, random_suffix};
use crate::apiserver::qos;
use crate::apiserver::resources::Behavior;
use crate::apiserver::store::{StoredObject, read, write};

/// How many names a create with `generateName` tries before it answers AlreadyExists, as the
/// API server does since Kubernetes 1.30's RetryGenerateName (on by default from 1.31): a
/// thousand NodeClaims named from one NodePool's prefix collide once in a few dozen runs with
/// one try (five characters of 27), never with eight.
const NAME_GENERATION_ATTEMPTS: usize = 8;

impl Registry {
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
        let generated = meta_str(&body, "name").is_empty();
        {
            let meta = meta_mut(&mut body);
            if generated {
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
        let warnings = self.validate(t, &mut body, None, opts)?;
        let mut key = (
            namespace.unwrap_or_default(),
            meta_str(&body, "name").to_string(),
        );
        let mut state = write(&t.ts.state);
        let mut attempts = 1;
        while generated && attempts < NAME_GENERATION_ATTEMPTS && state.objects.contains_key(&key) {
            key.1 = format!("{generate}{}", random_suffix());
            meta_mut(&mut body).insert("name".into(), json!(key.1));
            attempts += 1;
        }
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

    pub(super) fn check_type_meta(&self, t: &Target, body: &Value) -> ApiResult<()> {
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

    pub(super) fn object_namespace(&self, t: &Target, body: &Value) -> ApiResult<Option<String>> {
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

    fn after_create(&self, t: &Target, object: &Arc<StoredObject>) -> ApiResult<()> {
        if t.rt.behavior == Behavior::CustomResourceDefinition {
            let rt = crd::resource_type_of(&object.value())?;
            self.store.register(rt);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn a_generated_name_that_is_taken_is_drawn_again() {
        let (_runtime, registry, t) = crate::apiserver::registry::config_maps();
        // 20,000 names of 27^5: about 14 draws collide with a name taken before them, so a
        // single try would refuse about 14 creates.
        let mut names = HashSet::new();
        for _ in 0..20_000 {
            let written = registry
                .create(
                    &t,
                    json!({"metadata": {"generateName": "c-"}}),
                    &WriteOptions::default(),
                )
                .expect("a generated name is drawn again until it is free");
            names.insert(meta_str(&written.object.value(), "name").to_owned());
        }
        assert_eq!(names.len(), 20_000);
    }
}
