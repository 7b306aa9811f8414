//! Which instance types and offerings a NodeClaim may launch on, as upstream's launch-time
//! filters: types whose labels satisfy the NodeClaim's requirements and whose allocatable
//! holds its requests, with an available offering the requirements allow (zone, zone id,
//! capacity type, reservation); metal and accelerator types only when nothing else fits;
//! reserved, then spot, then on-demand, the first the requirements allow and a candidate
//! offers; with spot and on-demand allowed, types whose cheapest offering costs more than the
//! cheapest on-demand one are dropped. A reserved launch targets one kind of reservation
//! ([`reserved_offerings`]), as CreateFleet takes one target capacity type.

use crate::fleet::FleetReservation;
use kerf::api::NodeClaim;
use kerf::catalog::{CapacityType, INSTANCE_TYPE_LABEL_KEYS, InstanceType, Offering};
use kerf::labels;
use kerf::requirements::{AllowUndefined, Requirement, Requirements};
use kerf::resources::{Quantity, Resources};
use thiserror::Error;

/// Why a NodeClaim's spec could not be read.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClaimSpecError {
    #[error("spec.requirements[{index}] ({key}): {reason}")]
    Requirement {
        index: usize,
        key: String,
        reason: String,
    },
    #[error("spec.resources.requests[{name}]: invalid quantity {value:?}: {reason}")]
    Request {
        name: String,
        value: String,
        reason: String,
    },
}

pub fn claim_requirements(node_claim: &NodeClaim) -> Result<Requirements, ClaimSpecError> {
    let mut reqs = Requirements::new();
    for (index, r) in node_claim.requirements().iter().enumerate() {
        let min_values = r.min_values.and_then(|m| u32::try_from(m).ok());
        let req = Requirement::parse(&r.key, r.operator.as_str(), &r.values, min_values).map_err(
            |e| ClaimSpecError::Requirement {
                index,
                key: r.key.clone(),
                reason: e.to_string(),
            },
        )?;
        reqs.add(req);
    }
    Ok(reqs)
}

pub fn claim_requests(node_claim: &NodeClaim) -> Result<Resources, ClaimSpecError> {
    let mut requests = Resources::new();
    for (name, quantity) in node_claim.resource_requests().into_iter().flatten() {
        let parsed = Quantity::parse(&quantity.0).map_err(|e| ClaimSpecError::Request {
            name: name.clone(),
            value: quantity.0.clone(),
            reason: e.to_string(),
        })?;
        requests.insert(name, parsed);
    }
    Ok(requests)
}

/// The type's labels as requirements, with "does not exist" for well-known keys it lacks.
pub fn instance_type_requirements(it: &InstanceType) -> Requirements {
    let mut reqs: Requirements = it
        .labels
        .iter()
        .map(|(k, v)| Requirement::in_values(k, [v.as_str()]))
        .collect();
    for key in INSTANCE_TYPE_LABEL_KEYS {
        if !it.labels.contains_key(*key) {
            reqs.add(Requirement::does_not_exist(key));
        }
    }
    reqs
}

pub fn offering_allowed(reqs: &Requirements, o: &Offering) -> bool {
    let allows = |key: &str, value: &str| reqs.get(key).is_none_or(|r| r.has(value));
    o.available
        && allows(labels::ZONE, &o.zone)
        && allows(labels::ZONE_ID, &o.zone_id)
        && allows(labels::CAPACITY_TYPE, o.capacity_type.as_str())
        && o.reservation
            .as_ref()
            .is_none_or(|r| allows(labels::CAPACITY_RESERVATION_ID, &r.id))
}

/// The reserved offerings a reserved launch of `types` uses: those of the first kind of
/// reservation offered, in upstream's order (On-Demand Capacity Reservations, Capacity
/// Blocks, interruptible reservations), and per instance type and zone only the
/// reservation with the most room, so a launched instance names its reservation.
pub fn reserved_offerings<'a>(
    types: &[&'a InstanceType],
    reqs: &Requirements,
) -> Option<(FleetReservation, Vec<(&'a InstanceType, &'a Offering)>)> {
    let kind_rank = |r: &kerf::catalog::ReservedCapacity| match (
        r.reservation_type.as_str(),
        r.interruptible,
    ) {
        (_, true) => 2,
        (kerf::catalog::CAPACITY_BLOCK, false) => 1,
        _ => 0,
    };
    let allowed = || {
        types.iter().flat_map(|it| {
            it.offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::Reserved && offering_allowed(reqs, o))
                .filter_map(move |o| o.reservation.as_ref().map(|r| (*it, o, r)))
        })
    };
    let (_, _, first) = allowed().min_by_key(|(_, _, r)| kind_rank(r))?;
    let kind = FleetReservation {
        reservation_type: first.reservation_type.clone(),
        interruptible: first.interruptible,
    };
    let rank = kind_rank(first);
    let mut chosen: Vec<(&InstanceType, &Offering)> = Vec::new();
    for (it, o, r) in allowed().filter(|(_, _, r)| kind_rank(r) == rank) {
        let same_place = chosen
            .iter()
            .position(|(t, c)| t.name == it.name && c.zone == o.zone);
        let room = |c: &Offering| c.reservation.as_ref().map_or(0, |r| r.capacity);
        match same_place {
            Some(i) if room(chosen[i].1) < r.capacity => chosen[i] = (it, o),
            Some(_) => {}
            None => chosen.push((it, o)),
        }
    }
    Some((kind, chosen))
}

