//! Capacity reservations against moto. moto 5.2 has no capacity-reservation API: the
//! launcher (`kerf_aws::moto`) adds DescribeCapacityReservations to moto's EC2 backend,
//! answering reservations each test seeds ([`SeededReservation`]) with EC2's id, owner,
//! state, tag and match-criteria filters. Everything else (the SDK client, the request, its
//! paging and the IAM policy check) is real.

use crate::nodeclass::{condition, node_class, resolver};
use crate::support::*;
use kerf::api::ConditionStatus;
use kerf::api::ec2nodeclass::{
    CapacityReservationState, CapacityReservationType, InstanceMatchCriteria,
};
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
