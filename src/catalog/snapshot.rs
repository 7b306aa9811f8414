//! [`CatalogSnapshot`]: the instance types, zones and prices of one region as a cloud
//! provider last fetched them (DescribeInstanceTypes, DescribeInstanceTypeOfferings, prices)
//! or as the embedded catalog has them ([`Catalog::snapshot`]), and the per-EC2NodeClass
//! view the scheduler plans and the provider launches with ([`CatalogSnapshot::instance_types`]).
//! The provider only fetches; everything derived is computed here, from the same
//! [`InstanceType::resolve`] the embedded catalog uses, so planning and launching agree.
//! A type gets one offering per zone offering it and per capacity type it is sold as; an
//! offering is available only with a known price and, for a class with resolved subnets,
//! in a zone of one of them; the others are kept, unavailable, so their prices stay known
//! (upstream keeps them the same way). [`CatalogSnapshot::seq_num`] names the content: a
//! provider bumps it when a refresh changes anything, and caches of resolved types key on it.

use super::embedded::{Catalog, Zone};
use super::info::InstanceTypeInfo;
use super::instance_type::{CapacityType, InstanceType, Offering};
use super::settings::AllocatableSettings;
use std::collections::{BTreeMap, BTreeSet};

/// The raw parts of a region's catalog, as fetched.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatalogFacts {
    pub region: String,
    /// EC2 facts per type, sorted by name.
    pub infos: Vec<InstanceTypeInfo>,
    /// Zone name → zone id, for every zone of the region.
    pub zones: BTreeMap<String, String>,
    /// Type → the zones offering it (DescribeInstanceTypeOfferings by availability zone).
    pub offered: BTreeMap<String, BTreeSet<String>>,
    /// On-demand USD per hour, by type.
    pub on_demand: BTreeMap<String, f64>,
    /// Spot USD per hour, by type, then zone.
    pub spot: BTreeMap<String, BTreeMap<String, f64>>,
}

/// A region's catalog at one time, numbered.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogSnapshot {
    facts: CatalogFacts,
    seq_num: u64,
}

impl CatalogSnapshot {
    /// `facts` (infos sorted here) as content number `seq_num`. The embedded catalog's
    /// snapshots are number 0; a provider numbers its refreshes from 1.
    pub fn new(mut facts: CatalogFacts, seq_num: u64) -> Self {
        facts.infos.sort_by(|a, b| a.name.cmp(&b.name));
        Self { facts, seq_num }
    }

    pub fn facts(&self) -> &CatalogFacts {
        &self.facts
    }

    pub fn seq_num(&self) -> u64 {
        self.seq_num
    }

    pub fn region(&self) -> &str {
        &self.facts.region
    }

    /// How many types are offered in at least one zone.
    pub fn offered_types(&self) -> usize {
        self.facts
            .infos
            .iter()
            .filter(|info| {
                self.facts
                    .offered
                    .get(&info.name)
                    .is_some_and(|z| !z.is_empty())
            })
            .count()
    }

    /// EC2 facts of `name`, if the snapshot has it.
    pub fn info(&self, name: &str) -> Option<&InstanceTypeInfo> {
        let index = self
            .facts
            .infos
            .binary_search_by(|info| info.name.as_str().cmp(name))
            .ok()?;
        Some(&self.facts.infos[index])
    }

    /// Every type offered in at least one zone, resolved under `settings`, by name; an
    /// offering outside `subnet_zones` (when given) is unavailable. Types the AMI family
    /// cannot run (Windows on arm64) are left out.
    pub fn instance_types(
        &self,
        settings: &AllocatableSettings,
        subnet_zones: Option<&BTreeSet<String>>,
    ) -> Vec<InstanceType> {
        self.facts
            .infos
            .iter()
            .filter_map(|info| self.resolve(info, settings, subnet_zones))
            .collect()
    }

    /// One type, as [`Self::instance_types`] resolves it.
    pub fn instance_type(
        &self,
        name: &str,
        settings: &AllocatableSettings,
        subnet_zones: Option<&BTreeSet<String>>,
    ) -> Option<InstanceType> {
        self.resolve(self.info(name)?, settings, subnet_zones)
    }

    fn resolve(
        &self,
        info: &InstanceTypeInfo,
        settings: &AllocatableSettings,
        subnet_zones: Option<&BTreeSet<String>>,
    ) -> Option<InstanceType> {
        let zones = self.facts.offered.get(&info.name)?;
        if zones.is_empty() {
            return None;
        }
        let on_demand = self.facts.on_demand.get(&info.name).copied();
        let spot = self.facts.spot.get(&info.name);
        let mut offerings = Vec::with_capacity(zones.len() * 2);
        for zone in zones {
            let in_subnets = subnet_zones.is_none_or(|z| z.contains(zone));
            let zone_id = self.facts.zones.get(zone).cloned().unwrap_or_default();
            for capacity_type in [CapacityType::OnDemand, CapacityType::Spot] {
                if !info.supports_usage_class(capacity_type.as_str()) {
                    continue;
                }
                let price = match capacity_type {
                    CapacityType::Spot => spot.and_then(|s| s.get(zone)).copied(),
                    _ => on_demand,
                };
                offerings.push(Offering {
                    zone: zone.clone(),
                    zone_id: zone_id.clone(),
                    capacity_type,
                    price: price.unwrap_or(0.0),
                    available: price.is_some() && in_subnets,
                    reservation: None,
                });
            }
        }
        InstanceType::resolve(info, &self.facts.region, offerings, settings)
    }
}

