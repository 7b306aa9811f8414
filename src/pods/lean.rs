//! The pod form decisions carry: [`LeanPod`]. Most of a `Pod`'s spec and metadata is what
//! every replica of one workload holds alike (a spec is mostly room for unset fields; the
//! namespace, labels, annotations and owner come from one template), so a lean pod keeps
//! what names this pod and what happens to it — name, uid, resourceVersion, creation and
//! deletion times, grace period, finalizers, node, status (as a [`LeanStatus`]: what is read
//! of it), and the time of the kube-scheduler's last status write — and shares the rest,
//! through a [`PodInterner`], with every pod that has it equal: its spec (without the node
//! name) and [`SharedMeta`]. The spec is kept whole, so [`LeanPod::to_pod`] gives back what
//! was read; metadata no decision reads (`generation`, `selfLink`, the other
//! `managedFields`) is not kept.
//!
//! Readers go through [`PodLike`], which the API's `Pod` implements too, so a check written
//! once reads either form: [`PodLike::meta`] gives the metadata as borrowed fields
//! ([`PodMeta`]) and [`PodLike::node_name`] is the one place to read the node.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::id::PodRef;
use super::intern::Interner;
use super::status::{LeanStatus, PodStatusView};

/// What decisions read of a pod, in either form: the API's `Pod` or a [`LeanPod`].
pub trait PodLike {
    /// The metadata decisions read, wherever the form keeps it.
    fn meta(&self) -> PodMeta<'_>;
    /// The scheduling spec. A lean pod's has no `nodeName`: read [`PodLike::node_name`].
    fn spec(&self) -> Option<&PodSpec>;
    /// `spec.nodeName`.
    fn node_name(&self) -> Option<&str>;
    fn status(&self) -> Option<PodStatusView<'_>>;
    /// What names the pod in plans, results and nominations (namespace `default` when unset):
    /// a lean pod's own, shared; for the API's form, made anew.
    fn pod_ref(&self) -> PodRef {
        let meta = self.meta();
        PodRef::new(
            meta.namespace.unwrap_or("default"),
            meta.name.unwrap_or_default(),
            meta.uid.unwrap_or_default(),
        )
    }
    /// When the kube-scheduler last changed the pod's status: the time of its
    /// `managedFields` entry for the status subresource ([`super::is_scheduler_status_write`]).
    /// It rewrites its `Unschedulable` report when the message changes (as it does once a
    /// node is added, the count of nodes in it changing), but keeps the condition's
    /// `lastTransitionTime` while the status stays False, so only this tells a verdict given
    /// after some moment from one given before.
    fn scheduler_reported_at(&self) -> Option<Timestamp>;
}

/// A pod's metadata as decisions read it, borrowed from either form: the fields keep
/// `ObjectMeta`'s names, so `pod.metadata.labels.as_ref()` reads as `pod.meta().labels`.
/// Lists are slices, empty when the API leaves them out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodMeta<'a> {
    pub name: Option<&'a str>,
    pub generate_name: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub uid: Option<&'a str>,
    pub resource_version: Option<&'a str>,
    pub creation_timestamp: Option<&'a Time>,
    pub deletion_timestamp: Option<&'a Time>,
    pub deletion_grace_period_seconds: Option<i64>,
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub annotations: Option<&'a BTreeMap<String, String>>,
    pub owner_references: &'a [OwnerReference],
    pub finalizers: &'a [String],
}

impl<'a> From<&'a ObjectMeta> for PodMeta<'a> {
    fn from(meta: &'a ObjectMeta) -> Self {
        Self {
            name: meta.name.as_deref(),
            generate_name: meta.generate_name.as_deref(),
            namespace: meta.namespace.as_deref(),
            uid: meta.uid.as_deref(),
            resource_version: meta.resource_version.as_deref(),
            creation_timestamp: meta.creation_timestamp.as_ref(),
            deletion_timestamp: meta.deletion_timestamp.as_ref(),
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            labels: meta.labels.as_ref(),
            annotations: meta.annotations.as_ref(),
            owner_references: meta.owner_references.as_deref().unwrap_or_default(),
            finalizers: meta.finalizers.as_deref().unwrap_or_default(),
        }
    }
}

