//! Stand-ins for the `resources` and `catalog` types while those modules are written on their
//! own branches; replaced by re-exports of the real types when they merge.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A resource list: resource name to quantity.
pub type Resources = BTreeMap<String, Quantity>;

/// One way to buy an instance type: a zone and capacity type with a price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    pub available: bool,
}

/// An instance type with its well-known labels, capacity, overhead and offerings.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub capacity: Resources,
    pub overhead: Resources,
    pub offerings: Vec<Offering>,
}
