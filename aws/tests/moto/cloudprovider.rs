//! The AWS CloudProvider end to end against moto: a NodeClaim is launched through its
//! EC2NodeClass (resolved status, launch template with user data, CreateFleet), found by
//! Get and List, reported drifted once a newer AMI is selected, and deleted.

use crate::support::*;
use base64::Engine;
use kerf::api::{EC2NodeClass, NodeClaim};
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kerf_aws::cloudprovider::{AwsCloudProvider, InMemoryNodeClasses};
use kerf_aws::drift::{HASH_VERSION, HASH_VERSION_ANNOTATION, node_class_hash};
use kerf_aws::unavailable::UnavailableOfferingsCache;
use kerf_aws::userdata::mime;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A provider over a cluster's own VPC objects (subnets in us-east-1a and us-east-1b) and
/// its Ready EC2NodeClass `default`.
pub(crate) struct Fixture {
    pub(crate) provider: AwsCloudProvider,
    pub(crate) store: Arc<InMemoryNodeClasses>,
    cluster: String,
    pub(crate) node_class: EC2NodeClass,
}

pub(crate) async fn fixture() -> Fixture {
    fixture_with(serde_json::json!({})).await
}

/// [`fixture`] with `spec` merged into the EC2NodeClass's spec.
pub(crate) async fn fixture_with(spec: serde_json::Value) -> Fixture {
    let c = clients().await;
    let cluster = unique("cluster");
    let vpc = vpc().await;
    subnet(&vpc, "us-east-1a", 1, &[("discovery", &cluster)]).await;
    subnet(&vpc, "us-east-1b", 2, &[("discovery", &cluster)]).await;
    security_group(&vpc, &unique("nodes"), &[("discovery", &cluster)]).await;
    image(
        &unique("node-amd64"),
        "x86_64",
        "2024-01-01T00:00:00Z",
        &[("discovery", &cluster)],
    )
    .await;
    image(
        &unique("node-arm64"),
        "arm64",
        "2024-01-01T00:00:00Z",
        &[("discovery", &cluster)],
    )
    .await;
    let role = node_role().await;
    let store = Arc::new(InMemoryNodeClasses::default());
    let settings = provider_settings(&cluster);
    let provider = AwsCloudProvider::new(
        c,
        settings,
        store.clone(),
        Arc::new(UnavailableOfferingsCache::default()),
    );
    let mut manifest = serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": role,
            "amiFamily": "AL2023",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"tags": {"discovery": cluster}}],
            "tags": {"team": "data"},
        },
    });
    if let (Some(base), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
        base.extend(extra.clone());
    }
    let mut node_class: EC2NodeClass =
        serde_json::from_value(manifest).expect("a valid EC2NodeClass");
    let hash = node_class_hash(&node_class, provider.settings.ca_bundle.as_deref());
    node_class.metadata.annotations = Some(BTreeMap::from([
        ("karpenter.k8s.aws/ec2nodeclass-hash".to_owned(), hash),
        (HASH_VERSION_ANNOTATION.to_owned(), HASH_VERSION.to_owned()),
    ]));
    node_class.status = Some(provider.node_class_resolver().resolve(&node_class).await);
    assert!(
        node_class.is_condition_true("Ready"),
        "{:#?}",
        node_class.status
    );
    store.put(node_class.clone());
    Fixture {
        provider,
        store,
        cluster,
        node_class,
    }
}

pub(crate) fn node_claim(name: &str, requirements: serde_json::Value) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "team": "data"}},
        "spec": {
            "requirements": requirements,
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
    }))
    .expect("a valid NodeClaim")
}

