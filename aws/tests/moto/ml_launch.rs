//! ML launch features against moto: `placementGroupSelector`, EFA network interfaces and
//! `ipPrefixCount`. moto 5.2 has no placement-group API: the launcher (`kerf_aws::moto`)
//! adds DescribePlacementGroups to moto's EC2 backend, answering groups each test seeds
//! ([`SeededPlacementGroup`]) by id or name with EC2's unknown-group error and state filter.
//! Launch templates (their placement and network interfaces), CreateFleet, the SDK clients
//! and the IAM policy check are moto's and the SDK's own: the tests read back through
//! DescribeLaunchTemplateVersions what kerf asked EC2 to launch.

use crate::cloudprovider::{fixture_with, node_claim};
use crate::nodeclass::{condition, node_class, resolver};
use crate::reservations::{fleet_request_for, label, template_data};
use crate::support::*;
use kerf::api::{ConditionStatus, NodeClaim};
use kerf::cloudprovider::CloudProvider;
use kerf_aws::moto::SeededPlacementGroup;

/// A unique placement group id (EC2's `pg-` + 17 hex digits) and name.
fn placement_group(strategy: &str, partitions: Option<u32>) -> SeededPlacementGroup {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!(
        "pg-{:08x}{:09x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let group = SeededPlacementGroup {
        partition_count: partitions,
        ..SeededPlacementGroup::new(&id, &unique("train"), strategy)
    };
    moto()
        .seed_placement_group(REGION, &group)
        .expect("seed a placement group");
    group
}

fn with_requests(mut claim: NodeClaim, requests: serde_json::Value) -> NodeClaim {
    claim.spec.resources = Some(kerf::api::nodeclaim::NodeClaimResources {
        requests: serde_json::from_value(requests).expect("resource requests"),
    });
    claim
}

/// Each launched interface's card, device index, type and IPv4 prefix count.
type InterfaceShape<'a> = (Option<i32>, Option<i32>, Option<&'a str>, Option<i32>);

fn interface_shapes(
    data: &aws_sdk_ec2::types::ResponseLaunchTemplateData,
) -> Vec<InterfaceShape<'_>> {
    data.network_interfaces()
        .iter()
        .map(|n| {
            (
                n.network_card_index(),
                n.device_index(),
                n.interface_type(),
                n.ipv4_prefix_count(),
            )
        })
        .collect()
}

fn capacity<'a>(claim: &'a NodeClaim, resource: &str) -> Option<&'a str> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.capacity.get(resource))
        .map(|q| q.0.as_str())
}

#[tokio::test]
async fn the_selector_resolves_by_id_or_name_and_says_when_it_matches_nothing() {
    let c = clients().await;
    let cluster = unique("cluster");
    let vpc = vpc().await;
    subnet(&vpc, "us-east-1a", 1, &[("discovery", &cluster)]).await;
    security_group(&vpc, &unique("nodes"), &[("discovery", &cluster)]).await;
    image(
        &unique("node"),
        "x86_64",
        "2024-01-01T00:00:00Z",
        &[("discovery", &cluster)],
    )
    .await;
    let role = node_role().await;
    let cluster_group = placement_group("cluster", None);
    let pending = SeededPlacementGroup {
        state: "pending".into(),
        ..placement_group("spread", None)
    };
    moto()
        .seed_placement_group(REGION, &pending)
        .expect("seed a pending group");
    let r = resolver(&c, &cluster);
    let spec = |selector: serde_json::Value| {
        serde_json::json!({
            "role": role,
            "amiFamily": "AL2023",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"tags": {"discovery": cluster}}],
            "placementGroupSelector": selector,
        })
    };
    for selector in [
        serde_json::json!({"id": cluster_group.id}),
        serde_json::json!({"name": cluster_group.name}),
    ] {
        let status = r
            .resolve(&node_class(&unique("pg"), spec(selector.clone())))
            .await;
        let ready = condition(&status, "PlacementGroupReady");
        assert_eq!(ready.status, ConditionStatus::True, "{selector}: {ready:?}");
        assert_eq!(condition(&status, "Ready").status, ConditionStatus::True);
    }
    // No such group, and a group not yet available: a False condition that names it.
    for (selector, named) in [
        (
            serde_json::json!({"name": "no-such-group"}),
            "no-such-group".to_owned(),
        ),
        (serde_json::json!({"id": pending.id}), pending.id.clone()),
    ] {
        let status = r.resolve(&node_class(&unique("pg"), spec(selector))).await;
        let missing = condition(&status, "PlacementGroupReady");
        assert_eq!(missing.status, ConditionStatus::False);
        assert_eq!(missing.reason, "PlacementGroupNotFound");
        assert!(missing.message.contains(&named), "{}", missing.message);
        let ready = condition(&status, "Ready");
        assert_eq!(ready.status, ConditionStatus::False);
        assert!(
            ready.message.contains("PlacementGroupReady"),
            "{}",
            ready.message
        );
    }
    // Without a selector the condition holds.
    let mut plain = spec(serde_json::json!({}));
    plain
        .as_object_mut()
        .expect("an object")
        .remove("placementGroupSelector");
    let status = r.resolve(&node_class(&unique("pg"), plain)).await;
    assert_eq!(
        condition(&status, "PlacementGroupReady").status,
        ConditionStatus::True
    );
}

