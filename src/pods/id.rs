//! What names a pod wherever it is carried: [`PodRef`], one shared [`PodId`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Identifies a pod: a [`PodId`] shared by every holder. The stores' [`super::LeanPod`]s hold
/// one each, and a round's plan and forms, the registry's nominations, the events and the
/// nomination writes clone it ([`super::PodLike::pod_ref`]), so a clone is a reference count,
/// not three strings copied for every pod each of them holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PodRef(Arc<PodId>);

/// A pod's namespace, name and uid.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodId {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        uid: impl Into<String>,
    ) -> Self {
        Self(Arc::new(PodId {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }))
    }
}

/// `namespace/name`, as kubectl and the events name a pod.
impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl std::ops::Deref for PodRef {
    type Target = PodId;

    fn deref(&self) -> &PodId {
        &self.0
    }
}
