//! `karpenter.sh/v1alpha1` NodeOverlay (alpha, behind the `NodeOverlay` gate): a change to the
//! instance types the scheduling simulation sees — a price (`price`, or `priceAdjustment`
//! absolute or in percent), extended resources (`capacity`) — for the types and offerings its
//! `requirements` select, ordered by `weight`. The transform itself is `crate::overlay`.

use super::condition::Condition;
use super::nodeclaim::ResourceList;
use super::requirement::Operator;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `ValidationSucceeded` condition: the overlay's requirements are valid and it conflicts
/// with no other overlay of the same weight.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// The `Ready` condition, the root of the overlay's conditions.
pub const CONDITION_READY: &str = "Ready";

/// Which instance types and offerings an overlay changes, and how.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    status = "NodeOverlayStatus",
    category = "karpenter",
    shortname = "overlays",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    pub requirements: Vec<OverlayRequirement>,
    /// `+0.5`, `-0.1`, `+10%`, `-15%`: a change of the offering's price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_adjustment: Option<String>,
    /// The offering's price, replacing the cloud provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<String>,
    /// Extended resources added to the instance type's capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ResourceList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// A node selector requirement (no `minValues`, unlike NodePool's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OverlayRequirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// What the controller observed of an overlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeOverlayStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl NodeOverlay {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The weight, 0 when unset.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// The price change, `price` first: upstream's `price ?? priceAdjustment`.
    pub fn price_change(&self) -> Option<&str> {
        self.spec
            .price
            .as_deref()
            .or(self.spec.price_adjustment.as_deref())
    }
}

/// Resources an overlay's `capacity` may not change (upstream's CEL rule).
pub const RESTRICTED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// A parsed `price` or `priceAdjustment`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// `price`, or an adjustment without sign: the new price.
    Set(f64),
    /// `+0.5`, `-0.1`: added to the price.
    Add(f64),
    /// `+10%`, `-15%`: the price scaled by (1 + p/100).
    Percent(f64),
}

impl PriceChange {
    /// Reads upstream's forms; the CRD's patterns already refuse anything else.
    pub fn parse(text: &str) -> Result<Self, String> {
        let number = |t: &str| {
            t.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("invalid price {text:?}"))
        };
        if !text.starts_with(['+', '-']) {
            return number(text).map(PriceChange::Set);
        }
        match text.strip_suffix('%') {
            Some(percent) => number(percent).map(PriceChange::Percent),
            None => number(text).map(PriceChange::Add),
        }
    }

    /// The changed price, never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let changed = match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => price + d,
            PriceChange::Percent(p) => price * (1.0 + p / 100.0),
        };
        changed.max(0.0)
    }
}
