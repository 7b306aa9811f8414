//! How an instant fleet picks its pool. Both strategies kerf uses resolve, in the simulator,
//! to "cheapest pool that has capacity": on-demand `lowest-price` literally, spot
//! `price-capacity-optimized` approximately (the simulator has no capacity depth to weigh,
//! only pools with or without capacity). Pools tried before the one that launched, and all
//! pools when none launched, are reported as fleet errors, which is what Karpenter's
//! unavailable-offerings cache learns from.

use super::faults::IceSet;
use super::reservations::RESERVATION_CAPACITY_EXCEEDED;
use super::types::{
    CapacityType, CreateFleetRequest, FleetError, FleetOverride, INSUFFICIENT_INSTANCE_CAPACITY,
    OfferingKey, UNSUPPORTED,
};
use std::cmp::Ordering;
use std::collections::HashMap;

/// The pool a fleet launched into.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Chosen {
    pub(crate) key: OfferingKey,
    pub(crate) price: f64,
    pub(crate) launch_template_name: String,
    pub(crate) image_id: Option<String>,
    pub(crate) subnet_id: Option<String>,
    pub(crate) reservation: Option<String>,
}

/// The outcome of allocation: the pool (if any) and the errors to report.
#[derive(Debug, Default)]
pub(crate) struct Allocation {
    pub(crate) chosen: Option<Chosen>,
    pub(crate) errors: Vec<FleetError>,
}

struct Candidate<'a> {
    key: OfferingKey,
    price: f64,
    priority: f64,
    order: usize,
    launch_template_name: &'a str,
    over: &'a FleetOverride,
}

/// Picks the cheapest launchable pool among the request's overrides; an override into a
/// reservation needs room in it (`room`) and costs the reserved price.
pub(crate) fn allocate(
    request: &CreateFleetRequest,
    capacity_type: CapacityType,
    prices: &HashMap<OfferingKey, f64>,
    ice: &IceSet,
    room: &HashMap<String, u32>,
) -> Allocation {
    let mut allocation = Allocation::default();
    let mut candidates = Vec::new();
    let overrides = request.launch_template_configs.iter().flat_map(|lt| {
        lt.overrides
            .iter()
            .map(move |o| (lt.launch_template_name.as_str(), o))
    });
    for (order, (lt_name, over)) in overrides.enumerate() {
        let key = OfferingKey::new(&over.instance_type, &over.zone, capacity_type);
        if let Some(id) = &over.capacity_reservation_id {
            match (prices.get(&key), room.get(id)) {
                (Some(&price), Some(&n)) if n > 0 && capacity_type == CapacityType::OnDemand => {
                    candidates.push(Candidate {
                        key,
                        price: price / kerf::catalog::RESERVED_PRICE_DIVISOR,
                        priority: over.priority.unwrap_or(f64::INFINITY),
                        order,
                        launch_template_name: lt_name,
                        over,
                    })
                }
                _ => allocation.errors.push(fleet_error(
                    &key,
                    lt_name,
                    RESERVATION_CAPACITY_EXCEEDED,
                    format!("Insufficient capacity in capacity reservation {id}."),
                )),
            }
            continue;
        }
        match prices.get(&key) {
            Some(&price) => candidates.push(Candidate {
                key,
                price,
                priority: over.priority.unwrap_or(f64::INFINITY),
                order,
                launch_template_name: lt_name,
                over,
            }),
            None => allocation.errors.push(unsupported(&key, lt_name)),
        }
    }
    candidates.sort_by(cheapest_first);
    for candidate in candidates {
        if ice.contains(&candidate.key) {
            allocation
                .errors
                .push(insufficient(&candidate.key, candidate.launch_template_name));
            continue;
        }
        allocation.chosen = Some(Chosen {
            key: candidate.key,
            price: candidate.price,
            launch_template_name: candidate.launch_template_name.to_owned(),
            image_id: candidate.over.image_id.clone(),
            subnet_id: candidate.over.subnet_id.clone(),
            reservation: candidate.over.capacity_reservation_id.clone(),
        });
        break;
    }
    allocation
}

