//! Capacity reservations against moto. moto 5.2 has no capacity-reservation API: the
//! launcher (`kerf_aws::moto`) adds DescribeCapacityReservations to moto's EC2 backend,
//! answering reservations each test seeds ([`SeededReservation`]) with EC2's id, owner,
//! state, tag and match-criteria filters, and emulates what EC2 does with a CreateFleet
//! whose launch template targets one: launches into it while it has room (the instance
//! carrying its id, preference and lifecycle), refuses with ReservationCapacityExceeded once
//! full, and ends an ODCR leaving its instances on-demand. It records every CreateFleet
//! request as moto parsed it, so the tests check the targeting kerf sent. Everything else
//! (the SDK clients, launch templates, paging, the IAM policy check) is real.

use crate::cloudprovider::{fixture_with, node_claim};
use crate::nodeclass::{condition, node_class, resolver};
use crate::support::*;
use kerf::api::ConditionStatus;
use kerf::api::ec2nodeclass::{
    CapacityReservationState, CapacityReservationType, InstanceMatchCriteria,
};
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kerf_aws::capacityreservation::CapacityReservationProvider;
use kerf_aws::moto::SeededReservation;
use std::sync::Arc;

fn seed(reservation: SeededReservation) {
    moto()
        .seed_capacity_reservation(REGION, &reservation)
        .expect("seed a capacity reservation");
}

/// A unique reservation id (EC2's `cr-` + 17 hex digits).
fn reservation_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "cr-{:08x}{:09x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[tokio::test]
async fn selector_terms_resolve_into_the_status_with_their_counts() {
    let c = clients().await;
    let team = unique("team");
    let by_id = reservation_id();
    let tagged = reservation_id();
    let block = reservation_id();
    let untagged = reservation_id();
    seed(SeededReservation::new(&by_id, "m5.large", "us-east-1a", 3));
    seed(SeededReservation {
        tags: [("team".to_owned(), team.clone())].into(),
        match_criteria: "open".into(),
        available: 1,
        ..SeededReservation::new(&tagged, "c5.xlarge", "us-east-1b", 4)
    });
    // A Capacity Block ending in 30 minutes: inside the 40-minute window, so expiring.
    let end =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(30 * 60);
    seed(SeededReservation {
        tags: [("team".to_owned(), team.clone())].into(),
        reservation_type: "capacity-block".into(),
        interruptible: false,
        end_date: Some(end.to_string()),
        ..SeededReservation::new(&block, "p5.48xlarge", "us-east-1a", 2)
    });
    seed(SeededReservation::new(
        &untagged,
        "m5.large",
        "us-east-1c",
        9,
    ));

    let cluster = unique("cluster");
    let mut r = resolver(&c, &cluster);
    let provider = Arc::new(CapacityReservationProvider::new(c.ec2.clone()));
    r.capacity_reservations = Some(provider.clone());
    let nc = node_class(
        "reserved",
        serde_json::json!({
            "instanceProfile": "p",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "capacityReservationSelectorTerms": [{"id": by_id}, {"tags": {"team": team}}],
        }),
    );
    let status = r.resolve(&nc).await;
    let mut expected = vec![by_id.clone(), tagged.clone(), block.clone()];
    expected.sort();
    let ids: Vec<&str> = status
        .capacity_reservations
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(ids, expected, "{:#?}", status.capacity_reservations);
    let found = |id: &str| {
        status
            .capacity_reservations
            .iter()
            .find(|r| r.id == id)
            .expect("resolved")
    };
    assert_eq!(found(&by_id).instance_type, "m5.large");
    assert_eq!(found(&by_id).availability_zone, "us-east-1a");
    assert_eq!(found(&by_id).owner_id, "123456789012");
    assert_eq!(
        found(&by_id).instance_match_criteria,
        InstanceMatchCriteria::Targeted
    );
    assert_eq!(
        found(&tagged).instance_match_criteria,
        InstanceMatchCriteria::Open
    );
    assert_eq!(
        found(&block).reservation_type,
        CapacityReservationType::CapacityBlock
    );
    assert_eq!(found(&block).state, CapacityReservationState::Expiring);
    assert_eq!(found(&by_id).state, CapacityReservationState::Active);
    assert!(found(&block).end_time.is_some());
    assert_eq!(
        condition(&status, "CapacityReservationsReady").status,
        ConditionStatus::True
    );
    // The counts stay with the provider (the status has no field for them).
    assert_eq!(provider.available(&by_id), Some(3));
    assert_eq!(provider.available(&tagged), Some(1));
}

