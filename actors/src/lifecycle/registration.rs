//! Registration, as upstream's lifecycle controller does it: the Node whose `spec.providerID`
//! equals the NodeClaim's `status.providerID` is the NodeClaim's Node. Registering it syncs
//! the NodeClaim onto it — the termination finalizer, an ownerReference to the NodeClaim,
//! the NodeClaim's annotations and labels (which win over the Node's), its taints and
//! startup taints (unless the Node opts out with `karpenter.sh/do-not-sync-taints=true`) —
//! then lifts `karpenter.sh/unregistered:NoExecute`, which kept pods off the Node until
//! this sync, and labels it `karpenter.sh/registered=true`.

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kerf::api::NodeClaim;
use kerf::labels;
use kerf::taints::{EFFECT_NO_EXECUTE, merge_taints, taints_match};

pub fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|id| !id.is_empty())
}

/// The taint that keeps pods off a Node until registration synced it.
pub fn unregistered_taint() -> Taint {
    Taint {
        key: labels::UNREGISTERED_TAINT.to_owned(),
        effect: EFFECT_NO_EXECUTE.to_owned(),
        ..Taint::default()
    }
}

pub fn has_unregistered_taint(node: &Node) -> bool {
    let unregistered = unregistered_taint();
    node_taints(node)
        .iter()
        .any(|t| taints_match(t, &unregistered))
}

/// A Node that has neither been registered nor carries the unregistered taint: the race the
/// taint prevents (pods landing before the sync) was possible. Upstream reports it.
pub fn lacks_unregistered_taint(node: &Node) -> bool {
    let registered = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::REGISTERED));
    !registered && !has_unregistered_taint(node)
}

pub fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// `node` registered for `claim`: everything upstream's registration writes onto it.
pub fn registered_node(claim: &NodeClaim, node: &Node) -> Node {
    let mut synced = node.clone();
    let meta = &mut synced.metadata;
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
    }
    let owners = meta.owner_references.get_or_insert_with(Vec::new);
    let owner = owner_reference(claim);
    if !owners
        .iter()
        .any(|o| o.api_version == owner.api_version && o.kind == owner.kind && o.uid == owner.uid)
    {
        owners.push(owner);
    }
    if let Some(annotations) = &claim.metadata.annotations {
        meta.annotations
            .get_or_insert_with(Default::default)
            .extend(annotations.clone());
    }
    let node_labels = meta.labels.get_or_insert_with(Default::default);
    let sync_taints = node_labels
        .get(labels::DO_NOT_SYNC_TAINTS)
        .map(String::as_str)
        != Some("true");
    node_labels.extend(claim.metadata.labels.clone().unwrap_or_default());
    node_labels.insert(labels::REGISTERED.to_owned(), "true".to_owned());

    let spec = synced.spec.get_or_insert_with(Default::default);
    let mut taints = spec.taints.clone().unwrap_or_default();
    if sync_taints {
        taints = merge_taints(&taints, claim.taints());
        taints = merge_taints(&taints, claim.startup_taints());
    }
    let unregistered = unregistered_taint();
    taints.retain(|t| !taints_match(t, &unregistered));
    spec.taints = Some(taints);
    synced
}

/// The Node's ownerReference to its NodeClaim, which garbage-collects a Node left behind.
fn owner_reference(claim: &NodeClaim) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/v1", labels::GROUP),
        kind: "NodeClaim".to_owned(),
        name: claim.name().to_owned(),
        uid: claim.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim() -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "uid": "uid-1",
                "labels": {"karpenter.sh/nodepool": "default", "team": "claim"},
                "annotations": {"karpenter.sh/nodepool-hash": "123"}},
            "spec": {
                "requirements": [],
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "cni", "effect": "NoSchedule"}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            },
            "status": {"providerID": "aws:///us-east-1a/i-1"}
        }))
        .expect("valid NodeClaim")
    }

    fn node(extra: serde_json::Value) -> Node {
        let mut base = json!({
            "metadata": {"name": "ip-10-0-0-1", "labels": {"team": "node", "kubernetes.io/hostname": "ip-10-0-0-1"}},
            "spec": {"providerID": "aws:///us-east-1a/i-1", "taints": [
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
            ]}
        });
        if let (Some(b), serde_json::Value::Object(e)) = (base.as_object_mut(), extra) {
            for (k, v) in e {
                b.insert(k, v);
            }
        }
        serde_json::from_value(base).expect("valid Node")
    }

    fn taint_names(node: &Node) -> Vec<String> {
        node_taints(node)
            .iter()
            .map(kerf::taints::format_taint)
            .collect()
    }

    #[test]
    fn registration_syncs_the_claim_and_lifts_the_unregistered_taint() {
        let synced = registered_node(&claim(), &node(json!({})));
        let labels = synced.metadata.labels.clone().expect("labels");
        assert_eq!(labels["team"], "claim", "the NodeClaim's labels win");
        assert_eq!(labels[labels::NODEPOOL], "default");
        assert_eq!(labels[labels::REGISTERED], "true");
        assert_eq!(labels[labels::HOSTNAME], "ip-10-0-0-1");
        assert_eq!(
            synced.metadata.annotations.clone().expect("annotations")["karpenter.sh/nodepool-hash"],
            "123"
        );
        assert_eq!(
            synced.metadata.finalizers.clone().expect("finalizers"),
            [labels::TERMINATION_FINALIZER]
        );
        let owners = synced.metadata.owner_references.clone().expect("owners");
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "NodeClaim");
        assert_eq!(owners[0].api_version, "karpenter.sh/v1");
        assert_eq!(owners[0].name, "default-abc");
        assert_eq!(owners[0].uid, "uid-1");
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        assert_eq!(
            taint_names(&synced),
            [
                "node.kubernetes.io/not-ready:NoSchedule",
                "dedicated=gpu:NoSchedule",
                "cni:NoSchedule"
            ]
        );
        assert!(!has_unregistered_taint(&synced));
    }

    #[test]
    fn registration_is_idempotent() {
        let once = registered_node(&claim(), &node(json!({})));
        let twice = registered_node(&claim(), &once);
        assert_eq!(once, twice);
    }

    #[test]
    fn nodes_opting_out_keep_their_taints() {
        let opted_out = node(json!({"metadata": {"name": "n", "labels": {
            "karpenter.sh/do-not-sync-taints": "true"}}}));
        let synced = registered_node(&claim(), &opted_out);
        assert_eq!(
            taint_names(&synced),
            ["node.kubernetes.io/not-ready:NoSchedule"],
            "only the unregistered taint is removed"
        );
    }

    #[test]
    fn a_node_without_the_unregistered_taint_is_reported_until_registered() {
        let bare = node(json!({"spec": {"providerID": "aws:///us-east-1a/i-1"}}));
        assert!(lacks_unregistered_taint(&bare));
        assert!(!lacks_unregistered_taint(&node(json!({}))));
        let registered = registered_node(&claim(), &bare);
        assert!(!lacks_unregistered_taint(&registered));
    }
}
