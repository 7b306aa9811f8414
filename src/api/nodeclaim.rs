//! `karpenter.sh/v1` NodeClaim: one request for one node, created by the provisioner from a
//! NodePool template and fulfilled by the cloud provider. Its spec is immutable once created.

use super::condition::{Condition, Conditions};
use super::duration::{Duration, NillableDuration};
use super::requirement::NodeSelectorRequirementWithMinValues;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A resource name → quantity map (`cpu: "4"`, `memory: 16Gi`, `pods: "110"`).
pub type ResourceList = BTreeMap<String, Quantity>;

/// The default node lifetime upstream applies when `expireAfter` is omitted.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";

pub(crate) fn default_expire_after() -> NillableDuration {
    NillableDuration::parse(DEFAULT_EXPIRE_AFTER).expect("720h is a valid Go duration")
}

/// The desired node: requirements it must satisfy, taints it gets, resources it must hold.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    status = "NodeClaimStatus",
    category = "karpenter",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<NodeClaimResources>,
    pub node_class_ref: NodeClassReference,
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<Duration>,
}

/// The minimum resources the node must offer (requests only; limits are not modelled).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeClaimResources {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: ResourceList,
}

/// Points at the provider's node class object (`karpenter.k8s.aws` / `EC2NodeClass` / name).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct NodeClassReference {
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// What the cloud provider and kubelet reported about the launched node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl NodeClaim {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn requirements(&self) -> &[NodeSelectorRequirementWithMinValues] {
        &self.spec.requirements
    }

    pub fn node_class_ref(&self) -> &NodeClassReference {
        &self.spec.node_class_ref
    }

    pub fn taints(&self) -> &[Taint] {
        &self.spec.taints
    }

    pub fn startup_taints(&self) -> &[Taint] {
        &self.spec.startup_taints
    }

    /// The resource requests the node must satisfy (empty when none).
    pub fn resource_requests(&self) -> Option<&ResourceList> {
        self.spec.resources.as_ref().map(|r| &r.requests)
    }

    /// The owning NodePool, from the `karpenter.sh/nodepool` label.
    pub fn nodepool_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::labels::NODEPOOL))
            .map(String::as_str)
    }

    pub fn provider_id(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.provider_id.as_deref())
    }

    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }

    pub fn is_condition_true(&self, type_: &str) -> bool {
        self.conditions().is_condition_true(type_)
    }
}