#[tokio::test]
async fn launches_go_into_the_group_and_partition_and_drift_when_the_group_changes() {
    let group = placement_group("partition", Some(3));
    let f = fixture_with(serde_json::json!({"placementGroupSelector": {"id": group.id}})).await;
    let p = &f.provider;
    let claim = node_claim(
        &unique("placed"),
        serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/placement-group-partition", "operator": "In", "values": ["3", "2"]},
        ]),
    );
    let launched = p.create(&claim).await.expect("a launch into the group");
    let request = fleet_request_for(claim.metadata.name.as_deref().unwrap());
    let data = template_data(&request).await;
    let placement = data.placement().expect("the template's placement");
    assert_eq!(placement.group_id(), Some(group.id.as_str()));
    assert_eq!(
        placement.partition_number(),
        Some(2),
        "the lowest partition the NodeClaim allows"
    );
    assert_eq!(
        label(&launched, "karpenter.k8s.aws/placement-group-id"),
        Some(group.id.as_str())
    );
    assert_eq!(
        label(&launched, "karpenter.k8s.aws/placement-group-partition"),
        Some("2")
    );
    assert_eq!(p.is_drifted(&launched).await.expect("drift check"), None);
    // A Create whose answer was lost adopts the instance, labelled as the launch was.
    let adopted = p.create(&claim).await.expect("the instance adopted");
    assert_eq!(adopted.provider_id(), launched.provider_id());
    assert_eq!(
        label(&adopted, "karpenter.k8s.aws/placement-group-id"),
        Some(group.id.as_str())
    );
    assert_eq!(
        label(&adopted, "karpenter.k8s.aws/placement-group-partition"),
        Some("2")
    );
    assert_eq!(p.is_drifted(&adopted).await.expect("drift check"), None);

    // The class now selects another group (by name): the node drifts, dynamically.
    let other = placement_group("cluster", None);
    let mut moved = f.node_class.clone();
    moved.spec.placement_group_selector = Some(kerf::api::ec2nodeclass::PlacementGroupSelector {
        name: Some(other.name.clone()),
        id: None,
    });
    moved.status = Some(p.node_class_resolver().resolve(&moved).await);
    assert!(moved.is_condition_true("Ready"), "{:#?}", moved.status);
    f.store.put(moved.clone());
    assert_eq!(
        p.is_drifted(&launched)
            .await
            .expect("drift check")
            .map(|r| r.0),
        Some("PlacementGroupDrift".to_owned())
    );
    // A launch now goes into the cluster group, with no partition.
    let next = node_claim(
        &unique("placed"),
        serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]),
    );
    let relaunched = p
        .create(&next)
        .await
        .expect("a launch into the other group");
    let data = template_data(&fleet_request_for(next.metadata.name.as_deref().unwrap())).await;
    let placement = data.placement().expect("the template's placement");
    assert_eq!(placement.group_id(), Some(other.id.as_str()));
    assert_eq!(placement.partition_number(), None);
    assert_eq!(
        label(&relaunched, "karpenter.k8s.aws/placement-group-partition"),
        None
    );
    assert_eq!(p.is_drifted(&relaunched).await.expect("drift check"), None);

    // Dropping the selector drifts the placed nodes too.
    let mut unplaced = moved;
    unplaced.spec.placement_group_selector = None;
    unplaced.status = Some(p.node_class_resolver().resolve(&unplaced).await);
    f.store.put(unplaced);
    assert_eq!(
        p.is_drifted(&relaunched)
            .await
            .expect("drift check")
            .map(|r| r.0),
        Some("PlacementGroupDrift".to_owned())
    );
}

