//! Drift: whether a launched node no longer matches its EC2NodeClass. Static fields are
//! compared through the `karpenter.k8s.aws/ec2nodeclass-hash` annotation (the EC2NodeClass
//! carries the hash of its current spec, a NodeClaim the hash it was launched with, both at
//! the same hash version); dynamic ones through the node class's resolved status: the
//! instance's AMI must be the one the status maps its instance type to, its subnet one of
//! the status subnets, its security groups exactly the status security groups, and its
//! NodeClaim's `karpenter.k8s.aws/placement-group-id` label the group the class resolves to
//! now (absent on both sides without a selector). The checks are pure; the cloud provider
//! gathers their inputs.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use kerf::api::ec2nodeclass::Ami;
use kerf::labels;
use std::collections::{BTreeMap, BTreeSet};

/// `karpenter.k8s.aws/ec2nodeclass-hash-version`.
pub const HASH_VERSION_ANNOTATION: &str = labels::EC2NODECLASS_HASH_VERSION;
pub use kerf::api::nodeclass_hash::{HASH_VERSION, node_class_hash};

/// Whether the static fields changed since launch: both sides carry a hash of the same
/// version and the hashes differ.
pub fn static_fields_drifted(
    node_class_annotations: &BTreeMap<String, String>,
    node_claim_annotations: &BTreeMap<String, String>,
) -> bool {
    let get = |m: &BTreeMap<String, String>, k: &str| m.get(k).cloned();
    match (
        get(node_class_annotations, labels::EC2NODECLASS_HASH),
        get(node_class_annotations, HASH_VERSION_ANNOTATION),
        get(node_claim_annotations, labels::EC2NODECLASS_HASH),
        get(node_claim_annotations, HASH_VERSION_ANNOTATION),
    ) {
        (Some(class_hash), Some(class_version), Some(claim_hash), Some(claim_version)) => {
            class_version == claim_version && class_hash != claim_hash
        }
        _ => false,
    }
}

/// Whether single-valued `labels` satisfy every requirement.
pub fn labels_satisfy(reqs: &[NodeSelectorRequirement], labels: &BTreeMap<String, String>) -> bool {
    reqs.iter().all(|r| {
        let value = labels.get(&r.key);
        let values = r.values.as_deref().unwrap_or(&[]);
        let number = |v: Option<&String>| v.and_then(|v| v.parse::<i64>().ok());
        match r.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "Gt" => matches!((number(value), number(values.first())), (Some(v), Some(b)) if v > b),
            "Lt" => matches!((number(value), number(values.first())), (Some(v), Some(b)) if v < b),
            _ => false,
        }
    })
}

/// The first (newest) status AMI an instance type with `labels` can run.
pub fn ami_for<'a>(amis: &'a [Ami], labels: &BTreeMap<String, String>) -> Option<&'a Ami> {
    amis.iter()
        .find(|a| labels_satisfy(&a.requirements, labels))
}

/// The node class's static fields changed since launch.
pub const NODE_CLASS_DRIFT: &str = "NodeClassDrift";
/// The instance's AMI is no longer the one its instance type maps to.
pub const AMI_DRIFT: &str = "AMIDrift";
/// The instance's subnet is no longer selected.
pub const SUBNET_DRIFT: &str = "SubnetDrift";
/// The instance's security groups differ from the selected ones.
pub const SECURITY_GROUP_DRIFT: &str = "SecurityGroupDrift";

/// The NodeClaim's placement group is not the one the class selects now.
pub const PLACEMENT_GROUP_DRIFT: &str = "PlacementGroupDrift";

/// What drift detection compares.
#[derive(Clone, Debug)]
pub struct DriftInputs<'a> {
    pub node_class_annotations: &'a BTreeMap<String, String>,
    pub node_claim_annotations: &'a BTreeMap<String, String>,
    pub image_id: Option<&'a str>,
    pub instance_type_labels: &'a BTreeMap<String, String>,
    pub status_amis: &'a [Ami],
    pub subnet_id: Option<&'a str>,
    pub status_subnet_ids: &'a [String],
    pub security_group_ids: &'a [String],
    pub status_security_group_ids: &'a [String],
    /// The NodeClaim's `karpenter.k8s.aws/placement-group-id` label.
    pub placement_group_id: Option<&'a str>,
    /// The id of the group the class's selector resolves to now.
    pub resolved_placement_group_id: Option<&'a str>,
}

