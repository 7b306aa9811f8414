//! The NodePool hash upstream writes as `karpenter.sh/nodepool-hash` (version
//! `karpenter.sh/nodepool-hash-version: v3`) and copies onto every NodeClaim it launches: a
//! later change of the template's static fields (labels, annotations, taints, startup taints,
//! `nodeClassRef`, `terminationGracePeriod`, `expireAfter`; never `requirements`, which drift
//! separately) makes the two differ and the NodeClaim `NodePoolDrifted`.
//!
//! The value must equal upstream's bit for bit: a cluster that swaps Karpenter for kerf keeps
//! its NodeClaims and their hashes, and a different value at the same version would mark every
//! node drifted. Upstream hashes the Go `NodeClaimTemplate` with `hashstructure/v2`
//! (`FormatV2`, `SlicesAsSets`, `IgnoreZeroValue`, `ZeroNil`, FNV-1 64). That walk is rebuilt
//! here for exactly the shapes the template holds: a struct starts from the hash of its Go type
//! name and folds in each non-zero field as `finish(h ^ ordered(name, value))`, a map is the
//! finished XOR of its `ordered(key, value)` pairs, a slice (as a set) the plain XOR of its
//! elements, strings and integers are FNV-1 of their bytes (integers little-endian). The test
//! checks a hash read from a live EKS cluster's NodePool.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

use crate::api::{NillableDuration, NodePool};

/// `karpenter.sh/nodepool-hash-version` upstream writes: hashes of other versions are never
/// compared, the NodeClaim is re-stamped instead.
pub const NODEPOOL_HASH_VERSION: &str = "v3";

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1 (multiply, then xor), Go's `hash/fnv.New64`.
fn fnv1(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(FNV_OFFSET, |h, b| h.wrapping_mul(FNV_PRIME) ^ u64::from(*b))
}

fn string(s: &str) -> u64 {
    fnv1(s.as_bytes())
}

fn int(i: i64) -> u64 {
    fnv1(&i.to_le_bytes())
}

fn ordered(a: u64, b: u64) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    fnv1(&bytes)
}

fn finish(a: u64) -> u64 {
    fnv1(&a.to_le_bytes())
}

/// A Go struct named `type_name` whose fields are `(name, hash)`; `None` is a zero field
/// (skipped under `IgnoreZeroValue`).
fn structure(type_name: &str, fields: &[(&str, Option<u64>)]) -> u64 {
    fields
        .iter()
        .filter_map(|(name, value)| value.map(|v| (name, v)))
        .fold(string(type_name), |h, (name, value)| {
            finish(h ^ ordered(string(name), value))
        })
}

fn map(m: &BTreeMap<String, String>) -> u64 {
    finish(
        m.iter()
            .fold(0, |h, (k, v)| h ^ ordered(string(k), string(v))),
    )
}

fn non_empty(s: &str) -> Option<u64> {
    (!s.is_empty()).then(|| string(s))
}

fn taints(taints: &[Taint]) -> Option<u64> {
    (!taints.is_empty()).then(|| {
        taints.iter().fold(0, |h, t| {
            h ^ structure(
                "Taint",
                &[
                    ("Key", non_empty(&t.key)),
                    ("Value", t.value.as_deref().and_then(non_empty)),
                    ("Effect", non_empty(&t.effect)),
                    ("TimeAdded", None),
                ],
            )
        })
    })
}

