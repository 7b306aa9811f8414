//! Capacity reservations (ODCRs, Capacity Blocks, interruptible reservations) selected by an
//! EC2NodeClass's `capacityReservationSelectorTerms`. Each term becomes one
//! DescribeCapacityReservations query (by id, or by owner, tags and match criteria; always
//! `state=active`), answers are cached per term set for [`RESERVATION_CACHE_TTL`], and the
//! union becomes `status.capacityReservations`. EC2's available instance count is kept here
//! per reservation, as upstream keeps it out of the status (the CRD has no field for it):
//! each fresh answer replaces it, a launch into a reservation takes one, a termination gives
//! one back, and EC2 refusing a launch for lack of room empties it until the next answer.

use crate::cache::TtlCache;
use crate::errors::ApiError;
use crate::selectors::{filter, tag_filters};
use aws_sdk_ec2::types::{self as ec2, Filter};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kerf::api::ec2nodeclass::{
    CapacityReservation, CapacityReservationSelectorTerm, CapacityReservationState,
    CapacityReservationType, InstanceMatchCriteria,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long one selection's answer is reused: upstream polls reservations every minute.
pub const RESERVATION_CACHE_TTL: Duration = Duration::from_secs(60);

/// A reservation as EC2 described it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReservationInfo {
    pub reservation: CapacityReservation,
    /// Instances that may still launch into it.
    pub available: u32,
}

/// Finds reservations and tracks how many instances each still takes.
pub struct CapacityReservationProvider {
    ec2: aws_sdk_ec2::Client,
    cache: TtlCache<String, Vec<ReservationInfo>>,
    available: Mutex<HashMap<String, u32>>,
}

