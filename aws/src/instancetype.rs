//! Instance types and their offerings as EC2 reports them now: DescribeInstanceTypes,
//! DescribeInstanceTypeOfferings and the [`PricingProvider`]'s prices, refreshed at start-up
//! and every 12 hours (sooner after a failure, see [`AwsCloudProvider::run_upkeep`]), are
//! folded after each refresh into one [`CatalogSnapshot`], numbered anew only when its
//! content changed. The controller plans with that snapshot ([`Self::refreshed`]) and
//! launches resolve the same one here, so both see the same types, zones and prices. The
//! embedded catalog supplies what EC2 does not report (network bandwidth, VPC limits) and
//! stands in until the first refresh; a failed or empty answer keeps the last good part,
//! logged and counted in [`CATALOG_REFRESH_FAILURES`]. Resolved types are cached per
//! settings and snapshot for five minutes; every listing then marks offerings unavailable
//! outside the node class's subnet zones or after a recent launch failure.
//!
//! [`AwsCloudProvider::run_upkeep`]: crate::cloudprovider::AwsCloudProvider::run_upkeep

use crate::cache::TtlCache;
use crate::errors::ApiError;
use crate::launchtemplate::fnv1a64;
use crate::pricing::PricingProvider;
use crate::selectors::filter;
use crate::unavailable::UnavailableOfferings;
use aws_sdk_ec2::types::LocationType;
use kerf::catalog::{
    Accelerator, AllocatableSettings, Catalog, CatalogFacts, CatalogSnapshot, Gpu, InstanceStorage,
    InstanceType, InstanceTypeInfo, NeuronDevice, Offering,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use thiserror::Error;

/// How long resolved instance types are reused for one configuration.
pub const INSTANCE_TYPES_CACHE_TTL: Duration = Duration::from_secs(300);
/// How often EC2's instance-type facts and offerings are refreshed (upstream's 12 hours).
pub const INSTANCE_TYPES_REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);
/// Failed parts of a catalog refresh, by `part` (`instance_types`, `offerings`,
/// `on_demand_prices`, `spot_prices`).
pub const CATALOG_REFRESH_FAILURES: &str = "kerf_cloudprovider_catalog_refresh_failures_total";

/// Why one part of a refresh kept the previous answer.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum RefreshError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// EC2 answered without any entry: taken as a failure, never as an empty catalog.
    #[error("{0} answered nothing")]
    Empty(&'static str),
}

/// What DescribeAvailabilityZones and DescribeInstanceTypeOfferings answered.
#[derive(Clone, Debug, PartialEq)]
struct LiveOfferings {
    /// Zone name → zone id.
    zones: BTreeMap<String, String>,
    /// Type → zones offering it.
    offered: BTreeMap<String, BTreeSet<String>>,
}

/// Resolves instance types with live EC2 facts, prices and availability.
pub struct InstanceTypeProvider {
    ec2: aws_sdk_ec2::Client,
    catalog: Option<Catalog>,
    pricing: Arc<PricingProvider>,
    unavailable: Arc<dyn UnavailableOfferings>,
    live_infos: RwLock<Option<Arc<Vec<InstanceTypeInfo>>>>,
    live_offerings: RwLock<Option<Arc<LiveOfferings>>>,
    /// The catalog the refreshes made; `None` until one fetched anything.
    refreshed: RwLock<Option<Arc<CatalogSnapshot>>>,
    /// The embedded catalog (empty for a region it lacks), until then.
    stand_in: Arc<CatalogSnapshot>,
    resolved: TtlCache<u64, Arc<Vec<InstanceType>>>,
}

/// Where a node class may launch: its subnets' zones and ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchScope {
    /// Zone → the node class's subnet ids there.
    pub subnets_by_zone: BTreeMap<String, Vec<String>>,
}

impl LaunchScope {
    pub fn from_subnets<'a>(subnets: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut subnets_by_zone: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (zone, id) in subnets {
            subnets_by_zone
                .entry(zone.to_owned())
                .or_default()
                .push(id.to_owned());
        }
        Self { subnets_by_zone }
    }
}

