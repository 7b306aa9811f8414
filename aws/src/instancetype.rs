//! Instance types and their offerings as EC2 reports them now. DescribeInstanceTypes and
//! DescribeInstanceTypeOfferings (refreshed at start-up and every 12 hours) replace the
//! embedded catalog's facts and zones where they answer; the catalog still supplies what EC2
//! does not report (network bandwidth, VPC limits) and stands in until the first refresh.
//! Types are resolved per allocatable settings and subnet zones and cached for five
//! minutes; every listing then marks offerings unavailable that have no price, no subnet in
//! their zone, or a recent launch failure in the unavailable-offerings cache.

use crate::cache::TtlCache;
use crate::errors::ApiError;
use crate::launchtemplate::fnv1a64;
use crate::pricing::PricingProvider;
use crate::selectors::filter;
use crate::unavailable::UnavailableOfferings;
use aws_sdk_ec2::types::LocationType;
use kerf::catalog::{
    Accelerator, AllocatableSettings, CapacityType, Catalog, Gpu, InstanceStorage, InstanceType,
    InstanceTypeInfo, NeuronDevice, Offering,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long resolved instance types are reused for one configuration.
pub const INSTANCE_TYPES_CACHE_TTL: Duration = Duration::from_secs(300);
/// How often EC2's instance-type facts and offerings are refreshed.
pub const INSTANCE_TYPES_REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);

/// Zone name → zone id.
type Zones = BTreeMap<String, String>;

/// Resolves instance types with live EC2 facts, prices and availability.
pub struct InstanceTypeProvider {
    ec2: aws_sdk_ec2::Client,
    region: String,
    catalog: Option<Catalog>,
    pricing: Arc<PricingProvider>,
    unavailable: Arc<dyn UnavailableOfferings>,
    live_infos: RwLock<Option<Arc<Vec<InstanceTypeInfo>>>>,
    live_zones: RwLock<Option<Arc<BTreeMap<String, Zones>>>>,
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
        Self {
            ec2,
            region: region.to_owned(),
            catalog: Catalog::embedded(region).ok(),
            pricing,
            unavailable,
            live_infos: RwLock::new(None),
            live_zones: RwLock::new(None),
            resolved: TtlCache::new(INSTANCE_TYPES_CACHE_TTL),
        }
    }

    /// Refreshes instance-type facts from DescribeInstanceTypes; returns how many types.
    pub async fn update_instance_types(&self) -> Result<usize, ApiError> {
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
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let count = infos.len();
        *self.live_infos.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(infos));
        self.resolved.clear();
        tracing::debug!(count, "updated instance types from EC2");
        Ok(count)
    }

    /// Refreshes the zones offering each type from DescribeInstanceTypeOfferings.
    pub async fn update_offerings(&self) -> Result<usize, ApiError> {
        let zone_ids: BTreeMap<String, String> = self
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
        let mut zones: BTreeMap<String, Zones> = BTreeMap::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| ApiError::from_sdk("DescribeInstanceTypeOfferings", e))?;
            for o in page.instance_type_offerings() {
                let (Some(t), Some(zone)) = (o.instance_type(), o.location()) else {
                    continue;
                };
                let id = zone_ids.get(zone).cloned().unwrap_or_default();
                zones
                    .entry(t.as_str().to_owned())
                    .or_default()
                    .insert(zone.to_owned(), id);
            }
        }
        let count = zones.len();
        *self.live_zones.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(zones));
        self.resolved.clear();
        Ok(count)
    }

    /// Refreshes facts, offerings and prices, logging (not failing on) each part's error
    /// so one unreachable API does not stop the others.
    pub async fn refresh(&self) {
        if let Err(e) = self.update_instance_types().await {
            tracing::error!(error = %e, "refreshing instance types failed; keeping the previous ones");
        }
        if let Err(e) = self.update_offerings().await {
            tracing::error!(error = %e, "refreshing instance type offerings failed; keeping the previous ones");
        }
        if let Err(e) = self.pricing.update_on_demand().await {
            let age = self.pricing.on_demand_age();
            tracing::warn!("{}", crate::pricing::on_demand_failure_message(&e, age));
        }
        if let Err(e) = self.pricing.update_spot().await {
            tracing::warn!(error = %e, "refreshing spot prices failed; keeping the previous ones");
        }
        self.resolved.clear();
    }

    /// Every instance type for `settings`, with offerings marked available only where they
    /// can be launched now within `scope`.
    pub fn list(&self, settings: &AllocatableSettings, scope: &LaunchScope) -> Vec<InstanceType> {
        let key = fnv1a64(format!("{settings:?}").as_bytes());
        let resolved = match self.resolved.get(&key) {
            Some(hit) => hit,
            None => {
                let fresh = Arc::new(self.resolve_all(settings));
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

    fn resolve_all(&self, settings: &AllocatableSettings) -> Vec<InstanceType> {
        let infos: Vec<InstanceTypeInfo> = match self
            .live_infos
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(live) => live.as_ref().clone(),
            None => self
                .catalog
                .map(|c| c.infos().cloned().collect())
                .unwrap_or_default(),
        };
        infos
            .iter()
            .filter_map(|info| {
                InstanceType::resolve(info, &self.region, self.offerings(info), settings)
            })
            .collect()
    }

    fn zones_of(&self, name: &str) -> Zones {
        if let Some(live) = self
            .live_zones
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            return live.get(name).cloned().unwrap_or_default();
        }
        self.catalog
            .map(|c| {
                c.offerings(name)
                    .into_iter()
                    .map(|o| (o.zone, o.zone_id))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// On-demand and spot offerings per zone offering the type, priced; without a price an
    /// offering is unavailable, as upstream.
    fn offerings(&self, info: &InstanceTypeInfo) -> Vec<Offering> {
        let mut offerings = Vec::new();
        for (zone, zone_id) in self.zones_of(&info.name) {
            for capacity_type in [CapacityType::OnDemand, CapacityType::Spot] {
                if !info.supports_usage_class(capacity_type.as_str()) {
                    continue;
                }
                let price = match capacity_type {
                    CapacityType::Spot => self.pricing.spot_price(&info.name, &zone),
                    _ => self.pricing.on_demand_price(&info.name),
                };
                offerings.push(Offering {
                    zone: zone.clone(),
                    zone_id: zone_id.clone(),
                    capacity_type,
                    price: price.unwrap_or(0.0),
                    available: price.is_some(),
                });
            }
        }
        offerings
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
        match self
            .live_zones
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(live) => live.values().flat_map(|z| z.keys().cloned()).collect(),
            None => self
                .catalog
                .map(|c| c.zones().iter().map(|z| z.name.clone()).collect())
                .unwrap_or_default(),
        }
    }
}
