//! The AWS provider's instance type metrics and NodePool cost, as upstream's: per instance
//! type its vCPUs and memory, per offering (type, capacity type, zone) whether it can be
//! launched and its hourly price, and per NodePool the summed price of its NodeClaims'
//! offerings. Read at scrape time from the instance type cache's lists (by EC2NodeClass,
//! `crate::instance_types`), so they follow the catalog the rounds plan with. Upstream emits
//! every type of each NodePool's class — over a thousand types in a region, ten thousand
//! offering series each — so kerf keeps the types and offerings each NodePool's
//! requirements allow: the ones its NodeClaims can have (docs/performance.md's series budget).

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf::catalog::{CapacityType, INSTANCE_TYPE_LABEL_KEYS, InstanceType, Offering};
use kerf::labels;
use kerf::requirements::{Operator, Requirement, Requirements};

use super::exposition::Family;
use crate::metrics::{
    INSTANCE_TYPE_CPU_CORES, INSTANCE_TYPE_MEMORY_BYTES, NODEPOOLS_COST,
    NODEPOOLS_COST_TRACKER_ERRORS, OFFERING_AVAILABLE, OFFERING_PRICE_ESTIMATE,
};
use crate::state::ClusterState;

/// (instance type, capacity type, zone).
type Dimensions = (String, &'static str, String);

/// The instance type, offering and NodePool cost families.
pub fn families(state: &ClusterState, lists: &[(String, Arc<[InstanceType]>)]) -> [Family; 5] {
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
    let pools = state.nodepools.snapshot();
    for pool in &pools {
        let class = &pool.node_class_ref().name;
        // A pool whose requirements do not parse was refused by the API server.
        let Ok(requirements) = Requirements::from_requirements_with_min_values(pool.requirements())
        else {
            continue;
        };
        let listed = lists
            .iter()
            .filter(|(name, _)| name == class)
            .flat_map(|(_, list)| list.iter());
        for instance_type in listed.filter(|t| type_allowed(t, &requirements)) {
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
                if !offering_allowed(offering, &requirements) {
                    continue;
                }
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
    for pool in pools {
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

/// Whether `requirement` allows a label of `value` (absent: `None`).
fn allows(requirement: &Requirement, value: Option<&str>) -> bool {
    match value {
        Some(value) => requirement.has(value),
        None => matches!(
            requirement.operator(),
            Operator::NotIn | Operator::DoesNotExist
        ),
    }
}

/// Whether a NodePool's `requirements` allow `instance_type`'s labels (the keys instance
/// types carry; others constrain pods, not types).
fn type_allowed(instance_type: &InstanceType, requirements: &Requirements) -> bool {
    requirements
        .iter()
        .filter(|r| INSTANCE_TYPE_LABEL_KEYS.contains(&r.key()))
        .all(|r| allows(r, instance_type.label(r.key())))
}

/// Whether a NodePool's `requirements` allow `offering`'s capacity type and zone.
fn offering_allowed(offering: &Offering, requirements: &Requirements) -> bool {
    let capacity_type = requirements.get(labels::CAPACITY_TYPE);
    let zone = requirements.get(labels::ZONE);
    capacity_type.is_none_or(|r| allows(r, Some(offering.capacity_type.as_str())))
        && zone.is_none_or(|r| allows(r, Some(&offering.zone)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ObjectKey;

    #[test]
    fn offerings_are_those_the_nodepools_requirements_allow() {
        let catalog = kerf::catalog::Catalog::embedded("us-east-1").expect("embedded");
        let types: Arc<[InstanceType]> = catalog
            .instance_types(&kerf::catalog::AllocatableSettings::default())
            .into();
        let (state, mut writers) = ClusterState::new();
        let pool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "c-spot"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}
        }))
        .expect("valid NodePool");
        writers
            .nodepools
            .apply(ObjectKey::new(None, "c-spot"), pool);
        let lists = [
            ("default".to_owned(), types),
            ("other".to_owned(), Arc::from([])),
        ];
        let [cpu, _, available, _, cost] = families(&state, &lists);
        let (cpu_text, offering_text, cost_text) = (cpu.text(), available.text(), cost.text());
        assert!(
            cpu_text.contains(
                "karpenter_cloudprovider_instance_type_cpu_cores{instance_type=\"c5.xlarge\"} 4"
            ),
            "{cpu_text}"
        );
        assert!(!cpu_text.contains("m5.large"), "{cpu_text}");
        assert!(
            offering_text.contains("capacity_type=\"spot\""),
            "{offering_text}"
        );
        assert!(!offering_text.contains("on-demand"), "{offering_text}");
        assert!(
            cost_text.contains("karpenter_nodepools_cost_total{nodepool=\"c-spot\"} 0"),
            "{cost_text}"
        );
    }

    #[test]
    fn a_class_s_reservations_are_reserved_offering_series_at_the_reserved_price() {
        use kerf::api::ec2nodeclass::{
            CapacityReservation, CapacityReservationState, CapacityReservationType,
            InstanceMatchCriteria,
        };
        let catalog = kerf::catalog::Catalog::embedded("us-east-1").expect("embedded");
        let mut types = vec![
            catalog
                .instance_type("m5.large", &kerf::catalog::AllocatableSettings::default())
                .expect("m5.large"),
        ];
        let reservation = |id: &str, zone: &str| CapacityReservation {
            availability_zone: zone.into(),
            end_time: None,
            id: id.into(),
            instance_match_criteria: InstanceMatchCriteria::Targeted,
            instance_type: "m5.large".into(),
            interruptible: None,
            owner_id: "123456789012".into(),
            reservation_type: CapacityReservationType::Default,
            state: CapacityReservationState::Active,
        };
        // Room in the first, none left in the second.
        kerf::catalog::add_reserved_offerings(
            &mut types,
            &[
                reservation("cr-1", "us-east-1a"),
                reservation("cr-2", "us-east-1b"),
            ],
            |id| Some(if id == "cr-1" { 3 } else { 0 }),
        );
        let (state, mut writers) = ClusterState::new();
        let pool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "reserved-first"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}]}}}
        }))
        .expect("valid NodePool");
        writers
            .nodepools
            .apply(ObjectKey::new(None, "reserved-first"), pool);
        let lists = [("default".to_owned(), Arc::from(types))];
        let [_, _, available, price, _] = families(&state, &lists);
        let (available_text, price_text) = (available.text(), price.text());
        let series = |zone: &str| {
            format!("{{instance_type=\"m5.large\",capacity_type=\"reserved\",zone=\"{zone}\"}}")
        };
        for (zone, up) in [("us-east-1a", 1), ("us-east-1b", 0)] {
            let line = format!("{OFFERING_AVAILABLE}{} {up}", series(zone));
            assert!(available_text.contains(&line), "{line}\n{available_text}");
        }
        let on_demand = catalog.on_demand_price("m5.large").expect("price");
        let line = format!(
            "{OFFERING_PRICE_ESTIMATE}{} {}",
            series("us-east-1a"),
            on_demand / kerf::catalog::RESERVED_PRICE_DIVISOR
        );
        assert!(price_text.contains(&line), "{line}\n{price_text}");
        assert!(
            available_text.contains("capacity_type=\"on-demand\""),
            "{available_text}"
        );
    }
}
