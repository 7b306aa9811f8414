//! The NodeClaim object the Launcher creates for a planned claim, and what it writes back
//! after the launch. Follows upstream's NodeClaim template: the NodePool's template labels
//! and annotations, its `nodeClassRef`, taints, startup taints, `expireAfter` and
//! `terminationGracePeriod`; the planned requirements and requests; the `nodepool` label,
//! the NodePool's hash annotations, an ownerReference to the NodePool and the termination
//! finalizer that holds the object until its machine is gone.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kerf::api::condition::types;
use kerf::api::nodeclaim::NodeClaimResources;
use kerf::api::{Condition, ConditionStatus, NodeClaim, NodeClaimSpec, NodeClaimStatus, NodePool};
use kerf::labels;
use kerf::scheduling::PlannedNodeClaim;

/// `reason` label of `karpenter_nodeclaims_created_total` for NodeClaims made to hold
/// pending pods (upstream's other reasons come from disruption replacements).
pub const CREATED_REASON_PROVISIONING: &str = "provisioning";

/// The NodeClaim to create for `claim`, planned in `pool`.
pub fn node_claim(claim: &PlannedNodeClaim, pool: &NodePool) -> NodeClaim {
    let mut labels = pool.template_labels().clone();
    labels.extend(claim.labels.clone());
    labels.insert(labels::NODEPOOL.to_owned(), pool.name().to_owned());
    let mut annotations = pool.template_annotations().clone();
    for key in [labels::NODEPOOL_HASH, labels::NODEPOOL_HASH_VERSION] {
        if let Some(value) = pool.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
            annotations.insert(key.to_owned(), value.clone());
        }
    }
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", pool.name())),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(vec![labels::TERMINATION_FINALIZER.to_owned()]),
            owner_references: Some(vec![owner(pool)]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: claim.taints.clone(),
            startup_taints: claim.startup_taints.clone(),
            requirements: claim.node_claim_requirements(),
            resources: Some(NodeClaimResources {
                requests: claim.requests.to_api(),
            }),
            node_class_ref: pool.node_class_ref().clone(),
            expire_after: pool.expire_after().clone(),
            termination_grace_period: pool.termination_grace_period().cloned(),
        },
        status: None,
    }
}

/// Upstream's ownerReference from a NodeClaim to its NodePool: deleting the pool cascades.
fn owner(pool: &NodePool) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/v1", labels::GROUP),
        kind: "NodePool".to_owned(),
        name: pool.name().to_owned(),
        uid: pool.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    }
}

/// The labels the launch resolved (instance type, zone, capacity type, …) under the
/// NodeClaim's own, which win.
pub fn merged_labels(created: &NodeClaim, launched: &NodeClaim) -> BTreeMap<String, String> {
    let mut labels = launched.metadata.labels.clone().unwrap_or_default();
    labels.extend(created.metadata.labels.clone().unwrap_or_default());
    labels
}

/// Annotations the launch added (the EC2NodeClass hash the machine was launched with, which
/// drift compares later); the NodeClaim's own win.
pub fn added_annotations(created: &NodeClaim, launched: &NodeClaim) -> BTreeMap<String, String> {
    let own = created.metadata.annotations.clone().unwrap_or_default();
    launched
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !own.contains_key(k))
        .collect()
}

/// The status after a successful launch: what the provider reported, and `Launched=True`.
pub fn launched_status(created: &NodeClaim, launched: &NodeClaim) -> NodeClaimStatus {
    let reported = launched.status.clone().unwrap_or_default();
    NodeClaimStatus {
        provider_id: reported.provider_id,
        image_id: reported.image_id,
        capacity: reported.capacity,
        allocatable: reported.allocatable,
        conditions: vec![Condition {
            type_: types::LAUNCHED.to_owned(),
            status: ConditionStatus::True,
            observed_generation: created.metadata.generation,
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
            reason: types::LAUNCHED.to_owned(),
            message: String::new(),
        }],
        ..NodeClaimStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::api::{NodeClaimStatus, NodeClassReference};

    fn claim(labels: &[(&str, &str)], status: Option<NodeClaimStatus>) -> NodeClaim {
        let mut claim = NodeClaim::new(
            "default-abcde",
            NodeClaimSpec {
                taints: Vec::new(),
                startup_taints: Vec::new(),
                requirements: Vec::new(),
                resources: None,
                node_class_ref: NodeClassReference {
                    group: labels::AWS_GROUP.to_owned(),
                    kind: "EC2NodeClass".to_owned(),
                    name: "default".to_owned(),
                },
                expire_after: kerf::api::NillableDuration::parse("720h").expect("valid"),
                termination_grace_period: None,
            },
        );
        claim.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        claim.metadata.generation = Some(1);
        claim.status = status;
        claim
    }

    #[test]
    fn annotations_the_launch_added_are_written_without_overriding_the_claims_own() {
        let mut created = claim(&[], None);
        created.metadata.annotations = Some(BTreeMap::from([("mine".into(), "1".into())]));
        let mut launched = created.clone();
        launched.metadata.annotations = Some(BTreeMap::from([
            ("mine".into(), "2".into()),
            (labels::EC2NODECLASS_HASH.into(), "123".into()),
        ]));
        assert_eq!(
            added_annotations(&created, &launched),
            BTreeMap::from([(labels::EC2NODECLASS_HASH.to_owned(), "123".to_owned())])
        );
    }

    #[test]
    fn launched_labels_sit_under_the_nodeclaims_own() {
        let created = claim(&[(labels::NODEPOOL, "default"), ("team", "a")], None);
        let launched = claim(
            &[
                (labels::INSTANCE_TYPE, "m5.large"),
                ("team", "from-provider"),
            ],
            None,
        );
        let merged = merged_labels(&created, &launched);
        assert_eq!(merged[labels::INSTANCE_TYPE], "m5.large");
        assert_eq!(merged["team"], "a");
        assert_eq!(merged[labels::NODEPOOL], "default");
    }

    #[test]
    fn launched_status_keeps_what_the_provider_reported_and_marks_launched() {
        let created = claim(&[], None);
        let launched = claim(
            &[],
            Some(NodeClaimStatus {
                provider_id: Some("aws:///us-east-1a/i-0123".to_owned()),
                image_id: Some("ami-1".to_owned()),
                node_name: Some("ignored".to_owned()),
                ..NodeClaimStatus::default()
            }),
        );
        let status = launched_status(&created, &launched);
        assert_eq!(
            status.provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123")
        );
        assert_eq!(status.image_id.as_deref(), Some("ami-1"));
        assert_eq!(
            status.node_name, None,
            "the node name comes with registration"
        );
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.conditions[0].type_, types::LAUNCHED);
        assert!(status.conditions[0].is_true());
        assert_eq!(status.conditions[0].observed_generation, Some(1));
    }
}