/// The drift reason of a running instance, static fields first, as upstream.
pub fn drift_reason(inputs: &DriftInputs<'_>) -> Option<&'static str> {
    if static_fields_drifted(inputs.node_class_annotations, inputs.node_claim_annotations) {
        return Some(NODE_CLASS_DRIFT);
    }
    if let Some(image) = inputs.image_id
        && !inputs.status_amis.is_empty()
        && ami_for(inputs.status_amis, inputs.instance_type_labels).is_none_or(|a| a.id != image)
    {
        return Some(AMI_DRIFT);
    }
    let wanted: BTreeSet<&String> = inputs.status_security_group_ids.iter().collect();
    let actual: BTreeSet<&String> = inputs.security_group_ids.iter().collect();
    if !wanted.is_empty() && !actual.is_empty() && wanted != actual {
        return Some(SECURITY_GROUP_DRIFT);
    }
    if let Some(subnet) = inputs.subnet_id
        && !inputs.status_subnet_ids.is_empty()
        && !inputs.status_subnet_ids.iter().any(|s| s == subnet)
    {
        return Some(SUBNET_DRIFT);
    }
    if inputs.placement_group_id.unwrap_or_default()
        != inputs.resolved_placement_group_id.unwrap_or_default()
    {
        return Some(PLACEMENT_GROUP_DRIFT);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ami::alias::{does_not_exist, exists, in_values};

    fn ami(id: &str, reqs: Vec<NodeSelectorRequirement>) -> Ami {
        Ami {
            id: id.into(),
            name: None,
            deprecated: None,
            requirements: reqs,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn amis_map_to_instance_types_by_requirements() {
        let amis = [
            ami(
                "ami-gpu",
                vec![
                    in_values("kubernetes.io/arch", &["amd64"]),
                    exists("karpenter.k8s.aws/instance-gpu-count"),
                ],
            ),
            ami(
                "ami-std",
                vec![
                    in_values("kubernetes.io/arch", &["amd64"]),
                    does_not_exist("karpenter.k8s.aws/instance-gpu-count"),
                ],
            ),
            ami("ami-arm", vec![in_values("kubernetes.io/arch", &["arm64"])]),
        ];
        let m5 = labels(&[("kubernetes.io/arch", "amd64")]);
        let g5 = labels(&[
            ("kubernetes.io/arch", "amd64"),
            ("karpenter.k8s.aws/instance-gpu-count", "1"),
        ]);
        let m6g = labels(&[("kubernetes.io/arch", "arm64")]);
        assert_eq!(ami_for(&amis, &m5).map(|a| a.id.as_str()), Some("ami-std"));
        assert_eq!(ami_for(&amis, &g5).map(|a| a.id.as_str()), Some("ami-gpu"));
        assert_eq!(ami_for(&amis, &m6g).map(|a| a.id.as_str()), Some("ami-arm"));
        assert!(labels_satisfy(
            &[NodeSelectorRequirement {
                key: "karpenter.k8s.aws/instance-cpu".into(),
                operator: "Gt".into(),
                values: Some(vec!["3".into()]),
            }],
            &labels(&[("karpenter.k8s.aws/instance-cpu", "4")])
        ));
    }

    #[test]
    fn drift_reasons_in_upstream_order() {
        let amis = [ami(
            "ami-new",
            vec![in_values("kubernetes.io/arch", &["amd64"])],
        )];
        let it = labels(&[("kubernetes.io/arch", "amd64")]);
        let empty = BTreeMap::new();
        let subnets = ["subnet-a".to_owned()];
        let groups = ["sg-1".to_owned()];
        let base = DriftInputs {
            node_class_annotations: &empty,
            node_claim_annotations: &empty,
            image_id: Some("ami-new"),
            instance_type_labels: &it,
            status_amis: &amis,
            subnet_id: Some("subnet-a"),
            status_subnet_ids: &subnets,
            security_group_ids: &groups,
            status_security_group_ids: &groups,
            placement_group_id: Some("pg-1"),
            resolved_placement_group_id: Some("pg-1"),
        };
        assert_eq!(drift_reason(&base), None);
        for (claim, class) in [
            (Some("pg-1"), Some("pg-2")),
            (Some("pg-1"), None),
            (None, Some("pg-1")),
        ] {
            let moved = DriftInputs {
                placement_group_id: claim,
                resolved_placement_group_id: class,
                ..base.clone()
            };
            assert_eq!(
                drift_reason(&moved),
                Some("PlacementGroupDrift"),
                "{claim:?} → {class:?}"
            );
        }
        let never_placed = DriftInputs {
            placement_group_id: None,
            resolved_placement_group_id: None,
            ..base.clone()
        };
        assert_eq!(drift_reason(&never_placed), None);
        let reason = |i: &DriftInputs<'_>| drift_reason(i).map(str::to_owned);
        assert_eq!(
            reason(&DriftInputs {
                image_id: Some("ami-old"),
                ..base.clone()
            })
            .as_deref(),
            Some("AMIDrift")
        );
        assert_eq!(
            reason(&DriftInputs {
                subnet_id: Some("subnet-b"),
                ..base.clone()
            })
            .as_deref(),
            Some("SubnetDrift")
        );
        let other = ["sg-1".to_owned(), "sg-2".to_owned()];
        assert_eq!(
            reason(&DriftInputs {
                security_group_ids: &other,
                ..base.clone()
            })
            .as_deref(),
            Some("SecurityGroupDrift")
        );
        let class = labels(&[
            (labels::EC2NODECLASS_HASH, "2"),
            (HASH_VERSION_ANNOTATION, "v6"),
        ]);
        let claim = labels(&[
            (labels::EC2NODECLASS_HASH, "1"),
            (HASH_VERSION_ANNOTATION, "v6"),
        ]);
        let both = DriftInputs {
            node_class_annotations: &class,
            node_claim_annotations: &claim,
            image_id: Some("ami-old"),
            ..base.clone()
        };
        assert_eq!(reason(&both).as_deref(), Some("NodeClassDrift"));
        let old_version = labels(&[
            (labels::EC2NODECLASS_HASH, "1"),
            (HASH_VERSION_ANNOTATION, "v5"),
        ]);
        assert!(!static_fields_drifted(&class, &old_version));
    }
}
