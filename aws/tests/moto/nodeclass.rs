//! EC2NodeClass status resolution against moto: resolved subnets, security groups, AMIs and
//! instance profile, and conditions that say what is wrong.

use crate::support::*;
use kerf::api::{ConditionStatus, EC2NodeClass, EC2NodeClassStatus};
use kerf_aws::ami::AmiProvider;
use kerf_aws::clients::AwsClients;
use kerf_aws::instanceprofile::InstanceProfileProvider;
use kerf_aws::nodeclass::NodeClassResolver;
use kerf_aws::placementgroup::PlacementGroupProvider;
use kerf_aws::securitygroup::SecurityGroupProvider;
use kerf_aws::ssm::SsmProvider;
use kerf_aws::subnet::SubnetProvider;
use std::sync::Arc;

pub fn resolver(c: &AwsClients, cluster: &str) -> NodeClassResolver {
    NodeClassResolver {
        subnets: Arc::new(SubnetProvider::new(c.ec2.clone())),
        security_groups: Arc::new(SecurityGroupProvider::new(c.ec2.clone())),
        amis: Arc::new(AmiProvider::new(
            c.ec2.clone(),
            Arc::new(SsmProvider::new(c.ssm.clone())),
        )),
        instance_profiles: Arc::new(InstanceProfileProvider::new(c.iam.clone(), cluster, REGION)),
        capacity_reservations: None,
        placement_groups: Arc::new(PlacementGroupProvider::new(c.ec2.clone())),
        kubernetes_version: "1.31".into(),
    }
}

pub fn node_class(name: &str, spec: serde_json::Value) -> EC2NodeClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "generation": 3},
        "spec": spec,
    }))
    .expect("a valid EC2NodeClass")
}

pub fn condition<'a>(status: &'a EC2NodeClassStatus, type_: &str) -> &'a kerf::api::Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("condition {type_} in {:#?}", status.conditions))
}

#[tokio::test]
async fn a_valid_node_class_resolves_and_is_ready() {
    let c = clients().await;
    let cluster = unique("cluster");
    let vpc = vpc().await;
    let subnet_id = subnet(&vpc, "us-east-1a", 1, &[("discovery", &cluster)]).await;
    let sg = security_group(&vpc, &unique("nodes"), &[("discovery", &cluster)]).await;
    let ami = image(
        &unique("node"),
        "arm64",
        "2024-04-01T00:00:00Z",
        &[("discovery", &cluster)],
    )
    .await;
    let role = unique("KarpenterNodeRole");
    setup_clients()
        .await
        .iam
        .create_role()
        .role_name(&role)
        .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[]}"#)
        .send()
        .await
        .expect("CreateRole");
    let nc = node_class(
        "default",
        serde_json::json!({
            "role": role,
            "amiFamily": "AL2023",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"tags": {"discovery": cluster}}],
        }),
    );
    let r = resolver(&c, &cluster);
    let status = r.resolve(&nc).await;
    assert_eq!(status.subnets.len(), 1);
    assert_eq!(status.subnets[0].id, subnet_id);
    assert_eq!(status.subnets[0].zone, "us-east-1a");
    assert_eq!(status.security_groups[0].id, sg);
    assert_eq!(status.amis[0].id, ami);
    let profile = status
        .instance_profile
        .clone()
        .expect("an instance profile");
    assert!(profile.starts_with(&format!("{cluster}_")));
    for t in [
        "SubnetsReady",
        "SecurityGroupsReady",
        "AMIsReady",
        "InstanceProfileReady",
        "ValidationSucceeded",
        "Ready",
    ] {
        assert_eq!(
            condition(&status, t).status,
            ConditionStatus::True,
            "{t}: {}",
            condition(&status, t).message
        );
        assert_eq!(condition(&status, t).observed_generation, Some(3));
    }
    let attached = c
        .iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attached.instance_profile().unwrap().roles()[0].role_name(),
        role
    );

    // Resolving again keeps the profile (and the transition times of unchanged conditions).
    let mut nc2 = nc.clone();
    nc2.status = Some(status.clone());
    let again = r.resolve(&nc2).await;
    assert_eq!(again.instance_profile.as_deref(), Some(profile.as_str()));
    assert_eq!(
        condition(&again, "Ready").last_transition_time,
        condition(&status, "Ready").last_transition_time
    );

    r.instance_profiles.delete("default").await.unwrap();
    assert!(
        c.iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
            .is_err()
    );
}

#[tokio::test]
async fn unmatched_selectors_say_what_to_fix() {
    let c = clients().await;
    let cluster = unique("cluster");
    let nc = node_class(
        "broken",
        serde_json::json!({
            "instanceProfile": "no-such-profile",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"alias": "al2@latest"}],
            "tags": {"karpenter.sh/nodepool": "spoofed"},
        }),
    );
    let mut r = resolver(&c, &cluster);
    r.kubernetes_version = "1.33".into();
    let status = r.resolve(&nc).await;
    let expect = |t: &str, reason: &str, needle: &str| {
        let cond = condition(&status, t);
        assert_eq!(cond.status, ConditionStatus::False, "{t}");
        assert_eq!(cond.reason, reason, "{t}");
        assert!(cond.message.contains(needle), "{t}: {}", cond.message);
    };
    expect(
        "SubnetsReady",
        "SubnetsNotFound",
        "SubnetSelector did not match any Subnets",
    );
    expect(
        "SecurityGroupsReady",
        "SecurityGroupsNotFound",
        "SecurityGroupSelector did not match any SecurityGroups",
    );
    expect(
        "AMIsReady",
        "UnsupportedAlias",
        "no longer supported on EKS 1.33+",
    );
    expect(
        "InstanceProfileReady",
        "InstanceProfileNotFound",
        "no-such-profile",
    );
    expect(
        "ValidationSucceeded",
        "TagValidationFailed",
        "karpenter.sh/nodepool",
    );
    expect("Ready", "UnhealthyDependents", "SubnetsReady=False");
    assert!(
        status.subnets.is_empty() && status.amis.is_empty() && status.instance_profile.is_none()
    );
}

/// A role name longer than IAM allows is said as such, before any IAM call: no instance
/// profile is made, and the class is not Ready.
#[tokio::test]
async fn a_role_name_longer_than_iam_allows_is_named_on_the_node_class() {
    let c = clients().await;
    let cluster = unique("cluster");
    let nc = node_class(
        "long-role",
        serde_json::json!({
            "role": format!("KarpenterNodeRole-{}", "a-very-long-cluster-name-".repeat(3)),
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
        }),
    );
    let status = resolver(&c, &cluster).resolve(&nc).await;
    let profile = condition(&status, "InstanceProfileReady");
    assert_eq!(
        (profile.status, profile.reason.as_str()),
        (ConditionStatus::False, "RoleNameTooLong")
    );
    assert!(
        profile
            .message
            .contains(kerf::troubleshooting::documented("role-too-long")),
        "{}",
        profile.message
    );
    assert!(status.instance_profile.is_none());
    assert_eq!(condition(&status, "Ready").status, ConditionStatus::False);
}
