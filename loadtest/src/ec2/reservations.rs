//! Capacity reservations of the simulated region: ODCRs and Capacity Blocks with a number of
//! instances, a zone and an instance type, optionally interruptible and ending at a time.
//! A fleet override naming a reservation (the simulated form of a launch template's
//! `CapacityReservationTarget`) launches into it while it has room, priced as upstream
//! prices reserved capacity (on-demand / 10,000,000: paid for already); a full or unknown
//! reservation answers `ReservationCapacityExceeded`, which kerf caches as an unavailable
//! offering. Room is the reservation's size less its live (pending or running) instances.

use std::collections::HashMap;
use std::time::SystemTime;

/// `default` (ODCR) or `capacity-block`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReservationType {
    #[default]
    Default,
    CapacityBlock,
}

impl ReservationType {
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationType::Default => "default",
            ReservationType::CapacityBlock => "capacity-block",
        }
    }
}

/// A reservation the region holds.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityReservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// Instances it holds in all.
    pub total: u32,
    pub reservation_type: ReservationType,
    pub interruptible: bool,
    pub end_time: Option<SystemTime>,
    pub tags: std::collections::BTreeMap<String, String>,
}

impl CapacityReservation {
    /// An open-ended ODCR of `total` instances.
    pub fn new(id: &str, instance_type: &str, zone: &str, total: u32) -> Self {
        Self {
            id: id.to_owned(),
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
            total,
            reservation_type: ReservationType::Default,
            interruptible: false,
            end_time: None,
            tags: std::collections::BTreeMap::new(),
        }
    }
}

/// A reservation as `DescribeCapacityReservations` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReservationView {
    pub reservation: CapacityReservation,
    /// Instances that may still launch into it.
    pub available: u32,
}

/// EC2's fleet error code for a launch into a reservation without room.
pub const RESERVATION_CAPACITY_EXCEEDED: &str = "ReservationCapacityExceeded";

/// Room per reservation id: its size less the live instances launched into it.
pub(crate) fn room<'a>(
    reservations: impl Iterator<Item = &'a CapacityReservation>,
    live_in: impl Fn(&str) -> u32,
) -> HashMap<String, u32> {
    reservations
        .map(|r| (r.id.clone(), r.total.saturating_sub(live_in(&r.id))))
        .collect()
}
