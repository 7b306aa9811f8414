//! The readiness of a NodePool's node class read from cluster state
//! ([`kerf::cluster::readiness`] decides it). The NodePool status actor writes the answer as
//! the `NodeClassReady` condition; the provisioner leaves a pool whose class is known not to
//! be Ready out of its solves and says so in the pods' `FailedScheduling` events.

use kerf::api::NodePool;
pub use kerf::cluster::readiness::NodeClassReadiness;

use super::{ClusterState, ObjectKey};

impl ClusterState {
    /// The readiness of `pool`'s node class (see [`kerf::cluster::readiness`]).
    pub fn node_class_readiness(&self, pool: &NodePool) -> NodeClassReadiness {
        let class_name = &pool.node_class_ref().name;
        let class = self.nodeclasses.get(&ObjectKey::new(None, class_name));
        kerf::cluster::readiness::readiness(class_name, class.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::api::ConditionStatus;
    use kerf::api::condition::types;
    use kerf::cluster::readiness::{NODE_CLASS_NOT_FOUND, NODE_CLASS_NOT_READY};

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
