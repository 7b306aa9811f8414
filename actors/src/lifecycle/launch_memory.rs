//! What the launch step ([`super::launch`]) remembers across attempts, by NodeClaim uid:
//! a launch whose status write failed ([`LaunchedMemory`], so the retry records it without
//! asking the cloud again) and the NodeClaims whose spot was refused ([`OnDemandFallback`],
//! so their next attempts ask for on-demand only). Both live in memory and expire: past
//! them the provider's adoption by tag, and the marked offerings, cover the same cases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kerf::api::{NodeClaim, NodeSelectorRequirementWithMinValues, Operator};
use kerf::labels;
use tokio::time::Instant;

/// How long a launch is remembered after its status write failed (upstream's launch cache
/// keeps entries a minute): long enough for the retries with backoff, after which the
/// provider's adoption by tag covers the same case.
pub const LAUNCHED_MEMORY: Duration = Duration::from_secs(60);

/// Launches by NodeClaim uid: what was launched until its record is written, then that it was.
#[derive(Default)]
pub struct LaunchedMemory {
    by_uid: Mutex<HashMap<String, Remembered>>,
}

struct Remembered {
    /// What was launched, until it is recorded: then only that it was is kept (a thousand
    /// launches' NodeClaims are megabytes held a minute).
    launched: Option<Arc<NodeClaim>>,
    at: Instant,
}

/// What the memory holds of a launch.
pub(super) enum Memory {
    /// Launched, its status not yet written.
    Unrecorded(Arc<NodeClaim>),
    /// The labels and `Launched=True` status were written: a reconcile that still finds
    /// the NodeClaim not `Launched` read it before that write's watch event arrived.
    Recorded,
}

impl LaunchedMemory {
    pub(super) fn get(&self, uid: &str) -> Option<Memory> {
        let map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        let remembered = map.get(uid).filter(|r| r.at.elapsed() < LAUNCHED_MEMORY)?;
        Some(match &remembered.launched {
            Some(launched) => Memory::Unrecorded(Arc::clone(launched)),
            None => Memory::Recorded,
        })
    }

    /// Remembers what the launch resolved (labels, annotations, status), all that recording
    /// it reads: the spec, instance types and all, is the NodeClaim's own.
    pub(super) fn remember(&self, uid: &str, mut launched: NodeClaim) -> Arc<NodeClaim> {
        launched.spec.requirements = Vec::new();
        launched.spec.resources = None;
        let launched = Arc::new(launched);
        let mut map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, r| r.at.elapsed() < LAUNCHED_MEMORY);
        let remembered = Remembered {
            launched: Some(Arc::clone(&launched)),
            at: Instant::now(),
        };
        map.insert(uid.to_owned(), remembered);
        launched
    }

    pub(super) fn recorded(&self, uid: &str) {
        let mut map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(remembered) = map.get_mut(uid) {
            remembered.launched = None;
        }
    }
}

/// How long a NodeClaim whose spot was refused keeps launching on-demand: past its launch
/// TTL it is deleted anyway, and by then the refused spot offerings are available again.
pub const ON_DEMAND_FALLBACK_MEMORY: Duration = Duration::from_secs(5 * 60);

/// NodeClaims whose spot offerings were refused, by uid: their next attempts ask the
/// provider for on-demand only, where upstream deletes the NodeClaim and lets the next rounds
/// walk the spot offerings one refusal at a time. Kept in memory: after a restart the first attempt is spot
/// again, its offerings are still marked unavailable, and the fallback is taken again.
#[derive(Default)]
pub struct OnDemandFallback {
    by_uid: Mutex<HashMap<String, Instant>>,
}

impl OnDemandFallback {
    fn contains(&self, uid: &str) -> bool {
        let map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(uid)
            .is_some_and(|at| at.elapsed() < ON_DEMAND_FALLBACK_MEMORY)
    }

    pub(super) fn insert(&self, uid: &str) {
        let mut map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, at| at.elapsed() < ON_DEMAND_FALLBACK_MEMORY);
        map.insert(uid.to_owned(), Instant::now());
    }

    /// What to ask the provider for: `claim` itself, or, once its spot was refused, `claim`
    /// narrowed to on-demand (in memory only: the NodeClaim's spec is never rewritten).
    pub(super) fn attempt<'c>(&self, claim: &'c NodeClaim) -> Attempt<'c> {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        if self.contains(uid) {
            Attempt::OnDemand(Box::new(on_demand_only(claim)))
        } else {
            Attempt::AsCreated(claim)
        }
    }
}

/// The NodeClaim a launch asks the provider for. The narrowed copy is boxed: a launch's
/// future holds its attempt while the provider answers, and a NodeClaim's own struct is a
/// kilobyte and a half, which every launch's future would otherwise reserve.
pub(super) enum Attempt<'c> {
    AsCreated(&'c NodeClaim),
    OnDemand(Box<NodeClaim>),
}

impl std::ops::Deref for Attempt<'_> {
    type Target = NodeClaim;

    fn deref(&self) -> &NodeClaim {
        match self {
            Attempt::AsCreated(claim) => claim,
            Attempt::OnDemand(narrowed) => narrowed,
        }
    }
}

/// `claim` with its capacity type narrowed to on-demand.
fn on_demand_only(claim: &NodeClaim) -> NodeClaim {
    let mut narrowed = claim.clone();
    let requirements = &mut narrowed.spec.requirements;
    requirements.retain(|r| r.key != labels::CAPACITY_TYPE);
    requirements.push(NodeSelectorRequirementWithMinValues {
        key: labels::CAPACITY_TYPE.to_owned(),
        operator: Operator::In,
        values: vec![labels::CAPACITY_TYPE_ON_DEMAND.to_owned()],
        min_values: None,
    });
    narrowed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launched(name: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["m5.large", "m5.xlarge"]}],
                "resources": {"requests": {"cpu": "1"}},
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            },
            "status": {"providerID": "aws:///us-east-1a/i-1"}
        }))
        .expect("valid NodeClaim")
    }

    #[test]
    fn a_launch_is_remembered_without_its_spec_and_only_until_it_is_recorded() {
        let memory = LaunchedMemory::default();
        assert!(memory.get("uid-a").is_none());
        memory.remember("uid-a", launched("a"));
        let Some(Memory::Unrecorded(claim)) = memory.get("uid-a") else {
            panic!("an unrecorded launch is remembered with what was launched");
        };
        assert_eq!(claim.provider_id(), Some("aws:///us-east-1a/i-1"));
        assert!(
            claim.spec.requirements.is_empty(),
            "the NodeClaim's own spec is not kept"
        );
        assert!(claim.spec.resources.is_none());

        memory.recorded("uid-a");
        assert!(matches!(memory.get("uid-a"), Some(Memory::Recorded)));
        let map = memory.by_uid.lock().expect("not poisoned");
        assert!(map["uid-a"].launched.is_none(), "the NodeClaim is dropped");
    }
}
