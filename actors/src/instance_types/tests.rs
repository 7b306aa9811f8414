//! The per-class cache against a running OfferingCache: refused offerings become
//! unavailable in the next round's types, the list is rebuilt only when the generation,
//! settings or subnets change, and expiry makes offerings available again; and against a
//! provider's catalog: the embedded one until the provider has one, then the provider's,
//! rebuilt when it is renumbered, narrowed to the class's subnet zones throughout.

use kerf::catalog::CapacityType;
use kerf::cloudprovider::{OfferingRef, UNAVAILABLE_OFFERINGS_TTL, UnavailableOfferings};

use super::*;
use crate::mailbox::MailboxDepth;
use crate::offering_cache::testing::{paused, until_generation};
use crate::offering_cache::{EXPIRY_TICK, OfferingCache};

fn available(types: &[InstanceType], name: &str, zone: &str, capacity_type: CapacityType) -> bool {
    types
        .iter()
        .find(|it| it.name == name)
        .and_then(|it| {
            it.offerings
                .iter()
                .find(|o| o.zone == zone && o.capacity_type == capacity_type)
        })
        .map(|o| o.available)
        .expect("the catalog offers it")
}

fn resolve(
    cache: &InstanceTypeCache,
    catalog: &Catalog,
    offerings: &OfferingCacheHandle,
    class: Option<&EC2NodeClass>,
) -> Arc<[InstanceType]> {
    let mut source = cache.round(catalog, Some(offerings));
    let types = source.resolve("default", class, &AllocatableSettings::default());
    cache.finish_round();
    types
}

#[test]
fn refused_offerings_are_unavailable_until_they_expire_and_lists_rebuild_only_on_change() {
    paused(|| async {
        let catalog = Catalog::embedded("us-east-1").expect("catalog");
        let offerings = OfferingCache::start(
            UNAVAILABLE_OFFERINGS_TTL,
            MailboxDepth::new(
                "offering-cache-test",
                crate::offering_cache::OFFERING_CACHE_MAILBOX_CAPACITY,
            ),
        );
        let cache = InstanceTypeCache::default();
        let types = resolve(&cache, &catalog, &offerings, None);
        assert!(available(
            &types,
            "m5.large",
            "us-east-1a",
            CapacityType::Spot
        ));
        let again = resolve(&cache, &catalog, &offerings, None);
        assert_eq!(cache.builds(), 1, "nothing changed: the list is reused");
        assert!(
            Arc::ptr_eq(&types, &again),
            "the rounds share the cached list, not copies of it"
        );

        offerings.mark_offerings(
            &[OfferingRef::new("spot", "m5.large", "us-east-1a")],
            "InsufficientCapacity",
        );
        until_generation(&offerings, 1).await;
        let types = resolve(&cache, &catalog, &offerings, None);
        assert_eq!(cache.builds(), 2, "the generation moved: rebuilt");
        assert!(!available(
            &types,
            "m5.large",
            "us-east-1a",
            CapacityType::Spot
        ));
        assert!(available(
            &types,
            "m5.large",
            "us-east-1a",
            CapacityType::OnDemand
        ));
        assert!(available(
            &types,
            "m5.large",
            "us-east-1b",
            CapacityType::Spot
        ));
        assert!(available(
            &types,
            "c5.large",
            "us-east-1a",
            CapacityType::Spot
        ));
        resolve(&cache, &catalog, &offerings, None);
        assert_eq!(cache.builds(), 2);

        tokio::time::sleep(UNAVAILABLE_OFFERINGS_TTL + EXPIRY_TICK).await;
        let types = resolve(&cache, &catalog, &offerings, None);
        assert_eq!(cache.builds(), 3, "expiry moved the generation: rebuilt");
        assert!(available(
            &types,
            "m5.large",
            "us-east-1a",
            CapacityType::Spot
        ));
    });
}

