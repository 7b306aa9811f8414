//! The simulated region's network, as an EKS cluster's VPC looks to an EC2NodeClass: one
//! private subnet per zone the catalog sells in, and two security groups (the node group
//! and the group EKS creates for the cluster), each tagged the way `eksctl` and the
//! Karpenter getting-started guide tag them, so the usual selectors
//! (`karpenter.sh/discovery: <cluster>`) find them and others do not.
//!
//! Selector terms select as EC2's `Describe*` filters do for the AWS provider: the terms of
//! a list are alternatives; within a term `id`, `name` and every tag must all match; a tag
//! value of `"*"` asks only that the key be present (EC2's `tag-key` filter), any other
//! value is matched with AWS's wildcards ([`kerf::wildcard::matches`]); a term that sets
//! nothing selects nothing (the CRD refuses such a term).

use std::collections::BTreeMap;

use kerf::api::ec2nodeclass::{
    SecurityGroup, SecurityGroupSelectorTerm, Subnet, SubnetSelectorTerm,
};
use kerf::api::nodeclass_hash::fnv1a64;
use kerf::wildcard;

use super::provider::tags;

/// The tag the Karpenter guides put on the subnets and security groups nodes use.
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";

type Tags = BTreeMap<String, String>;

/// The simulated subnet of `zone`.
pub fn subnet_id(zone: &str) -> String {
    format!("subnet-{:017x}", fnv1a64(zone.as_bytes()) >> 4)
}

/// The simulated node security group of a cluster.
pub fn security_group_id(cluster: &str) -> String {
    format!("sg-{:017x}", fnv1a64(cluster.as_bytes()) >> 4)
}

/// The security group EKS creates for a cluster (control plane and nodes).
fn cluster_security_group_id(cluster: &str) -> String {
    format!(
        "sg-{:017x}",
        fnv1a64(format!("eks-cluster-sg-{cluster}").as_bytes()) >> 4
    )
}

/// The subnets and security groups of a cluster's VPC in the simulated region.
pub struct Network {
    subnets: Vec<(Subnet, Tags)>,
    security_groups: Vec<(SecurityGroup, Tags)>,
}

