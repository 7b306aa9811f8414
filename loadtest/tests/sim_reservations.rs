//! Capacity reservations in the simulated region: node class resolution selects them into
//! the status, launches that allow `reserved` go into them first (labelled as upstream
//! labels them) while they have room, then fall back to on-demand; a reserved-only launch
//! without room is refused; a reservation's end takes its instances.

mod sim_support;

use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kerf::labels;
use kerf_loadtest::ec2::{CapacityReservation, InstanceState, ReservationType};
use serde_json::json;
use sim_support::{cloud, node_claim};

const ZONE_A: &str = "us-east-1a";

fn node_class(terms: serde_json::Value) -> kerf::api::EC2NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "kerf-sim"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "kerf-sim"}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "capacityReservationSelectorTerms": terms,
        }
    }))
    .expect("a valid EC2NodeClass")
}

fn requirements(capacity_types: &[&str]) -> serde_json::Value {
    json!([
        {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large", "m5.xlarge"]},
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": capacity_types},
    ])
}

fn label<'a>(claim: &'a kerf::api::NodeClaim, key: &str) -> &'a str {
    claim.metadata.labels.as_ref().expect("labels")[key].as_str()
}

#[tokio::test]
async fn launches_go_into_the_reservation_while_it_has_room_then_on_demand() {
    let cloud = cloud();
    cloud.ec2().add_capacity_reservation(CapacityReservation {
        interruptible: true,
        ..CapacityReservation::new("cr-0000000000000000a", "m5.xlarge", ZONE_A, 2)
    });
    cloud
        .ec2()
        .add_capacity_reservation(CapacityReservation::new(
            "cr-0000000000000000b",
            "m5.large",
            ZONE_A,
            5,
        ));
    let resolved = cloud
        .node_class_reconciler()
        .expect("the simulated provider resolves node classes")
        .resolve(&node_class(json!([{"id": "cr-0000000000000000a"}])))
        .await
        .expect("resolves");
    let ids: Vec<&str> = resolved
        .status
        .capacity_reservations
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(ids, ["cr-0000000000000000a"], "only the selected one");
    assert_eq!(cloud.reservation_capacity("cr-0000000000000000a"), Some(2));

    let mut launched = Vec::new();
    for n in 0..3 {
        let claim = node_claim(
            &format!("r{n}"),
            requirements(&["reserved", "on-demand"]),
            json!({}),
        );
        launched.push(cloud.create(&claim).await.expect("launches"));
    }
    for claim in &launched[..2] {
        assert_eq!(label(claim, labels::CAPACITY_TYPE), "reserved");
        assert_eq!(label(claim, labels::INSTANCE_TYPE), "m5.xlarge");
        assert_eq!(
            label(claim, labels::CAPACITY_RESERVATION_ID),
            "cr-0000000000000000a"
        );
        assert_eq!(label(claim, labels::CAPACITY_RESERVATION_TYPE), "default");
        assert_eq!(
            label(claim, labels::CAPACITY_RESERVATION_INTERRUPTIBLE),
            "true"
        );
    }
    // The reservation is full: the third goes on-demand, to the cheapest type, and not into
    // the reservation the class did not select.
    assert_eq!(label(&launched[2], labels::CAPACITY_TYPE), "on-demand");
    assert_eq!(label(&launched[2], labels::INSTANCE_TYPE), "m5.large");
    assert!(
        !launched[2]
            .metadata
            .labels
            .as_ref()
            .expect("labels")
            .contains_key(labels::CAPACITY_RESERVATION_ID)
    );
    assert_eq!(cloud.reservation_capacity("cr-0000000000000000a"), Some(0));
    let in_reservation = cloud.ec2().instances_in_reservation("cr-0000000000000000a");
    assert_eq!(in_reservation.len(), 2);

    // Reserved only and no room: refused, so the NodeClaim goes and its pods are re-planned.
    let reserved_only = node_claim("r-only", requirements(&["reserved"]), json!({}));
    match cloud.create(&reserved_only).await {
        Err(CloudProviderError::InsufficientCapacity { node_claim, .. }) => {
            assert_eq!(node_claim, "r-only")
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }

    // Terminating one gives its room back.
    cloud.delete(&launched[0]).await.expect("terminates");
    assert_eq!(cloud.reservation_capacity("cr-0000000000000000a"), Some(1));
}

#[tokio::test]
async fn a_selector_matching_nothing_is_a_false_condition() {
    let cloud = cloud();
    let resolved = cloud
        .node_class_reconciler()
        .expect("resolves node classes")
        .resolve(&node_class(json!([{"tags": {"team": "nobody"}}])))
        .await
        .expect("resolves");
    let condition = resolved
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "CapacityReservationsReady")
        .expect("the condition");
    assert_eq!(condition.reason, "CapacityReservationsNotFound");
    assert!(!condition.is_true());
}

