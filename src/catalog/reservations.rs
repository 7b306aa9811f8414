//! Capacity reservations as offerings: each reservation an EC2NodeClass's status lists
//! becomes a `reserved` offering of its instance type in its zone, carrying the reservation
//! and how many instances it still takes. Its price is the type's on-demand price divided by
//! [`RESERVED_PRICE_DIVISOR`], as upstream prices it: the capacity is paid for already, so
//! it is all but free, yet reservations keep the on-demand order among themselves, which
//! consolidation relies on. It is available only with room left, while the reservation is
//! `active` (not an expiring Capacity Block) and where the type has an available offering in
//! that zone (the class's subnets reach it).

use super::instance_type::{CapacityType, InstanceType, Offering, ReservedCapacity};
use crate::api::ec2nodeclass::{
    CapacityReservation, CapacityReservationState, CapacityReservationType,
};

/// `karpenter.k8s.aws/capacity-reservation-type` of an On-Demand Capacity Reservation.
pub const RESERVATION_TYPE_DEFAULT: &str = "default";
/// `karpenter.k8s.aws/capacity-reservation-type` of a Capacity Block.
pub const CAPACITY_BLOCK: &str = "capacity-block";

/// What a reserved offering's price is the on-demand price divided by (upstream's).
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// How long before a Capacity Block's end its reservation counts as `expiring` (upstream:
/// EC2 reclaims the instances 30 minutes before the end, Karpenter drains them 10 minutes
/// before that), after which nothing launches into it and its nodes are replaced.
pub const CAPACITY_BLOCK_EXPIRATION_WINDOW: std::time::Duration =
    std::time::Duration::from_secs(40 * 60);

/// The state of a reservation of `reservation_type` ending at `end` (seconds since the
/// epoch), at `now`: `expiring` for a Capacity Block inside its expiration window.
pub fn reservation_state(
    reservation_type: CapacityReservationType,
    end: Option<i64>,
    now: i64,
) -> CapacityReservationState {
    let window = CAPACITY_BLOCK_EXPIRATION_WINDOW.as_secs() as i64;
    if reservation_type == CapacityReservationType::CapacityBlock
        && end.is_some_and(|end| end - now <= window)
    {
        CapacityReservationState::Expiring
    } else {
        CapacityReservationState::Active
    }
}

/// Appends one `reserved` offering per reservation of a type in `types`, with
/// `available(id)` instances of room (`None`: unknown, taken as none).
pub fn add_reserved_offerings(
    types: &mut [InstanceType],
    reservations: &[CapacityReservation],
    available: impl Fn(&str) -> Option<u32>,
) {
    for reservation in reservations {
        let Some(it) = types
            .iter_mut()
            .find(|t| t.name == reservation.instance_type)
        else {
            continue;
        };
        let on_demand = it
            .offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::OnDemand && o.price > 0.0)
            .map_or(0.0, |o| o.price);
        let in_zone = it
            .offerings
            .iter()
            .find(|o| o.zone == reservation.availability_zone && o.reservation.is_none());
        let reachable = in_zone.is_some_and(|o| o.available);
        let zone_id = in_zone.map(|o| o.zone_id.clone()).unwrap_or_default();
        let capacity = available(&reservation.id).unwrap_or(0);
        it.offerings.push(Offering {
            zone: reservation.availability_zone.clone(),
            zone_id,
            capacity_type: CapacityType::Reserved,
            price: on_demand / RESERVED_PRICE_DIVISOR,
            available: capacity > 0
                && reachable
                && reservation.state == CapacityReservationState::Active,
            reservation: Some(ReservedCapacity {
                id: reservation.id.clone(),
                reservation_type: match reservation.reservation_type {
                    CapacityReservationType::Default => RESERVATION_TYPE_DEFAULT,
                    CapacityReservationType::CapacityBlock => CAPACITY_BLOCK,
                }
                .to_owned(),
                interruptible: reservation.interruptible.unwrap_or(false),
                capacity,
            }),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ec2nodeclass::InstanceMatchCriteria;
    use crate::catalog::{AllocatableSettings, Catalog};

    fn reservation(id: &str, instance_type: &str, zone: &str) -> CapacityReservation {
        CapacityReservation {
            availability_zone: zone.into(),
            end_time: None,
            id: id.into(),
            instance_match_criteria: InstanceMatchCriteria::Targeted,
            instance_type: instance_type.into(),
            interruptible: Some(true),
            owner_id: "123456789012".into(),
            reservation_type: CapacityReservationType::Default,
            state: CapacityReservationState::Active,
        }
    }

    fn reserved(it: &InstanceType) -> Vec<&Offering> {
        it.offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::Reserved)
            .collect()
    }

    #[test]
    fn each_reservation_is_a_nearly_free_offering_with_its_room() {
        let catalog = Catalog::embedded("us-east-1").expect("region");
        let settings = AllocatableSettings::default();
        let mut types = vec![
            catalog
                .instance_type("m5.large", &settings)
                .expect("m5.large"),
            catalog
                .instance_type("c5.large", &settings)
                .expect("c5.large"),
        ];
        let mut expiring = reservation("cr-3", "m5.large", "us-east-1b");
        expiring.reservation_type = CapacityReservationType::CapacityBlock;
        expiring.state = CapacityReservationState::Expiring;
        let reservations = [
            reservation("cr-1", "m5.large", "us-east-1a"),
            reservation("cr-2", "m5.large", "us-east-1c"),
            expiring,
            reservation("cr-4", "x9.none", "us-east-1a"),
        ];
        add_reserved_offerings(&mut types, &reservations, |id| match id {
            "cr-1" => Some(2),
            "cr-3" => Some(5),
            _ => None,
        });
        let m5 = reserved(&types[0]);
        assert_eq!(m5.len(), 3);
        assert!(reserved(&types[1]).is_empty());
        let od = catalog.on_demand_price("m5.large").expect("price");
        assert_eq!(m5[0].price, od / RESERVED_PRICE_DIVISOR);
        assert!(m5[0].available, "room left");
        assert_eq!(m5[0].zone, "us-east-1a");
        assert!(!m5[0].zone_id.is_empty());
        let r = m5[0].reservation.as_ref().expect("reservation");
        assert_eq!(
            (r.id.as_str(), r.capacity, r.interruptible),
            ("cr-1", 2, true)
        );
        assert!(!m5[1].available, "unknown room is none");
        assert!(!m5[2].available, "an expiring block takes no launch");
        assert_eq!(
            m5[2]
                .reservation
                .as_ref()
                .map(|r| r.reservation_type.as_str()),
            Some("capacity-block")
        );
    }

    #[test]
    fn a_zone_the_class_cannot_reach_makes_the_reservation_unavailable() {
        let catalog = Catalog::embedded("us-east-1").expect("region");
        let mut it = catalog
            .instance_type("m5.large", &AllocatableSettings::default())
            .expect("m5.large");
        for o in it.offerings.iter_mut().filter(|o| o.zone == "us-east-1a") {
            o.available = false;
        }
        let mut types = [it];
        add_reserved_offerings(
            &mut types,
            &[reservation("cr-1", "m5.large", "us-east-1a")],
            |_| Some(3),
        );
        assert!(!reserved(&types[0])[0].available);
    }
}
