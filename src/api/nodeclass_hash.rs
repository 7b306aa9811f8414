//! The hash of an EC2NodeClass's static fields, which upstream's hash controller writes on
//! the node class (`karpenter.k8s.aws/ec2nodeclass-hash`, with its version in
//! `karpenter.k8s.aws/ec2nodeclass-hash-version`) and the launch copies onto its NodeClaims,
//! so a later change of those fields reads as `NodeClassDrift`. Fields resolved against the
//! cloud (selector terms) are left out, as they drift through the resolved status instead.
//! The hash is FNV-1a over canonical JSON: stable across processes and releases of kerf
//! until [`HASH_VERSION`] changes.

use std::collections::BTreeMap;

use super::EC2NodeClass;
use crate::labels;

/// The version of [`node_class_hash`]; hashes of different versions are not compared.
pub const HASH_VERSION: &str = "v6";

/// FNV-1a, 64 bit: a stable hash (Rust's default hasher is randomised per process).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The hash of a node class's static fields: the spec without the selector terms (resolved
/// separately), `ipPrefixCount` and the literal `amiFamily` (the resolved family counts, so
/// spelling out the family an alias implies does not drift nodes), plus the CA bundle nodes
/// are given.
pub fn node_class_hash(node_class: &EC2NodeClass, ca_bundle: Option<&str>) -> String {
    let mut spec =
        serde_json::to_value(&node_class.spec).expect("an EC2NodeClass spec always serialises");
    if let Some(map) = spec.as_object_mut() {
        for dynamic in [
            "subnetSelectorTerms",
            "securityGroupSelectorTerms",
            "capacityReservationSelectorTerms",
            "amiSelectorTerms",
            "ipPrefixCount",
            "amiFamily",
        ] {
            map.remove(dynamic);
        }
    }
    let input = serde_json::json!([
        spec,
        node_class.ami_family().as_str(),
        ca_bundle.unwrap_or_default()
    ]);
    fnv1a64(input.to_string().as_bytes()).to_string()
}

/// The hash annotations `node_class` must carry.
pub fn hash_annotations(
    node_class: &EC2NodeClass,
    ca_bundle: Option<&str>,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::EC2NODECLASS_HASH.to_owned(),
            node_class_hash(node_class, ca_bundle),
        ),
        (
            labels::EC2NODECLASS_HASH_VERSION.to_owned(),
            HASH_VERSION.to_owned(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_class(spec: serde_json::Value) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": spec,
        }))
        .expect("test node class parses")
    }

    #[test]
    fn hash_ignores_dynamic_fields_and_follows_static_ones() {
        let a = node_class(serde_json::json!({"role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}]}));
        let b = node_class(serde_json::json!({"role": "r", "amiFamily": "AL2023",
            "amiSelectorTerms": [{"alias": "al2023@v2024"}],
            "subnetSelectorTerms": [{"id": "subnet-2"}],
            "securityGroupSelectorTerms": [{"id": "sg-2"}]}));
        let c = node_class(serde_json::json!({"role": "r", "detailedMonitoring": true,
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}]}));
        assert_eq!(node_class_hash(&a, None), node_class_hash(&b, None));
        assert_ne!(node_class_hash(&a, None), node_class_hash(&c, None));
        assert_ne!(node_class_hash(&a, None), node_class_hash(&a, Some("ca")));
        let annotations = hash_annotations(&a, None);
        assert_eq!(annotations[labels::EC2NODECLASS_HASH_VERSION], HASH_VERSION);
        assert_eq!(
            annotations[labels::EC2NODECLASS_HASH],
            node_class_hash(&a, None)
        );
    }

    #[test]
    fn fnv_is_not_process_seeded() {
        // FNV-1a of the empty input is its offset basis.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    }
}
