//! AMI drift through SSM, against moto: an EC2NodeClass selects its AMI with an
//! `ssmParameter` term (the mechanism behind the EKS aliases, on a parameter name moto lets a
//! test write); an instance is launched with the image the parameter names; a newer image
//! is registered and the parameter pointed at it; once the node class's status is resolved
//! again, the provider reports the launched instance `AMIDrift`, and a new launch uses the
//! new image and is not drifted. The same follows a control-plane upgrade: once the
//! provider's Kubernetes version moves on, an `alias` term resolves to that version's image.

use crate::support::*;
use kerf::api::{EC2NodeClass, NodeClaim};
use kerf::cloudprovider::CloudProvider;
use kerf_aws::cloudprovider::{AwsCloudProvider, InMemoryNodeClasses};
use kerf_aws::unavailable::UnavailableOfferingsCache;
use std::sync::Arc;

async fn point(c: &kerf_aws::clients::AwsClients, parameter: &str, image: &str) {
    c.ssm
        .put_parameter()
        .name(parameter)
        .value(image)
        .overwrite(true)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .expect("PutParameter");
}

fn provider(
    c: &kerf_aws::clients::AwsClients,
    settings: kerf_aws::cloudprovider::AwsSettings,
    store: &Arc<InMemoryNodeClasses>,
) -> AwsCloudProvider {
    AwsCloudProvider::new(
        c.clone(),
        settings,
        store.clone(),
        Arc::new(UnavailableOfferingsCache::default()),
    )
}

/// EC2NodeClass `default`: AL2023, the cluster's subnets and security groups, `ami_term`.
fn al2023_class(role: &str, cluster: &str, ami_term: serde_json::Value) -> EC2NodeClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": role,
            "amiFamily": "AL2023",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [ami_term],
        },
    }))
    .expect("a valid EC2NodeClass")
}

fn claim(name: &str) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
            ],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
    }))
    .expect("a valid NodeClaim")
}

#[tokio::test]
async fn a_new_image_behind_the_ssm_parameter_drifts_launched_instances() {
    let c = crate::iam_policy::provider_clients_allowing(&[crate::iam_policy::OWN_SSM_PARAMETERS])
        .await;
    let cluster = unique("cluster");
    let vpc = vpc().await;
    subnet(&vpc, "us-east-1a", 1, &[("discovery", &cluster)]).await;
    security_group(&vpc, &unique("nodes"), &[("discovery", &cluster)]).await;
    let old = image(&unique("node-old"), "x86_64", "2024-01-01T00:00:00Z", &[]).await;
    let parameter = format!("/kerf-tests/{}/image_id", unique("drift"));
    point(&setup_clients().await, &parameter, &old).await;
    let role = node_role().await;
    let store = Arc::new(InMemoryNodeClasses::default());
    let p = provider(&c, provider_settings(&cluster), &store);
    let mut node_class = al2023_class(
        &role,
        &cluster,
        serde_json::json!({"ssmParameter": parameter}),
    );
    node_class.status = Some(p.node_class_resolver().resolve(&node_class).await);
    assert!(
        node_class.is_condition_true("Ready"),
        "{:#?}",
        node_class.status
    );
    store.put(node_class.clone());

    let launched = p.create(&claim("default-a")).await.expect("launch");
    let status = launched.status.clone().expect("status");
    assert_eq!(status.image_id.as_deref(), Some(old.as_str()));
    assert_eq!(p.is_drifted(&launched).await.expect("drift check"), None);

    // A new image behind the parameter: the resolved status follows, the instance drifts.
    let new = image(&unique("node-new"), "x86_64", "2024-06-01T00:00:00Z", &[]).await;
    point(&setup_clients().await, &parameter, &new).await;
    // The parameter (30 min) and image (60 s) caches would see it later; the test does not wait.
    p.ssm.invalidate_mutable();
    p.amis.invalidate();
    node_class.status = Some(p.node_class_resolver().resolve(&node_class).await);
    let ids: Vec<&str> = node_class
        .status
        .as_ref()
        .expect("status")
        .amis
        .iter()
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(ids, [new.as_str()]);
    store.put(node_class.clone());
    assert_eq!(
        p.is_drifted(&launched)
            .await
            .expect("drift check")
            .map(|r| r.0),
        Some("AMIDrift".to_owned())
    );

    // The replacement runs the new image and is not drifted.
    let replacement = p.create(&claim("default-b")).await.expect("launch");
    assert_eq!(
        replacement
            .status
            .as_ref()
            .and_then(|s| s.image_id.as_deref()),
        Some(new.as_str())
    );
    assert_eq!(p.is_drifted(&replacement).await.expect("drift check"), None);
    p.delete(&launched).await.expect("delete");
    p.delete(&replacement).await.expect("delete");
}

