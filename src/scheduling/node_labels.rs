//! An existing node's labels, shared with the object they are read from. A round's input
//! holds every node and in-flight NodeClaim of the cluster, a few dozen labels each, and the
//! Node's or NodeClaim's own map in the cluster state's store holds the very same labels: a
//! copy in the input would be a second map per node for the whole round (3.7 MB of map nodes
//! at the peak round of `kerf simulate --pods 20000 --heap-profile`). [`NodeLabels`] points at
//! that object instead, and holds a map of its own only where the labels differ from it (a
//! Node without a hostname label, a NodeClaim whose requirements pin a label it does not
//! carry) or are written to.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::api::NodeClaim;

/// A label map read as a `BTreeMap`: a Node's or NodeClaim's own, or one of its own. Writing
/// to a shared one copies it first.
#[derive(Clone)]
pub enum NodeLabels {
    Own(BTreeMap<String, String>),
    OfNode(Arc<Node>),
    OfNodeClaim(Arc<NodeClaim>),
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl Deref for NodeLabels {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &BTreeMap<String, String> {
        let labels = match self {
            NodeLabels::Own(labels) => return labels,
            NodeLabels::OfNode(node) => node.metadata.labels.as_ref(),
            NodeLabels::OfNodeClaim(claim) => claim.metadata.labels.as_ref(),
        };
        labels.unwrap_or(&NO_LABELS)
    }
}

impl DerefMut for NodeLabels {
    fn deref_mut(&mut self) -> &mut BTreeMap<String, String> {
        if !matches!(self, NodeLabels::Own(_)) {
            *self = NodeLabels::Own((**self).clone());
        }
        match self {
            NodeLabels::Own(labels) => labels,
            NodeLabels::OfNode(_) | NodeLabels::OfNodeClaim(_) => {
                unreachable!("a shared map was copied into one of its own above")
            }
        }
    }
}

impl Default for NodeLabels {
    fn default() -> Self {
        NodeLabels::Own(BTreeMap::new())
    }
}

impl From<BTreeMap<String, String>> for NodeLabels {
    fn from(labels: BTreeMap<String, String>) -> Self {
        NodeLabels::Own(labels)
    }
}

impl<const N: usize> From<[(String, String); N]> for NodeLabels {
    fn from(labels: [(String, String); N]) -> Self {
        NodeLabels::Own(labels.into())
    }
}

impl fmt::Debug for NodeLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)]) -> Arc<Node> {
        let mut node = Node::default();
        node.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        Arc::new(node)
    }

    #[test]
    fn shared_labels_read_as_the_nodes_and_are_copied_before_a_write() {
        let source = node(&[("zone", "a"), ("team", "x")]);
        let shared = NodeLabels::OfNode(Arc::clone(&source));
        assert_eq!(shared.get("zone").map(String::as_str), Some("a"));
        assert!(
            std::ptr::eq(&*shared, source.metadata.labels.as_ref().expect("set")),
            "read from the Node's own map, not a copy"
        );

        let mut written = shared.clone();
        written.insert("zone".into(), "b".into());
        assert_eq!(written.get("zone").map(String::as_str), Some("b"));
        assert_eq!(shared.get("zone").map(String::as_str), Some("a"));
        assert_eq!(
            source.metadata.labels.as_ref().and_then(|l| l.get("zone")),
            Some(&"a".to_owned()),
            "the Node is never written"
        );
        assert!(matches!(written, NodeLabels::Own(_)));
    }

    #[test]
    fn an_object_without_labels_reads_as_none() {
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {
                "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }))
        .expect("a valid NodeClaim");
        let claim = Arc::new(claim);
        let labels = NodeLabels::OfNodeClaim(claim);
        assert!(labels.is_empty());
        assert_eq!(format!("{labels:?}"), "{}");
    }
}