#[test]
fn a_capacity_type_or_every_subnet_of_a_zone_makes_offerings_unavailable() {
    paused(|| async {
        let catalog = Catalog::embedded("us-east-1").expect("catalog");
        let offerings = OfferingCache::start(
            UNAVAILABLE_OFFERINGS_TTL,
            MailboxDepth::new(
                "offering-cache-test",
                crate::offering_cache::OFFERING_CACHE_MAILBOX_CAPACITY,
            ),
        );
        let mut class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "r",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"team": "a"}}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}]
            },
            "status": {"subnets": [
                {"id": "subnet-a", "zone": "us-east-1a"},
                {"id": "subnet-b", "zone": "us-east-1b"},
                {"id": "subnet-b2", "zone": "us-east-1b"}
            ]}
        }))
        .expect("a valid EC2NodeClass");
        let cache = InstanceTypeCache::default();
        offerings.mark_capacity_type_unavailable("spot");
        offerings.mark_subnet_unavailable("subnet-a");
        offerings.mark_subnet_unavailable("subnet-b");
        until_generation(&offerings, 3).await;
        let types = resolve(&cache, &catalog, &offerings, Some(&class));
        assert!(!available(
            &types,
            "c5.large",
            "us-east-1b",
            CapacityType::Spot
        ));
        assert!(
            !available(&types, "c5.large", "us-east-1a", CapacityType::OnDemand),
            "us-east-1a's only subnet is full"
        );
        assert!(
            available(&types, "c5.large", "us-east-1b", CapacityType::OnDemand),
            "us-east-1b has another subnet"
        );

        // The class's subnets changing rebuilds the list.
        let builds = cache.builds();
        if let Some(status) = class.status.as_mut() {
            status.subnets.retain(|s| s.id != "subnet-b2");
        }
        let types = resolve(&cache, &catalog, &offerings, Some(&class));
        assert_eq!(cache.builds(), builds + 1);
        assert!(!available(
            &types,
            "c5.large",
            "us-east-1b",
            CapacityType::OnDemand
        ));
    });
}

#[test]
fn classes_no_recent_round_uses_are_forgotten() {
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let cache = InstanceTypeCache::default();
    let settings = AllocatableSettings::default();
    let resolve_in_round = |classes: &[&str]| {
        let mut source = cache.round(&catalog, None);
        for class in classes {
            source.resolve(class, None, &settings);
        }
        cache.finish_round();
    };
    resolve_in_round(&["a", "b"]);
    assert_eq!(cache.classes(), ["a", "b"]);
    resolve_in_round(&["b"]);
    assert_eq!(
        cache.classes(),
        ["a", "b"],
        "a was used by the round before"
    );
    resolve_in_round(&["b"]);
    assert_eq!(cache.classes(), ["b"]);
    assert_eq!(cache.builds(), 2, "b was reused");
}

#[test]
fn the_provisioner_and_the_disruption_snapshots_share_one_list() {
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let cache = InstanceTypeCache::default();
    let settings = AllocatableSettings::default();
    let provisioner = cache.clone();
    let disruption = cache.clone();
    // Their rounds interleave: each starts before the other finishes.
    let mut provisioning = provisioner.round(&catalog, None);
    let mut disrupting = disruption.round(&catalog, None);
    let disrupted = disrupting.resolve("default", None, &settings);
    disruption.finish_round();
    let provisioned = provisioning.resolve("default", None, &settings);
    provisioner.finish_round();
    assert!(
        Arc::ptr_eq(&provisioned, &disrupted),
        "one list, not a copy per user"
    );
    assert_eq!(cache.builds(), 1);
    assert_eq!(cache.classes(), ["default"]);
}

fn class_in(zones: &[&str]) -> EC2NodeClass {
    let subnets: Vec<serde_json::Value> = zones
        .iter()
        .map(|zone| serde_json::json!({"id": format!("subnet-{zone}"), "zone": zone}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"team": "a"}}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}]
        },
        "status": {"subnets": subnets}
    }))
    .expect("a valid EC2NodeClass")
}

