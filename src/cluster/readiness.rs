//! Whether a NodePool's node class can be launched from, as upstream's NodePool readiness
//! controller decides it: the class must exist, not be terminating, and be `Ready`. The
//! controller's NodePool status actor writes the answer as the `NodeClassReady` condition and
//! its provisioner leaves out a pool whose class is not Ready; `kerf explain` says the same
//! from a snapshot. Pure: the caller looks the class up.

use crate::api::condition::types;
use crate::api::{ConditionStatus, Conditions, EC2NodeClass, NodePool};

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

/// The readiness of a NodePool's class named `class_name`, found in the cluster as `class`.
pub fn readiness(class_name: &str, class: Option<&EC2NodeClass>) -> NodeClassReadiness {
    let readiness = |status, reason, message: String| NodeClassReadiness {
        status,
        reason,
        message,
    };
    match class {
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