#[tokio::test]
async fn create_get_list_drift_and_delete() {
    let f = fixture().await;
    let p = &f.provider;
    let claim = node_claim(
        "default-x1",
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge", "m6g.large"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        ]),
    );
    let launched = p.create(&claim).await.unwrap();
    let labels = launched.metadata.labels.clone().unwrap();
    // Cheapest compatible on-demand type first; moto launches the first override.
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["team"], "data");
    let zone = labels["topology.kubernetes.io/zone"].clone();
    assert!(zone == "us-east-1a" || zone == "us-east-1b", "{zone}");
    let status = launched.status.clone().unwrap();
    let provider_id = status.provider_id.clone().unwrap();
    assert!(
        provider_id.starts_with(&format!("aws:///{zone}/i-")),
        "{provider_id}"
    );
    assert_eq!(status.capacity["cpu"].0, "2");
    let amd64_ami = status.image_id.clone().unwrap();
    assert_eq!(
        launched.metadata.annotations.as_ref().unwrap()["karpenter.k8s.aws/ec2nodeclass-hash-version"],
        HASH_VERSION
    );

    // The instance: tags and the launch template's user data as sent.
    let instance_id = provider_id.rsplit('/').next().unwrap();
    let instance = p.instances.get(instance_id).await.unwrap();
    assert_eq!(instance.tags["karpenter.sh/nodeclaim"], "default-x1");
    assert_eq!(instance.tags["karpenter.sh/nodepool"], "default");
    assert_eq!(instance.tags["karpenter.k8s.aws/ec2nodeclass"], "default");
    assert_eq!(instance.tags["eks:eks-cluster-name"], f.cluster);
    assert_eq!(instance.tags["team"], "data");
    let templates = p
        .clients
        .ec2
        .describe_launch_templates()
        .filters(kerf_aws::selectors::filter(
            "tag:eks:eks-cluster-name",
            [f.cluster.clone()],
        ))
        .send()
        .await
        .unwrap();
    let lt = &templates.launch_templates()[0];
    assert!(
        lt.launch_template_name()
            .unwrap()
            .starts_with("karpenter.k8s.aws/")
    );
    let version = setup_clients()
        .await
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(lt.launch_template_id().unwrap())
        .send()
        .await
        .unwrap();
    let data = version.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    assert_eq!(
        data.iam_instance_profile().and_then(|i| i.name()),
        f.node_class
            .status
            .as_ref()
            .unwrap()
            .instance_profile
            .as_deref()
    );
    let user_data = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().unwrap())
        .unwrap();
    let parts = mime::parse(std::str::from_utf8(&user_data).unwrap()).unwrap();
    let config: serde_json::Value = serde_saphyr::from_str(&parts.last().unwrap().body).unwrap();
    let kubelet = &config["spec"]["kubelet"];
    assert_eq!(
        kubelet["config"]["clusterDNS"],
        serde_json::json!(["10.100.0.10"])
    );
    assert_eq!(
        kubelet["config"]["maxPods"], 29,
        "m5.large's ENI-limited max pods"
    );
    let taint_keys: Vec<&str> = kubelet["config"]["registerWithTaints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert_eq!(taint_keys, ["dedicated", "karpenter.sh/unregistered"]);
    let flags = kubelet["flags"][0].as_str().unwrap();
    assert!(
        flags.contains("karpenter.sh/capacity-type=on-demand"),
        "{flags}"
    );
    assert!(
        flags.contains("karpenter.sh/do-not-sync-taints=true"),
        "{flags}"
    );
    assert!(flags.contains("team=data"), "{flags}");

    // Get and List see it.
    let got = p.get(&provider_id).await.unwrap();
    assert_eq!(got.name(), "default-x1");
    assert_eq!(
        got.metadata.labels.as_ref().unwrap()["karpenter.sh/nodepool"],
        "default"
    );
    let listed = p.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].provider_id(), Some(provider_id.as_str()));
    let types = p
        .get_instance_types(&serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
        }))
        .unwrap())
        .await
        .unwrap();
    assert!(types.iter().any(|t| t.name == "m5.large"));

    // Not drifted; then a newer AMI is selected and the node is.
    assert_eq!(p.is_drifted(&launched).await.unwrap(), None);
    let newer = image(
        &unique("node-amd64-new"),
        "x86_64",
        "2024-06-01T00:00:00Z",
        &[("discovery", &f.cluster)],
    )
    .await;
    p.amis.invalidate();
    let mut updated = f.node_class.clone();
    updated.status = Some(p.node_class_resolver().resolve(&updated).await);
    assert!(
        updated
            .status
            .as_ref()
            .unwrap()
            .amis
            .iter()
            .any(|a| a.id == newer)
    );
    assert!(
        !updated
            .status
            .as_ref()
            .unwrap()
            .amis
            .iter()
            .any(|a| a.id == amd64_ami)
    );
    f.store.put(updated);
    assert_eq!(
        p.is_drifted(&launched).await.unwrap().map(|r| r.0),
        Some("AMIDrift".to_owned())
    );

    // Delete terminates; afterwards the NodeClaim is gone for Get and Delete.
    p.delete(&launched).await.unwrap();
    assert!(matches!(
        p.get(&provider_id).await,
        Err(CloudProviderError::NodeClaimNotFound { .. })
    ));
    assert!(matches!(
        p.delete(&launched).await,
        Err(CloudProviderError::NodeClaimNotFound { .. })
    ));
}