impl CapacityReservationProvider {
    pub fn new(ec2: aws_sdk_ec2::Client) -> Self {
        Self {
            ec2,
            cache: TtlCache::new(RESERVATION_CACHE_TTL),
            available: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.available
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The active reservations `terms` select, sorted by id, with their state as of `now`;
    /// empty when there are no terms. Reservations with an instance match criteria or type
    /// kerf does not know are left out (logged), as upstream leaves them out.
    pub async fn list(
        &self,
        terms: &[CapacityReservationSelectorTerm],
        now: Timestamp,
    ) -> Result<Vec<ReservationInfo>, ApiError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let key = format!("{terms:?}");
        let found = match self.cache.get(&key) {
            Some(hit) => hit,
            None => {
                let found = self.describe(terms, now).await?;
                let mut available = self.lock();
                for info in &found {
                    available.insert(info.reservation.id.clone(), info.available);
                }
                drop(available);
                self.cache.insert(key, found.clone());
                found
            }
        };
        Ok(found
            .into_iter()
            .map(|mut info| {
                info.reservation.state = state_at(&info.reservation, now);
                info
            })
            .collect())
    }

    async fn describe(
        &self,
        terms: &[CapacityReservationSelectorTerm],
        now: Timestamp,
    ) -> Result<Vec<ReservationInfo>, ApiError> {
        let mut found: BTreeMap<String, ReservationInfo> = BTreeMap::new();
        for term in terms {
            let mut request = self
                .ec2
                .describe_capacity_reservations()
                .set_filters(Some(query_filters(term)));
            if let Some(id) = &term.id {
                request = request.capacity_reservation_ids(id);
            }
            let mut pages = request.into_paginator().send();
            while let Some(page) = pages.next().await {
                let page =
                    page.map_err(|e| ApiError::from_sdk("DescribeCapacityReservations", e))?;
                for described in page.capacity_reservations() {
                    match reservation_info(described, now) {
                        Ok(info) => {
                            found.insert(info.reservation.id.clone(), info);
                        }
                        Err(reason) => tracing::warn!(
                            capacity_reservation = described.capacity_reservation_id(),
                            reason,
                            "ignoring capacity reservation"
                        ),
                    }
                }
            }
        }
        Ok(found.into_values().collect())
    }

    /// Instances that may still launch into `id` as last known; `None` when unknown.
    pub fn available(&self, id: &str) -> Option<u32> {
        self.lock().get(id).copied()
    }

    /// An instance launched into `id`: one less until EC2's next answer.
    pub fn mark_launched(&self, id: &str) {
        if let Some(n) = self.lock().get_mut(id) {
            *n = n.saturating_sub(1);
        }
    }

    /// An instance of `id` was terminated: one more until EC2's next answer.
    pub fn mark_terminated(&self, id: &str) {
        if let Some(n) = self.lock().get_mut(id) {
            *n += 1;
        }
    }

    /// EC2 refused a launch into `id` for lack of room: none until EC2's next answer.
    pub fn mark_unavailable(&self, id: &str) {
        tracing::info!(
            capacity_reservation = id,
            "marking capacity reservation unavailable"
        );
        self.lock().insert(id.to_owned(), 0);
    }
}

/// One term's filters: always `state=active`; a term by id needs nothing else (the id goes in
/// `CapacityReservationIds`); otherwise owner, tags and match criteria, ANDed.
pub fn query_filters(term: &CapacityReservationSelectorTerm) -> Vec<Filter> {
    let mut filters = vec![filter("state", ["active".to_owned()])];
    if term.id.is_some() {
        return filters;
    }
    if let Some(owner) = &term.owner_id {
        filters.push(filter("owner-id", [owner.clone()]));
    }
    filters.extend(tag_filters(&term.tags));
    if let Some(criteria) = term.instance_match_criteria {
        let value = match criteria {
            InstanceMatchCriteria::Open => "open",
            InstanceMatchCriteria::Targeted => "targeted",
        };
        filters.push(filter("instance-match-criteria", [value.to_owned()]));
    }
    filters
}

/// `expiring` for a Capacity Block within [`kerf::catalog::CAPACITY_BLOCK_EXPIRATION_WINDOW`]
/// of its end.
pub fn state_at(reservation: &CapacityReservation, now: Timestamp) -> CapacityReservationState {
    kerf::catalog::reservation_state(
        reservation.reservation_type,
        reservation.end_time.as_ref().map(|end| end.0.as_second()),
        now.as_second(),
    )
}

fn reservation_info(
    described: &ec2::CapacityReservation,
    now: Timestamp,
) -> Result<ReservationInfo, String> {
    let id = described
        .capacity_reservation_id()
        .ok_or("no capacity reservation id")?;
    let instance_match_criteria = match described.instance_match_criteria() {
        Some(ec2::InstanceMatchCriteria::Open) => InstanceMatchCriteria::Open,
        Some(ec2::InstanceMatchCriteria::Targeted) => InstanceMatchCriteria::Targeted,
        other => return Err(format!("unsupported instance match criteria {other:?}")),
    };
    let reservation_type = match described.reservation_type() {
        None | Some(ec2::CapacityReservationType::Default) => CapacityReservationType::Default,
        Some(ec2::CapacityReservationType::CapacityBlock) => CapacityReservationType::CapacityBlock,
        Some(other) => return Err(format!("unsupported reservation type {other:?}")),
    };
    let end_time = described
        .end_date()
        .map(|end| Timestamp::from_second(end.secs()).map(Time))
        .transpose()
        .map_err(|e| format!("end date out of range: {e}"))?;
    let mut reservation = CapacityReservation {
        availability_zone: described
            .availability_zone()
            .ok_or("no availability zone")?
            .to_owned(),
        end_time,
        id: id.to_owned(),
        instance_match_criteria,
        instance_type: described
            .instance_type()
            .ok_or("no instance type")?
            .to_owned(),
        interruptible: described.interruptible(),
        owner_id: described.owner_id().unwrap_or_default().to_owned(),
        reservation_type,
        state: CapacityReservationState::Active,
    };
    reservation.state = state_at(&reservation, now);
    Ok(ReservationInfo {
        reservation,
        available: described
            .available_instance_count()
            .unwrap_or(0)
            .max(0)
            .unsigned_abs(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(end: &str) -> CapacityReservation {
        CapacityReservation {
            availability_zone: "us-east-1a".into(),
            end_time: Some(Time(end.parse().expect("timestamp"))),
            id: "cr-1".into(),
            instance_match_criteria: InstanceMatchCriteria::Targeted,
            instance_type: "p5.48xlarge".into(),
            interruptible: None,
            owner_id: "123456789012".into(),
            reservation_type: CapacityReservationType::CapacityBlock,
            state: CapacityReservationState::Active,
        }
    }

    #[test]
    fn a_capacity_block_expires_forty_minutes_before_its_end() {
        let now: Timestamp = "2026-01-01T10:00:00Z".parse().expect("timestamp");
        assert_eq!(
            state_at(&block("2026-01-01T10:41:00Z"), now),
            CapacityReservationState::Active
        );
        assert_eq!(
            state_at(&block("2026-01-01T10:40:00Z"), now),
            CapacityReservationState::Expiring
        );
        let mut odcr = block("2026-01-01T10:05:00Z");
        odcr.reservation_type = CapacityReservationType::Default;
        assert_eq!(state_at(&odcr, now), CapacityReservationState::Active);
    }

    #[test]
    fn a_term_by_id_filters_on_state_only() {
        let by_id = CapacityReservationSelectorTerm {
            id: Some("cr-1".into()),
            ..Default::default()
        };
        let names = |t| {
            query_filters(t)
                .iter()
                .map(|f| f.name().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&by_id), ["state"]);
        let by_tags = CapacityReservationSelectorTerm {
            tags: [("team".to_owned(), "ml".to_owned())].into(),
            owner_id: Some("123456789012".into()),
            instance_match_criteria: Some(InstanceMatchCriteria::Open),
            ..Default::default()
        };
        assert_eq!(
            names(&by_tags),
            ["state", "owner-id", "tag:team", "instance-match-criteria"]
        );
    }
}