#[tokio::test]
async fn a_selector_matching_nothing_is_a_false_condition_not_an_empty_list() {
    let c = clients().await;
    let cluster = unique("cluster");
    let mut r = resolver(&c, &cluster);
    r.capacity_reservations = Some(Arc::new(CapacityReservationProvider::new(c.ec2.clone())));
    let nc = node_class(
        "no-reservations",
        serde_json::json!({
            "instanceProfile": "p",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "capacityReservationSelectorTerms": [{"tags": {"team": unique("nobody")}}],
        }),
    );
    let status = r.resolve(&nc).await;
    let cond = condition(&status, "CapacityReservationsReady");
    assert_eq!(cond.status, ConditionStatus::False);
    assert_eq!(cond.reason, "CapacityReservationsNotFound");
    assert!(cond.message.contains("capacityReservationSelectorTerms"));
    assert!(status.capacity_reservations.is_empty());
    // Not Ready for its other selectors (nothing matches them here), never for reservations.
    assert!(
        !condition(&status, "Ready")
            .message
            .contains("CapacityReservationsReady")
    );
}

#[tokio::test]
async fn with_the_gate_off_no_reservation_is_resolved() {
    let c = clients().await;
    let id = reservation_id();
    seed(SeededReservation::new(&id, "m5.large", "us-east-1a", 1));
    let cluster = unique("cluster");
    let nc = node_class(
        "gate-off",
        serde_json::json!({
            "instanceProfile": "p",
            "subnetSelectorTerms": [{"tags": {"discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": cluster}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "capacityReservationSelectorTerms": [{"id": id}],
        }),
    );
    let status = resolver(&c, &cluster).resolve(&nc).await;
    assert!(status.capacity_reservations.is_empty());
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.type_ != "CapacityReservationsReady")
    );
}

/// The CreateFleet request moto received for NodeClaim `name` last.
pub(crate) fn fleet_request_for(name: &str) -> serde_json::Value {
    let requests = moto()
        .fleet_requests()
        .expect("the recorded CreateFleet requests");
    requests
        .into_iter()
        .rev()
        .find(|r| {
            r["TagSpecifications"].as_array().is_some_and(|specs| {
                specs.iter().any(|spec| {
                    spec["Tags"].as_array().is_some_and(|tags| {
                        tags.iter()
                            .any(|t| t["Key"] == "karpenter.sh/nodeclaim" && t["Value"] == name)
                    })
                })
            })
        })
        .unwrap_or_else(|| panic!("no CreateFleet request for {name}"))
}

