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
    /// Why the provisioner leaves `pool` out, when its class is in the cluster and known not
    /// to be usable. A class whose readiness is still Unknown (its controller has not
    /// reported yet) is used; so is a class missing from the cluster, which the solve plans
    /// with the defaults (saying so in the round's problems) and the launch then refuses.
    pub fn skip_reason(&self, pool: &NodePool) -> Option<String> {
        let known_unusable =
            self.status == ConditionStatus::False && self.reason != NODE_CLASS_NOT_FOUND;
        known_unusable.then(|| {
            format!(
                "nodepool {:?} skipped: {} {:?}: NodeClassReady=False, {}: {}",
                pool.name(),
                pool.node_class_ref().kind,
                pool.node_class_ref().name,
                self.reason,
                self.message
            )
        })
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
