//! Karpenter v1 API types: karpenter.sh NodePool and NodeClaim, karpenter.k8s.aws EC2NodeClass;
//! the alpha karpenter.sh/v1alpha1 NodeOverlay and autoscaling.x-k8s.io/v1beta1 CapacityBuffer.
//! Every field of the upstream CRD schemas is represented (tests/crd_parity.rs holds the
//! types to the schemas in deploy/crds), defaults the API server would apply are applied on
//! deserialisation, and accessors give the scheduler and controllers the values they need
//! without walking `Option`s.

pub mod capacitybuffer;
pub mod condition;
pub mod duration;
pub mod ec2nodeclass;
pub mod kubelet;
pub mod nodeclaim;
pub mod nodeclass_hash;
pub mod nodeoverlay;
pub mod nodepool;
pub mod requirement;

pub use capacitybuffer::{CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus};
pub use condition::{Condition, ConditionStatus, Conditions};
pub use duration::{Duration, NillableDuration, ParseDurationError};
pub use ec2nodeclass::{
    AmiFamily, AmiFamilyError, AmiSelectorTerm, BlockDevice, BlockDeviceMapping, EC2NodeClass,
    EC2NodeClassSpec, EC2NodeClassStatus, InstanceStorePolicy, InterfaceType, MetadataOptions,
    NetworkInterface,
};
pub use kubelet::KubeletConfiguration;
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference, ResourceList};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus, OverlayRequirement};
pub use nodepool::{
    Budget, BudgetNodes, ConsolidationPolicy, Disruption, DisruptionReason, NodeClaimTemplate,
    NodeClaimTemplateSpec, NodePool, NodePoolSpec, NodePoolStatus,
};
pub use requirement::{NodeSelectorRequirementWithMinValues, Operator};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The CRDs generated from these types, in the order kerf installs them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        NodePool::crd(),
        NodeClaim::crd(),
        EC2NodeClass::crd(),
        NodeOverlay::crd(),
        CapacityBuffer::crd(),
    ]
}