#[test]
fn rounds_plan_with_the_providers_catalog_once_it_has_one() {
    use kerf::cloudprovider::CloudProviderError;
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let cloud = crate::testing::RefusingCloud::new(|| CloudProviderError::Other {
        operation: "test".into(),
        message: "refused".into(),
    });
    let cache = InstanceTypeCache::following(Some(cloud.clone()));
    let class = class_in(&["us-east-1a"]);
    let settings = AllocatableSettings::default();
    let resolve = || {
        let mut source = cache.round(&catalog, None);
        let types = source.resolve("default", Some(&class), &settings);
        cache.finish_round();
        types
    };

    // No refresh yet: the embedded catalog, narrowed to the class's zone.
    let types = resolve();
    assert!(types.iter().all(|it| it.name != "m9z.large"));
    assert!(available(
        &types,
        "m5.large",
        "us-east-1a",
        CapacityType::OnDemand
    ));
    assert!(!available(
        &types,
        "m5.large",
        "us-east-1b",
        CapacityType::OnDemand
    ));

    // The provider refreshed: a type the embedded catalog lacks, m5.large no longer
    // offered, c5.large's spot price in us-east-1a changed.
    let mut facts = catalog.snapshot().facts().clone();
    let mut added = catalog.info("m5.large").expect("m5.large").clone();
    added.name = "m9z.large".into();
    facts.infos.push(added);
    facts
        .offered
        .insert("m9z.large".into(), ["us-east-1a".to_owned()].into());
    facts.on_demand.insert("m9z.large".into(), 0.2);
    facts.offered.remove("m5.large");
    let spot = |facts: &mut kerf::catalog::CatalogFacts, price: f64| {
        facts
            .spot
            .entry("c5.large".into())
            .or_default()
            .insert("us-east-1a".into(), price);
    };
    spot(&mut facts, 0.011);
    cloud.set_catalog(CatalogSnapshot::new(facts.clone(), 1));
    let types = resolve();
    assert_eq!(cache.builds(), 2, "a new catalog: rebuilt");
    assert!(available(
        &types,
        "m9z.large",
        "us-east-1a",
        CapacityType::OnDemand
    ));
    assert!(types.iter().all(|it| it.name != "m5.large"));
    let price = |types: &[InstanceType]| {
        types
            .iter()
            .find(|it| it.name == "c5.large")
            .and_then(|it| {
                it.offerings
                    .iter()
                    .find(|o| o.zone == "us-east-1a" && o.capacity_type == CapacityType::Spot)
            })
            .map(|o| o.price)
    };
    assert_eq!(price(&types), Some(0.011));
    resolve();
    assert_eq!(cache.builds(), 2, "the same catalog: reused");

    spot(&mut facts, 0.009);
    cloud.set_catalog(CatalogSnapshot::new(facts, 2));
    let types = resolve();
    assert_eq!(cache.builds(), 3, "renumbered: rebuilt");
    assert_eq!(price(&types), Some(0.009));
}

#[test]
fn a_class_s_reservations_are_reserved_offerings_rebuilt_when_their_room_changes() {
    use kerf::cloudprovider::CloudProviderError;
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let cloud = crate::testing::RefusingCloud::new(|| CloudProviderError::Other {
        operation: "test".into(),
        message: "refused".into(),
    });
    let mut class = class_in(&["us-east-1a"]);
    class.status.as_mut().expect("status").capacity_reservations = vec![
        serde_json::from_value(serde_json::json!({
            "id": "cr-1", "instanceType": "m5.large", "availabilityZone": "us-east-1a",
            "instanceMatchCriteria": "targeted", "ownerID": "123456789012",
        }))
        .expect("a reservation"),
    ];
    cloud.set_reservation_capacity("cr-1", 2);
    let settings = AllocatableSettings::default();
    let resolve = |cache: &InstanceTypeCache| {
        let mut source = cache.round(&catalog, None);
        let types = source.resolve("default", Some(&class), &settings);
        cache.finish_round();
        types
    };
    let room = |types: &[InstanceType]| {
        types
            .iter()
            .find(|it| it.name == "m5.large")
            .and_then(|it| {
                it.offerings
                    .iter()
                    .find(|o| o.capacity_type == CapacityType::Reserved)
            })
            .map(|o| (o.available, o.reservation.as_ref().map(|r| r.capacity)))
    };

    let cache = InstanceTypeCache::following(Some(cloud.clone()));
    assert_eq!(room(&resolve(&cache)), Some((true, Some(2))));
    assert_eq!(room(&resolve(&cache)), Some((true, Some(2))));
    assert_eq!(cache.builds(), 1, "nothing changed: not rebuilt");
    cloud.set_reservation_capacity("cr-1", 0);
    assert_eq!(room(&resolve(&cache)), Some((false, Some(0))));
    assert_eq!(cache.builds(), 2, "the room changed: rebuilt");

    let gated = InstanceTypeCache::following(Some(cloud.clone())).with_reserved_capacity(false);
    assert_eq!(
        room(&resolve(&gated)),
        None,
        "the gate off: no reserved offering"
    );
}