fn tags_of(pairs: &[(&str, &str)]) -> Tags {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Network {
    /// `zones` as `(name, id)`, as the catalog sells in them.
    pub fn new(cluster: &str, zones: Vec<(String, String)>) -> Self {
        let ownership = tags::cluster_ownership(cluster);
        let subnets = zones
            .into_iter()
            .map(|(zone, zone_id)| {
                let name = format!("{cluster}-private-{zone}");
                let tags = tags_of(&[
                    (DISCOVERY_TAG, cluster),
                    ("Name", &name),
                    (&ownership, "shared"),
                    ("kubernetes.io/role/internal-elb", "1"),
                ]);
                let subnet = Subnet {
                    id: subnet_id(&zone),
                    zone,
                    zone_id: Some(zone_id),
                };
                (subnet, tags)
            })
            .collect();
        let node_group = format!("{cluster}-nodes");
        let cluster_group = format!("eks-cluster-sg-{cluster}");
        let security_groups = vec![
            (
                SecurityGroup {
                    id: security_group_id(cluster),
                    name: Some(node_group.clone()),
                },
                tags_of(&[
                    (DISCOVERY_TAG, cluster),
                    ("Name", &node_group),
                    (&ownership, "owned"),
                ]),
            ),
            (
                SecurityGroup {
                    id: cluster_security_group_id(cluster),
                    name: Some(cluster_group.clone()),
                },
                tags_of(&[
                    ("aws:eks:cluster-name", cluster),
                    ("Name", &cluster_group),
                    (&ownership, "owned"),
                ]),
            ),
        ];
        Self {
            subnets,
            security_groups,
        }
    }

    /// The subnets any of `terms` selects, in zone order.
    pub fn subnets(&self, terms: &[SubnetSelectorTerm]) -> Vec<Subnet> {
        self.subnets
            .iter()
            .filter(|(subnet, tags)| {
                terms
                    .iter()
                    .any(|t| selects(t.id.as_deref(), None, &t.tags, &subnet.id, None, tags))
            })
            .map(|(subnet, _)| subnet.clone())
            .collect()
    }

    /// The security groups any of `terms` selects, by id.
    pub fn security_groups(&self, terms: &[SecurityGroupSelectorTerm]) -> Vec<SecurityGroup> {
        let mut found: Vec<SecurityGroup> = self
            .security_groups
            .iter()
            .filter(|(group, tags)| {
                terms.iter().any(|t| {
                    let name = group.name.as_deref();
                    selects(
                        t.id.as_deref(),
                        t.name.as_deref(),
                        &t.tags,
                        &group.id,
                        name,
                        tags,
                    )
                })
            })
            .map(|(group, _)| group.clone())
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found
    }
}

/// Whether one selector term (its `id`, `name` and `tags`) selects a resource.
fn selects(
    id: Option<&str>,
    name: Option<&str>,
    wanted: &Tags,
    resource_id: &str,
    resource_name: Option<&str>,
    resource_tags: &Tags,
) -> bool {
    if id.is_none() && name.is_none() && wanted.is_empty() {
        return false;
    }
    let id_ok = id.is_none_or(|id| wildcard::matches(id, resource_id));
    let name_ok = name.is_none_or(|n| resource_name.is_some_and(|r| wildcard::matches(n, r)));
    let tags_ok = wanted.iter().all(|(key, value)| {
        resource_tags
            .get(key)
            .is_some_and(|actual| value == "*" || wildcard::matches(value, actual))
    });
    id_ok && name_ok && tags_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network() -> Network {
        let zones = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, z)| (format!("us-east-1{z}"), format!("use1-az{}", i + 1)))
            .collect();
        Network::new("prod", zones)
    }

    fn subnet_term(json: serde_json::Value) -> Vec<SubnetSelectorTerm> {
        serde_json::from_value(json).expect("terms parse")
    }

    fn group_term(json: serde_json::Value) -> Vec<SecurityGroupSelectorTerm> {
        serde_json::from_value(json).expect("terms parse")
    }

    fn zones(subnets: &[Subnet]) -> Vec<&str> {
        subnets.iter().map(|s| s.zone.as_str()).collect()
    }

    fn names(groups: &[SecurityGroup]) -> Vec<&str> {
        groups.iter().filter_map(|g| g.name.as_deref()).collect()
    }

    #[test]
    fn subnets_are_selected_by_discovery_tag_wildcards_and_ids() {
        let n = network();
        let all = ["us-east-1a", "us-east-1b", "us-east-1c"];
        let by = |terms| zones(&n.subnets(&subnet_term(terms))).join(",");
        assert_eq!(
            by(serde_json::json!([{"tags": {DISCOVERY_TAG: "prod"}}])),
            all.join(",")
        );
        assert_eq!(
            by(serde_json::json!([{"tags": {DISCOVERY_TAG: "staging"}}])),
            ""
        );
        assert_eq!(
            by(serde_json::json!([{"tags": {DISCOVERY_TAG: "*"}}])),
            all.join(",")
        );
        assert_eq!(
            by(serde_json::json!([{"tags": {"team": "*"}}])),
            "",
            "the key must exist"
        );
        assert_eq!(
            by(serde_json::json!([{"tags": {"Name": "*-1b"}}])),
            "us-east-1b"
        );
        assert_eq!(
            by(
                serde_json::json!([{"tags": {"Name": "prod-private-us-east-1?", DISCOVERY_TAG: "prod"}}])
            ),
            all.join(","),
        );
        assert_eq!(
            by(serde_json::json!([{"tags": {"Name": "*-1a", DISCOVERY_TAG: "staging"}}])),
            "",
            "every tag of a term must match"
        );
        assert_eq!(
            by(serde_json::json!([{"id": subnet_id("us-east-1c")}, {"tags": {"Name": "*-1a"}}])),
            "us-east-1a,us-east-1c",
            "terms are alternatives"
        );
        assert_eq!(
            by(serde_json::json!([{"id": "subnet-0123456789abcdef0"}])),
            ""
        );
        assert_eq!(by(serde_json::json!([{}])), "");
    }

    #[test]
    fn security_groups_are_selected_by_tag_name_and_id() {
        let n = network();
        let by = |terms| names(&n.security_groups(&group_term(terms))).join(",");
        assert_eq!(
            by(serde_json::json!([{"tags": {DISCOVERY_TAG: "prod"}}])),
            "prod-nodes"
        );
        assert_eq!(
            by(serde_json::json!([{"tags": {DISCOVERY_TAG: "dev"}}])),
            ""
        );
        let both = n.security_groups(&group_term(serde_json::json!([
            {"tags": {"kubernetes.io/cluster/prod": "*"}}
        ])));
        assert_eq!(both.len(), 2);
        assert_eq!(
            by(serde_json::json!([{"name": "eks-cluster-sg-*"}])),
            "eks-cluster-sg-prod"
        );
        assert_eq!(
            by(serde_json::json!([{"name": "nodes"}])),
            "",
            "names match whole"
        );
        assert_eq!(
            by(
                serde_json::json!([{"name": "prod-nodes", "tags": {"aws:eks:cluster-name": "prod"}}])
            ),
            "",
            "a name and tags must both match"
        );
        assert_eq!(
            by(serde_json::json!([{"id": security_group_id("prod")}])),
            "prod-nodes"
        );
        assert_eq!(by(serde_json::json!([{"id": "sg-0123456789abcdef0"}])), "");
    }
}
