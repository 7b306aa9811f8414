//! Subnet discovery and the choice of subnet per zone at launch. Discovery runs the selector
//! terms' filter sets through DescribeSubnets (cached for a minute per selector). At launch,
//! each zone gets the subnet with the most free addresses, counting addresses already
//! promised to launches in flight (as upstream, a launch reserves the smallest max-pods of
//! its candidate instance types) so concurrent launches spread over subnets instead of all
//! draining the same one.

use crate::cache::TtlCache;
use crate::errors::ApiError;
use crate::selectors::{SelectorTerm, subnet_filter_sets, terms_key};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

const SUBNET_CACHE_TTL: Duration = Duration::from_secs(60);

/// A discovered subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubnetInfo {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub vpc_id: Option<String>,
    pub available_ip_count: i32,
    pub tags: BTreeMap<String, String>,
}

/// Finds subnets and tracks their free addresses across launches.
pub struct SubnetProvider {
    ec2: aws_sdk_ec2::Client,
    cache: TtlCache<String, Vec<SubnetInfo>>,
    /// Free addresses per subnet: the last count EC2 reported minus launches in flight.
    free_ips: Mutex<HashMap<String, i32>>,
}

impl SubnetProvider {
    pub fn new(ec2: aws_sdk_ec2::Client) -> Self {
        Self {
            ec2,
            cache: TtlCache::new(SUBNET_CACHE_TTL),
            free_ips: Mutex::new(HashMap::new()),
        }
    }

    /// The subnets selected by `terms`, sorted by id; empty when there are no terms.
    pub async fn list(&self, terms: &[SelectorTerm]) -> Result<Vec<SubnetInfo>, ApiError> {
        let key = terms_key(terms);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let mut found: BTreeMap<String, SubnetInfo> = BTreeMap::new();
        for filters in subnet_filter_sets(terms) {
            let mut pages = self
                .ec2
                .describe_subnets()
                .set_filters(Some(filters))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| ApiError::from_sdk("DescribeSubnets", e))?;
                for subnet in page.subnets() {
                    if let Some(info) = subnet_info(subnet) {
                        found.insert(info.id.clone(), info);
                    }
                }
            }
        }
        let subnets: Vec<SubnetInfo> = found.into_values().collect();
        self.record_free_ips(&subnets);
        self.cache.insert(key, subnets.clone());
        Ok(subnets)
    }

    fn lock_free_ips(&self) -> std::sync::MutexGuard<'_, HashMap<String, i32>> {
        self.free_ips.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh count from EC2 replaces whatever launches in flight had reserved.
    fn record_free_ips(&self, subnets: &[SubnetInfo]) {
        let mut free = self.lock_free_ips();
        for s in subnets {
            free.insert(s.id.clone(), s.available_ip_count);
        }
    }

    /// Per zone, the candidate subnet with the most free addresses; each chosen subnet's
    /// count is reduced by `reserve(zone)` addresses for the launch about to happen.
    pub fn zonal_subnets_for_launch(
        &self,
        candidates: &[SubnetInfo],
        reserve: impl Fn(&str) -> i32,
    ) -> BTreeMap<String, SubnetInfo> {
        let mut free = self.lock_free_ips();
        let mut chosen: BTreeMap<String, SubnetInfo> = BTreeMap::new();
        for subnet in candidates {
            let ips = *free
                .entry(subnet.id.clone())
                .or_insert(subnet.available_ip_count);
            let better = chosen
                .get(&subnet.zone)
                .is_none_or(|current| ips > free.get(&current.id).copied().unwrap_or(0));
            if better {
                let mut pick = subnet.clone();
                pick.available_ip_count = ips;
                chosen.insert(subnet.zone.clone(), pick);
            }
        }
        for subnet in chosen.values() {
            if let Some(ips) = free.get_mut(&subnet.id) {
                *ips -= reserve(&subnet.zone);
            }
        }
        chosen
    }

    /// Gives back the addresses reserved in subnets the launch did not use.
    pub fn release_reserved(&self, subnet_id: &str, ips: i32) {
        if let Some(count) = self.lock_free_ips().get_mut(subnet_id) {
            *count += ips;
        }
    }

    /// A subnet EC2 reported out of addresses counts as empty until rediscovered.
    pub fn mark_exhausted(&self, subnet_id: &str) {
        self.lock_free_ips().insert(subnet_id.to_owned(), 0);
    }

    /// Forgets cached selections (after the node class changed).
    pub fn invalidate(&self) {
        self.cache.clear();
    }
}

fn subnet_info(subnet: &aws_sdk_ec2::types::Subnet) -> Option<SubnetInfo> {
    Some(SubnetInfo {
        id: subnet.subnet_id()?.to_owned(),
        zone: subnet.availability_zone()?.to_owned(),
        zone_id: subnet.availability_zone_id().map(str::to_owned),
        vpc_id: subnet.vpc_id().map(str::to_owned),
        available_ip_count: subnet.available_ip_address_count().unwrap_or(0),
        tags: crate::tags::from_ec2(subnet.tags()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, zone: &str, ips: i32) -> SubnetInfo {
        SubnetInfo {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
            vpc_id: None,
            available_ip_count: ips,
            tags: BTreeMap::new(),
        }
    }

    fn provider() -> SubnetProvider {
        let conf = aws_sdk_ec2::Config::builder()
            .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
            .build();
        SubnetProvider::new(aws_sdk_ec2::Client::from_conf(conf))
    }

    #[test]
    fn picks_the_freest_subnet_per_zone_and_spreads_launches() {
        let p = provider();
        let candidates = [
            subnet("a1", "us-east-1a", 100),
            subnet("a2", "us-east-1a", 90),
            subnet("b1", "us-east-1b", 10),
        ];
        let first = p.zonal_subnets_for_launch(&candidates, |_| 20);
        assert_eq!(first["us-east-1a"].id, "a1");
        assert_eq!(first["us-east-1b"].id, "b1");
        // a1 now has 80 free against a2's 90: the next launch goes to a2.
        let second = p.zonal_subnets_for_launch(&candidates, |_| 20);
        assert_eq!(second["us-east-1a"].id, "a2");
        p.release_reserved("a2", 20);
        p.mark_exhausted("a1");
        let third = p.zonal_subnets_for_launch(&candidates, |_| 20);
        assert_eq!(third["us-east-1a"].id, "a2");
        assert_eq!(third["us-east-1a"].available_ip_count, 90);
    }
}