impl InstanceTypeProvider {
    pub fn new(
        ec2: aws_sdk_ec2::Client,
        region: &str,
        pricing: Arc<PricingProvider>,
        unavailable: Arc<dyn UnavailableOfferings>,
    ) -> Self {
        let catalog = Catalog::embedded(region).ok();
        let stand_in = catalog.map_or_else(
            || {
                let facts = CatalogFacts {
                    region: region.to_owned(),
                    ..CatalogFacts::default()
                };
                CatalogSnapshot::new(facts, 0)
            },
            |c| c.snapshot(),
        );
        Self {
            ec2,
            catalog,
            pricing,
            unavailable,
            live_infos: RwLock::new(None),
            live_offerings: RwLock::new(None),
            refreshed: RwLock::new(None),
            stand_in: Arc::new(stand_in),
            resolved: TtlCache::new(INSTANCE_TYPES_CACHE_TTL),
        }
    }

    /// The catalog the refreshes made, once one fetched anything: what the controller
    /// plans with ([`kerf::cloudprovider::CloudProvider::catalog`]).
    pub fn refreshed(&self) -> Option<Arc<CatalogSnapshot>> {
        self.refreshed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The catalog launches resolve: the refreshed one, else the embedded stand-in.
    pub fn current(&self) -> Arc<CatalogSnapshot> {
        self.refreshed()
            .unwrap_or_else(|| Arc::clone(&self.stand_in))
    }

    /// Fetches instance-type facts from DescribeInstanceTypes; returns how many types. The
    /// next [`Self::publish`] folds them into the catalog.
    pub async fn update_instance_types(&self) -> Result<usize, RefreshError> {
        let mut pages = self
            .ec2
            .describe_instance_types()
            .filters(filter("supported-virtualization-type", ["hvm".to_owned()]))
            .filters(filter(
                "processor-info.supported-architecture",
                ["x86_64".to_owned(), "arm64".to_owned()],
            ))
            .into_paginator()
            .send();
        let mut infos = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| ApiError::from_sdk("DescribeInstanceTypes", e))?;
            infos.extend(
                page.instance_types()
                    .iter()
                    .filter_map(|t| self.info_from_ec2(t)),
            );
        }
        if infos.is_empty() {
            return Err(RefreshError::Empty("DescribeInstanceTypes"));
        }
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let count = infos.len();
        *self.live_infos.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(infos));
        tracing::debug!(count, "fetched instance types from EC2");
        Ok(count)
    }

    /// Fetches the zones offering each type from DescribeInstanceTypeOfferings; returns how
    /// many types are offered. The next [`Self::publish`] folds them into the catalog.
    pub async fn update_offerings(&self) -> Result<usize, RefreshError> {
        let zones: BTreeMap<String, String> = self
            .ec2
            .describe_availability_zones()
            .send()
            .await
            .map_err(|e| ApiError::from_sdk("DescribeAvailabilityZones", e))?
            .availability_zones()
            .iter()
            .filter_map(|z| {
                Some((
                    z.zone_name()?.to_owned(),
                    z.zone_id().unwrap_or_default().to_owned(),
                ))
            })
            .collect();
        let mut pages = self
            .ec2
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .into_paginator()
            .send();
        let mut offered: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| ApiError::from_sdk("DescribeInstanceTypeOfferings", e))?;
            for o in page.instance_type_offerings() {
                let (Some(t), Some(zone)) = (o.instance_type(), o.location()) else {
                    continue;
                };
                offered
                    .entry(t.as_str().to_owned())
                    .or_default()
                    .insert(zone.to_owned());
            }
        }
        if offered.is_empty() {
            return Err(RefreshError::Empty("DescribeInstanceTypeOfferings"));
        }
        let count = offered.len();
        *self
            .live_offerings
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(LiveOfferings { zones, offered }));
        tracing::debug!(count, "fetched instance type offerings from EC2");
        Ok(count)
    }

    /// Refreshes facts, offerings and prices, then publishes the catalog they make. A part
    /// that fails keeps its previous answer, is logged and counted, and does not stop the
    /// others; returns whether every part succeeded.
    pub async fn refresh(&self) -> bool {
        let mut failed = Vec::new();
        if let Err(e) = self.update_instance_types().await {
            tracing::error!(error = %e, "refreshing instance types failed; keeping the previous ones");
            failed.push("instance_types");
        }
        if let Err(e) = self.update_offerings().await {
            tracing::error!(error = %e, "refreshing instance type offerings failed; keeping the previous ones");
            failed.push("offerings");
        }
        if let Err(e) = self.pricing.update_on_demand().await {
            let age = self.pricing.on_demand_age();
            tracing::warn!("{}", crate::pricing::on_demand_failure_message(&e, age));
            failed.push("on_demand_prices");
        }
        if let Err(e) = self.pricing.update_spot().await {
            tracing::warn!(error = %e, "refreshing spot prices failed; keeping the previous ones");
            failed.push("spot_prices");
        }
        for part in &failed {
            metrics::counter!(CATALOG_REFRESH_FAILURES, "part" => *part).increment(1);
        }
        self.publish();
        failed.is_empty()
    }

    /// Folds what was fetched into a catalog snapshot, numbered after the previous one when
    /// its content differs; nothing is published before any part was fetched (the embedded
    /// stand-in stays in use). Returns the catalog now published.
    pub fn publish(&self) -> Option<Arc<CatalogSnapshot>> {
        let infos = self
            .live_infos
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let offerings = self
            .live_offerings
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (on_demand, spot) = self.pricing.live_counts();
        let mut refreshed = self.refreshed.write().unwrap_or_else(|p| p.into_inner());
        if infos.is_none() && offerings.is_none() && on_demand + spot == 0 {
            return refreshed.clone();
        }
        let stand_in = self.stand_in.facts();
        let mut facts = CatalogFacts {
            region: stand_in.region.clone(),
            infos: infos.map_or_else(|| stand_in.infos.clone(), |i| i.as_ref().clone()),
            ..CatalogFacts::default()
        };
        match offerings {
            Some(live) => {
                facts.zones = live.zones.clone();
                facts.offered = live.offered.clone();
            }
            None => {
                facts.zones = stand_in.zones.clone();
                facts.offered = stand_in.offered.clone();
            }
        }
        for info in &facts.infos {
            let name = &info.name;
            if let Some(price) = self.pricing.on_demand_price(name) {
                facts.on_demand.insert(name.clone(), price);
            }
            for zone in facts.offered.get(name).into_iter().flatten() {
                if let Some(price) = self.pricing.spot_price(name, zone) {
                    facts
                        .spot
                        .entry(name.clone())
                        .or_default()
                        .insert(zone.clone(), price);
                }
            }
        }
        let previous = refreshed.as_ref().map_or(0, |r| r.seq_num());
        if refreshed.as_ref().is_some_and(|r| r.facts() == &facts) {
            return refreshed.clone();
        }
        let snapshot = Arc::new(CatalogSnapshot::new(facts, previous + 1));
        tracing::info!(
            instance_types = snapshot.offered_types(),
            seq_num = snapshot.seq_num(),
            "refreshed the instance type catalog from EC2"
        );
        *refreshed = Some(Arc::clone(&snapshot));
        self.resolved.clear();
        Some(snapshot)
    }

    /// Every instance type for `settings`, with offerings marked available only where they
    /// can be launched now within `scope`.
    pub fn list(&self, settings: &AllocatableSettings, scope: &LaunchScope) -> Vec<InstanceType> {
        let catalog = self.current();
        let key = fnv1a64(format!("{}/{settings:?}", catalog.seq_num()).as_bytes());
        let resolved = match self.resolved.get(&key) {
            Some(hit) => hit,
            None => {
                let fresh = Arc::new(catalog.instance_types(settings, None));
                self.resolved.insert(key, fresh.clone());
                fresh
            }
        };
        resolved
            .iter()
            .map(|t| {
                let mut t = t.clone();
                for o in &mut t.offerings {
                    o.available = o.available && self.launchable(&t.name, o, scope);
                }
                t
            })
            .collect()
    }

    fn launchable(&self, name: &str, o: &Offering, scope: &LaunchScope) -> bool {
        let Some(subnets) = scope.subnets_by_zone.get(&o.zone) else {
            return false;
        };
        !self
            .unavailable
            .is_unavailable(name, &o.zone, o.capacity_type.as_str(), subnets)
    }

    /// EC2's description of a type, completed with the catalog's bandwidth and VPC limits.
    fn info_from_ec2(&self, t: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<InstanceTypeInfo> {
        let name = t.instance_type()?.as_str().to_owned();
        let embedded = self.catalog.and_then(|c| c.info(&name));
        let network = t.network_info();
        let default_card = network.and_then(|n| {
            let index = n.default_network_card_index().unwrap_or(0);
            n.network_cards()
                .iter()
                .find(|c| c.network_card_index() == Some(index))
                .and_then(|c| c.maximum_network_interfaces())
                .or(n.maximum_network_interfaces())
        });
        let processor = t.processor_info();
        Some(InstanceTypeInfo {
            architectures: processor
                .map(|p| {
                    p.supported_architectures()
                        .iter()
                        .map(|a| a.as_str().to_owned())
                        .collect()
                })
                .unwrap_or_default(),
            vcpus: t
                .v_cpu_info()
                .and_then(|v| v.default_v_cpus())
                .unwrap_or(0)
                .max(0) as u32,
            memory_mib: t
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .unwrap_or(0)
                .max(0) as u64,
            hypervisor: t
                .hypervisor()
                .map(|h| h.as_str().to_owned())
                .unwrap_or_default(),
            cpu_manufacturer: processor.and_then(|p| p.manufacturer()).map(str::to_owned),
            sustained_clock_speed_ghz: processor.and_then(|p| p.sustained_clock_speed_in_ghz()),
            ebs_optimized_support: t
                .ebs_info()
                .and_then(|e| e.ebs_optimized_support())
                .map(|s| s.as_str().to_owned()),
            ebs_maximum_bandwidth_mbps: t
                .ebs_info()
                .and_then(|e| e.ebs_optimized_info())
                .and_then(|o| o.maximum_bandwidth_in_mbps())
                .map(|b| b.max(0) as u64),
            encryption_in_transit_supported: network
                .and_then(|n| n.encryption_in_transit_supported())
                .unwrap_or(false),
            default_network_card_max_interfaces: default_card.unwrap_or(0).max(0) as u32,
            ipv4_addresses_per_interface: network
                .and_then(|n| n.ipv4_addresses_per_interface())
                .unwrap_or(0)
                .max(0) as u32,
            maximum_efa_interfaces: network
                .and_then(|n| n.efa_info())
                .and_then(|e| e.maximum_efa_interfaces())
                .map(|m| m.max(0) as u32),
            usage_classes: t
                .supported_usage_classes()
                .iter()
                .map(|u| u.as_str().to_owned())
                .collect(),
            network_bandwidth_mbps: embedded.and_then(|e| e.network_bandwidth_mbps),
            instance_storage: t.instance_storage_info().map(|s| InstanceStorage {
                total_size_gb: s.total_size_in_gb().map(|g| g.max(0) as u64),
                nvme_support: s
                    .nvme_support()
                    .map(|n| n.as_str().to_owned())
                    .unwrap_or_default(),
            }),
            gpus: t
                .gpu_info()
                .map(|g| {
                    g.gpus()
                        .iter()
                        .map(|d| Gpu {
                            name: d.name().unwrap_or_default().to_owned(),
                            manufacturer: d.manufacturer().unwrap_or_default().to_owned(),
                            count: d.count().unwrap_or(0).max(0) as u32,
                            memory_mib: d
                                .memory_info()
                                .and_then(|m| m.size_in_mib())
                                .unwrap_or(0)
                                .max(0) as u64,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            inference_accelerators: t
                .inference_accelerator_info()
                .map(|a| {
                    a.accelerators()
                        .iter()
                        .map(|d| Accelerator {
                            name: d.name().unwrap_or_default().to_owned(),
                            manufacturer: d.manufacturer().unwrap_or_default().to_owned(),
                            count: d.count().unwrap_or(0).max(0) as u32,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            neuron_devices: t
                .neuron_info()
                .map(|n| {
                    n.neuron_devices()
                        .iter()
                        .map(|d| NeuronDevice {
                            name: d.name().unwrap_or_default().to_owned(),
                            count: d.count().unwrap_or(0).max(0) as u32,
                            core_count: d.core_info().and_then(|c| c.count()).unwrap_or(0).max(0)
                                as u32,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            vpc: embedded.and_then(|e| e.vpc.clone()),
            name,
        })
    }

    /// The zones where any type is offered (for validating subnets).
    pub fn offered_zones(&self) -> BTreeSet<String> {
        self.current()
            .facts()
            .offered
            .values()
            .flatten()
            .cloned()
            .collect()
    }
}