impl PodLike for Pod {
    fn meta(&self) -> PodMeta<'_> {
        PodMeta::from(&self.metadata)
    }

    fn spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()
    }

    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }

    fn status(&self) -> Option<PodStatusView<'_>> {
        self.status.as_ref().map(PodStatusView::from)
    }

    fn scheduler_reported_at(&self) -> Option<Timestamp> {
        scheduler_write_time(&self.metadata)
    }
}

impl<T: PodLike + ?Sized> PodLike for Arc<T> {
    fn meta(&self) -> PodMeta<'_> {
        (**self).meta()
    }

    fn spec(&self) -> Option<&PodSpec> {
        (**self).spec()
    }

    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }

    fn status(&self) -> Option<PodStatusView<'_>> {
        (**self).status()
    }

    fn pod_ref(&self) -> PodRef {
        (**self).pod_ref()
    }

    fn scheduler_reported_at(&self) -> Option<Timestamp> {
        (**self).scheduler_reported_at()
    }
}

impl<T: PodLike + ?Sized> PodLike for &T {
    fn meta(&self) -> PodMeta<'_> {
        (**self).meta()
    }

    fn spec(&self) -> Option<&PodSpec> {
        (**self).spec()
    }

    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }

    fn status(&self) -> Option<PodStatusView<'_>> {
        (**self).status()
    }

    fn pod_ref(&self) -> PodRef {
        (**self).pod_ref()
    }

    fn scheduler_reported_at(&self) -> Option<Timestamp> {
        (**self).scheduler_reported_at()
    }
}

/// The time of `meta`'s kube-scheduler status write, if it has one.
fn scheduler_write_time(meta: &ObjectMeta) -> Option<Timestamp> {
    meta.managed_fields
        .iter()
        .flatten()
        .find(|entry| super::is_scheduler_status_write(entry))?
        .time
        .as_ref()
        .map(|time| time.0)
}

/// The metadata replicas of one workload hold alike, shared by every pod that has it equal
/// through a [`PodInterner`] (see the module doc).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct SharedMeta {
    namespace: Option<String>,
    generate_name: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

/// A pod as the stores, rounds and plans keep it: what names and concerns this pod alone,
/// and a spec and [`SharedMeta`] shared with every pod that has them equal (see the module
/// doc).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeanPod {
    /// Its namespace, name and uid, which plans and nominations share
    /// ([`PodLike::pod_ref`]); an absent name or uid is kept empty.
    id: PodRef,
    resource_version: Option<Box<str>>,
    creation_timestamp: Option<Time>,
    /// Boxed: few pods are being deleted or carry finalizers, and every pod is stored.
    deletion: Option<Box<Deletion>>,
    /// All that is kept of `managedFields` ([`PodLike::scheduler_reported_at`]).
    scheduler_reported_at: Option<Timestamp>,
    shared: Arc<SharedMeta>,
    status: Option<LeanStatus>,
    node_name: Option<Box<str>>,
    spec: Option<Arc<PodSpec>>,
}

/// A pod's deletion and the finalizers that hold it back.
#[derive(Debug, Clone, PartialEq, Default)]
struct Deletion {
    timestamp: Option<Time>,
    grace_period_seconds: Option<i64>,
    finalizers: Option<Vec<String>>,
}

impl Deletion {
    /// `None` when there is nothing to keep.
    fn of(
        timestamp: Option<Time>,
        grace_period_seconds: Option<i64>,
        finalizers: Option<Vec<String>>,
    ) -> Option<Box<Self>> {
        let nothing = timestamp.is_none()
            && grace_period_seconds.is_none()
            && finalizers.as_ref().is_none_or(Vec::is_empty);
        (!nothing).then(|| {
            Box::new(Self {
                timestamp,
                grace_period_seconds,
                finalizers,
            })
        })
    }
}

