//! Whether a launched NodeClaim drifted, in upstream's order, first match wins: the NodePool's
//! static fields changed (`NodePoolDrifted`: both hash annotations present at the same hash
//! version and different), the NodeClaim's labels no longer satisfy the NodePool's
//! requirements (`RequirementsDrifted`), its instance type is no longer one the NodePool may
//! use (`InstanceTypeNotFound`), or the cloud provider says so (`AMIDrift`, `SubnetDrift`,
//! `SecurityGroupDrift`, `NodeClassDrift`). The first two are pure and checked every pass;
//! the cloud's answer is kept for [`CLOUD_RECHECK`] (upstream's 5-minute requeue) unless the
//! NodePool's spec (its generation) or its node class (any write: the status carries the
//! resolved AMIs) changed since, so an AMI change is seen at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use kerf::api::{NodeClaim, NodePool};
use kerf::labels;
use kerf::requirements::{AllowUndefined, Requirements};

pub const NODEPOOL_DRIFTED: &str = "NodePoolDrifted";
pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";
pub const INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";

/// How long the cloud provider's drift answer for one NodeClaim stands when nothing it
/// depends on changed: upstream requeues every NodeClaim 5 minutes after a drift check.
pub const CLOUD_RECHECK: Duration = Duration::from_secs(5 * 60);

/// `NodePoolDrifted` when the NodePool's hash moved on since the NodeClaim was stamped.
pub fn static_drift(pool: &NodePool, claim: &NodeClaim) -> Option<&'static str> {
    let get = |a: &Option<BTreeMap<String, String>>, k: &str| a.as_ref()?.get(k).cloned();
    let (pool_meta, claim_meta) = (&pool.metadata.annotations, &claim.metadata.annotations);
    let pool_hash = get(pool_meta, labels::NODEPOOL_HASH)?;
    let pool_version = get(pool_meta, labels::NODEPOOL_HASH_VERSION)?;
    let claim_hash = get(claim_meta, labels::NODEPOOL_HASH)?;
    let claim_version = get(claim_meta, labels::NODEPOOL_HASH_VERSION)?;
    (pool_version == claim_version && pool_hash != claim_hash).then_some(NODEPOOL_DRIFTED)
}

/// `RequirementsDrifted` when the node's labels (the NodeClaim's, overridden by its Node's)
/// no longer satisfy the NodePool's requirements. Well-known labels the node lacks are
/// allowed, as the core's disruption candidate check does, so a label kerf never stamps
/// cannot drift every node.
pub fn requirements_drift(
    pool: &NodePool,
    node_labels: &BTreeMap<String, String>,
) -> Option<&'static str> {
    let wanted = Requirements::from_requirements_with_min_values(pool.requirements()).ok()?;
    Requirements::from_labels(node_labels.iter())
        .compatible(&wanted, AllowUndefined::WellKnownLabels)
        .is_err()
        .then_some(REQUIREMENTS_DRIFTED)
}

/// `InstanceTypeNotFound` when the NodeClaim's instance type is not among `types` (the
/// NodePool's instance types as the cloud provider lists them now).
pub fn instance_type_drift(claim: &NodeClaim, types: &HashSet<String>) -> Option<&'static str> {
    let name = claim.metadata.labels.as_ref()?.get(labels::INSTANCE_TYPE)?;
    (!types.is_empty() && !types.contains(name)).then_some(INSTANCE_TYPE_NOT_FOUND)
}

/// What the cloud's answer for one NodeClaim depended on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs {
    pub nodepool_version: Option<String>,
    pub node_class_version: Option<String>,
}

/// The cloud provider's last drift answers, per NodeClaim.
#[derive(Debug, Default)]
pub struct CloudAnswers {
    answers: HashMap<String, (Instant, Inputs, Option<String>)>,
}

impl CloudAnswers {
    /// The stored answer for `claim`, while it is fresh and its inputs are unchanged.
    pub fn fresh(&self, claim: &str, inputs: &Inputs, now: Instant) -> Option<Option<String>> {
        let (at, stored, reason) = self.answers.get(claim)?;
        (stored == inputs && now.duration_since(*at) < CLOUD_RECHECK).then(|| reason.clone())
    }