impl Catalog {
    /// The embedded catalog of the region as a snapshot (number 0): its types, zones and
    /// derived prices, which [`CatalogSnapshot::instance_types`] resolves exactly as
    /// [`Catalog::instance_types`] does when no subnet zones are given.
    pub fn snapshot(&self) -> CatalogSnapshot {
        let zones: BTreeMap<String, String> = self
            .zones()
            .iter()
            .map(|Zone { name, id }| (name.clone(), id.clone()))
            .collect();
        let mut facts = CatalogFacts {
            region: self.region().to_owned(),
            zones,
            ..CatalogFacts::default()
        };
        for info in self.infos() {
            let mut offered = BTreeSet::new();
            for offering in self.offerings(&info.name) {
                offered.insert(offering.zone.clone());
                if offering.available && offering.capacity_type == CapacityType::Spot {
                    facts
                        .spot
                        .entry(info.name.clone())
                        .or_default()
                        .insert(offering.zone, offering.price);
                }
            }
            if let Some(price) = self.on_demand_price(&info.name) {
                facts.on_demand.insert(info.name.clone(), price);
            }
            facts.offered.insert(info.name.clone(), offered);
            facts.infos.push(info.clone());
        }
        CatalogSnapshot::new(facts, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|z| (*z).to_owned()).collect()
    }

    #[test]
    fn the_embedded_snapshot_resolves_as_the_embedded_catalog() {
        let catalog = Catalog::embedded("us-east-1").expect("embedded region");
        let snapshot = catalog.snapshot();
        assert_eq!(snapshot.seq_num(), 0);
        let settings = AllocatableSettings::default();
        assert_eq!(
            snapshot.instance_types(&settings, None),
            catalog.instance_types(&settings)
        );
        assert_eq!(snapshot.offered_types(), catalog.infos().count());
    }

    #[test]
    fn offerings_outside_the_subnet_zones_or_without_a_price_are_unavailable() {
        let mut facts = Catalog::embedded("us-east-1")
            .expect("embedded region")
            .snapshot()
            .facts()
            .clone();
        // A type the embedded catalog lacks, offered in two zones, priced only for spot in
        // one of them.
        let mut new_type = facts
            .infos
            .iter()
            .find(|info| info.name == "m5.large")
            .expect("m5.large")
            .clone();
        new_type.name = "m9z.large".to_owned();
        facts.infos.push(new_type);
        facts
            .offered
            .insert("m9z.large".to_owned(), zones(&["us-east-1a", "us-east-1c"]));
        facts.spot.insert(
            "m9z.large".to_owned(),
            [("us-east-1c".to_owned(), 0.02)].into_iter().collect(),
        );
        let snapshot = CatalogSnapshot::new(facts, 7);
        assert_eq!(snapshot.seq_num(), 7);
        let subnets = zones(&["us-east-1b", "us-east-1c"]);
        let it = snapshot
            .instance_type("m9z.large", &AllocatableSettings::default(), Some(&subnets))
            .expect("resolved");
        let available: Vec<(&str, CapacityType, f64)> = it
            .available_offerings()
            .map(|o| (o.zone.as_str(), o.capacity_type, o.price))
            .collect();
        assert_eq!(available, [("us-east-1c", CapacityType::Spot, 0.02)]);
        assert_eq!(it.offerings.len(), 4, "every offered zone is listed");
        assert_eq!(it.offerings[0].zone_id, "use1-az6");
        // m5.large: only the subnet zones are available; without subnets, every zone is.
        let types = snapshot.instance_types(&AllocatableSettings::default(), Some(&subnets));
        let m5 = types
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("m5.large");
        assert!(m5.available_offerings().all(|o| subnets.contains(&o.zone)));
        assert!(
            m5.offerings
                .iter()
                .any(|o| o.zone == "us-east-1a" && !o.available)
        );
        let unrestricted = snapshot.instance_types(&AllocatableSettings::default(), None);
        let m5 = unrestricted
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("m5.large");
        assert!(m5.offerings.iter().all(|o| o.available));
    }

    #[test]
    fn a_type_offered_nowhere_is_not_listed() {
        let catalog = Catalog::embedded("us-east-1").expect("embedded region");
        let mut facts = catalog.snapshot().facts().clone();
        facts.offered.insert("m5.large".to_owned(), BTreeSet::new());
        let snapshot = CatalogSnapshot::new(facts, 1);
        let settings = AllocatableSettings::default();
        assert!(
            snapshot
                .instance_type("m5.large", &settings, None)
                .is_none()
        );
        assert_eq!(
            snapshot.instance_types(&settings, None).len(),
            catalog.instance_types(&settings).len() - 1
        );
    }
}
