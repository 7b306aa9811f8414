//! The instance types the Provisioner solves with: each EC2NodeClass's types resolved with
//! the class's allocatable settings from the cloud provider's refreshed catalog
//! ([`CloudProvider::catalog`]: the account's types, its subnets' zones, today's prices) —
//! or, until the provider's first refresh, the embedded catalog (said once in the log) —
//! with offerings outside the class's subnet zones and every offering the OfferingCache
//! holds marked unavailable, which the scheduler then neither plans on nor prices. The list
//! is kept per class — NodePools sharing a class share it — and rebuilt only when the
//! class's settings or subnets change, the provider's catalog is renumbered (a refresh
//! changed it) or the OfferingCache's generation moves (an offering marked or expired),
//! so a quiet cluster re-resolves nothing between rounds. One cache serves the
//! Provisioner's rounds and the disruption snapshots alike, and each shares the cached list
//! itself: a list is six megabytes (1,235 types in us-east-1), and a copy per user would
//! keep two of them for good. With the `ReservedCapacity` gate, the class's
//! `status.capacityReservations` become `reserved` offerings with the room the provider
//! knows ([`CloudProvider::reservation_capacity`]); a change of room rebuilds the list. The cache is locked only while one class is looked up (or
//! rebuilt), not while a snapshot is built around it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kerf::api::EC2NodeClass;
use kerf::api::ec2nodeclass::CapacityReservation;
use kerf::catalog::{
    AllocatableSettings, Catalog, CatalogSnapshot, InstanceType, add_reserved_offerings,
};
use kerf::cloudprovider::CloudProvider;
use kerf::cluster::snapshot::InstanceTypeSource;

use crate::offering_cache::{OfferingCacheHandle, Table};

/// Resolved instance types by EC2NodeClass name; clones share the cache.
#[derive(Clone, Default)]
pub struct InstanceTypeCache {
    classes: Arc<Mutex<Classes>>,
    /// Whose refreshed catalog rounds plan with; without one, the embedded catalog.
    provider: Option<Arc<dyn CloudProvider>>,
    /// The `ReservedCapacity` gate.
    reserved_capacity: bool,
}

#[derive(Default)]
struct Classes {
    by_class: HashMap<String, Resolved>,
    /// The provider catalog's number the latest round planned with (0: the embedded one),
    /// so that a change of catalog is logged once.
    planned_with: Option<u64>,
    /// Rounds started, by every user; classes no round has used since the one before the
    /// latest are dropped.
    round: u64,
    /// How many times a class's list was (re)built.
    builds: u64,
}

struct Resolved {
    settings: AllocatableSettings,
    subnets: BTreeMap<String, Vec<String>>,
    /// The provider catalog's number (0: the embedded catalog).
    catalog: u64,
    generation: u64,
    /// The class's reservations with the room each had when the list was built.
    reserved: Vec<(CapacityReservation, Option<u32>)>,
    types: Arc<[InstanceType]>,
    /// The latest round that used it.
    round: u64,
}

/// The cache as one round's [`InstanceTypeSource`].
pub struct Source<'a> {
    cache: &'a InstanceTypeCache,
    round: u64,
    catalog: &'a Catalog,
    /// The provider's refreshed catalog, read once at the round's start.
    refreshed: Option<Arc<CatalogSnapshot>>,
    offerings: Option<&'a OfferingCacheHandle>,
}

impl InstanceTypeCache {
    /// A cache planning with `provider`'s refreshed catalog once it has one (with `None`,
    /// always with the embedded catalog).
    pub fn following(provider: Option<Arc<dyn CloudProvider>>) -> Self {
        Self {
            classes: Arc::default(),
            provider,
            reserved_capacity: true,
        }
    }

    /// The cache with the `ReservedCapacity` gate set to `on`.
    pub fn with_reserved_capacity(mut self, on: bool) -> Self {
        self.reserved_capacity = on;
        self
    }

