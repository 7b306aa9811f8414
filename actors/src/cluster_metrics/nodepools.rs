//! NodePool metrics as upstream's: `karpenter_nodepools_limit` from `spec.limits`, and
//! `karpenter_nodepools_usage`, the resources provisioned for the pool — what upstream's
//! counter writes to `status.resources`: the capacity of every node and NodeClaim of the
//! pool, each machine counted once (a registered node's capacity replacing its NodeClaim's).

use std::collections::HashMap;

use kerf::api::ResourceList;
use kerf::labels;
use kerf::resources::Quantity;

use super::exposition::{Family, quantity_value, resource_type};
use crate::metrics::{NODEPOOLS_LIMIT, NODEPOOLS_USAGE};
use crate::state::ClusterState;

/// The `nodes` pseudo-resource of `spec.limits`: a count of nodes, not a quantity on them.
const NODES: &str = "nodes";

/// The limit and usage families of every NodePool in `state`.
pub fn families(state: &ClusterState) -> [Family; 2] {
    let mut limit = Family::new(
        NODEPOOLS_LIMIT,
        "Limits specified on the nodepool that restrict the quantity of resources \
         provisioned. Labeled by nodepool name and resource type.",
    );
    let mut usage = Family::new(
        NODEPOOLS_USAGE,
        "The amount of resources that have been provisioned for a nodepool. Labeled by \
         nodepool name and resource type.",
    );
    let machines = machines_by_pool(state);
    let mut pools = state.nodepools.snapshot();
    pools.sort_by(|a, b| a.name().cmp(b.name()));
    for pool in pools {
        let name = pool.name();
        let limits = pool.limits().cloned().unwrap_or_default();
        push_list(&mut limit, name, &limits);
        let owned = machines.get(name).map(Vec::as_slice).unwrap_or_default();
        let mut used = sum(owned);
        if limits.contains_key(NODES) {
            used.push((NODES.to_owned(), count_value(owned.len())));
        }
        for (resource, value) in used {
            usage.push(labels_of(name, &resource), value);
        }
    }
    [limit, usage]
}

fn push_list(family: &mut Family, pool: &str, list: &ResourceList) {
    for (resource, quantity) in list {
        let value = if resource == NODES {
            Quantity::parse(&quantity.0)
                .ok()
                .map(|q| count_of(q.value()))
        } else {
            Quantity::parse(&quantity.0)
                .ok()
                .map(|q| quantity_value(resource, q))
        };
        // An unparsable quantity was refused by the CRD's validation; nothing to chart.
        if let Some(value) = value {
            family.push(labels_of(pool, resource), value);
        }
    }
}

fn labels_of(pool: &str, resource: &str) -> Vec<(&'static str, String)> {
    vec![
        ("nodepool", pool.to_owned()),
        ("resource_type", resource_type(resource)),
    ]
}

/// The capacity of each machine per NodePool, keyed by providerID so a NodeClaim and its
/// registered node count once (the node's capacity wins).
pub fn machines_by_pool(state: &ClusterState) -> HashMap<String, Vec<ResourceList>> {
    let mut machines: HashMap<(String, String), ResourceList> = HashMap::new();
    for claim in state.nodeclaims.snapshot() {
        let Some(pool) = claim.nodepool_name() else {
            continue;
        };
        let id = claim
            .provider_id()
            .map_or_else(|| format!("nodeclaim/{}", claim.name()), str::to_owned);
        let capacity = claim
            .status
            .as_ref()
            .map(|s| s.capacity.clone())
            .unwrap_or_default();
        machines.insert((pool.to_owned(), id), capacity);
    }
    for node in state.nodes.snapshot() {
        let Some(pool) = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
        else {
            continue;
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        let id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_else(|| format!("node/{name}"));
        let capacity = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.clone())
            .unwrap_or_default();
        machines.insert((pool.clone(), id), capacity);
    }
    let mut by_pool: HashMap<String, Vec<ResourceList>> = HashMap::new();
    for ((pool, _), capacity) in machines {
        by_pool.entry(pool).or_default().push(capacity);
    }
    by_pool
}

