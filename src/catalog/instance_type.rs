//! `InstanceType`: one EC2 instance type as the scheduler sees it — its labels (the
//! requirements it satisfies), capacity, overhead and offerings — and its resolution from raw
//! EC2 facts plus [`AllocatableSettings`].

use super::capacity::capacity;
use super::info::InstanceTypeInfo;
use super::overhead::{Overhead, overhead};
use super::settings::AllocatableSettings;
use super::type_labels::instance_type_labels;
use crate::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT};
use crate::resources::Resources;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::str::FromStr;

/// An instance type resolved for one EC2NodeClass and region.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstanceType {
    pub name: String,
    /// Single-valued well-known labels; see [`super::INSTANCE_TYPE_LABEL_KEYS`] for the keys
    /// whose absence means "does not exist". Zone, zone id and capacity type vary per
    /// offering and live on [`Offering`].
    pub labels: BTreeMap<String, String>,
    pub capacity: Resources,
    pub overhead: Overhead,
    pub offerings: Vec<Offering>,
}

/// Where and how the type can be bought, and at what price.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    /// `topology.kubernetes.io/zone`.
    pub zone: String,
    /// `topology.k8s.aws/zone-id`.
    pub zone_id: String,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// False when the offering cannot be launched (no known price, or, later, an
    /// insufficient-capacity error).
    pub available: bool,
    /// The capacity reservation a `reserved` offering launches into; `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservedCapacity>,
}

/// The reservation behind a `reserved` offering.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservedCapacity {
    /// `karpenter.k8s.aws/capacity-reservation-id`.
    pub id: String,
    /// `karpenter.k8s.aws/capacity-reservation-type`: `default` or `capacity-block`.
    pub reservation_type: String,
    /// `karpenter.k8s.aws/capacity-reservation-interruptible`.
    pub interruptible: bool,
    /// Instances that may still launch into it.
    pub capacity: u32,
}

/// `karpenter.sh/capacity-type` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CapacityType {
    #[serde(rename = "on-demand")]
    OnDemand,
    #[serde(rename = "spot")]
    Spot,
    #[serde(rename = "reserved")]
    Reserved,
}

impl CapacityType {
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => CAPACITY_TYPE_ON_DEMAND,
            CapacityType::Spot => CAPACITY_TYPE_SPOT,
            CapacityType::Reserved => CAPACITY_TYPE_RESERVED,
        }
    }
}

impl FromStr for CapacityType {
    type Err = String;

    fn from_str(text: &str) -> Result<CapacityType, String> {
        [
            CapacityType::OnDemand,
            CapacityType::Spot,
            CapacityType::Reserved,
        ]
        .into_iter()
        .find(|c| c.as_str() == text)
        .ok_or_else(|| {
            format!("unknown capacity type {text:?} (expected on-demand, spot or reserved)")
        })
    }
}

impl std::fmt::Display for CapacityType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl InstanceType {
    /// Resolves `info` for `region` under `settings`, with the given offerings; `None` when
    /// the AMI family cannot run the type (Windows on arm64).
    pub fn resolve(
        info: &InstanceTypeInfo,
        region: &str,
        offerings: Vec<Offering>,
        settings: &AllocatableSettings,
    ) -> Option<InstanceType> {
        let labels = instance_type_labels(info, region, settings.ami_family)?;
        if !super::capacity::interfaces_fit(info, settings) {
            return None;
        }
        let capacity = capacity(info, settings);
        let overhead = overhead(info, settings, &capacity);
        Some(InstanceType {
            name: info.name.clone(),
            labels,
            capacity,
            overhead,
            offerings,
        })
    }

    /// Capacity less kube-reserved, system-reserved and eviction thresholds, over the names
    /// of capacity only (Karpenter `Subtract`). An entry can be negative when the overhead
    /// exceeds capacity; such a type fits nothing that needs that resource.
    pub fn allocatable(&self) -> Resources {
        self.capacity.subtract(&self.overhead.total())
    }

    /// Offerings that can be launched now.
    pub fn available_offerings(&self) -> impl Iterator<Item = &Offering> {
        self.offerings.iter().filter(|offering| offering.available)
    }

    /// The label value for `key`, if the type defines it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}
