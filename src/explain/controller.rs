//! What the running controller alone knows, as its `/explain` endpoint serves it (JSON, on
//! the metrics port) and `kerf explain` reads it: the unavailable-offerings cache with each
//! entry's expiry, the NodeClaims and nodes nominated for pending pods, and the disruption
//! loop's last pass. Names and times only: no credentials, no object bodies.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::cloudprovider::OfferingRef;

/// The path the controller serves this on, on its metrics port.
pub const PATH: &str = "/explain";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerState {
    /// This replica leads: only a leader launches, so only its caches fill.
    pub leader: bool,
    /// Its cluster state has synced (`/readyz`).
    pub synced: bool,
    pub unavailable_offerings: Vec<UnavailableOffering>,
    /// Whole capacity types marked unavailable (spot without its service-linked role).
    pub unavailable_capacity_types: Vec<Unavailable>,
    /// Subnets out of addresses.
    pub unavailable_subnets: Vec<Unavailable>,
    pub nominations: Vec<Nomination>,
    /// The disruption loop's progress (with a cloud provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<DisruptionPass>,
}

/// An offering whose launch failed, unavailable until `expires`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableOffering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub expires: Timestamp,
}

/// A capacity type or a subnet unavailable until `expires`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unavailable {
    pub name: String,
    pub expires: Timestamp,
}

/// A NodeClaim created for pending pods, or an existing node a round placed pods on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nomination {
    /// A NodeClaim name, or a node name when `existing_node`.
    pub name: String,
    pub existing_node: bool,
    /// `namespace/name` of the pods it was created for (empty for an existing node).
    pub pods: Vec<String>,
}

/// What the disruption loop last did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionPass {
    /// Passes that evaluated the cluster.
    pub passes: u64,
    /// The last pass found nothing to do (and is memoized until the cluster changes).
    pub idle: bool,
    /// After an idle pass: when time alone next changes the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_consolidatable: Option<Timestamp>,
    /// Commands handed to the Orchestrator so far: `method: node, node`.
    pub commands: Vec<String>,
}

impl ControllerState {
    /// What a plan of the live cluster takes from it.
    pub fn for_plan(&self) -> crate::plan::Controller {
        let mut unavailable: Vec<OfferingRef> = self
            .unavailable_offerings
            .iter()
            .map(|o| OfferingRef::new(&o.capacity_type, &o.instance_type, &o.zone))
            .collect();
        unavailable.sort_by(|a, b| {
            (&a.instance_type, &a.zone, &a.capacity_type).cmp(&(
                &b.instance_type,
                &b.zone,
                &b.capacity_type,
            ))
        });
        let nominated: BTreeSet<String> = self.nominations.iter().map(|n| n.name.clone()).collect();
        crate::plan::Controller {
            unavailable,
            unavailable_capacity_types: self
                .unavailable_capacity_types
                .iter()
                .map(|u| u.name.clone())
                .collect(),
            nominated,
        }
    }

    /// The nomination holding `pod` (`namespace/name`), if any.
    pub fn nomination_of(&self, pod: &str) -> Option<&Nomination> {
        self.nominations
            .iter()
            .find(|n| n.pods.iter().any(|p| p == pod))
    }
}