fn cheapest(it: &InstanceType, reqs: &Requirements, only: Option<CapacityType>) -> Option<f64> {
    it.offerings
        .iter()
        .filter(|o| offering_allowed(reqs, o) && only.is_none_or(|c| o.capacity_type == c))
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

fn is_exotic(it: &InstanceType) -> bool {
    let accelerators = [
        labels::RESOURCE_NVIDIA_GPU,
        labels::RESOURCE_AMD_GPU,
        labels::RESOURCE_AWS_NEURON,
        labels::RESOURCE_AWS_NEURON_CORE,
        labels::RESOURCE_HABANA_GAUDI,
    ];
    it.label(labels::INSTANCE_SIZE)
        .is_some_and(|s| s.contains("metal"))
        || accelerators
            .iter()
            .any(|r| it.capacity.get_or_zero(r) > Quantity::ZERO)
}

/// The launch choice for a NodeClaim.
#[derive(Clone, Debug)]
pub struct Selection<'a> {
    pub capacity_type: CapacityType,
    /// Compatible types, cheapest first.
    pub instance_types: Vec<&'a InstanceType>,
}

/// Chooses the capacity type and the compatible instance types; `None` when nothing fits.
pub fn select<'a>(
    types: &'a [InstanceType],
    reqs: &Requirements,
    requests: &Resources,
) -> Option<Selection<'a>> {
    let mut compatible: Vec<(f64, &InstanceType)> = types
        .iter()
        .filter(|it| {
            reqs.is_compatible(
                &instance_type_requirements(it),
                AllowUndefined::WellKnownLabels,
            )
        })
        .filter(|it| requests.fits(&it.allocatable()))
        .filter_map(|it| cheapest(it, reqs, None).map(|p| (p, it)))
        .collect();
    if compatible.is_empty() {
        return None;
    }
    if !reqs.has_min_values() && compatible.iter().any(|(_, it)| !is_exotic(it)) {
        compatible.retain(|(_, it)| !is_exotic(it));
    }
    let allows = |c: CapacityType| {
        reqs.get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.has(c.as_str()))
    };
    let offered = |c: CapacityType, list: &[(f64, &InstanceType)]| {
        allows(c)
            && list
                .iter()
                .any(|(_, it)| cheapest(it, reqs, Some(c)).is_some())
    };
    let capacity_type = if offered(CapacityType::Reserved, &compatible) {
        CapacityType::Reserved
    } else if offered(CapacityType::Spot, &compatible) {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    };
    if !reqs.has_min_values()
        && offered(CapacityType::OnDemand, &compatible)
        && capacity_type == CapacityType::Spot
    {
        let on_demand_floor = compatible
            .iter()
            .filter_map(|(_, it)| cheapest(it, reqs, Some(CapacityType::OnDemand)))
            .min_by(f64::total_cmp)
            .unwrap_or(f64::INFINITY);
        compatible.retain(|(price, _)| *price <= on_demand_floor);
    }
    let mut priced: Vec<(f64, &InstanceType)> = compatible
        .into_iter()
        .filter_map(|(_, it)| cheapest(it, reqs, Some(capacity_type)).map(|p| (p, it)))
        .collect();
    priced.sort_by(|(a, ia), (b, ib)| a.total_cmp(b).then_with(|| ia.name.cmp(&ib.name)));
    Some(Selection {
        capacity_type,
        instance_types: priced.into_iter().map(|(_, it)| it).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::catalog::{AllocatableSettings, Catalog};

    fn types() -> Vec<InstanceType> {
        let catalog = Catalog::embedded("us-east-1").unwrap();
        [
            "m5.large",
            "m5.xlarge",
            "m6g.large",
            "g5.xlarge",
            "m5.metal",
        ]
        .iter()
        .filter_map(|n| catalog.instance_type(n, &AllocatableSettings::default()))
        .collect()
    }

    fn reqs(list: &[Requirement]) -> Requirements {
        list.iter().cloned().collect()
    }

    #[test]
    fn prefers_spot_and_cheapest_non_exotic_types() {
        let all = types();
        let s = select(&all, &Requirements::new(), &Resources::new()).unwrap();
        assert_eq!(s.capacity_type, CapacityType::Spot);
        let names: Vec<&str> = s.instance_types.iter().map(|t| t.name.as_str()).collect();
        assert!(
            !names.contains(&"g5.xlarge") && !names.contains(&"m5.metal"),
            "{names:?}"
        );
        assert!(names.contains(&"m5.large"));
    }

    #[test]
    fn honours_capacity_type_arch_and_requests() {
        let all = types();
        let on_demand = reqs(&[Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"])]);
        assert_eq!(
            select(&all, &on_demand, &Resources::new())
                .unwrap()
                .capacity_type,
            CapacityType::OnDemand
        );
        let arm = reqs(&[Requirement::in_values(labels::ARCH, ["arm64"])]);
        let s = select(&all, &arm, &Resources::new()).unwrap();
        assert!(
            s.instance_types
                .iter()
                .all(|t| t.label(labels::ARCH) == Some("arm64"))
        );
        let big = Resources::new().with("cpu", Quantity::parse("3").unwrap());
        let s = select(&all, &Requirements::new(), &big).unwrap();
        assert!(s.instance_types.iter().all(|t| t.name != "m5.large"));
        let gpu = reqs(&[Requirement::exists(labels::INSTANCE_GPU_COUNT)]);
        assert_eq!(
            select(&all, &gpu, &Resources::new())
                .unwrap()
                .instance_types[0]
                .name,
            "g5.xlarge"
        );
        let nowhere = reqs(&[Requirement::in_values(labels::ZONE, ["mars-1a"])]);
        assert!(select(&all, &nowhere, &Resources::new()).is_none());
    }

    #[test]
    fn reserved_first_one_kind_and_the_roomiest_reservation_per_type_and_zone() {
        use kerf::api::ec2nodeclass::{
            CapacityReservation, CapacityReservationState, CapacityReservationType,
            InstanceMatchCriteria,
        };
        let reservation = |id: &str, zone: &str, block: bool| CapacityReservation {
            availability_zone: zone.into(),
            end_time: None,
            id: id.into(),
            instance_match_criteria: InstanceMatchCriteria::Targeted,
            instance_type: "m5.large".into(),
            interruptible: None,
            owner_id: "123456789012".into(),
            reservation_type: if block {
                CapacityReservationType::CapacityBlock
            } else {
                CapacityReservationType::Default
            },
            state: CapacityReservationState::Active,
        };
        let mut all = types();
        kerf::catalog::add_reserved_offerings(
            &mut all,
            &[
                reservation("cr-small", "us-east-1a", false),
                reservation("cr-big", "us-east-1a", false),
                reservation("cr-block", "us-east-1b", true),
            ],
            |id| Some(if id == "cr-big" { 5 } else { 1 }),
        );
        let s = select(&all, &Requirements::new(), &Resources::new()).unwrap();
        assert_eq!(s.capacity_type, CapacityType::Reserved);
        let (kind, offerings) =
            reserved_offerings(&s.instance_types, &Requirements::new()).unwrap();
        assert_eq!(kind.reservation_type, "default");
        let ids: Vec<&str> = offerings
            .iter()
            .filter_map(|(_, o)| o.reservation.as_ref().map(|r| r.id.as_str()))
            .collect();
        assert_eq!(ids, ["cr-big"]);
        // Pinned to the block: only it.
        let pinned = reqs(&[Requirement::in_values(
            labels::CAPACITY_RESERVATION_ID,
            ["cr-block"],
        )]);
        let (kind, offerings) = reserved_offerings(&s.instance_types, &pinned).unwrap();
        assert_eq!(kind.reservation_type, "capacity-block");
        assert_eq!(offerings.len(), 1);
        // Requirements that do not allow reserved launch spot, as without reservations.
        let no_reserved = reqs(&[Requirement::in_values(
            labels::CAPACITY_TYPE,
            ["spot", "on-demand"],
        )]);
        assert_eq!(
            select(&all, &no_reserved, &Resources::new())
                .unwrap()
                .capacity_type,
            CapacityType::Spot
        );
    }
}