fn cheapest_first(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    a.price
        .total_cmp(&b.price)
        .then(a.priority.total_cmp(&b.priority))
        .then(a.order.cmp(&b.order))
}

fn unsupported(key: &OfferingKey, launch_template_name: &str) -> FleetError {
    fleet_error(
        key,
        launch_template_name,
        UNSUPPORTED,
        format!(
            "The requested configuration is currently not supported: {} is not offered as {} in {}.",
            key.instance_type, key.capacity_type, key.zone
        ),
    )
}

fn insufficient(key: &OfferingKey, launch_template_name: &str) -> FleetError {
    fleet_error(
        key,
        launch_template_name,
        INSUFFICIENT_INSTANCE_CAPACITY,
        format!(
            "We currently do not have sufficient {} capacity in the Availability Zone you requested ({}).",
            key.instance_type, key.zone
        ),
    )
}

fn fleet_error(key: &OfferingKey, lt: &str, code: &str, message: String) -> FleetError {
    FleetError {
        error_code: code.to_owned(),
        error_message: message,
        instance_type: key.instance_type.clone(),
        zone: key.zone.clone(),
        capacity_type: key.capacity_type,
        launch_template_name: lt.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ec2::types::LaunchTemplateConfig;

    fn request(pools: &[(&str, &str)]) -> CreateFleetRequest {
        CreateFleetRequest {
            launch_template_configs: vec![LaunchTemplateConfig {
                launch_template_name: "lt".into(),
                overrides: pools
                    .iter()
                    .map(|(t, z)| FleetOverride {
                        instance_type: (*t).into(),
                        zone: (*z).into(),
                        ..FleetOverride::default()
                    })
                    .collect(),
            }],
            capacity_type: Some(CapacityType::Spot),
            total_target_capacity: 1,
            ..CreateFleetRequest::default()
        }
    }

    fn prices() -> HashMap<OfferingKey, f64> {
        [
            ("m5.large", "a", 0.05),
            ("m5.large", "b", 0.04),
            ("c5.large", "a", 0.03),
        ]
        .into_iter()
        .map(|(t, z, p)| (OfferingKey::new(t, z, CapacityType::Spot), p))
        .collect()
    }

    #[test]
    fn picks_the_cheapest_pool() {
        let req = request(&[("m5.large", "a"), ("m5.large", "b"), ("c5.large", "a")]);
        let out = allocate(
            &req,
            CapacityType::Spot,
            &prices(),
            &IceSet::default(),
            &HashMap::new(),
        );
        let chosen = out.chosen.expect("a pool has capacity");
        assert_eq!(chosen.key.instance_type, "c5.large");
        assert!(out.errors.is_empty());
    }

    #[test]
    fn falls_through_ice_to_the_next_cheapest_and_reports_it() {
        let req = request(&[("m5.large", "a"), ("m5.large", "b"), ("c5.large", "a")]);
        let mut ice = IceSet::default();
        ice.set(OfferingKey::new("c5.large", "a", CapacityType::Spot), true);
        let out = allocate(&req, CapacityType::Spot, &prices(), &ice, &HashMap::new());
        assert_eq!(out.chosen.expect("m5.large/b has capacity").key.zone, "b");
        assert_eq!(out.errors.len(), 1);
        assert_eq!(out.errors[0].error_code, INSUFFICIENT_INSTANCE_CAPACITY);
        assert_eq!(out.errors[0].instance_type, "c5.large");
    }

    #[test]
    fn unknown_pools_are_unsupported() {
        let req = request(&[("x9.huge", "a")]);
        let out = allocate(
            &req,
            CapacityType::Spot,
            &prices(),
            &IceSet::default(),
            &HashMap::new(),
        );
        assert!(out.chosen.is_none());
        assert_eq!(out.errors[0].error_code, UNSUPPORTED);
        assert!(out.errors[0].is_unfulfillable_capacity());
    }
}