/// The launch template data of the first launch template `request` names.
pub(crate) async fn template_data(
    request: &serde_json::Value,
) -> aws_sdk_ec2::types::ResponseLaunchTemplateData {
    let name =
        request["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
            .as_str()
            .expect("a launch template name");
    // Read with the test's own clients: kerf's policy does not need to read templates back.
    let versions = crate::iam_policy::setup_clients()
        .await
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .versions("$Latest")
        .send()
        .await
        .expect("DescribeLaunchTemplateVersions");
    versions.launch_template_versions()[0]
        .launch_template_data()
        .expect("launch template data")
        .clone()
}

pub(crate) fn label<'a>(claim: &'a kerf::api::NodeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

#[tokio::test]
async fn a_reserved_launch_targets_its_reservation_and_falls_back_once_ec2_refuses() {
    let odcr = reservation_id();
    let full = reservation_id();
    seed(SeededReservation::new(&odcr, "m5.large", "us-east-1a", 1));
    seed(SeededReservation::new(&full, "m5.xlarge", "us-east-1b", 1));
    let f = fixture_with(serde_json::json!({
        "capacityReservationSelectorTerms": [{"id": odcr}, {"id": full}],
    }))
    .await;
    let p = &f.provider;
    assert_eq!(p.reservation_capacity(&odcr), Some(1));

    // Pinned to the reservation as the scheduler pins a reserved NodeClaim.
    let claim = node_claim(
        &unique("reserved"),
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
            {"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": [odcr]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
        ]),
    );
    let launched = p.create(&claim).await.expect("a launch into the ODCR");
    assert_eq!(
        label(&launched, "karpenter.sh/capacity-type"),
        Some("reserved")
    );
    assert_eq!(
        label(&launched, "karpenter.k8s.aws/capacity-reservation-id"),
        Some(odcr.as_str())
    );
    assert_eq!(
        label(&launched, "karpenter.k8s.aws/capacity-reservation-type"),
        Some("default")
    );
    assert_eq!(
        label(
            &launched,
            "karpenter.k8s.aws/capacity-reservation-interruptible"
        ),
        Some("false")
    );
    assert_eq!(
        label(&launched, "node.kubernetes.io/instance-type"),
        Some("m5.large")
    );
    assert_eq!(
        label(&launched, "topology.kubernetes.io/zone"),
        Some("us-east-1a")
    );
    // What CreateFleet received: an on-demand fleet over the reservation's offering only,
    // through a template that launches into that reservation only.
    let request = fleet_request_for(claim.metadata.name.as_deref().unwrap());
    assert_eq!(
        request["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
        "on-demand"
    );
    assert_eq!(
        request["OnDemandOptions"]["AllocationStrategy"],
        "lowest-price"
    );
    let overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
        .as_array()
        .expect("overrides");
    assert_eq!(overrides.len(), 1, "{overrides:?}");
    assert_eq!(overrides[0]["InstanceType"], "m5.large");
    assert_eq!(overrides[0]["AvailabilityZone"], "us-east-1a");
    let data = template_data(&request).await;
    let spec = data
        .capacity_reservation_specification()
        .expect("reservation targeting");
    assert_eq!(
        spec.capacity_reservation_preference().map(|p| p.as_str()),
        Some("capacity-reservations-only")
    );
    assert_eq!(
        spec.capacity_reservation_target()
            .and_then(|t| t.capacity_reservation_id()),
        Some(odcr.as_str())
    );
    assert!(data.instance_market_options().is_none());
    // The count reached zero: the provider says so without asking EC2 again.
    assert_eq!(p.reservation_capacity(&odcr), Some(0));
    // EC2 sees the instance in the reservation, and Get reads it back as reserved.
    let provider_id = launched
        .status
        .as_ref()
        .unwrap()
        .provider_id
        .clone()
        .unwrap();
    let got = p.get(&provider_id).await.expect("the launched instance");
    assert_eq!(label(&got, "karpenter.sh/capacity-type"), Some("reserved"));
    assert_eq!(
        label(&got, "karpenter.k8s.aws/capacity-reservation-id"),
        Some(odcr.as_str())
    );

    // Another account's launch fills `full` behind kerf's back: EC2 refuses, the
    // reservation is marked unavailable and the NodeClaim fails for capacity.
    seed(SeededReservation {
        available: 0,
        ..SeededReservation::new(&full, "m5.xlarge", "us-east-1b", 1)
    });
    let refused = node_claim(
        &unique("refused"),
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
        ]),
    );
    let err = p
        .create(&refused)
        .await
        .expect_err("the reservation is full");
    assert!(
        matches!(err, CloudProviderError::InsufficientCapacity { .. }),
        "{err:?}"
    );
    assert_eq!(p.reservation_capacity(&full), Some(0));
    // Its replacement (the provisioner's next NodeClaim, same requirements) falls back
    // to on-demand, through a template that keeps out of reservations.
    let fallback = node_claim(
        &unique("fallback"),
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
        ]),
    );
    let launched = p.create(&fallback).await.expect("an on-demand launch");
    assert_eq!(
        label(&launched, "karpenter.sh/capacity-type"),
        Some("on-demand")
    );
    assert_eq!(
        label(&launched, "karpenter.k8s.aws/capacity-reservation-id"),
        None
    );
    let request = fleet_request_for(fallback.metadata.name.as_deref().unwrap());
    let data = template_data(&request).await;
    assert_eq!(
        data.capacity_reservation_specification()
            .and_then(|s| s.capacity_reservation_preference())
            .map(|p| p.as_str()),
        Some("none")
    );
}

