//! NodeClaims the Launcher created, kept until the watch has surely delivered them, so a
//! round right after a launch counts them as in-flight capacity instead of planning their
//! pods again. The Launcher is the only writer: it adds each NodeClaim before answering the
//! Provisioner (so the next round sees it) and withdraws one it deletes because its launch
//! was refused (so its pods are planned again at once, even if the deletion completes before
//! the watch ever showed the object). The Provisioner reads the ones its store lacks.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use kerf::api::NodeClaim;
use tokio::time::Instant;

use crate::state::{ClusterState, ObjectKey};

/// How long a created NodeClaim counts as in-flight capacity before its watch event
/// arrives. Events normally arrive within milliseconds; the bound only matters for a
/// NodeClaim deleted by someone else before the watch saw it, whose pods must not stay
/// covered by it for good.
pub const UNSEEN_NODECLAIM_GRACE: Duration = Duration::from_secs(30);

/// The registry; clones share it.
#[derive(Clone, Debug, Default)]
pub struct CreatedClaims {
    claims: Arc<DashMap<String, (NodeClaim, Instant)>>,
}

impl CreatedClaims {
    /// Created NodeClaims `state` does not hold yet, younger than the grace.
    pub fn unseen(&self, state: &ClusterState) -> Vec<NodeClaim> {
        self.claims
            .iter()
            .filter(|entry| {
                let key = ObjectKey::new(None, entry.key());
                // Gone already counts as seen: a NodeClaim deleted (and released) within
                // milliseconds, as after insufficient capacity, must not cover its pods.
                entry.value().1.elapsed() < UNSEEN_NODECLAIM_GRACE
                    && state.nodeclaims.get(&key).is_none()
                    && !state.nodeclaims.recently_deleted(&key)
            })
            .map(|entry| entry.value().0.clone())
            .collect()
    }

    /// Records a NodeClaim just created, forgetting ones past the grace.
    pub(super) fn insert(&self, claim: NodeClaim) {
        self.claims
            .retain(|_, (_, created)| created.elapsed() < UNSEEN_NODECLAIM_GRACE);
        let name = claim.metadata.name.clone().unwrap_or_default();
        self.claims.insert(name, (claim, Instant::now()));
    }

    /// Forgets a NodeClaim that is being deleted: it is no capacity any more.
    pub(crate) fn withdraw(&self, name: &str) {
        self.claims.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::api::{NodeClaimSpec, NodeClassReference};

    fn claim(name: &str) -> NodeClaim {
        NodeClaim::new(
            name,
            NodeClaimSpec {
                taints: Vec::new(),
                startup_taints: Vec::new(),
                requirements: Vec::new(),
                resources: None,
                node_class_ref: NodeClassReference {
                    group: kerf::labels::AWS_GROUP.to_owned(),
                    kind: "EC2NodeClass".to_owned(),
                    name: "default".to_owned(),
                },
                expire_after: kerf::api::NillableDuration::parse("720h").expect("valid"),
                termination_grace_period: None,
            },
        )
    }

    fn names(claims: &[NodeClaim]) -> Vec<String> {
        let mut names: Vec<String> = claims.iter().map(|c| c.name().to_owned()).collect();
        names.sort();
        names
    }

    #[tokio::test(start_paused = true)]
    async fn created_claims_count_until_seen_withdrawn_or_past_the_grace() {
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        created.insert(claim("a"));
        created.insert(claim("b"));
        created.insert(claim("c"));
        assert_eq!(names(&created.unseen(&state)), ["a", "b", "c"]);

        writers
            .nodeclaims
            .apply(ObjectKey::new(None, "a"), claim("a"));
        created.withdraw("b");
        assert_eq!(names(&created.unseen(&state)), ["c"]);

        tokio::time::advance(UNSEEN_NODECLAIM_GRACE).await;
        assert!(created.unseen(&state).is_empty());
        created.insert(claim("d"));
        assert_eq!(created.claims.len(), 1, "old entries are dropped on insert");
    }
}