#[tokio::test]
async fn a_capacity_block_expires_ahead_of_its_end_and_its_end_takes_the_instances() {
    let cloud = cloud();
    let end = std::time::SystemTime::now() + std::time::Duration::from_secs(20 * 60);
    cloud.ec2().add_capacity_reservation(CapacityReservation {
        reservation_type: ReservationType::CapacityBlock,
        end_time: Some(end),
        tags: [("team".to_owned(), "ml".to_owned())].into(),
        ..CapacityReservation::new("cr-0000000000000000c", "m5.large", ZONE_A, 3)
    });
    let resolved = cloud
        .node_class_reconciler()
        .expect("resolves node classes")
        .resolve(&node_class(json!([{"tags": {"team": "ml"}}])))
        .await
        .expect("resolves");
    let block = &resolved.status.capacity_reservations[0];
    assert_eq!(
        block.state,
        kerf::api::ec2nodeclass::CapacityReservationState::Expiring,
        "20 minutes before its end a block takes no launch"
    );
    let claim = node_claim("b0", requirements(&["reserved", "on-demand"]), json!({}));
    let launched = cloud.create(&claim).await.expect("launches");
    assert_eq!(label(&launched, labels::CAPACITY_TYPE), "on-demand");

    // A block with an hour left takes launches; its end reclaims them.
    cloud.ec2().add_capacity_reservation(CapacityReservation {
        reservation_type: ReservationType::CapacityBlock,
        end_time: Some(std::time::SystemTime::now() + std::time::Duration::from_secs(3600)),
        tags: [("team".to_owned(), "ml".to_owned())].into(),
        ..CapacityReservation::new("cr-0000000000000000d", "m5.large", ZONE_A, 3)
    });
    cloud
        .node_class_reconciler()
        .expect("resolves node classes")
        .resolve(&node_class(json!([{"tags": {"team": "ml"}}])))
        .await
        .expect("resolves");
    let claim = node_claim("b1", requirements(&["reserved", "on-demand"]), json!({}));
    let launched = cloud.create(&claim).await.expect("launches");
    assert_eq!(
        label(&launched, labels::CAPACITY_RESERVATION_TYPE),
        "capacity-block"
    );
    let ended = cloud.ec2().end_capacity_reservation("cr-0000000000000000d");
    assert_eq!(ended.len(), 1);
    let instance = cloud.ec2().instance(&ended[0]).expect("instance");
    assert_ne!(instance.state, InstanceState::Running);
    assert!(!instance.state.is_live());
}

#[tokio::test]
async fn an_odcr_that_ends_leaves_its_instances_running_on_demand() {
    let cloud = cloud();
    cloud
        .ec2()
        .add_capacity_reservation(CapacityReservation::new(
            "cr-0000000000000000e",
            "m5.large",
            ZONE_A,
            1,
        ));
    cloud
        .node_class_reconciler()
        .expect("resolves node classes")
        .resolve(&node_class(json!([{"id": "cr-0000000000000000e"}])))
        .await
        .expect("resolves");
    let claim = node_claim("o0", requirements(&["reserved"]), json!({}));
    let launched = cloud.create(&claim).await.expect("launches");
    assert_eq!(label(&launched, labels::CAPACITY_TYPE), "reserved");
    let ended = cloud.ec2().end_capacity_reservation("cr-0000000000000000e");
    assert_eq!(ended.len(), 1);
    let instance = cloud.ec2().instance(&ended[0]).expect("instance");
    assert_eq!(instance.state, InstanceState::Running);
    // Listed as a plain on-demand machine now.
    let provider_id = launched
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .expect("provider id");
    let listed = cloud.get(&provider_id).await.expect("still there");
    assert_eq!(label(&listed, labels::CAPACITY_TYPE), "on-demand");
    assert!(
        !listed
            .metadata
            .labels
            .as_ref()
            .expect("labels")
            .contains_key(labels::CAPACITY_RESERVATION_ID)
    );
}

#[tokio::test]
async fn an_interruptible_reservation_reclaimed_warns_each_instance_through_eventbridge() {
    let cloud = cloud();
    cloud.ec2().add_capacity_reservation(CapacityReservation {
        interruptible: true,
        ..CapacityReservation::new("cr-0000000000000000f", "m5.large", ZONE_A, 2)
    });
    cloud
        .node_class_reconciler()
        .expect("resolves node classes")
        .resolve(&node_class(json!([{"id": "cr-0000000000000000f"}])))
        .await
        .expect("resolves");
    let launched = cloud
        .create(&node_claim("i0", requirements(&["reserved"]), json!({})))
        .await
        .expect("launches");
    assert_eq!(
        label(&launched, labels::CAPACITY_RESERVATION_INTERRUPTIBLE),
        "true"
    );
    let mut events = cloud.ec2().subscribe();
    let interrupted = cloud
        .ec2()
        .interrupt_reservation("cr-0000000000000000f")
        .expect("interruptible");
    assert_eq!(interrupted.len(), 1);
    let event = events.recv().await.expect("a warning");
    let body = kerf_loadtest::ec2::to_eventbridge(&event, "m1", "us-east-1").expect("forwarded");
    let parsed = kerf::interruption::parse(&body).expect("parses");
    assert_eq!(
        parsed.kind(),
        kerf::interruption::Kind::CapacityReservationInterrupted
    );
    assert_eq!(parsed.instance_ids(), [interrupted[0].as_str()]);
    // A reservation that is not interruptible is refused.
    cloud
        .ec2()
        .add_capacity_reservation(CapacityReservation::new(
            "cr-00000000000000010",
            "m5.large",
            ZONE_A,
            1,
        ));
    assert!(
        cloud
            .ec2()
            .interrupt_reservation("cr-00000000000000010")
            .is_err()
    );
}
