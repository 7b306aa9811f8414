//! Reservations are finite: a solve may plan more NodeClaims onto a reserved offering than its
//! reservation has room for, because the bin-packing sees a price, not a count. After the
//! parts are assembled, [`Reservations::bound`] walks the new NodeClaims in queue order and
//! hands each reserved launch one instance of room (the chosen offering's reservation, else
//! another reserved offering the NodeClaim allows); a NodeClaim for which none is left falls
//! back as upstream's does, to spot, then on-demand, when its requirements allow them, and
//! to no launch otherwise. A NodeClaim that keeps a reserved launch is pinned to it, as
//! upstream pins one: `karpenter.sh/capacity-type In [reserved]` and
//! `karpenter.k8s.aws/capacity-reservation-id In [its reservation]`, so the provider
//! launches it into the room counted for it and nowhere else. One that falls back does not
//! allow `reserved`, so whichever launches first cannot take room counted for another. Only
//! pools that offer reserved capacity are kept (their instance types shared, not copied), so
//! a solve without reservations pays nothing.

use std::collections::HashMap;
use std::sync::Arc;

use super::types::{
    CapacityType, InstanceType, LaunchChoice, NodeSelectorRequirementWithMinValues, Operator,
    PlannedNodeClaim, SchedulingInput, SchedulingResult,
};
use crate::labels;

/// The pools with reserved offerings, by name.
#[derive(Clone, Debug, Default)]
pub struct Reservations {
    pools: Arc<HashMap<String, Arc<[InstanceType]>>>,
}

impl Reservations {
    pub fn of(input: &SchedulingInput) -> Self {
        let pools = input
            .node_pools
            .iter()
            .filter(|p| {
                p.instance_types
                    .iter()
                    .flat_map(|t| &t.offerings)
                    .any(|o| o.reservation.is_some() && o.available)
            })
            .map(|p| (p.name.clone(), Arc::clone(&p.instance_types)))
            .collect();
        Self {
            pools: Arc::new(pools),
        }
    }

    /// Gives every reserved launch of `result` one instance of room, or moves it elsewhere.
    pub fn bound(&self, result: &mut SchedulingResult) {
        if self.pools.is_empty() {
            return;
        }
        let mut room: HashMap<String, u32> = HashMap::new();
        for (pool, types) in self.pools.iter() {
            for o in types.iter().flat_map(|t| &t.offerings) {
                if let Some(r) = o.reservation.as_ref().filter(|_| o.available) {
                    room.insert(reservation_key(pool, &r.id), r.capacity);
                }
            }
        }
        for claim in &mut result.new_node_claims {
            let Some(types) = self.pools.get(&claim.node_pool) else {
                continue;
            };
            if claim
                .launch
                .as_ref()
                .is_none_or(|l| l.capacity_type != labels::CAPACITY_TYPE_RESERVED)
            {
                continue;
            }
            let (launch, reservation) = match relaunch(claim, types, &mut room) {
                Some((launch, reservation)) => (Some(launch), reservation),
                None => (None, None),
            };
            let fell_back = launch.is_some() && reservation.is_none();
            claim.launch = launch;
            if let Some(id) = reservation {
                pin(claim, &id);
            } else if fell_back {
                exclude_reserved(claim);
            }
        }
    }
}

/// Narrows `claim` to reserved capacity in reservation `id`.
fn pin(claim: &mut PlannedNodeClaim, id: &str) {
    claim
        .requirements
        .retain(|r| r.key != labels::CAPACITY_TYPE && r.key != labels::CAPACITY_RESERVATION_ID);
    for (key, value) in [
        (labels::CAPACITY_TYPE, labels::CAPACITY_TYPE_RESERVED),
        (labels::CAPACITY_RESERVATION_ID, id),
    ] {
        claim
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: key.to_owned(),
                operator: Operator::In,
                values: vec![value.to_owned()],
                min_values: None,
            });
    }
    claim.requirements.sort_by(|a, b| a.key.cmp(&b.key));
}

