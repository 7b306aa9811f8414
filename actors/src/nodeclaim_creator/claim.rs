//! The NodeClaim object the NodeClaimCreator creates for a planned claim, following upstream's
//! NodeClaim template: the NodePool's template labels and annotations, its `nodeClassRef`, taints, startup taints, `expireAfter` and
//! `terminationGracePeriod`; the planned requirements and requests; the `nodepool` label,
//! the NodePool's hash annotations, whether its `minValues` were relaxed, an ownerReference to the NodePool and the termination
//! finalizer that holds the object until its machine is gone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf::api::nodeclaim::NodeClaimResources;
use kerf::api::{NodeClaim, NodeClaimSpec, NodePool};
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
    annotations.insert(
        labels::NODECLAIM_MIN_VALUES_RELAXED.to_owned(),
        claim.min_values_relaxed.to_string(),
    );
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