    /// The class's reservations and their room now (none with the gate off).
    fn reservations(
        &self,
        class: Option<&EC2NodeClass>,
    ) -> Vec<(CapacityReservation, Option<u32>)> {
        if !self.reserved_capacity {
            return Vec::new();
        }
        class
            .and_then(|c| c.status.as_ref())
            .map(|s| s.capacity_reservations.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let room = self
                    .provider
                    .as_ref()
                    .and_then(|p| p.reservation_capacity(&r.id));
                (r.clone(), room)
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Classes> {
        // Every critical section leaves the map consistent.
        self.classes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a round: the returned source resolves the round's classes from the provider's
    /// refreshed catalog, else from `catalog` (the embedded one); classes no round asks for
    /// are dropped by [`Self::finish_round`].
    pub fn round<'a>(
        &'a self,
        catalog: &'a Catalog,
        offerings: Option<&'a OfferingCacheHandle>,
    ) -> Source<'a> {
        let refreshed = self.provider.as_ref().and_then(|p| p.catalog());
        let round = {
            let mut classes = self.lock();
            classes.round += 1;
            let number = refreshed.as_ref().map_or(0, |c| c.seq_num());
            if classes.planned_with != Some(number) {
                match &refreshed {
                    Some(c) => tracing::info!(
                        seq_num = number,
                        instance_types = c.offered_types(),
                        "planning with the cloud provider's refreshed instance type catalog"
                    ),
                    None if self.provider.is_some() => tracing::info!(
                        region = catalog.region(),
                        "planning with the embedded instance type catalog until the cloud \
                         provider's first refresh"
                    ),
                    None => {}
                }
                classes.planned_with = Some(number);
            }
            classes.round
        };
        Source {
            cache: self,
            round,
            catalog,
            refreshed,
            offerings,
        }
    }

    /// Forgets classes neither the latest round nor the one before used (deleted or
    /// unused EC2NodeClasses). The one before counts too: the Provisioner's and the
    /// disruption's rounds interleave, and a class one of them uses must not be dropped
    /// because the other started a round meanwhile.
    pub fn finish_round(&self) {
        let mut classes = self.lock();
        let latest = classes.round;
        classes.by_class.retain(|_, r| r.round + 1 >= latest);
    }

    /// How many rounds its users (provisioning rounds, disruption passes) have started.
    pub fn rounds_started(&self) -> u64 {
        self.lock().round
    }

    /// How many times a class's instance types were built from the catalog.
    #[cfg(test)]
    pub fn builds(&self) -> u64 {
        self.lock().builds
    }

    /// Every class's list as last resolved, by class name, for the instance type metrics.
    pub fn resolved(&self) -> Vec<(String, Arc<[InstanceType]>)> {
        self.lock()
            .by_class
            .iter()
            .map(|(class, r)| (class.clone(), Arc::clone(&r.types)))
            .collect()
    }

    /// The classes cached, sorted.
    #[cfg(test)]
    pub fn classes(&self) -> Vec<String> {
        let mut classes: Vec<String> = self.lock().by_class.keys().cloned().collect();
        classes.sort();
        classes
    }
}

impl InstanceTypeSource for Source<'_> {
    fn resolve(
        &mut self,
        class_name: &str,
        class: Option<&EC2NodeClass>,
        settings: &AllocatableSettings,
    ) -> Arc<[InstanceType]> {
        let subnets = subnets_by_zone(class);
        let reserved = self.cache.reservations(class);
        let catalog = self.refreshed.as_ref().map_or(0, |c| c.seq_num());
        let generation = self.offerings.map_or(0, OfferingCacheHandle::generation);
        let mut classes = self.cache.lock();
        if let Some(resolved) = classes.by_class.get_mut(class_name)
            && resolved.generation == generation
            && resolved.catalog == catalog
            && resolved.settings == *settings
            && resolved.subnets == subnets
            && resolved.reserved == reserved
        {
            resolved.round = resolved.round.max(self.round);
            return Arc::clone(&resolved.types);
        }
        // Built under the lock: the other user waits for this list rather than building a
        // second one beside it. A class without resolved subnets is not narrowed by zone
        // (the Provisioner leaves its NodePools out until the class is Ready).
        let zones: Option<BTreeSet<String>> =
            (!subnets.is_empty()).then(|| subnets.keys().cloned().collect());
        let mut types = match &self.refreshed {
            Some(refreshed) => refreshed.instance_types(settings, zones.as_ref()),
            None => {
                let mut types = self.catalog.instance_types(settings);
                if let Some(zones) = &zones {
                    for offering in types.iter_mut().flat_map(|t| &mut t.offerings) {
                        offering.available &= zones.contains(&offering.zone);
                    }
                }
                types
            }
        };
        if !reserved.is_empty() {
            let reservations: Vec<CapacityReservation> =
                reserved.iter().map(|(r, _)| r.clone()).collect();
            add_reserved_offerings(&mut types, &reservations, |id| {
                reserved
                    .iter()
                    .find(|(r, _)| r.id == id)
                    .and_then(|(_, room)| *room)
            });
        }
        // Read under the lock once, with the generation it had: a mark arriving meanwhile
        // moves the generation again, so the next round rebuilds.
        let generation = match self.offerings {
            Some(offerings) => offerings.read(|table| {
                mark_unavailable(&mut types, table, &subnets);
                table.generation()
            }),
            None => generation,
        };
        classes.builds += 1;
        let types: Arc<[InstanceType]> = types.into();
        classes.by_class.insert(
            class_name.to_owned(),
            Resolved {
                settings: settings.clone(),
                subnets,
                catalog,
                generation,
                reserved,
                types: Arc::clone(&types),
                round: self.round,
            },
        );
        types
    }
}

/// The class's resolved subnets by zone (empty when its status has none yet, in which case
/// subnet entries of the OfferingCache cannot apply).
fn subnets_by_zone(class: Option<&EC2NodeClass>) -> BTreeMap<String, Vec<String>> {
    let mut by_zone: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for subnet in class
        .and_then(|c| c.status.as_ref())
        .map(|s| s.subnets.as_slice())
        .unwrap_or_default()
    {
        by_zone
            .entry(subnet.zone.clone())
            .or_default()
            .push(subnet.id.clone());
    }
    by_zone
}

/// Marks every offering of `types` the table holds unavailable (its own entry, its capacity
/// type's, or all of the class's subnets in its zone).
fn mark_unavailable(
    types: &mut [InstanceType],
    table: &Table,
    subnets: &BTreeMap<String, Vec<String>>,
) {
    if table.is_empty() {
        return;
    }
    for it in types {
        for offering in it.offerings.iter_mut().filter(|o| o.available) {
            let zone_subnets = subnets
                .get(&offering.zone)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if table.is_unavailable(
                &it.name,
                &offering.zone,
                offering.capacity_type.as_str(),
                zone_subnets,
            ) {
                offering.available = false;
            }
        }
    }
}

#[cfg(test)]
mod tests;
