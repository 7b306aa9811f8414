//! NodeOverlay as a pure transform of the instance types a NodePool schedules with, as
//! upstream's overlay store computes it. [`evaluate`] takes every overlay and every NodePool
//! with its instance types and orders the overlays by weight (higher first; equal weights
//! by name, later in the alphabet first); an overlay applies to a type of a pool when the
//! pool's name and template labels with the type's labels are compatible with its
//! requirements, and then to the type's offerings its requirements select. The first overlay
//! to price an offering wins; one of equal weight pricing the same offering, or adding a
//! resource of the same type at the weight that last added one, conflicts and is not applied
//! at all (in any pool). Capacities merge. [`Overlays::apply`] then copies a pool's list only
//! when an overlay touches one of its types. A price overlay makes an offering with no
//! public price (price 0 and unavailable) available where its zone is the class's, so preview
//! types become usable once priced.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::api::NodeOverlay;
pub use crate::api::nodeoverlay::PriceChange;
use crate::catalog::{INSTANCE_TYPE_LABEL_KEYS, InstanceType, Offering};
use crate::labels;
use crate::requirements::{AllowUndefined, Requirement, Requirements};
use crate::resources::{Quantity, Resources};
use crate::validation::runtime::{overlay_requirement, validate_nodeoverlay};

/// What [`evaluate`] concluded of one overlay, for its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and without conflict (it may select nothing).
    Applied,
    /// Its requirements or price fail upstream's runtime validation.
    Invalid(String),
    /// It conflicts with an overlay of the same weight.
    Conflict,
}

/// One NodePool as overlays see it.
pub struct PoolTypes<'a> {
    pub name: &'a str,
    /// `spec.template.metadata.labels`.
    pub labels: &'a BTreeMap<String, String>,
    pub types: &'a [InstanceType],
    /// The zones of the pool's class's subnets (`None`: not resolved, every zone).
    pub zones: Option<BTreeSet<String>>,
}

/// An offering as overlays tell them apart: zone, capacity type and reservation.
type OfferingKey = (String, &'static str, Option<String>);

fn offering_key(offering: &Offering) -> OfferingKey {
    (
        offering.zone.clone(),
        offering.capacity_type.as_str(),
        offering.reservation.as_ref().map(|r| r.id.clone()),
    )
}

#[derive(Debug, Clone)]
struct PriceUpdate {
    change: PriceChange,
    /// The weight of the last overlay that selected the offering.
    lowest_weight: i32,
}

#[derive(Debug, Clone, Default)]
struct CapacityUpdate {
    resources: Resources,
    /// The resources the last (lowest-weight) overlay added, and its weight.
    lowest_weight_resources: BTreeSet<String>,
    lowest_weight: i32,
}

#[derive(Debug, Clone, Default)]
struct TypeUpdate {
    prices: HashMap<OfferingKey, PriceUpdate>,
    capacity: Option<CapacityUpdate>,
}

/// The evaluated overlays: per pool and type, what changes; per overlay, its verdict.
#[derive(Debug, Clone, Default)]
pub struct Overlays {
    updates: HashMap<String, HashMap<String, TypeUpdate>>,
    zones: HashMap<String, Option<BTreeSet<String>>>,
    /// By overlay name.
    pub verdicts: BTreeMap<String, Verdict>,
}

/// A parsed, valid overlay.
struct Parsed<'a> {
    overlay: &'a NodeOverlay,
    requirements: Requirements,
    price: Option<PriceChange>,
    capacity: Option<Resources>,
}

/// Orders `overlays` as upstream applies them: higher weight first, then name descending.
pub fn order(overlays: &mut [&NodeOverlay]) {
    overlays.sort_by(|a, b| {
        b.weight()
            .cmp(&a.weight())
            .then_with(|| b.name().cmp(a.name()))
    });
}

