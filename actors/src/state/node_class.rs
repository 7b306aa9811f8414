//! Whether a NodePool's node class can be launched from, read from cluster state the way
//! upstream's NodePool readiness controller reads it: the class must exist, not be
//! terminating, and be `Ready`. The NodePool status actor writes the answer as the
//! `NodeClassReady` condition; the provisioner leaves a pool whose class is known not to be
//! Ready out of its solves and says so in the pods' `FailedScheduling` events.

use kerf::api::condition::types;
use kerf::api::{ConditionStatus, Conditions, NodePool};

use super::{ClusterState, ObjectKey};

pub const NODE_CLASS_NOT_FOUND: &str = "NodeClassNotFound";
pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
pub const NODE_CLASS_TERMINATING: &str = "NodeClassTerminating";

/// The `NodeClassReady` condition a NodePool's class earns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassReadiness {
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: String,
}

impl NodeClassReadiness {
    /// Why the provisioner leaves `pool` out: its class is in the cluster and known not to be
    /// usable, or (where this controller resolves classes, `resolving`) its readiness is still
    /// Unknown, as upstream skips a NodePool that is not Ready yet: a NodeClaim launched
    /// before the class resolved would only fail with `NodeClassNotReady` and be retried.
    /// Without a resolver nothing would ever make such a class Ready, so it is used. A class
    /// missing from the cluster is used too: the solve plans with the defaults (saying so in
    /// the round's problems) and the launch then refuses.
    pub fn skip_reason(&self, pool: &NodePool, resolving: bool) -> Option<String> {
        let class = format!(
            "nodepool {:?} skipped: {} {:?}",
            pool.name(),
            pool.node_class_ref().kind,
            pool.node_class_ref().name
        );
        match self.status {
            ConditionStatus::False if self.reason != NODE_CLASS_NOT_FOUND => Some(format!(
                "{class}: NodeClassReady=False, {}: {}",
                self.reason, self.message
            )),
            ConditionStatus::Unknown if resolving => Some(format!(
                "{class}: NodeClassReady=Unknown, its subnets, security groups and AMIs are not \
                 resolved yet"
            )),
            _ => None,
        }
    }
}

impl ClusterState {
    /// The readiness of `pool`'s node class (see the module doc).
    pub fn node_class_readiness(&self, pool: &NodePool) -> NodeClassReadiness {
        let class_name = &pool.node_class_ref().name;
        let readiness = |status, reason, message: String| NodeClassReadiness {
            status,
            reason,
            message,
        };
        match self.nodeclasses.get(&ObjectKey::new(None, class_name)) {
            None => readiness(
                ConditionStatus::False,
                NODE_CLASS_NOT_FOUND,
                format!("NodeClass {class_name} not found on cluster"),
            ),
            Some(c) if c.metadata.deletion_timestamp.is_some() => readiness(
                ConditionStatus::False,
                NODE_CLASS_TERMINATING,
                "NodeClass is Terminating".to_owned(),
            ),
            Some(c) => match c.conditions().condition(types::READY) {
                Some(ready) if ready.is_true() => readiness(
                    ConditionStatus::True,
                    types::NODE_CLASS_READY,
                    String::new(),
                ),
                ready => readiness(
                    ready.map_or(ConditionStatus::Unknown, |r| r.status),
                    NODE_CLASS_NOT_READY,
                    ready
                        .filter(|r| !r.message.is_empty())
                        .map_or("NodeClass is NotReady".to_owned(), |r| {
                            format!("NodeClass is NotReady: {}", r.message)
                        }),
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "main"},
                "requirements": []}}},
        }))
        .expect("a valid NodePool")
    }

    fn readiness(status: ConditionStatus, reason: &'static str) -> NodeClassReadiness {
        NodeClassReadiness {
            status,
            reason,
            message: "SubnetsNotFound".to_owned(),
        }
    }

    #[test]
    fn a_class_not_resolved_yet_holds_its_pool_only_where_this_controller_resolves_classes() {
        let unresolved = readiness(ConditionStatus::Unknown, NODE_CLASS_NOT_READY);
        assert_eq!(
            unresolved.skip_reason(&pool(), true).as_deref(),
            Some(
                r#"nodepool "default" skipped: EC2NodeClass "main": NodeClassReady=Unknown, its subnets, security groups and AMIs are not resolved yet"#
            )
        );
        assert_eq!(
            unresolved.skip_reason(&pool(), false),
            None,
            "nothing would resolve it"
        );
        let not_ready = readiness(ConditionStatus::False, NODE_CLASS_NOT_READY);
        for resolving in [true, false] {
            assert!(
                not_ready
                    .skip_reason(&pool(), resolving)
                    .is_some_and(|r| r.contains("NodeClassReady=False, NodeClassNotReady")),
            );
        }
        let missing = readiness(ConditionStatus::False, NODE_CLASS_NOT_FOUND);
        assert_eq!(missing.skip_reason(&pool(), true), None);
        let ready = readiness(ConditionStatus::True, types::NODE_CLASS_READY);
        assert_eq!(ready.skip_reason(&pool(), true), None);
    }
}
