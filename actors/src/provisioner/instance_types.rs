//! The instance types the Provisioner solves with: each EC2NodeClass's types resolved from
//! the catalog with the class's allocatable settings, and every offering the OfferingCache
//! holds marked unavailable, which the scheduler then neither plans on nor prices (a
//! NodeClaim's capacity-type requirement narrows to what stays available). The list is
//! kept per class — NodePools sharing a class share it — and rebuilt only when the class's
//! settings or subnets change or the OfferingCache's generation moves (an offering marked
//! or expired), so a quiet cluster re-resolves nothing between rounds. Rounds (and the
//! disruption snapshots) share the cached list itself, so a round copies no instance type.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kerf::api::EC2NodeClass;
use kerf::catalog::{AllocatableSettings, Catalog, InstanceType};
use kerf::plan::snapshot::InstanceTypeSource;

use crate::offering_cache::{OfferingCacheHandle, Table};

/// Resolved instance types by EC2NodeClass name.
#[derive(Default)]
pub struct InstanceTypeCache {
    by_class: HashMap<String, Resolved>,
    /// Rounds started; entries not used by the latest one are dropped.
    round: u64,
    /// How many times a class's list was (re)built.
    builds: u64,
}

struct Resolved {
    settings: AllocatableSettings,
    subnets: BTreeMap<String, Vec<String>>,
    generation: u64,
    types: Arc<[InstanceType]>,
    round: u64,
}

/// The cache as one round's [`InstanceTypeSource`].
pub struct Source<'a> {
    cache: &'a mut InstanceTypeCache,
    catalog: &'a Catalog,
    offerings: Option<&'a OfferingCacheHandle>,
}

impl InstanceTypeCache {
    /// Starts a round: the returned source resolves the round's classes; classes the round
    /// does not ask for are dropped by [`Self::finish_round`].
    pub fn round<'a>(
        &'a mut self,
        catalog: &'a Catalog,
        offerings: Option<&'a OfferingCacheHandle>,
    ) -> Source<'a> {
        self.round += 1;
        Source {
            cache: self,
            catalog,
            offerings,
        }
    }

    /// Forgets classes the latest round did not use (deleted or unused EC2NodeClasses).
    pub fn finish_round(&mut self) {
        let round = self.round;
        self.by_class.retain(|_, r| r.round == round);
    }

    /// How many times a class's instance types were built from the catalog.
    #[cfg(test)]
    pub fn builds(&self) -> u64 {
        self.builds
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
        let round = self.cache.round;
        if let Some(resolved) = self.cache.by_class.get_mut(class_name)
            && resolved.generation == generation
            && resolved.settings == *settings
            && resolved.subnets == subnets
        {
            resolved.round = round;
            return Arc::clone(&resolved.types);
        }
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
        self.cache.builds += 1;
        let types: Arc<[InstanceType]> = types.into();
        self.cache.by_class.insert(
            class_name.to_owned(),
            Resolved {
                settings: settings.clone(),
                subnets,
                generation,
                types: Arc::clone(&types),
                round,
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
