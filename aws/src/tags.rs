//! The EC2 tags kerf puts on what it launches and reads back to find it. Instances, volumes,
//! fleets and launch templates carry the NodePool, EC2NodeClass and cluster tags (the
//! NodeClaim tag on instances too), which is how Get/List/garbage collection find them and
//! how the EKS console attributes them. Users' `spec.tags` are kept except where they would
//! overwrite one of these keys, which upstream's API validation forbids anyway.

use kerf::labels;
use std::collections::BTreeMap;

/// `eks:eks-cluster-name`: the cluster an instance belongs to.
pub const EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
/// `karpenter.sh/nodeclaim`: the NodeClaim an instance was launched for.
pub const NODECLAIM: &str = "karpenter.sh/nodeclaim";
/// `Name`: set to the node name once the node registers.
pub const NAME: &str = "Name";
/// `karpenter.sh/nodepool` and `karpenter.k8s.aws/ec2nodeclass`, the same keys as the labels.
pub const NODEPOOL: &str = labels::NODEPOOL;
pub const EC2NODECLASS: &str = labels::EC2NODECLASS;

/// `kubernetes.io/cluster/<name>`.
pub fn cluster_ownership_key(cluster_name: &str) -> String {
    format!("kubernetes.io/cluster/{cluster_name}")
}

/// Whether a user tag key is one kerf owns (and so may not be set in `spec.tags`).
pub fn is_restricted(key: &str) -> bool {
    if let Some(cluster) = key.strip_prefix("kubernetes.io/cluster/") {
        let mut chars = cluster.chars();
        return chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    }
    [NODEPOOL, EKS_CLUSTER_NAME, EC2NODECLASS, NODECLAIM].contains(&key)
}

/// The tags of everything launched for a NodePool through an EC2NodeClass: the user's
/// tags, then kerf's own (which win).
pub fn launch_tags(
    cluster_name: &str,
    node_pool: &str,
    node_class: &str,
    user_tags: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut tags: BTreeMap<String, String> = user_tags
        .iter()
        .filter(|(k, _)| !is_restricted(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    tags.insert(cluster_ownership_key(cluster_name), "owned".to_owned());
    tags.insert(NODEPOOL.to_owned(), node_pool.to_owned());
    tags.insert(EKS_CLUSTER_NAME.to_owned(), cluster_name.to_owned());
    tags.insert(EC2NODECLASS.to_owned(), node_class.to_owned());
    tags
}

pub fn from_ec2(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_owned(),
                t.value().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
}

pub fn to_ec2(tags: &BTreeMap<String, String>) -> Vec<aws_sdk_ec2::types::Tag> {
    tags.iter()
        .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kerf_tags_win_over_user_tags() {
        let user = BTreeMap::from([
            ("team".to_owned(), "data".to_owned()),
            ("karpenter.sh/nodepool".to_owned(), "spoofed".to_owned()),
            ("kubernetes.io/cluster/other".to_owned(), "owned".to_owned()),
        ]);
        let tags = launch_tags("demo", "default", "nodes", &user);
        assert_eq!(tags["team"], "data");
        assert_eq!(tags["karpenter.sh/nodepool"], "default");
        assert_eq!(tags["kubernetes.io/cluster/demo"], "owned");
        assert_eq!(tags["eks:eks-cluster-name"], "demo");
        assert_eq!(tags["karpenter.k8s.aws/ec2nodeclass"], "nodes");
        assert!(!tags.contains_key("kubernetes.io/cluster/other"));
    }

    #[test]
    fn restricted_keys() {
        assert!(is_restricted("karpenter.sh/nodeclaim"));
        assert!(is_restricted("kubernetes.io/cluster/my-cluster_1"));
        assert!(!is_restricted("kubernetes.io/cluster/"));
        assert!(!is_restricted("team"));
    }
}