    pub fn store(&mut self, claim: &str, inputs: Inputs, reason: Option<String>, now: Instant) {
        self.answers.insert(claim.to_owned(), (now, inputs, reason));
    }

    /// Forgets NodeClaims that no longer exist, so the map is bounded by the live ones.
    pub fn retain(&mut self, live: impl Fn(&str) -> bool) {
        self.answers.retain(|name, _| live(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(annotations: serde_json::Value, requirements: serde_json::Value) -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "annotations": annotations},
            "spec": {"template": {"spec": {"requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
        }))
        .expect("a valid NodePool")
    }

    fn claim(annotations: serde_json::Value) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "annotations": annotations,
                "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        }))
        .expect("a valid NodeClaim")
    }

    fn hashes(hash: &str, version: &str) -> serde_json::Value {
        serde_json::json!({"karpenter.sh/nodepool-hash": hash, "karpenter.sh/nodepool-hash-version": version})
    }

    #[test]
    fn static_drift_needs_both_hashes_at_one_version() {
        let p = pool(hashes("2", "v3"), serde_json::json!([]));
        assert_eq!(
            static_drift(&p, &claim(hashes("1", "v3"))),
            Some(NODEPOOL_DRIFTED)
        );
        assert_eq!(static_drift(&p, &claim(hashes("2", "v3"))), None);
        assert_eq!(
            static_drift(&p, &claim(hashes("1", "v2"))),
            None,
            "other version"
        );
        assert_eq!(
            static_drift(&p, &claim(serde_json::json!({}))),
            None,
            "unstamped"
        );
    }

    #[test]
    fn requirements_drift_when_a_label_leaves_the_allowed_values() {
        let p = pool(
            serde_json::json!({}),
            serde_json::json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                               {"key": "team", "operator": "In", "values": ["a"]}]),
        );
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        let spot_a = labels(&[("karpenter.sh/capacity-type", "spot"), ("team", "a")]);
        assert_eq!(requirements_drift(&p, &spot_a), None);
        let on_demand = labels(&[("karpenter.sh/capacity-type", "on-demand"), ("team", "a")]);
        assert_eq!(
            requirements_drift(&p, &on_demand),
            Some(REQUIREMENTS_DRIFTED)
        );
        let no_team = labels(&[("karpenter.sh/capacity-type", "spot")]);
        assert_eq!(requirements_drift(&p, &no_team), Some(REQUIREMENTS_DRIFTED));
        let no_capacity_type = labels(&[("team", "a")]);
        assert_eq!(
            requirements_drift(&p, &no_capacity_type),
            None,
            "well-known"
        );
    }

    #[test]
    fn instance_type_drift_when_the_type_is_gone() {
        let c = claim(serde_json::json!({}));
        let set = |names: &[&str]| {
            names
                .iter()
                .map(|n| (*n).to_owned())
                .collect::<HashSet<_>>()
        };
        assert_eq!(instance_type_drift(&c, &set(&["m5.large"])), None);
        assert_eq!(
            instance_type_drift(&c, &set(&["m5.xlarge"])),
            Some(INSTANCE_TYPE_NOT_FOUND)
        );
        assert_eq!(
            instance_type_drift(&c, &set(&[])),
            None,
            "no answer is no verdict"
        );
    }

    #[test]
    fn cloud_answers_expire_and_follow_their_inputs() {
        let mut answers = CloudAnswers::default();
        let inputs = Inputs {
            nodepool_version: Some("1".into()),
            node_class_version: Some("7".into()),
        };
        let t0 = Instant::now();
        answers.store("c", inputs.clone(), Some("AMIDrift".into()), t0);
        assert_eq!(
            answers.fresh("c", &inputs, t0),
            Some(Some("AMIDrift".into()))
        );
        let changed = Inputs {
            node_class_version: Some("8".into()),
            ..inputs.clone()
        };
        assert_eq!(answers.fresh("c", &changed, t0), None);
        assert_eq!(answers.fresh("c", &inputs, t0 + CLOUD_RECHECK), None);
        answers.retain(|_| false);
        assert_eq!(answers.fresh("c", &inputs, t0), None);
    }
}