/// The AL2023 alias's parameter for Kubernetes `version`, pointed at `image` (moto refuses
/// writes under `/aws/service`; its back door seeds them as AWS publishes them).
fn publish_al2023(version: &str, image: &str) {
    moto()
        .seed_ssm_parameter(
            REGION,
            &format!(
                "/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/x86_64/standard/recommended/image_id"
            ),
            image,
        )
        .expect("seeded");
}

#[tokio::test]
async fn a_control_plane_upgrade_drifts_instances_to_the_new_versions_image() {
    let c = crate::iam_policy::provider_clients_allowing(&[]).await;
    let cluster = unique("cluster");
    let vpc = vpc().await;
    subnet(&vpc, "us-east-1a", 1, &[("discovery", &cluster)]).await;
    security_group(&vpc, &unique("nodes"), &[("discovery", &cluster)]).await;
    let on_1_33 = image(
        &unique("al2023-1.33"),
        "x86_64",
        "2025-01-01T00:00:00Z",
        &[],
    )
    .await;
    let on_1_34 = image(
        &unique("al2023-1.34"),
        "x86_64",
        "2025-02-01T00:00:00Z",
        &[],
    )
    .await;
    publish_al2023("1.33", &on_1_33);
    publish_al2023("1.34", &on_1_34);
    let role = node_role().await;
    let store = Arc::new(InMemoryNodeClasses::default());
    let mut settings = provider_settings(&cluster);
    settings.kubernetes_version = "1.33".into();
    // What the controller's version re-read holds: the provider resolves with it. (Claims get
    // names of their own: the client token of a claim without uid derives from its name.)
    let control_plane = settings.kubernetes_version.clone();
    let p = provider(&c, settings, &store);
    let mut node_class = al2023_class(
        &role,
        &cluster,
        serde_json::json!({"alias": "al2023@latest"}),
    );
    node_class.status = Some(p.node_class_resolver().resolve(&node_class).await);
    store.put(node_class.clone());
    let launched = p
        .create(&claim(&unique("upgrade-a")))
        .await
        .expect("launch");
    let image_of = |claim: &NodeClaim| claim.status.as_ref().and_then(|s| s.image_id.clone());
    assert_eq!(image_of(&launched), Some(on_1_33.clone()));

    assert_eq!(control_plane.set("1.34").as_deref(), Some("1.33"));
    node_class.status = Some(p.node_class_resolver().resolve(&node_class).await);
    let ids: Vec<&str> = node_class
        .status
        .as_ref()
        .expect("status")
        .amis
        .iter()
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(
        ids,
        [on_1_34.as_str()],
        "resolved for the upgraded control plane"
    );
    store.put(node_class.clone());
    assert_eq!(
        p.is_drifted(&launched)
            .await
            .expect("drift check")
            .map(|r| r.0),
        Some("AMIDrift".to_owned())
    );
    let replacement = p
        .create(&claim(&unique("upgrade-b")))
        .await
        .expect("launch");
    assert_eq!(image_of(&replacement), Some(on_1_34));
    assert_eq!(p.is_drifted(&replacement).await.expect("drift check"), None);
    p.delete(&launched).await.expect("delete");
    p.delete(&replacement).await.expect("delete");
}
