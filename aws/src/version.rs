//! The cluster's Kubernetes version as the provider resolves AMI aliases with it: shared
//! between the provider's settings and whoever re-reads it from the API server (the
//! controller, every 15 minutes as upstream), so a control-plane upgrade reaches the next
//! EC2NodeClass resolution — new AMIs in its status, drift for the nodes on the old ones —
//! without a restart.

use std::sync::{Arc, PoisonError, RwLock};

/// `1.33`-style major.minor of the control plane. Clones share one value.
#[derive(Clone, Debug, Default)]
pub struct KubernetesVersion(Arc<RwLock<String>>);

impl KubernetesVersion {
    pub fn new(version: impl Into<String>) -> Self {
        Self(Arc::new(RwLock::new(version.into())))
    }

    /// The version now.
    pub fn get(&self) -> String {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes `version`; answers the one it replaced when it differs, `None` when unchanged.
    pub fn set(&self, version: &str) -> Option<String> {
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        (*current != version).then(|| std::mem::replace(&mut *current, version.to_owned()))
    }
}

impl PartialEq for KubernetesVersion {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.get() == other.get()
    }
}

impl From<&str> for KubernetesVersion {
    fn from(version: &str) -> Self {
        Self::new(version)
    }
}

impl From<String> for KubernetesVersion {
    fn from(version: String) -> Self {
        Self::new(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_version_and_a_change_answers_the_old_one() {
        let version = KubernetesVersion::from("1.33");
        let provider_copy = version.clone();
        assert_eq!(version.set("1.33"), None, "unchanged");
        assert_eq!(version.set("1.34").as_deref(), Some("1.33"));
        assert_eq!(provider_copy.get(), "1.34");
    }
}