/// The sum of `lists` per resource, as upstream's values, sorted by resource name.
fn sum(lists: &[ResourceList]) -> Vec<(String, f64)> {
    let mut totals: HashMap<&str, Quantity> = HashMap::new();
    for list in lists {
        for (resource, quantity) in list {
            if let Ok(q) = Quantity::parse(&quantity.0) {
                let total = totals.entry(resource).or_insert(Quantity::ZERO);
                *total = total.saturating_add(q);
            }
        }
    }
    let mut out: Vec<(String, f64)> = totals
        .into_iter()
        .map(|(resource, q)| (resource.to_owned(), quantity_value(resource, q)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn count_value(n: usize) -> f64 {
    #[allow(clippy::cast_precision_loss, reason = "node counts are far below 2^52")]
    let value = n as f64;
    value
}

fn count_of(n: i64) -> f64 {
    #[allow(clippy::cast_precision_loss, reason = "node counts are far below 2^52")]
    let value = n as f64;
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ObjectKey;
    use k8s_openapi::api::core::v1::Node;
    use kerf::api::{NodeClaim, NodePool};
    use serde_json::json;

    fn pool(limits: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"limits": limits, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}}}
        }))
        .expect("valid nodepool")
    }

    fn claim(name: &str, provider_id: Option<&str>, cpu: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [], "nodeClassRef": {
                "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"providerID": provider_id, "capacity": {"cpu": cpu, "memory": "8Gi"}}
        }))
        .expect("valid nodeclaim")
    }

    fn node(name: &str, provider_id: &str, cpu: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"providerID": provider_id},
            "status": {"capacity": {"cpu": cpu, "memory": "8Gi"}}
        }))
        .expect("valid node")
    }

    fn value(family: &Family, resource: &str) -> Option<f64> {
        let text = family.text();
        let wanted = format!("resource_type=\"{resource}\"}} ");
        text.lines().find_map(|l| {
            l.split_once(&wanted)
                .map(|(_, v)| v.parse().expect("a number"))
        })
    }

    #[test]
    fn limits_and_usage_count_each_machine_once() {
        let (state, mut w) = ClusterState::new();
        w.nodepools.apply(
            ObjectKey::new(None, "default"),
            pool(json!({"cpu": "100", "memory": "1000Gi", "nodes": "10"})),
        );
        w.nodeclaims.apply(
            ObjectKey::new(None, "a"),
            claim("a", Some("aws:///z/i-a"), "2"),
        );
        w.nodeclaims.apply(
            ObjectKey::new(None, "b"),
            claim("b", Some("aws:///z/i-b"), "4"),
        );
        w.nodeclaims
            .apply(ObjectKey::new(None, "c"), claim("c", None, "0"));
        // The node of claim a reports a little more than the claim was launched with.
        w.nodes.apply(
            ObjectKey::new(None, "n-a"),
            node("n-a", "aws:///z/i-a", "2100m"),
        );
        let [limit, usage] = families(&state);
        assert_eq!(value(&limit, "cpu"), Some(100.0));
        assert_eq!(value(&limit, "memory"), Some(1_073_741_824_000.0));
        assert_eq!(value(&limit, "nodes"), Some(10.0));
        assert_eq!(value(&usage, "cpu"), Some(6.1));
        assert_eq!(value(&usage, "memory"), Some(3.0 * 8_589_934_592.0));
        assert_eq!(value(&usage, "nodes"), Some(3.0));
    }

    #[test]
    fn a_pool_without_limits_has_usage_only() {
        let (state, mut w) = ClusterState::new();
        w.nodepools
            .apply(ObjectKey::new(None, "default"), pool(json!(null)));
        w.nodeclaims.apply(
            ObjectKey::new(None, "a"),
            claim("a", Some("aws:///z/i-a"), "2"),
        );
        let [limit, usage] = families(&state);
        assert!(limit.is_empty());
        assert_eq!(value(&usage, "cpu"), Some(2.0));
        assert_eq!(
            value(&usage, "nodes"),
            None,
            "counted only against a nodes limit"
        );
    }
}