/// Takes `reserved` out of the capacity types `claim` allows: no room was counted for it, so
/// the provider must not launch it into a reservation whose room another NodeClaim of the
/// round holds.
fn exclude_reserved(claim: &mut PlannedNodeClaim) {
    let mut narrowed = false;
    for r in claim
        .requirements
        .iter_mut()
        .filter(|r| r.key == labels::CAPACITY_TYPE && r.operator == Operator::In)
    {
        r.values.retain(|v| v != labels::CAPACITY_TYPE_RESERVED);
        narrowed = true;
    }
    if !narrowed {
        claim
            .requirements
            .push(NodeSelectorRequirementWithMinValues {
                key: labels::CAPACITY_TYPE.to_owned(),
                operator: Operator::NotIn,
                values: vec![labels::CAPACITY_TYPE_RESERVED.to_owned()],
                min_values: None,
            });
        claim.requirements.sort_by(|a, b| a.key.cmp(&b.key));
    }
}

fn reservation_key(pool: &str, id: &str) -> String {
    format!("{pool}/{id}")
}

/// The launch `claim` gets with the room left, and the reservation it takes room in: its
/// chosen reserved offering when its reservation has room, else the cheapest allowed
/// reserved offering with room, else the cheapest allowed spot, else on-demand offering
/// among its instance types.
fn relaunch(
    claim: &PlannedNodeClaim,
    types: &[InstanceType],
    room: &mut HashMap<String, u32>,
) -> Option<(LaunchChoice, Option<String>)> {
    let by_name: HashMap<&str, &InstanceType> =
        types.iter().map(|t| (t.name.as_str(), t)).collect();
    let chosen = claim.launch.as_ref()?;
    let candidates = claim
        .instance_types
        .iter()
        .filter_map(|o| by_name.get(o.name.as_str()).copied());
    let mut best: [Option<(f64, &InstanceType, &super::types::Offering)>; 3] = [None; 3];
    let mut kept: Option<(&InstanceType, &super::types::Offering)> = None;
    for it in candidates {
        for o in it.offerings.iter().filter(|o| o.available) {
            if !allows(&claim.requirements, labels::ZONE, &o.zone)
                || !allows(
                    &claim.requirements,
                    labels::CAPACITY_TYPE,
                    o.capacity_type.as_str(),
                )
            {
                continue;
            }
            let rank = match o.capacity_type {
                CapacityType::Reserved => 0,
                CapacityType::Spot => 1,
                CapacityType::OnDemand => 2,
            };
            if let Some(r) = &o.reservation {
                if room
                    .get(&reservation_key(&claim.node_pool, &r.id))
                    .is_none_or(|n| *n == 0)
                {
                    continue;
                }
                if kept.is_none() && it.name == chosen.instance_type && o.zone == chosen.zone {
                    kept = Some((it, o));
                }
            }
            if best[rank].is_none_or(|(p, b, _)| o.price < p || (o.price == p && it.name < b.name))
            {
                best[rank] = Some((o.price, it, o));
            }
        }
    }
    let (it, o) = kept.or_else(|| best.iter().flatten().next().map(|(_, it, o)| (*it, *o)))?;
    if let Some(r) = &o.reservation
        && let Some(n) = room.get_mut(&reservation_key(&claim.node_pool, &r.id))
    {
        *n -= 1;
    }
    Some((
        LaunchChoice {
            instance_type: it.name.clone(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.as_str().to_owned(),
            price: o.price,
        },
        o.reservation.as_ref().map(|r| r.id.clone()),
    ))
}

/// Whether `requirements` allow `value` for `key` (a key they do not name allows anything).
fn allows(requirements: &[NodeSelectorRequirementWithMinValues], key: &str, value: &str) -> bool {
    requirements
        .iter()
        .filter(|r| r.key == key)
        .all(|r| match r.operator {
            Operator::In => r.values.iter().any(|v| v == value),
            Operator::NotIn => r.values.iter().all(|v| v != value),
            Operator::DoesNotExist => false,
            _ => true,
        })
}
