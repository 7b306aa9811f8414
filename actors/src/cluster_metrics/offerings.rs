//! The AWS provider's instance type metrics and NodePool cost, as upstream's: per instance
//! type its vCPUs and memory, per offering (type, capacity type, zone) whether it can be
//! launched and its hourly price, over the instance types the cluster's EC2NodeClasses
//! resolve (upstream's: those of every NodePool's class), and per NodePool the summed price of
//! its NodeClaims' offerings. Read at scrape time from the instance type cache's lists
//! (`crate::instance_types`), so they follow the catalog the rounds plan with. These are the largest families kerf
//! exports (one series per offering: see docs/performance.md's series budget).

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf::catalog::{CapacityType, InstanceType};
use kerf::labels;

use super::exposition::Family;
use crate::metrics::{
    INSTANCE_TYPE_CPU_CORES, INSTANCE_TYPE_MEMORY_BYTES, NODEPOOLS_COST,
    NODEPOOLS_COST_TRACKER_ERRORS, OFFERING_AVAILABLE, OFFERING_PRICE_ESTIMATE,
};
use crate::state::ClusterState;

/// (instance type, capacity type, zone).
type Dimensions = (String, &'static str, String);

/// The instance type, offering and NodePool cost families.
pub fn families(state: &ClusterState, lists: &[Arc<[InstanceType]>]) -> [Family; 5] {
    let mut cpu = Family::new(
        INSTANCE_TYPE_CPU_CORES,
        "VCPUs cores for a given instance type.",
    );
    let mut memory = Family::new(
        INSTANCE_TYPE_MEMORY_BYTES,
        "Memory, in bytes, for a given instance type.",
    );
    let mut available = Family::new(
        OFFERING_AVAILABLE,
        "Instance type offering availability, based on instance type, capacity type, and zone",
    );
    let mut price = Family::new(
        OFFERING_PRICE_ESTIMATE,
        "Instance type offering estimated hourly price used when making informed decisions on \
         node cost calculation, based on instance type, capacity type, and zone.",
    );
    let mut cost = Family::new(
        NODEPOOLS_COST,
        "Total cost of the nodepool from Karpenter's perspective. Units are determined by the \
         cloud provider. Not an authoritative source for billing.",
    );
    let mut types: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    let mut offerings: BTreeMap<Dimensions, (bool, f64)> = BTreeMap::new();
    for instance_type in lists.iter().flat_map(|l| l.iter()) {
        let capacity = |r: &str| {
            instance_type
                .capacity
                .get(r)
                .map_or(0.0, |q| super::exposition::quantity_value(r, q))
        };
        types.insert(
            &instance_type.name,
            (
                capacity(labels::RESOURCE_CPU),
                capacity(labels::RESOURCE_MEMORY),
            ),
        );
        for offering in &instance_type.offerings {
            let key = (
                instance_type.name.clone(),
                offering.capacity_type.as_str(),
                offering.zone.clone(),
            );
            let entry = offerings.entry(key).or_insert((false, offering.price));
            entry.0 |= offering.available;
            entry.1 = offering.price;
        }
    }
    for (name, (cores, bytes)) in &types {
        cpu.push(vec![("instance_type", (*name).to_owned())], *cores);
        memory.push(vec![("instance_type", (*name).to_owned())], *bytes);
    }
    for ((instance_type, capacity_type, zone), (up, dollars)) in &offerings {
        let labels = vec![
            ("instance_type", instance_type.clone()),
            ("capacity_type", (*capacity_type).to_owned()),
            ("zone", zone.clone()),
        ];
        available.push(labels.clone(), if *up { 1.0 } else { 0.0 });
        price.push(labels, *dollars);
    }
    let mut by_pool: BTreeMap<String, f64> = BTreeMap::new();
    for pool in state.nodepools.snapshot() {
        by_pool.insert(pool.name().to_owned(), 0.0);
    }
    for claim in state.nodeclaims.snapshot() {
        let Some(pool) = claim.nodepool_name() else {
            continue;
        };
        let label = |key: &str| {
            claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let capacity_type = label(labels::CAPACITY_TYPE);
        let capacity_type = [
            CapacityType::OnDemand,
            CapacityType::Spot,
            CapacityType::Reserved,
        ]
        .into_iter()
        .map(CapacityType::as_str)
        .find(|c| *c == capacity_type);
        let key = capacity_type.map(|c| (label(labels::INSTANCE_TYPE), c, label(labels::ZONE)));
        match key.and_then(|k| offerings.get(&k)) {
            Some((_, dollars)) => *by_pool.entry(pool.to_owned()).or_default() += dollars,
            // Launched but not priced yet (no labels yet), or an offering the catalog lost.
            None if claim.provider_id().is_some() => {
                metrics::counter!(NODEPOOLS_COST_TRACKER_ERRORS, "nodepool" => pool.to_owned())
                    .increment(1);
            }
            None => {}
        }
    }
    for (pool, dollars) in by_pool {
        cost.push(vec![("nodepool", pool)], dollars);
    }
    [cpu, memory, available, price, cost]
}