fn parse(overlay: &NodeOverlay) -> Result<Parsed<'_>, String> {
    validate_nodeoverlay(overlay)?;
    let requirements = overlay
        .spec
        .requirements
        .iter()
        .map(overlay_requirement)
        .collect::<Result<Requirements, _>>()?;
    let price = overlay.price_change().map(PriceChange::parse).transpose()?;
    let capacity = match &overlay.spec.capacity {
        Some(list) => {
            let mut resources = Resources::new();
            for (name, quantity) in list {
                let quantity = Quantity::parse(&quantity.0).map_err(|e| e.to_string())?;
                resources.insert(name, quantity);
            }
            Some(resources)
        }
        None => None,
    };
    Ok(Parsed {
        overlay,
        requirements,
        price,
        capacity,
    })
}

/// The requirements of instance type `it` in pool `pool`, as overlays match them: the pool's
/// name and template labels, the type's labels (the type-label keys it lacks as
/// DoesNotExist), and the zones and capacity types of its offerings.
fn type_requirements(pool: &PoolTypes<'_>, it: &InstanceType) -> Requirements {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::in_values(labels::NODEPOOL, [pool.name]));
    requirements.add(Requirement::in_values(labels::INSTANCE_TYPE, [&it.name]));
    for (key, value) in pool.labels.iter().chain(&it.labels) {
        requirements.add(Requirement::in_values(key, [value]));
    }
    for key in INSTANCE_TYPE_LABEL_KEYS {
        if !it.labels.contains_key(*key) && !requirements.contains_key(key) {
            requirements.add(Requirement::does_not_exist(key));
        }
    }
    requirements.add(Requirement::in_values(
        labels::ZONE,
        it.offerings.iter().map(|o| o.zone.as_str()),
    ));
    requirements.add(Requirement::in_values(
        labels::ZONE_ID,
        it.offerings.iter().map(|o| o.zone_id.as_str()),
    ));
    requirements.add(Requirement::in_values(
        labels::CAPACITY_TYPE,
        it.offerings.iter().map(|o| o.capacity_type.as_str()),
    ));
    requirements
}

/// An offering's own requirements: zone, zone id, capacity type, reservation.
fn offering_requirements(offering: &Offering) -> Requirements {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::in_values(labels::ZONE, [&offering.zone]));
    requirements.add(Requirement::in_values(labels::ZONE_ID, [&offering.zone_id]));
    requirements.add(Requirement::in_values(
        labels::CAPACITY_TYPE,
        [offering.capacity_type.as_str()],
    ));
    if let Some(reservation) = &offering.reservation {
        requirements.add(Requirement::in_values(
            labels::CAPACITY_RESERVATION_ID,
            [&reservation.id],
        ));
    }
    requirements
}

/// The offerings of `it` (whose requirements are `requirements`) the overlay selects (none:
/// it does not apply to the type).
fn selected<'t>(
    parsed: &Parsed<'_>,
    requirements: &Requirements,
    it: &'t InstanceType,
) -> Vec<&'t Offering> {
    if !requirements.is_compatible(&parsed.requirements, AllowUndefined::Nothing) {
        return Vec::new();
    }
    it.offerings
        .iter()
        .filter(|o| {
            offering_requirements(o)
                .is_compatible(&parsed.requirements, AllowUndefined::WellKnownLabels)
        })
        .collect()
}