impl PodLike for LeanPod {
    fn meta(&self) -> PodMeta<'_> {
        let shared = &*self.shared;
        let deletion = self.deletion.as_deref();
        PodMeta {
            name: non_empty(&self.id.name),
            generate_name: shared.generate_name.as_deref(),
            namespace: shared.namespace.as_deref(),
            uid: non_empty(&self.id.uid),
            resource_version: self.resource_version.as_deref(),
            creation_timestamp: self.creation_timestamp.as_ref(),
            deletion_timestamp: deletion.and_then(|d| d.timestamp.as_ref()),
            deletion_grace_period_seconds: deletion.and_then(|d| d.grace_period_seconds),
            labels: shared.labels.as_ref(),
            annotations: shared.annotations.as_ref(),
            owner_references: shared.owner_references.as_deref().unwrap_or_default(),
            finalizers: deletion
                .and_then(|d| d.finalizers.as_deref())
                .unwrap_or_default(),
        }
    }

    fn spec(&self) -> Option<&PodSpec> {
        self.spec.as_deref()
    }

    fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    fn status(&self) -> Option<PodStatusView<'_>> {
        self.status.as_ref().map(LeanStatus::view)
    }

    fn scheduler_reported_at(&self) -> Option<Timestamp> {
        self.scheduler_reported_at
    }

    fn pod_ref(&self) -> PodRef {
        self.id.clone()
    }
}

/// `text`, unless empty: how a lean pod gives back a name or uid the API left out.
fn non_empty(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
}

impl LeanPod {
    /// `pod`, its spec and [`SharedMeta`] interned in `interner`.
    pub fn new(pod: Pod, interner: &mut PodInterner) -> Self {
        let Pod {
            metadata,
            spec,
            status,
        } = pod;
        let scheduler_reported_at = scheduler_write_time(&metadata);
        // Destructured whole, so that a field k8s-openapi adds is a compile error here
        // rather than silently dropped; those named `_` are the ones no decision reads.
        let ObjectMeta {
            annotations,
            creation_timestamp,
            deletion_grace_period_seconds,
            deletion_timestamp,
            finalizers,
            generate_name,
            generation: _,
            labels,
            managed_fields: _,
            name,
            namespace,
            owner_references,
            resource_version,
            self_link: _,
            uid,
        } = metadata;
        let id = PodRef::new(
            namespace.as_deref().unwrap_or("default"),
            name.unwrap_or_default(),
            uid.unwrap_or_default(),
        );
        let shared = interner.metas.intern(SharedMeta {
            namespace,
            generate_name,
            labels,
            annotations,
            owner_references,
        });
        let (node_name, spec) = match spec {
            Some(mut spec) => {
                let node_name = spec.node_name.take().map(String::into_boxed_str);
                (node_name, Some(interner.specs.intern(spec)))
            }
            None => (None, None),
        };
        Self {
            id,
            resource_version: resource_version.map(String::into_boxed_str),
            creation_timestamp,
            deletion: Deletion::of(
                deletion_timestamp,
                deletion_grace_period_seconds,
                finalizers,
            ),
            scheduler_reported_at,
            shared,
            status: status.map(LeanStatus::from),
            node_name,
            spec,
        }
    }

    /// The shared spec itself, to tell whether two pods share one.
    pub fn shared_spec(&self) -> Option<&Arc<PodSpec>> {
        self.spec.as_ref()
    }

    /// The shared metadata itself, to tell whether two pods share it.
    pub fn shared_meta(&self) -> &Arc<SharedMeta> {
        &self.shared
    }

    /// Takes back the pod's deletion (its timestamp and grace period): the pod as the
    /// replacement its controller recreates under the same name (a StatefulSet's) would be.
    pub fn clear_deletion(&mut self) {
        if let Some(deletion) = self.deletion.take() {
            self.deletion = Deletion::of(None, None, deletion.finalizers);
        }
    }

    /// This pod bound to `node` (or unbound, `None`): a copy of its own parts, the spec and
    /// shared metadata still shared.
    pub fn with_node_name(&self, node: Option<&str>) -> Self {
        Self {
            node_name: node.map(Box::from),
            ..self.clone()
        }
    }

    /// This pod as its controller would recreate it elsewhere: no node and no status, the
    /// spec and shared metadata still shared.
    pub fn unbound(&self) -> Self {
        Self {
            node_name: None,
            status: None,
            ..self.clone()
        }
    }

