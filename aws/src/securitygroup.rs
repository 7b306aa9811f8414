//! Security group discovery: the selector terms' filter sets (id, name, tags) through
//! DescribeSecurityGroups, unioned, sorted by id and cached for five minutes per selector.

use crate::cache::TtlCache;
use crate::errors::ApiError;
use crate::selectors::{SelectorTerm, security_group_filter_sets, terms_key};
use std::collections::BTreeMap;
use std::time::Duration;

const SECURITY_GROUP_CACHE_TTL: Duration = Duration::from_secs(300);

/// A discovered security group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityGroupInfo {
    pub id: String,
    pub name: Option<String>,
    pub vpc_id: Option<String>,
}

/// Finds security groups by selector terms.
pub struct SecurityGroupProvider {
    ec2: aws_sdk_ec2::Client,
    cache: TtlCache<String, Vec<SecurityGroupInfo>>,
}

impl SecurityGroupProvider {
    pub fn new(ec2: aws_sdk_ec2::Client) -> Self {
        Self {
            ec2,
            cache: TtlCache::new(SECURITY_GROUP_CACHE_TTL),
        }
    }

    /// The security groups selected by `terms`, sorted by id; empty when there are no terms.
    pub async fn list(&self, terms: &[SelectorTerm]) -> Result<Vec<SecurityGroupInfo>, ApiError> {
        let key = terms_key(terms);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let mut found: BTreeMap<String, SecurityGroupInfo> = BTreeMap::new();
        for filters in security_group_filter_sets(terms) {
            let mut pages = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(filters))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| ApiError::from_sdk("DescribeSecurityGroups", e))?;
                for group in page.security_groups() {
                    let Some(id) = group.group_id() else { continue };
                    found.insert(
                        id.to_owned(),
                        SecurityGroupInfo {
                            id: id.to_owned(),
                            name: group.group_name().map(str::to_owned),
                            vpc_id: group.vpc_id().map(str::to_owned),
                        },
                    );
                }
            }
        }
        let groups: Vec<SecurityGroupInfo> = found.into_values().collect();
        self.cache.insert(key, groups.clone());
        Ok(groups)
    }

    pub fn invalidate(&self) {
        self.cache.clear();
    }
}