#[tokio::test]
async fn impossible_requirements_and_unready_node_classes_fail_clearly() {
    let f = fixture().await;
    let p = &f.provider;
    let nowhere = node_claim(
        "default-x2",
        serde_json::json!([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1f"]}]),
    );
    let err = p.create(&nowhere).await.unwrap_err();
    assert!(err.is_insufficient_capacity(), "{err}");

    let mut broken = f.node_class.clone();
    broken
        .status
        .as_mut()
        .unwrap()
        .conditions
        .retain(|c| c.type_ != "Ready");
    f.store.put(broken);
    let err = p
        .create(&node_claim("default-x3", serde_json::json!([])))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CloudProviderError::NodeClassNotReady { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn spot_is_preferred_when_allowed() {
    let f = fixture().await;
    let p = &f.provider;
    let claim = node_claim(
        "default-spot",
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]},
        ]),
    );
    let launched = p.create(&claim).await.expect("a spot launch");
    let labels = launched.metadata.labels.clone().expect("labels");
    assert_eq!(labels["karpenter.sh/capacity-type"], "spot");
    let provider_id = launched.provider_id().expect("a provider id").to_owned();
    let got = p.get(&provider_id).await.expect("the instance");
    // EC2 (moto) reports the instance as a spot instance too.
    assert_eq!(
        got.metadata.labels.as_ref().expect("labels")["karpenter.sh/capacity-type"],
        "spot"
    );
    p.delete(&launched).await.expect("terminating");
}

/// Create is idempotent per NodeClaim: a second Create for a NodeClaim whose instance is
/// already running (its first answer or status write lost) adopts that instance, found by
/// its `karpenter.sh/nodeclaim` tag; FindLaunched finds it too, and nothing once it is
/// terminated.
#[tokio::test]
async fn a_second_create_adopts_the_instance_tagged_with_the_nodeclaim() {
    let f = fixture().await;
    let p = &f.provider;
    let claim = node_claim(
        "default-adopt",
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        ]),
    );
    let first = p.create(&claim).await.expect("launched");
    let again = p.create(&claim).await.expect("adopted");
    assert_eq!(again.provider_id(), first.provider_id());
    let labels = again.metadata.labels.clone().expect("labels");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
    assert_eq!(
        labels["team"], "data",
        "the NodeClaim's own labels are kept"
    );
    let status = again.status.clone().expect("status");
    assert_eq!(status.capacity["cpu"].0, "2");
    let annotations = again.metadata.annotations.clone().expect("annotations");
    assert!(!annotations["karpenter.k8s.aws/ec2nodeclass-hash"].is_empty());
    let tagged = p
        .instances
        .list()
        .await
        .expect("listed")
        .into_iter()
        .filter(|i| {
            i.tags.get("karpenter.sh/nodeclaim").map(String::as_str) == Some("default-adopt")
        })
        .count();
    assert_eq!(tagged, 1, "one instance for the NodeClaim");

    let found = p.find_launched("default-adopt").await.expect("looked up");
    assert_eq!(
        found.as_ref().and_then(|c| c.provider_id()),
        first.provider_id()
    );
    assert!(
        p.find_launched("default-other")
            .await
            .expect("looked up")
            .is_none()
    );
    p.delete(&first).await.expect("terminating");
    assert!(
        p.find_launched("default-adopt")
            .await
            .expect("looked up")
            .is_none(),
        "a terminated instance is not adopted"
    );
}

/// A NodeClaim's launches share its client token: one asked to launch again after its
/// instance ended (terminated before its status was written) gets EC2's answer for the
/// token, sees that instance has ended, and launches a new one under the next token.
#[tokio::test]
async fn a_nodeclaim_whose_instance_ended_launches_anew_under_its_next_token() {
    let f = fixture().await;
    let p = &f.provider;
    let mut claim = node_claim(
        "default-ended",
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        ]),
    );
    claim.metadata.uid = Some(unique("uid"));
    let first = p.create(&claim).await.expect("launched");
    p.delete(&first).await.expect("terminating");
    let second = p.create(&claim).await.expect("launched again");
    assert_ne!(second.provider_id(), first.provider_id());
    let live: Vec<String> = p
        .instances
        .list()
        .await
        .expect("listed")
        .into_iter()
        .filter(|i| i.state != "shutting-down")
        .filter(|i| {
            i.tags.get("karpenter.sh/nodeclaim").map(String::as_str) == Some("default-ended")
        })
        .map(|i| i.id)
        .collect();
    assert_eq!(
        live.len(),
        1,
        "one live instance for the NodeClaim: {live:?}"
    );
    p.delete(&second).await.expect("terminating");
}
