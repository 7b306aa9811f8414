//! The pod form decisions carry: [`LeanPod`]. A k8s-openapi `Pod` holds its spec inline, and
//! a spec is mostly room for fields a pod leaves unset (each `Container` is about 2 KB before
//! it holds anything), so ten thousand replicas of one Deployment cost ten thousand copies of
//! the same spec. A lean pod keeps its own identity and status, and shares its spec with every
//! pod whose spec is equal: [`SpecInterner`] hands out one `Arc<PodSpec>` per distinct spec.
//!
//! What makes replicas' specs equal is taking out what names the replica: the node it is
//! bound to ([`PodLike::node_name`], kept beside the spec). (A StatefulSet pod's spec also
//! names it, in `hostname`, so those replicas share nothing; the spec is kept whole so that
//! [`LeanPod::to_pod`] gives back what was read.) Readers go through [`PodLike`], which the API's
//! `Pod` implements too, so a check written once reads either form; the spec a lean pod
//! gives has no node name, and [`PodLike::node_name`] is the one place to read it.
//!
//! The interner ([`super::intern`]) holds its specs weakly: a spec no pod uses any more is
//! dropped with its last pod, and its entry is swept on a later visit, so a long-running
//! store does not keep the specs of every pod it ever saw.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::intern::Interner;

/// What decisions read of a pod, in either form: the API's `Pod` or a [`LeanPod`].
pub trait PodLike {
    fn metadata(&self) -> &ObjectMeta;
    /// The scheduling spec. A lean pod's has no `nodeName`: read [`PodLike::node_name`].
    fn spec(&self) -> Option<&PodSpec>;
    /// `spec.nodeName`.
    fn node_name(&self) -> Option<&str>;
    fn status(&self) -> Option<&PodStatus>;
}

impl PodLike for Pod {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()
    }

    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }

    fn status(&self) -> Option<&PodStatus> {
        self.status.as_ref()
    }
}

impl<T: PodLike + ?Sized> PodLike for Arc<T> {
    fn metadata(&self) -> &ObjectMeta {
        (**self).metadata()
    }

    fn spec(&self) -> Option<&PodSpec> {
        (**self).spec()
    }

    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }

    fn status(&self) -> Option<&PodStatus> {
        (**self).status()
    }
}

impl<T: PodLike + ?Sized> PodLike for &T {
    fn metadata(&self) -> &ObjectMeta {
        (**self).metadata()
    }

    fn spec(&self) -> Option<&PodSpec> {
        (**self).spec()
    }

    fn node_name(&self) -> Option<&str> {
        (**self).node_name()
    }

    fn status(&self) -> Option<&PodStatus> {
        (**self).status()
    }
}

/// A pod as the stores, rounds and plans keep it: its own metadata, node name and status,
/// and a spec shared with every pod of equal spec (see the module doc).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeanPod {
    pub metadata: ObjectMeta,
    pub status: Option<PodStatus>,
    node_name: Option<String>,
    spec: Option<Arc<PodSpec>>,
}

/// A lean pod names the same API object as the `Pod` it was made from, so code addressing
/// the object (its kind, namespace, name and uid for an eviction, a patch or an event) takes
/// either form.
impl k8s_openapi::Resource for LeanPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for LeanPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl PodLike for LeanPod {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn spec(&self) -> Option<&PodSpec> {
        self.spec.as_deref()
    }

    fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    fn status(&self) -> Option<&PodStatus> {
        self.status.as_ref()
    }
}

impl LeanPod {
    /// `pod`, its spec interned in `specs`.
    pub fn new(pod: Pod, specs: &mut SpecInterner) -> Self {
        let Pod {
            metadata,
            spec,
            status,
        } = pod;
        let (node_name, spec) = match spec {
            Some(mut spec) => {
                let node_name = spec.node_name.take();
                (node_name, Some(specs.intern(spec)))
            }
            None => (None, None),
        };
        Self {
            metadata,
            status,
            node_name,
            spec,
        }
    }

    /// The shared spec itself, to tell whether two pods share one.
    pub fn shared_spec(&self) -> Option<&Arc<PodSpec>> {
        self.spec.as_ref()
    }

    /// This pod bound to `node` (or unbound, `None`): a copy of its own parts, the spec shared.
    pub fn with_node_name(&self, node: Option<&str>) -> Self {
        Self {
            node_name: node.map(str::to_string),
            ..self.clone()
        }
    }

    /// The API's form, for the edges that need it (e.g. a test comparing with a built pod).
    pub fn to_pod(&self) -> Pod {
        Pod {
            metadata: self.metadata.clone(),
            spec: self.spec.as_deref().map(|spec| {
                let mut spec = spec.clone();
                spec.node_name.clone_from(&self.node_name);
                spec
            }),
            status: self.status.clone(),
        }
    }
}

/// A one-off pod (a test's, a builder's), its spec its own: pods read in bulk go through
/// [`LeanPod::new`] with one [`SpecInterner`], which is what shares their specs.
impl From<Pod> for LeanPod {
    fn from(pod: Pod) -> Self {
        Self::new(pod, &mut SpecInterner::default())
    }
}

/// One shared `Arc<PodSpec>` per distinct spec (see the module doc for why the entries are
/// weak).
pub type SpecInterner = Interner<PodSpec>;

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

    #[test]
    fn replicas_share_one_spec_whatever_node_they_are_on() {
        let mut specs = SpecInterner::default();
        let a = LeanPod::new(replica("web-0", None, "1"), &mut specs);
        let b = LeanPod::new(replica("web-1", Some("n1"), "1"), &mut specs);
        let other = LeanPod::new(replica("db-0", None, "2"), &mut specs);
        let (sa, sb) = (
            a.shared_spec().expect("spec"),
            b.shared_spec().expect("spec"),
        );
        assert!(Arc::ptr_eq(sa, sb));
        assert!(!Arc::ptr_eq(sa, other.shared_spec().expect("spec")));
        assert_eq!((a.node_name(), b.node_name()), (None, Some("n1")));
        assert_eq!(b.spec().and_then(|s| s.node_name.as_deref()), None);
        assert_eq!(specs.live(), 2);
    }

    #[test]
    fn a_spec_goes_with_its_last_pod() {
        let mut specs = SpecInterner::default();
        let pod = LeanPod::new(replica("web-0", None, "1"), &mut specs);
        assert_eq!(specs.live(), 1);
        drop(pod);
        assert_eq!(specs.live(), 0);
        for i in 0..SWEEP_EVERY {
            drop(LeanPod::new(
                replica("x", None, &format!("{i}m")),
                &mut specs,
            ));
        }
        assert!(specs.hashes() < SWEEP_EVERY, "dead entries are swept");
    }

    #[test]
    fn the_api_form_comes_back_with_its_node() {
        let mut specs = SpecInterner::default();
        let pod = replica("web-1", Some("n1"), "1");
        let lean = LeanPod::new(pod.clone(), &mut specs);
        assert_eq!(lean.to_pod(), pod);
        let moved = lean.with_node_name(None);
        assert_eq!(moved.node_name(), None);
        assert!(Arc::ptr_eq(
            moved.shared_spec().expect("spec"),
            lean.shared_spec().expect("spec")
        ));
    }
}
