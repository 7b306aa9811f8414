//! The placement group an EC2NodeClass's `placementGroupSelector` names (by id or name),
//! resolved with DescribePlacementGroups filtered to `state=available`, as upstream. The
//! answer (found or not) is reused for [`PLACEMENT_GROUP_CACHE_TTL`]; a failed call is not
//! cached. The node class resolver reports it as `PlacementGroupReady`, the launch puts the
//! group (and a partition the NodeClaim asks for) in the launch template's placement, and
//! drift compares a NodeClaim's `karpenter.k8s.aws/placement-group-id` label with it.

use crate::cache::TtlCache;
use crate::errors::ApiError;
use crate::selectors::filter;
use kerf::api::ec2nodeclass::PlacementGroupSelector;
use std::time::Duration;

/// How long one selector's answer is reused: upstream's placement group cache TTL (a
/// minute), so a group created, deleted or renamed is seen within it.
pub const PLACEMENT_GROUP_CACHE_TTL: Duration = Duration::from_secs(60);

/// `cluster`, `partition` or `spread`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Cluster,
    Partition,
    Spread,
    /// A strategy EC2 added that kerf does not know: placed, never partitioned.
    Other,
}

impl Strategy {
    fn parse(s: &str) -> Self {
        match s {
            "cluster" => Strategy::Cluster,
            "partition" => Strategy::Partition,
            "spread" => Strategy::Spread,
            _ => Strategy::Other,
        }
    }
}

/// A resolved placement group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementGroup {
    pub id: String,
    pub name: String,
    pub strategy: Strategy,
    /// Partitions of a partition group (0 otherwise).
    pub partition_count: i32,
}

/// Resolves placement group selectors.
pub struct PlacementGroupProvider {
    ec2: aws_sdk_ec2::Client,
    cache: TtlCache<String, Option<PlacementGroup>>,
}

impl PlacementGroupProvider {
    pub fn new(ec2: aws_sdk_ec2::Client) -> Self {
        Self {
            ec2,
            cache: TtlCache::new(PLACEMENT_GROUP_CACHE_TTL),
        }
    }

    /// The available group `selector` names, `None` when none matches (or no selector).
    pub async fn get(
        &self,
        selector: Option<&PlacementGroupSelector>,
    ) -> Result<Option<PlacementGroup>, ApiError> {
        let Some(selector) = selector else {
            return Ok(None);
        };
        let key = format!("{:?}/{:?}", selector.id, selector.name);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let mut request = self
            .ec2
            .describe_placement_groups()
            .filters(filter("state", ["available".to_owned()]));
        if let Some(id) = &selector.id {
            request = request.group_ids(id);
        } else if let Some(name) = &selector.name {
            request = request.group_names(name);
        } else {
            return Ok(None);
        }
        let found = match request.send().await {
            Ok(out) => out.placement_groups().first().and_then(placement_group),
            Err(e) => {
                let err = ApiError::from_sdk("DescribePlacementGroups", e);
                // EC2 answers an unknown id or name with an error, not an empty list.
                if err.is_not_found() || is_unknown_group(&err) {
                    None
                } else {
                    return Err(err);
                }
            }
        };
        self.cache.insert(key, found.clone());
        Ok(found)
    }
}

fn is_unknown_group(err: &ApiError) -> bool {
    matches!(
        err.code.as_deref(),
        Some("InvalidPlacementGroup.Unknown" | "InvalidGroupId.Malformed")
    )
}

fn placement_group(g: &aws_sdk_ec2::types::PlacementGroup) -> Option<PlacementGroup> {
    Some(PlacementGroup {
        id: g.group_id()?.to_owned(),
        name: g.group_name().unwrap_or_default().to_owned(),
        strategy: Strategy::parse(g.strategy().map(|s| s.as_str()).unwrap_or_default()),
        partition_count: g.partition_count().unwrap_or(0),
    })
}

/// What the selector names, for messages: its name, else its id.
pub fn selector_text(selector: &PlacementGroupSelector) -> &str {
    selector
        .name
        .as_deref()
        .or(selector.id.as_deref())
        .unwrap_or_default()
}

/// The partition a launch into `group` targets: the lowest the NodeClaim's
/// `karpenter.k8s.aws/placement-group-partition` requirement allows (EC2 takes one), only
/// for a partition group; `None` leaves the choice to EC2.
pub fn partition_for(group: &PlacementGroup, allowed: &[String]) -> Option<i32> {
    if group.strategy != Strategy::Partition {
        return None;
    }
    allowed.iter().filter_map(|v| v.parse::<i32>().ok()).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(strategy: Strategy) -> PlacementGroup {
        PlacementGroup {
            id: "pg-1".into(),
            name: "train".into(),
            strategy,
            partition_count: 3,
        }
    }

    #[test]
    fn only_partition_groups_take_the_lowest_allowed_partition() {
        let allowed = ["3".to_owned(), "2".to_owned(), "x".to_owned()];
        assert_eq!(
            partition_for(&group(Strategy::Partition), &allowed),
            Some(2)
        );
        assert_eq!(partition_for(&group(Strategy::Partition), &[]), None);
        assert_eq!(partition_for(&group(Strategy::Cluster), &allowed), None);
        assert_eq!(Strategy::parse("spread"), Strategy::Spread);
        assert_eq!(Strategy::parse("new"), Strategy::Other);
    }
}