#[tokio::test]
async fn an_efa_request_attaches_every_efa_interface_with_the_prefixes() {
    let f = fixture_with(serde_json::json!({"ipPrefixCount": 4})).await;
    let p = &f.provider;
    let requirements = serde_json::json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p4d.24xlarge"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]);
    let claim = with_requests(
        node_claim(&unique("efa"), requirements.clone()),
        serde_json::json!({"cpu": "1", "vpc.amazonaws.com/efa": "1"}),
    );
    let launched = p.create(&claim).await.expect("an EFA launch");
    let data = template_data(&fleet_request_for(claim.metadata.name.as_deref().unwrap())).await;
    let interfaces = interface_shapes(&data);
    assert_eq!(
        interfaces,
        [
            (Some(0), Some(0), Some("efa"), Some(4)),
            (Some(1), Some(1), Some("efa"), Some(4)),
            (Some(2), Some(1), Some("efa"), Some(4)),
            (Some(3), Some(1), Some("efa"), Some(4)),
        ],
        "one EFA interface per network card of p4d.24xlarge"
    );
    assert!(
        data.network_interfaces()
            .iter()
            .all(|n| n.groups().len() == 1),
        "every interface carries the security groups"
    );
    assert_eq!(capacity(&launched, "vpc.amazonaws.com/efa"), Some("4"));

    // The same type without an EFA request: one primary interface with the prefixes, and no
    // EFA advertised (none is attached).
    let plain = node_claim(&unique("plain"), requirements);
    let launched = p.create(&plain).await.expect("a plain launch");
    let data = template_data(&fleet_request_for(plain.metadata.name.as_deref().unwrap())).await;
    let [primary] = data.network_interfaces() else {
        panic!("one interface: {:?}", data.network_interfaces())
    };
    assert_eq!(primary.device_index(), Some(0));
    assert_eq!(primary.interface_type(), None);
    assert_eq!(primary.ipv4_prefix_count(), Some(4));
    assert_eq!(capacity(&launched, "vpc.amazonaws.com/efa"), None);
    assert!(capacity(&launched, "nvidia.com/gpu").is_some());
}

#[tokio::test]
async fn the_class_network_interfaces_are_launched_as_listed() {
    let f = fixture_with(serde_json::json!({
        "ipPrefixCount": 2,
        "networkInterfaces": [
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        ],
    }))
    .await;
    let p = &f.provider;
    let claim = node_claim(
        &unique("listed"),
        serde_json::json!([
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p4d.24xlarge"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]),
    );
    let launched = p
        .create(&claim)
        .await
        .expect("a launch with the listed interfaces");
    let data = template_data(&fleet_request_for(claim.metadata.name.as_deref().unwrap())).await;
    let interfaces = interface_shapes(&data);
    assert_eq!(
        interfaces,
        [
            (Some(0), Some(0), Some("interface"), Some(2)),
            (Some(1), Some(0), Some("efa-only"), None),
        ],
        "an EFA-only interface gets no prefixes"
    );
    assert!(data.security_group_ids().is_empty());
    // The class's one EFA-only interface is the node's EFA capacity.
    assert_eq!(capacity(&launched, "vpc.amazonaws.com/efa"), Some("1"));
}
