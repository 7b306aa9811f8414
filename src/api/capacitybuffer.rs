//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer (cluster-autoscaler's API, served by Karpenter
//! behind the `CapacityBuffer` gate): spare room kept for a number of placeholder pods shaped
//! by a PodTemplate (`podTemplateRef`) or a workload's template (`scalableRef`), sized by
//! `replicas`, `percentage` of the workload and `limits`. The sizing and the placeholder pods
//! are `crate::buffer`.

use super::condition::Condition;
use super::nodeclaim::ResourceList;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The only strategy: placeholder pods make the autoscaler keep room.
pub const ACTIVE_PROVISIONING_STRATEGY: &str = "buffer.x-k8s.io/active-capacity";
/// The buffer's template resolved and its size computed (written by the buffer controller).
pub const CONDITION_READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// Whether the room is there (written after each provisioning round).
pub const CONDITION_PROVISIONING: &str = "Provisioning";

/// A buffer of spare capacity.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    namespaced,
    status = "CapacityBufferStatus",
    category = "autoscaling",
    shortname = "cb",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

/// An object in the buffer's namespace, by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectRef {
    pub name: String,
}

/// A workload with a scale subresource (Deployment, StatefulSet, ReplicaSet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

/// What the controller observed of a buffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

impl CapacityBuffer {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }
}