fn nanos(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The hash of `pool`'s template, as upstream's `NodePool.Hash()` prints it.
pub fn nodepool_hash(pool: &NodePool) -> String {
    let template = &pool.spec.template;
    let meta = template.metadata.clone().unwrap_or_default();
    let object_meta = (meta.labels.is_some() || meta.annotations.is_some()).then(|| {
        structure(
            "ObjectMeta",
            &[
                ("Labels", meta.labels.as_ref().map(map)),
                ("Annotations", meta.annotations.as_ref().map(map)),
            ],
        )
    });
    let spec = &template.spec;
    let class = &spec.node_class_ref;
    let node_class_ref = structure(
        "NodeClassReference",
        &[
            ("Kind", non_empty(&class.kind)),
            ("Name", non_empty(&class.name)),
            ("Group", non_empty(&class.group)),
        ],
    );
    let grace = spec.termination_grace_period.as_ref().map(|d| {
        let ns = nanos(d.as_std());
        structure("Duration", &[("Duration", (ns != 0).then(|| int(ns)))])
    });
    let expire_after = match &spec.expire_after {
        NillableDuration::Never => None,
        NillableDuration::After(d) => Some(structure(
            "NillableDuration",
            &[("Duration", Some(int(nanos(d.as_std()))))],
        )),
    };
    let template_spec = structure(
        "NodeClaimTemplateSpec",
        &[
            ("Taints", taints(&spec.taints)),
            ("StartupTaints", taints(&spec.startup_taints)),
            ("NodeClassRef", Some(node_class_ref)),
            ("TerminationGracePeriod", grace),
            ("ExpireAfter", expire_after),
        ],
    );
    structure(
        "NodeClaimTemplate",
        &[("ObjectMeta", object_meta), ("Spec", Some(template_spec))],
    )
    .to_string()
}

/// The annotations the hash controller keeps on `pool`.
pub fn hash_annotations(pool: &NodePool) -> BTreeMap<String, String> {
    BTreeMap::from([
        (crate::labels::NODEPOOL_HASH.to_owned(), nodepool_hash(pool)),
        (
            crate::labels::NODEPOOL_HASH_VERSION.to_owned(),
            NODEPOOL_HASH_VERSION.to_owned(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(spec: serde_json::Value) -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general-purpose"},
            "spec": {"template": spec},
        }))
        .expect("a valid NodePool")
    }

    fn eks_general_purpose() -> serde_json::Value {
        serde_json::json!({
            "metadata": {},
            "spec": {
                "expireAfter": "336h",
                "nodeClassRef": {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                ],
                "terminationGracePeriod": "24h0m0s",
            },
        })
    }

    /// EKS Auto Mode's built-in `general-purpose` NodePool, as `kubectl get nodepool -o yaml`
    /// shows it with the hash its controller wrote.
    #[test]
    fn equals_the_hash_upstream_wrote_on_a_live_nodepool() {
        assert_eq!(
            nodepool_hash(&pool(eks_general_purpose())),
            "4012513481623584108"
        );
    }

    #[test]
    fn static_fields_change_the_hash_and_requirements_do_not() {
        let base = nodepool_hash(&pool(eks_general_purpose()));
        let with = |path: &str, value: serde_json::Value| {
            let mut spec = eks_general_purpose();
            *spec.pointer_mut(path).expect("path exists") = value;
            nodepool_hash(&pool(spec))
        };
        assert_eq!(
            with("/spec/requirements", serde_json::json!([])),
            base,
            "requirements drift on their own, not through the hash"
        );
        for (path, value) in [
            ("/metadata", serde_json::json!({"labels": {"team": "a"}})),
            ("/metadata", serde_json::json!({"annotations": {"a": "b"}})),
            ("/spec/expireAfter", serde_json::json!("Never")),
            ("/spec/expireAfter", serde_json::json!("720h")),
            ("/spec/terminationGracePeriod", serde_json::json!("1h")),
            ("/spec/nodeClassRef/name", serde_json::json!("other")),
        ] {
            assert_ne!(with(path, value.clone()), base, "{path} = {value}");
        }
        let mut tainted = eks_general_purpose();
        tainted["spec"]["taints"] = serde_json::json!([{"key": "k", "effect": "NoSchedule"}]);
        let mut startup = eks_general_purpose();
        startup["spec"]["startupTaints"] = tainted["spec"]["taints"].clone();
        let (t, s) = (nodepool_hash(&pool(tainted)), nodepool_hash(&pool(startup)));
        assert!(t != base && s != base && t != s);
    }

    #[test]
    fn taint_order_and_label_order_do_not_matter() {
        let mut a = eks_general_purpose();
        a["spec"]["taints"] = serde_json::json!([
            {"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "1", "effect": "NoExecute"}]);
        let mut b = eks_general_purpose();
        b["spec"]["taints"] = serde_json::json!([
            {"key": "b", "value": "1", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}]);
        assert_eq!(nodepool_hash(&pool(a)), nodepool_hash(&pool(b)));
    }
}