    /// The API's form, for the edges that need it (e.g. a test comparing with a built pod,
    /// a simulation creating the pod). Of `managedFields` it has the kube-scheduler's status
    /// write alone, with its manager, subresource and time: what a lean pod keeps of it.
    pub fn to_pod(&self) -> Pod {
        let shared = &*self.shared;
        let deletion = self.deletion.as_deref();
        let scheduler_write = self.scheduler_reported_at.map(|time| ManagedFieldsEntry {
            manager: Some(super::SCHEDULER_FIELD_MANAGER.to_owned()),
            subresource: Some("status".to_owned()),
            time: Some(Time(time)),
            ..ManagedFieldsEntry::default()
        });
        Pod {
            metadata: ObjectMeta {
                name: non_empty(&self.id.name).map(str::to_owned),
                generate_name: shared.generate_name.clone(),
                namespace: shared.namespace.clone(),
                uid: non_empty(&self.id.uid).map(str::to_owned),
                resource_version: self.resource_version.as_deref().map(str::to_owned),
                creation_timestamp: self.creation_timestamp.clone(),
                deletion_timestamp: deletion.and_then(|d| d.timestamp.clone()),
                deletion_grace_period_seconds: deletion.and_then(|d| d.grace_period_seconds),
                finalizers: deletion.and_then(|d| d.finalizers.clone()),
                labels: shared.labels.clone(),
                annotations: shared.annotations.clone(),
                owner_references: shared.owner_references.clone(),
                managed_fields: scheduler_write.map(|entry| vec![entry]),
                ..ObjectMeta::default()
            },
            spec: self.spec.as_deref().map(|spec| {
                let mut spec = spec.clone();
                spec.node_name = self.node_name.as_deref().map(str::to_owned);
                spec
            }),
            status: self.status.as_ref().map(LeanStatus::to_status),
        }
    }
}

/// A one-off pod (a test's, a builder's), its spec and metadata its own: pods read in bulk
/// go through [`LeanPod::new`] with one [`PodInterner`], which is what shares them.
impl From<Pod> for LeanPod {
    fn from(pod: Pod) -> Self {
        Self::new(pod, &mut PodInterner::default())
    }
}

/// What pods read in bulk share: one `Arc` per distinct spec and per distinct
/// [`SharedMeta`], each held weakly, so it goes with its last pod (the `intern` module).
#[derive(Debug, Default)]
pub struct PodInterner {
    specs: Interner<PodSpec>,
    metas: Interner<SharedMeta>,
}

impl PodInterner {
    /// Distinct specs some pod still holds.
    pub fn live_specs(&self) -> usize {
        self.specs.live()
    }

    /// Distinct [`SharedMeta`]s some pod still holds.
    pub fn live_metas(&self) -> usize {
        self.metas.live()
    }
}

#[cfg(test)]
mod tests {
    use super::super::intern::SWEEP_EVERY;
    use super::*;
    use serde_json::json;