/// Evaluates `overlays` against every pool's types.
pub fn evaluate(overlays: &[NodeOverlay], pools: &[PoolTypes<'_>]) -> Overlays {
    let mut result = Overlays::default();
    for pool in pools {
        result
            .zones
            .insert(pool.name.to_owned(), pool.zones.clone());
    }
    let mut ordered: Vec<&NodeOverlay> = overlays.iter().collect();
    order(&mut ordered);
    // Each type's requirements once, not once per overlay.
    let requirements: Vec<Vec<Requirements>> = pools
        .iter()
        .map(|pool| {
            pool.types
                .iter()
                .map(|it| type_requirements(pool, it))
                .collect()
        })
        .collect();
    for overlay in ordered {
        let parsed = match parse(overlay) {
            Ok(parsed) => parsed,
            Err(e) => {
                result
                    .verdicts
                    .insert(overlay.name().to_owned(), Verdict::Invalid(e));
                continue;
            }
        };
        // All or nothing: every pool is checked before any is changed.
        let conflict = pools
            .iter()
            .zip(&requirements)
            .any(|(pool, reqs)| result.conflicts(&parsed, pool, reqs));
        if conflict {
            result
                .verdicts
                .insert(overlay.name().to_owned(), Verdict::Conflict);
            continue;
        }
        for (pool, reqs) in pools.iter().zip(&requirements) {
            result.store(&parsed, pool, reqs);
        }
        result
            .verdicts
            .insert(overlay.name().to_owned(), Verdict::Applied);
    }
    result
}

impl Overlays {
    fn conflicts(
        &self,
        parsed: &Parsed<'_>,
        pool: &PoolTypes<'_>,
        requirements: &[Requirements],
    ) -> bool {
        let Some(types) = self.updates.get(pool.name) else {
            return false;
        };
        let weight = parsed.overlay.weight();
        pool.types.iter().zip(requirements).any(|(it, reqs)| {
            let Some(update) = types.get(&it.name) else {
                return false;
            };
            let offerings = selected(parsed, reqs, it);
            if offerings.is_empty() {
                return false;
            }
            let price_conflict = parsed.price.is_some()
                && offerings.iter().any(|o| {
                    update
                        .prices
                        .get(&offering_key(o))
                        .is_some_and(|p| p.lowest_weight == weight)
                });
            let capacity_conflict = match (&parsed.capacity, &update.capacity) {
                (Some(resources), Some(existing)) => {
                    existing.lowest_weight == weight
                        && resources
                            .iter()
                            .any(|(name, _)| existing.lowest_weight_resources.contains(name))
                }
                _ => false,
            };
            price_conflict || capacity_conflict
        })
    }

    fn store(&mut self, parsed: &Parsed<'_>, pool: &PoolTypes<'_>, requirements: &[Requirements]) {
        let weight = parsed.overlay.weight();
        for (it, reqs) in pool.types.iter().zip(requirements) {
            let offerings = selected(parsed, reqs, it);
            if offerings.is_empty() {
                continue;
            }
            let update = self
                .updates
                .entry(pool.name.to_owned())
                .or_default()
                .entry(it.name.clone())
                .or_default();
            if let Some(change) = parsed.price {
                for offering in offerings {
                    update
                        .prices
                        .entry(offering_key(offering))
                        .and_modify(|p| p.lowest_weight = weight)
                        .or_insert(PriceUpdate {
                            change,
                            lowest_weight: weight,
                        });
                }
            }
            if let Some(resources) = &parsed.capacity {
                let capacity = update.capacity.get_or_insert_with(CapacityUpdate::default);
                for (name, quantity) in resources.iter() {
                    capacity.resources.insert(name, quantity);
                }
                capacity.lowest_weight_resources =
                    resources.iter().map(|(n, _)| n.to_owned()).collect();
                capacity.lowest_weight = weight;
            }
        }
    }

    /// Whether no overlay changes anything.
    pub fn is_empty(&self) -> bool {
        self.updates.values().all(HashMap::is_empty)
    }

    /// The types of pool `pool` with the overlays applied: `types` itself when none applies.
    pub fn apply(&self, pool: &str, types: &Arc<[InstanceType]>) -> Arc<[InstanceType]> {
        let Some(updates) = self.updates.get(pool).filter(|u| !u.is_empty()) else {
            return Arc::clone(types);
        };
        let zones = self.zones.get(pool).cloned().flatten();
        types
            .iter()
            .map(|it| match updates.get(&it.name) {
                Some(update) => applied(it, update, zones.as_ref()),
                None => it.clone(),
            })
            .collect()
    }
}

fn applied(
    it: &InstanceType,
    update: &TypeUpdate,
    zones: Option<&BTreeSet<String>>,
) -> InstanceType {
    let mut it = it.clone();
    for offering in &mut it.offerings {
        if let Some(price) = update.prices.get(&offering_key(offering)) {
            let unpriced = !offering.available && offering.price == 0.0;
            offering.price = price.change.apply(offering.price);
            if unpriced
                && matches!(price.change, PriceChange::Set(_))
                && zones.is_none_or(|z| z.contains(&offering.zone))
            {
                offering.available = true;
            }
        }
    }
    if let Some(capacity) = &update.capacity {
        for (name, quantity) in capacity.resources.iter() {
            it.capacity.insert(name, quantity);
        }
    }
    it
}

#[cfg(test)]
mod tests;