#[tokio::test]
async fn capacity_blocks_and_interruptible_reservations_launch_on_their_markets() {
    let block = reservation_id();
    let interruptible = reservation_id();
    let end = k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_secs(6 * 3600);
    seed(SeededReservation {
        reservation_type: "capacity-block".into(),
        end_date: Some(end.to_string()),
        ..SeededReservation::new(&block, "m5.xlarge", "us-east-1a", 2)
    });
    seed(SeededReservation {
        interruptible: true,
        ..SeededReservation::new(&interruptible, "c5.large", "us-east-1b", 2)
    });
    let f = fixture_with(serde_json::json!({
        "capacityReservationSelectorTerms": [{"id": block}, {"id": interruptible}],
    }))
    .await;
    let p = &f.provider;
    for (id, instance_type, target_type, market, lifecycle_type, interruptible_label) in [
        (
            &block,
            "m5.xlarge",
            "capacity-block",
            "capacity-block",
            "capacity-block",
            "false",
        ),
        (
            &interruptible,
            "c5.large",
            "reserved-capacity",
            "interruptible-capacity-reservation",
            "default",
            "true",
        ),
    ] {
        let claim = node_claim(
            &unique("market"),
            serde_json::json!([
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
            ]),
        );
        let launched = p.create(&claim).await.expect("a reserved launch");
        assert_eq!(
            label(&launched, "karpenter.k8s.aws/capacity-reservation-id"),
            Some(id.as_str())
        );
        assert_eq!(
            label(&launched, "karpenter.k8s.aws/capacity-reservation-type"),
            Some(lifecycle_type)
        );
        assert_eq!(
            label(
                &launched,
                "karpenter.k8s.aws/capacity-reservation-interruptible"
            ),
            Some(interruptible_label)
        );
        let request = fleet_request_for(claim.metadata.name.as_deref().unwrap());
        assert_eq!(
            request["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
            target_type
        );
        assert!(request.get("OnDemandOptions").is_none(), "{request}");
        if target_type == "reserved-capacity" {
            assert_eq!(
                request["ReservedCapacityOptions"]["ReservationTypes"],
                serde_json::json!(["interruptible-capacity-reservation"])
            );
        }
        let data = template_data(&request).await;
        assert_eq!(
            data.instance_market_options()
                .and_then(|m| m.market_type())
                .map(|m| m.as_str()),
            Some(market)
        );
        // Read back from EC2: the instance's lifecycle says which kind of reservation.
        let provider_id = launched
            .status
            .as_ref()
            .unwrap()
            .provider_id
            .clone()
            .unwrap();
        let got = p.get(&provider_id).await.expect("the launched instance");
        assert_eq!(
            label(&got, "karpenter.k8s.aws/capacity-reservation-type"),
            Some(lifecycle_type)
        );
        assert_eq!(
            label(&got, "karpenter.k8s.aws/capacity-reservation-interruptible"),
            Some(interruptible_label)
        );
    }
}

#[tokio::test]
async fn an_instance_whose_reservation_ended_reads_as_on_demand() {
    let odcr = reservation_id();
    seed(SeededReservation::new(&odcr, "m5.large", "us-east-1a", 1));
    let f = fixture_with(serde_json::json!({
        "capacityReservationSelectorTerms": [{"id": odcr}],
    }))
    .await;
    let p = &f.provider;
    let claim = node_claim(
        &unique("ending"),
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        ]),
    );
    let launched = p.create(&claim).await.expect("a reserved launch");
    let provider_id = launched
        .status
        .as_ref()
        .unwrap()
        .provider_id
        .clone()
        .unwrap();
    assert_eq!(
        label(
            &p.get(&provider_id).await.unwrap(),
            "karpenter.sh/capacity-type"
        ),
        Some("reserved")
    );
    moto()
        .end_capacity_reservation(REGION, &odcr)
        .expect("end the reservation");
    let got = p.get(&provider_id).await.expect("still running");
    assert_eq!(label(&got, "karpenter.sh/capacity-type"), Some("on-demand"));
    assert_eq!(
        label(&got, "karpenter.k8s.aws/capacity-reservation-id"),
        None
    );
}
