//! The instance types the Provisioner solves with: each EC2NodeClass's types resolved from
//! the catalog with the class's allocatable settings, and every offering the OfferingCache
//! holds marked unavailable, which the scheduler then neither plans on nor prices (a
//! NodeClaim's capacity-type requirement narrows to what stays available). The list is
//! kept per class — NodePools sharing a class share it — and rebuilt only when the class's
//! settings or subnets change or the OfferingCache's generation moves (an offering marked
//! or expired), so a quiet cluster re-resolves nothing between rounds. One cache serves the
//! Provisioner's rounds and the disruption snapshots alike, and each shares the cached list
//! itself: a list is six megabytes (1,235 types in us-east-1), and a copy per user would
//! keep two of them for good. The cache is locked only while one class is looked up (or
//! rebuilt), not while a snapshot is built around it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kerf::api::EC2NodeClass;
use kerf::catalog::{AllocatableSettings, Catalog, InstanceType};
use kerf::plan::snapshot::InstanceTypeSource;

use crate::offering_cache::{OfferingCacheHandle, Table};

/// Resolved instance types by EC2NodeClass name; clones share the cache.
#[derive(Clone, Default)]
pub struct InstanceTypeCache(Arc<Mutex<Classes>>);

#[derive(Default)]
struct Classes {
    by_class: HashMap<String, Resolved>,
    /// Rounds started, by every user; classes no round has used since the one before the
    /// latest are dropped.
    round: u64,
    /// How many times a class's list was (re)built.
    builds: u64,
}

struct Resolved {
    settings: AllocatableSettings,
    subnets: BTreeMap<String, Vec<String>>,
    generation: u64,
    types: Arc<[InstanceType]>,
    /// The latest round that used it.
    round: u64,
}

/// The cache as one round's [`InstanceTypeSource`].
pub struct Source<'a> {
    cache: &'a InstanceTypeCache,
    round: u64,
    catalog: &'a Catalog,
    offerings: Option<&'a OfferingCacheHandle>,
}

impl InstanceTypeCache {
    fn lock(&self) -> MutexGuard<'_, Classes> {
        // Every critical section leaves the map consistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a round: the returned source resolves the round's classes; classes no round
    /// asks for are dropped by [`Self::finish_round`].
    pub fn round<'a>(
        &'a self,
        catalog: &'a Catalog,
        offerings: Option<&'a OfferingCacheHandle>,
    ) -> Source<'a> {
        let round = {
            let mut classes = self.lock();
            classes.round += 1;
            classes.round
        };
        Source {
            cache: self,
            round,
            catalog,
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
        let generation = self.offerings.map_or(0, OfferingCacheHandle::generation);
        let mut classes = self.cache.lock();
        if let Some(resolved) = classes.by_class.get_mut(class_name)
            && resolved.generation == generation
            && resolved.settings == *settings
            && resolved.subnets == subnets
        {
            resolved.round = resolved.round.max(self.round);
            return Arc::clone(&resolved.types);
        }
        // Built under the lock: the other user waits for this list rather than building a
        // second one beside it.
        let mut types = self.catalog.instance_types(settings);
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
                generation,
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