    fn replica(name: &str, node: Option<&str>, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "uid": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]
            },
            "status": {"phase": "Pending"}
        }))
        .expect("a valid pod")
    }

    /// A replica of ReplicaSet `owner`, as the API server gives it: its own name, uid,
    /// resourceVersion and node; its template's labels and annotations, its owner's
    /// reference.
    fn owned(name: &str, node: Option<&str>, owner: &str, app: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "generateName": format!("{owner}-"), "namespace": "shop",
                "uid": format!("uid-{name}"), "resourceVersion": format!("rv-{name}"),
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": app, "pod-template-hash": "7d4b9c8f6d"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": owner, "uid": format!("uid-{owner}"), "controller": true}]
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]
            }
        }))
        .expect("a valid pod")
    }

    #[test]
    fn a_lean_pod_shares_its_pod_ref_and_names_it_as_the_apis_form_would() {
        let api = owned("web-0", None, "web-7d4b9c8f6d", "web");
        let lean = Arc::new(LeanPod::from(api.clone()));
        let (one, two) = (lean.pod_ref(), lean.pod_ref());
        assert!(
            std::ptr::eq(&*one, &*two),
            "a clone of the pod's own, not a copy"
        );
        assert_eq!(one, api.pod_ref());
        assert_eq!(
            (&*one.namespace, &*one.name, &*one.uid),
            ("shop", "web-0", "uid-web-0")
        );
        let mut unnamed = replica("x", None, "1");
        unnamed.metadata = ObjectMeta::default();
        let unnamed = LeanPod::from(unnamed);
        assert_eq!(unnamed.pod_ref(), PodRef::new("default", "", ""));
        let meta = unnamed.meta();
        assert_eq!((meta.name, meta.namespace, meta.uid), (None, None, None));
        assert_eq!(unnamed.to_pod().metadata.name, None);
    }

    #[test]
    fn replicas_share_one_spec_whatever_node_they_are_on() {
        let mut interner = PodInterner::default();
        let a = LeanPod::new(replica("web-0", None, "1"), &mut interner);
        let b = LeanPod::new(replica("web-1", Some("n1"), "1"), &mut interner);
        let other = LeanPod::new(replica("db-0", None, "2"), &mut interner);
        let (sa, sb) = (
            a.shared_spec().expect("spec"),
            b.shared_spec().expect("spec"),
        );
        assert!(Arc::ptr_eq(sa, sb));
        assert!(!Arc::ptr_eq(sa, other.shared_spec().expect("spec")));
        assert_eq!((a.node_name(), b.node_name()), (None, Some("n1")));
        assert_eq!(b.spec().and_then(|s| s.node_name.as_deref()), None);
        assert_eq!(interner.live_specs(), 2);
    }

    #[test]
    fn replicas_share_one_metadata_and_keep_their_own_names() {
        let mut interner = PodInterner::default();
        let a = LeanPod::new(owned("web-a", None, "web-rs", "web"), &mut interner);
        let b = LeanPod::new(owned("web-b", Some("n1"), "web-rs", "web"), &mut interner);
        let relabelled = LeanPod::new(owned("web-c", None, "web-rs", "api"), &mut interner);
        assert!(Arc::ptr_eq(a.shared_meta(), b.shared_meta()));
        assert!(!Arc::ptr_eq(a.shared_meta(), relabelled.shared_meta()));
        assert_eq!(interner.live_metas(), 2);
        let (ma, mb) = (a.meta(), b.meta());
        assert_eq!((ma.name, mb.name), (Some("web-a"), Some("web-b")));
        assert_eq!((ma.uid, mb.uid), (Some("uid-web-a"), Some("uid-web-b")));
        assert_eq!(mb.resource_version, Some("rv-web-b"));
        assert_eq!(
            (ma.namespace, ma.generate_name),
            (Some("shop"), Some("web-rs-"))
        );
        assert_eq!(ma.owner_references[0].name, "web-rs");
        assert_eq!(
            relabelled.meta().labels.and_then(|l| l.get("app")),
            Some(&"api".to_owned())
        );
    }

    #[test]
    fn a_spec_goes_with_its_last_pod() {
        let mut interner = PodInterner::default();
        let pod = LeanPod::new(replica("web-0", None, "1"), &mut interner);
        assert_eq!(interner.live_specs(), 1);
        drop(pod);
        assert_eq!(interner.live_specs(), 0);
        for i in 0..SWEEP_EVERY {
            drop(LeanPod::new(
                replica("x", None, &format!("{i}m")),
                &mut interner,
            ));
        }
        assert!(
            interner.specs.hashes() < SWEEP_EVERY,
            "dead entries are swept"
        );
    }

    #[test]
    fn shared_metadata_goes_with_its_last_pod() {
        let mut interner = PodInterner::default();
        let a = LeanPod::new(owned("web-a", None, "web-rs", "web"), &mut interner);
        let b = LeanPod::new(owned("web-b", None, "web-rs", "web"), &mut interner);
        drop(a);
        assert_eq!(interner.live_metas(), 1, "the other replica holds it");
        drop(b);
        assert_eq!(interner.live_metas(), 0);
        for i in 0..SWEEP_EVERY {
            drop(LeanPod::new(
                owned("x", None, &format!("rs-{i}"), "web"),
                &mut interner,
            ));
        }
        assert!(
            interner.metas.hashes() < SWEEP_EVERY,
            "dead entries are swept"
        );
    }

    #[test]
    fn a_lean_pod_holds_no_api_metadata_inline() {
        // Its own metadata inline: three strings (resourceVersion, node name; the name and
        // uid are in the shared `PodRef`) boxed at 16 bytes, the creation time and the
        // scheduler's write time of 24, and four pointers of 8 (the id, the deletion, the two
        // shared parts): 112 bytes beside the status, where a whole `ObjectMeta` alone is 360.
        let own = size_of::<LeanPod>() - size_of::<Option<LeanStatus>>();
        assert!(own <= 112, "{own} bytes inline beside the status");
        assert!(own < size_of::<ObjectMeta>());
    }

    #[test]
    fn a_pod_with_no_deletion_or_finalizers_keeps_no_box_for_them() {
        let mut interner = PodInterner::default();
        let pod = replica("web-1", Some("n1"), "1");
        assert!(LeanPod::new(pod.clone(), &mut interner).deletion.is_none());
        let mut finalized = pod;
        finalized.metadata.finalizers = Some(vec!["example.com/keep".to_owned()]);
        finalized.metadata.deletion_timestamp = finalized.metadata.creation_timestamp.clone();
        let mut lean = LeanPod::new(finalized, &mut interner);
        lean.clear_deletion();
        assert_eq!(lean.meta().deletion_timestamp, None);
        assert_eq!(
            lean.meta().finalizers,
            ["example.com/keep"],
            "the finalizers stay"
        );
    }

    #[test]
    fn the_api_form_comes_back_with_its_node() {
        let mut interner = PodInterner::default();
        let pod = replica("web-1", Some("n1"), "1");
        let lean = LeanPod::new(pod.clone(), &mut interner);
        assert_eq!(lean.to_pod(), pod);
        let moved = lean.with_node_name(None);
        assert_eq!(moved.node_name(), None);
        assert!(Arc::ptr_eq(
            moved.shared_spec().expect("spec"),
            lean.shared_spec().expect("spec")
        ));
        assert!(Arc::ptr_eq(moved.shared_meta(), lean.shared_meta()));
    }

    #[test]
    fn the_api_form_comes_back_with_its_metadata_and_scheduler_write() {
        let mut pod = owned("web-a", Some("n1"), "web-rs", "web");
        pod.metadata.deletion_timestamp = pod.metadata.creation_timestamp.clone();
        pod.metadata.deletion_grace_period_seconds = Some(30);
        pod.metadata.finalizers = Some(vec!["example.com/keep".to_owned()]);
        let write = |manager: &str, at: &str| -> ManagedFieldsEntry {
            serde_json::from_value(json!({
                "manager": manager, "operation": "Update", "subresource": "status",
                "time": at, "fieldsV1": {"f:status": {}}
            }))
            .expect("a managed fields entry")
        };
        pod.metadata.managed_fields = Some(vec![
            write("kubelet", "2026-01-01T00:00:09Z"),
            write(
                super::super::SCHEDULER_FIELD_MANAGER,
                "2026-01-01T00:00:05Z",
            ),
        ]);
        let lean = LeanPod::from(pod.clone());
        assert_eq!(
            lean.scheduler_reported_at(),
            pod.scheduler_reported_at(),
            "either form reads the same time"
        );
        assert_eq!(
            lean.meta(),
            pod.meta(),
            "either form reads the same metadata"
        );
        let back = lean.to_pod();
        let kept = back.metadata.managed_fields.as_deref().expect("one entry");
        assert_eq!(kept.len(), 1);
        assert!(super::super::is_scheduler_status_write(&kept[0]));
        assert_eq!(back.scheduler_reported_at(), pod.scheduler_reported_at());
        let mut expected = pod;
        expected.metadata.managed_fields = back.metadata.managed_fields.clone();
        assert_eq!(back, expected, "all but the other managedFields entries");
    }
}
