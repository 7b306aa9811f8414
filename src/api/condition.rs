//! Status conditions as Karpenter's objects carry them (`metav1.Condition` plus helpers).
//! NodeClaim's schema lets `reason` and `message` be absent where NodePool's and
//! EC2NodeClass's require them, so both read as empty strings when missing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `True`, `False` or `Unknown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// One observation about an object (`Ready`, `Initialized`, `Drifted`, ...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub last_transition_time: Time,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl Condition {
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Lookups over a condition list, which is a map keyed by `type`.
pub trait Conditions {
    fn conditions(&self) -> &[Condition];

    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions().iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition is present and `True`.
    fn is_condition_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(Condition::is_true)
    }
}

impl Conditions for [Condition] {
    fn conditions(&self) -> &[Condition] {
        self
    }
}

impl Conditions for Vec<Condition> {
    fn conditions(&self) -> &[Condition] {
        self
    }
}

/// Condition types upstream sets.
pub mod types {
    pub const READY: &str = "Ready";
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const DRIFTED: &str = "Drifted";
    pub const DRAINED: &str = "Drained";
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    pub const NODE_CLASS_READY: &str = "NodeClassReady";
    pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
    pub const AMIS_READY: &str = "AMIsReady";
    pub const SUBNETS_READY: &str = "SubnetsReady";
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
    pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
    pub const PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_conditions_without_reason_and_finds_by_type() {
        let list: Vec<Condition> = serde_json::from_value(serde_json::json!([
            {"type": "Launched", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
            {"type": "Ready", "status": "False", "lastTransitionTime": "2024-01-01T00:00:00Z",
             "reason": "NotReady", "message": "waiting"}
        ]))
        .unwrap();
        assert!(list.is_condition_true(types::LAUNCHED));
        assert!(!list.is_condition_true(types::READY));
        assert!(!list.is_condition_true(types::DRIFTED));
        assert_eq!(list.condition(types::READY).unwrap().reason, "NotReady");
    }
}
