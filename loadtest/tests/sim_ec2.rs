//! The simulated EC2 and the simulated cloud provider on their own: launches through
//! CreateFleet pick the cheapest offering and fall through injected insufficient capacity,
//! all-ICE launches fail listing the refused offerings, providerIDs are well-formed, API
//! calls are counted, throttling and spot interruptions are injected; a repeated client token
//! is answered without a second launch, DescribeInstances searches lag behind launches, and
//! CreateTags fails on demand.

mod sim_support;

use kerf::cloudprovider::{CloudProvider, CloudProviderError, OfferingRef, parse_aws_provider_id};
use kerf::labels;
use kerf::resources::Quantity;
use kerf_loadtest::ec2::{
    CapacityType, CreateFleetRequest, DescribeInstancesRequest, Ec2Config, Ec2Error, Ec2Event,
    FleetOverride, INSUFFICIENT_INSTANCE_CAPACITY, InstanceState, LaunchTemplateConfig,
    OfferingKey, SimulatedCloudProvider, SimulatedCloudProviderConfig, catalog_offerings, ops,
};
use serde_json::json;
use sim_support::{REGION, cloud, node_claim};
use std::collections::BTreeSet;

const ZONE_A: &str = "us-east-1a";

fn on_demand_m5(zone: &str, types: &[&str]) -> serde_json::Value {
    json!([
        {"key": labels::INSTANCE_TYPE, "operator": "In", "values": types},
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
        {"key": labels::ZONE, "operator": "In", "values": [zone]},
    ])
}

fn fleet(pools: &[(&str, &str)], capacity_type: CapacityType) -> CreateFleetRequest {
    CreateFleetRequest {
        launch_template_configs: vec![LaunchTemplateConfig {
            launch_template_name: "lt".into(),
            overrides: pools
                .iter()
                .map(|(t, z)| FleetOverride {
                    capacity_reservation_id: None,
                    instance_type: (*t).into(),
                    zone: (*z).into(),
                    ..FleetOverride::default()
                })
                .collect(),
        }],
        capacity_type: Some(capacity_type),
        total_target_capacity: 1,
        ..CreateFleetRequest::default()
    }
}

#[tokio::test]
async fn create_fleet_launches_the_cheapest_pool_and_falls_through_ice() {
    let cloud = cloud();
    let ec2 = cloud.ec2();
    let request = fleet(
        &[("m5.xlarge", ZONE_A), ("m5.large", ZONE_A)],
        CapacityType::OnDemand,
    );

    let first = ec2.create_fleet(&request).await.expect("launches");
    assert_eq!(
        first.instances[0].instance_type, "m5.large",
        "cheapest pool first"
    );
    assert!(first.errors.is_empty());

    ec2.set_insufficient_capacity(
        OfferingKey::new("m5.large", ZONE_A, CapacityType::OnDemand),
        true,
    );
    let second = ec2.create_fleet(&request).await.expect("launches");
    assert_eq!(
        second.instances[0].instance_type, "m5.xlarge",
        "falls through to the next cheapest"
    );
    assert_eq!(second.errors.len(), 1);
    assert_eq!(second.errors[0].error_code, INSUFFICIENT_INSTANCE_CAPACITY);
    assert_eq!(second.errors[0].instance_type, "m5.large");

    ec2.set_insufficient_capacity(
        OfferingKey::new("m5.xlarge", ZONE_A, CapacityType::OnDemand),
        true,
    );
    let third = ec2
        .create_fleet(&request)
        .await
        .expect("the call itself succeeds");
    assert!(third.instances.is_empty());
    let refused: BTreeSet<_> = third
        .errors
        .iter()
        .map(|e| e.instance_type.as_str())
        .collect();
    assert_eq!(refused, BTreeSet::from(["m5.large", "m5.xlarge"]));

    ec2.clear_insufficient_capacity();
    let fourth = ec2.create_fleet(&request).await.expect("launches");
    assert_eq!(
        fourth.instances[0].instance_type, "m5.large",
        "capacity is back"
    );
}

#[tokio::test]
async fn provider_launch_falls_through_ice_and_reports_all_refused_offerings() {
    let cloud = cloud();
    let claim = node_claim(
        "ice",
        on_demand_m5(ZONE_A, &["m5.large", "m5.xlarge"]),
        json!({}),
    );

    let launched = cloud.create(&claim).await.expect("launches");
    assert_eq!(
        launched.metadata.labels.as_ref().expect("labels")[labels::INSTANCE_TYPE],
        "m5.large"
    );

    cloud.ec2().set_insufficient_capacity(
        OfferingKey::new("m5.large", ZONE_A, CapacityType::OnDemand),
        true,
    );
    // A fresh NodeClaim: the first one's create would adopt the instance it already has.
    let next = node_claim(
        "ice-next",
        on_demand_m5(ZONE_A, &["m5.large", "m5.xlarge"]),
        json!({}),
    );
    let fallback = cloud.create(&next).await.expect("next cheapest launches");
    cloud.delete(&fallback).await.expect("terminates");
    assert_eq!(
        fallback.metadata.labels.as_ref().expect("labels")[labels::INSTANCE_TYPE],
        "m5.xlarge"
    );

    cloud.ec2().set_insufficient_capacity(
        OfferingKey::new("m5.xlarge", ZONE_A, CapacityType::OnDemand),
        true,
    );
    match cloud.create(&next).await {
        Err(CloudProviderError::InsufficientCapacity {
            node_claim,
            offerings,
        }) => {
            assert_eq!(node_claim, "ice-next");
            assert_eq!(
                offerings,
                vec![
                    OfferingRef::new("on-demand", "m5.large", ZONE_A),
                    OfferingRef::new("on-demand", "m5.xlarge", ZONE_A),
                ]
            );
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
}

#[tokio::test]
async fn launches_offer_at_most_the_sixty_cheapest_types() {
    let cloud = cloud();
    let all_pools = catalog_offerings(&cloud_types(&cloud));
    for pool in &all_pools {
        cloud
            .ec2()
            .set_insufficient_capacity(pool.key.clone(), true);
    }
    let claim = node_claim(
        "broad",
        json!([{"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]),
        json!({}),
    );
    let Err(CloudProviderError::InsufficientCapacity { offerings, .. }) =
        cloud.create(&claim).await
    else {
        panic!("every pool is out of capacity");
    };
    let types: BTreeSet<&str> = offerings.iter().map(|o| o.instance_type.as_str()).collect();
    assert_eq!(types.len(), kerf_loadtest::ec2::MAX_INSTANCE_TYPES);
    assert!(offerings.iter().all(|o| o.capacity_type == "on-demand"));
}

fn cloud_types(cloud: &SimulatedCloudProvider) -> Vec<kerf::catalog::InstanceType> {
    let catalog = kerf::catalog::Catalog::embedded(REGION).expect("region");
    let types = catalog.instance_types(&kerf::catalog::AllocatableSettings::default());
    assert!(cloud.instance_type(&types[0].name).is_some());
    types
}

#[tokio::test]
async fn launched_nodeclaims_are_hydrated_and_provider_ids_well_formed() {
    let cloud = cloud();
    let claim = node_claim(
        "hydrated",
        json!([
            {"key": labels::INSTANCE_FAMILY, "operator": "In", "values": ["c5", "m5"]},
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]},
            {"key": labels::ZONE, "operator": "In", "values": ["us-east-1b"]},
        ]),
        json!({"cpu": "30", "memory": "8Gi"}),
    );
    let launched = cloud.create(&claim).await.expect("launches");
    let labels = launched.metadata.labels.clone().expect("labels");
    assert_eq!(
        labels[labels::CAPACITY_TYPE],
        "spot",
        "spot is preferred when allowed"
    );
    assert_eq!(labels[labels::ZONE], "us-east-1b");
    assert_eq!(
        labels[labels::NODEPOOL],
        "default",
        "the NodeClaim's own labels are kept"
    );
    assert!(["c5", "m5"].contains(&labels[labels::INSTANCE_FAMILY].as_str()));
    let status = launched.status.clone().expect("status");
    let provider_id = status.provider_id.clone().expect("providerID");
    let parsed = parse_aws_provider_id(&provider_id).expect("well-formed providerID");
    assert_eq!(parsed.zone, "us-east-1b");
    assert!(
        parsed.instance_id.len() == 19
            && parsed.instance_id[2..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit()),
        "{provider_id}"
    );
    let cpu = Quantity::parse(&status.allocatable["cpu"].0).expect("quantity");
    assert!(
        cpu >= Quantity::parse("30").expect("quantity"),
        "allocatable fits the requests"
    );
    let instance_type = cloud
        .instance_type(&labels[labels::INSTANCE_TYPE])
        .expect("catalog type");
    assert_eq!(
        status.capacity["cpu"].0,
        instance_type.capacity.cpu().to_string()
    );

    let fetched = cloud.get(&provider_id).await.expect("get finds it");
    assert_eq!(fetched.metadata.name.as_deref(), Some("hydrated"));
    assert_eq!(
        fetched.metadata.labels.expect("labels")[labels::NODEPOOL],
        "default"
    );
}

#[tokio::test]
async fn api_calls_are_counted_and_deleted_machines_are_not_found() {
    let cloud = cloud();
    let claim = node_claim("counted", on_demand_m5(ZONE_A, &["m5.large"]), json!({}));
    let mut launched = cloud.create(&claim).await.expect("launches");
    let provider_id = launched
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .expect("providerID");
    cloud.get(&provider_id).await.expect("exists");
    assert_eq!(cloud.list().await.expect("lists").len(), 1);
    launched.metadata.name = Some("counted".into());
    cloud.delete(&launched).await.expect("terminates");
    let gone = cloud.get(&provider_id).await.expect_err("terminated");
    assert!(gone.is_not_found(), "{gone}");
    assert!(
        cloud
            .delete(&launched)
            .await
            .expect_err("already gone")
            .is_not_found()
    );
    assert!(cloud.list().await.expect("lists").is_empty());

    let calls = cloud.ec2().api_calls();
    assert_eq!(calls.calls(ops::CREATE_FLEET), 1);
    assert_eq!(calls.calls(ops::TERMINATE_INSTANCES), 1);
    // create's adoption lookup, get, list, delete's lookup, get, second delete's lookup, list
    assert_eq!(calls.calls(ops::DESCRIBE_INSTANCES), 7);
    assert_eq!(calls.total_throttled(), 0);
}

#[tokio::test]
async fn throttling_rejects_the_configured_fraction() {
    let cloud = cloud();
    let ec2 = cloud.ec2();
    ec2.set_throttling(0.5).expect("valid fraction");
    let mut throttled = 0;
    for _ in 0..10 {
        match ec2
            .describe_instances(&DescribeInstancesRequest::default())
            .await
        {
            Err(Ec2Error::RequestLimitExceeded { operation }) => {
                assert_eq!(operation, ops::DESCRIBE_INSTANCES);
                throttled += 1;
            }
            Err(other) => panic!("unexpected {other}"),
            Ok(_) => {}
        }
    }
    assert_eq!(throttled, 5);
    assert_eq!(ec2.api_calls().throttled(ops::DESCRIBE_INSTANCES), 5);
    assert_eq!(ec2.api_calls().calls(ops::DESCRIBE_INSTANCES), 10);

    ec2.set_throttling(1.0).expect("valid fraction");
    let claim = node_claim("throttled", on_demand_m5(ZONE_A, &["m5.large"]), json!({}));
    match cloud.create(&claim).await {
        // The adoption lookup comes first; a create that cannot look must not launch.
        Err(CloudProviderError::Throttled { operation, .. }) => {
            assert_eq!(operation, ops::DESCRIBE_INSTANCES)
        }
        other => panic!("expected throttling, got {other:?}"),
    }
    assert!(
        ec2.set_throttling(2.0).is_err(),
        "fractions above 1 are refused"
    );
}

#[tokio::test]
async fn spot_interruptions_warn_then_reclaim() {
    let cloud = cloud();
    let ec2 = cloud.ec2();
    let mut events = ec2.subscribe();
    let spot = ec2
        .create_fleet(&fleet(&[("m5.large", ZONE_A)], CapacityType::Spot))
        .await
        .expect("launches");
    let id = spot.instances[0].instance_ids[0].clone();
    let warning = ec2.interrupt_spot(&id).expect("running spot instance");
    assert_eq!(warning.instance_id, id);
    assert_eq!(ec2.spot_interruptions(), vec![warning.clone()]);

    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    assert!(matches!(&seen[0], Ec2Event::Launched { instance_id, .. } if *instance_id == id));
    assert_eq!(seen[1], Ec2Event::SpotInterruptionWarning(warning));
    assert!(matches!(
        &seen[2],
        Ec2Event::StateChanged {
            state: InstanceState::Terminated,
            ..
        }
    ));
    assert_eq!(
        ec2.instance(&id).expect("still described").state,
        InstanceState::Terminated
    );

    let on_demand = ec2
        .create_fleet(&fleet(&[("m5.large", ZONE_A)], CapacityType::OnDemand))
        .await
        .expect("launches");
    let err = ec2
        .interrupt_spot(&on_demand.instances[0].instance_ids[0])
        .expect_err("not spot");
    assert!(err.to_string().contains("not a spot instance"), "{err}");
}

#[tokio::test]
async fn launch_latency_and_pending_state_are_simulated() {
    let config = Ec2Config {
        launch_latency: std::time::Duration::from_millis(20),
        pending_duration: std::time::Duration::from_millis(20),
        ..Ec2Config::instant(REGION)
    };
    let cloud =
        SimulatedCloudProvider::for_region(REGION, config, SimulatedCloudProviderConfig::default())
            .expect("region");
    let ec2 = cloud.ec2();
    let mut events = ec2.subscribe();
    let out = ec2
        .create_fleet(&fleet(&[("m5.large", ZONE_A)], CapacityType::OnDemand))
        .await
        .expect("launches");
    let id = out.instances[0].instance_ids[0].clone();
    assert_eq!(
        ec2.instance(&id).expect("exists").state,
        InstanceState::Pending
    );
    loop {
        match tokio::time::timeout(sim_support::PATIENCE, events.recv())
            .await
            .expect("in time")
            .expect("open")
        {
            Ec2Event::StateChanged {
                state: InstanceState::Running,
                instance_id,
                ..
            } if instance_id == id => break,
            _ => {}
        }
    }
    assert_eq!(
        ec2.instance(&id).expect("exists").state,
        InstanceState::Running
    );
}

#[tokio::test]
async fn a_new_image_makes_running_machines_drift() {
    let cloud = cloud();
    let claim = node_claim("drift", on_demand_m5(ZONE_A, &["m5.large"]), json!({}));
    let launched = cloud.create(&claim).await.expect("launches");
    assert_eq!(cloud.is_drifted(&launched).await.expect("checks"), None);
    cloud.set_image_id("ami-0123456789abcdef0");
    let reason = cloud
        .is_drifted(&launched)
        .await
        .expect("checks")
        .expect("drifted");
    assert_eq!(reason.as_str(), "AMIDrift");
}

#[tokio::test]
async fn unsatisfiable_requirements_are_insufficient_capacity_without_offerings() {
    let cloud = cloud();
    let claim = node_claim(
        "huge",
        on_demand_m5(ZONE_A, &["m5.large"]),
        json!({"cpu": "64"}),
    );
    match cloud.create(&claim).await {
        Err(CloudProviderError::InsufficientCapacity { offerings, .. }) => {
            assert!(offerings.is_empty())
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    assert_eq!(
        cloud.ec2().api_calls().calls(ops::CREATE_FLEET),
        0,
        "nothing to ask EC2 for"
    );
}

/// One replica's unavailable offerings, as a test sees them.
#[derive(Default)]
struct Marked(std::sync::Mutex<BTreeSet<(String, String, String)>>);

impl kerf::cloudprovider::UnavailableOfferings for Marked {
    fn is_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        _: &[String],
    ) -> bool {
        let key = (
            instance_type.to_owned(),
            zone.to_owned(),
            capacity_type.to_owned(),
        );
        self.0.lock().expect("unpoisoned").contains(&key)
    }
    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, _: &str) {
        let key = (
            instance_type.to_owned(),
            zone.to_owned(),
            capacity_type.to_owned(),
        );
        self.0.lock().expect("unpoisoned").insert(key);
    }
    fn mark_capacity_type_unavailable(&self, _: &str) {}
    fn mark_subnet_unavailable(&self, _: &str) {}
    fn seq_num(&self, _: &str) -> u64 {
        self.0.lock().expect("unpoisoned").len() as u64
    }
}

#[tokio::test]
async fn each_replica_launches_around_its_own_unavailable_offerings_in_the_same_region() {
    let region = cloud();
    let marked_by_a = std::sync::Arc::new(Marked::default());
    let a = region.for_replica(marked_by_a.clone());
    let b = region.for_replica(std::sync::Arc::new(Marked::default()));
    kerf::cloudprovider::UnavailableOfferings::mark_unavailable(
        &*marked_by_a,
        "m5.large",
        ZONE_A,
        "on-demand",
        "InsufficientInstanceCapacity",
    );
    let wanted = on_demand_m5(ZONE_A, &["m5.large", "m5.xlarge"]);
    let type_of = |claim: &kerf::api::NodeClaim| {
        claim.metadata.labels.as_ref().expect("labels")[labels::INSTANCE_TYPE].clone()
    };
    let by_a = a
        .create(&node_claim("by-a", wanted.clone(), json!({})))
        .await
        .expect("launches");
    let by_b = b
        .create(&node_claim("by-b", wanted, json!({})))
        .await
        .expect("launches");
    assert_eq!(type_of(&by_a), "m5.xlarge", "a leaves out what it marked");
    assert_eq!(type_of(&by_b), "m5.large", "b did not mark it");
    assert_eq!(region.ec2().instances().len(), 2, "one region");
    region.set_image_id("ami-0000000000000000b");
    assert_eq!(
        b.image_id(),
        "ami-0000000000000000b",
        "a new AMI is the region's"
    );
}

#[tokio::test]
async fn a_launch_with_every_offering_marked_unavailable_is_insufficient_capacity() {
    // A spot-only NodeClaim planned before its offerings were refused elsewhere: nothing is
    // left to offer, so no fleet is sent (EC2 refuses one without overrides) and the answer
    // is insufficient capacity naming no offering, which deletes the NodeClaim.
    let region = cloud();
    let marked = std::sync::Arc::new(Marked::default());
    let provider = region.for_replica(marked.clone());
    for zone in ["us-east-1a", "us-east-1b"] {
        kerf::cloudprovider::UnavailableOfferings::mark_unavailable(
            &*marked,
            "m5.large",
            zone,
            "spot",
            "InsufficientInstanceCapacity",
        );
    }
    let spot_only = json!([
        {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
        {"key": labels::ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
    ]);
    match provider
        .create(&node_claim("spot-first-x", spot_only, json!({})))
        .await
    {
        Err(CloudProviderError::InsufficientCapacity { offerings, .. }) => {
            assert!(offerings.is_empty(), "{offerings:?}")
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    assert_eq!(region.ec2().api_calls().calls(ops::CREATE_FLEET), 0);
    assert!(region.ec2().instances().is_empty());
}

#[tokio::test]
async fn a_repeated_client_token_gets_the_first_answer_and_launches_nothing() {
    let cloud = cloud();
    let ec2 = cloud.ec2();
    let request = CreateFleetRequest {
        client_token: Some("kerf-uid-a-0".into()),
        ..fleet(&[("m5.large", ZONE_A)], CapacityType::OnDemand)
    };
    // The first answer is lost after the launch; the retry under the same token gets it.
    ec2.lose_next_fleet_answers(1);
    let lost = ec2.create_fleet(&request).await.expect_err("answer lost");
    assert!(matches!(
        lost,
        Ec2Error::Internal {
            after_launch: true,
            ..
        }
    ));
    let again = ec2.create_fleet(&request).await.expect("answered");
    let again_twice = ec2.create_fleet(&request).await.expect("answered");
    assert_eq!(again, again_twice);
    assert_eq!(ec2.instances().len(), 1, "one launch for one token");
    assert_eq!(
        again.instances[0].instance_ids,
        vec![ec2.instances()[0].instance_id.clone()]
    );

    let other = CreateFleetRequest {
        capacity_type: Some(CapacityType::Spot),
        ..request.clone()
    };
    let mismatch = ec2
        .create_fleet(&other)
        .await
        .expect_err("other parameters");
    assert_eq!(mismatch.code(), "IdempotentParameterMismatch");
    assert_eq!(ec2.instances().len(), 1);

    // A call refused before it ran records nothing: its token launches once retried.
    let fresh = CreateFleetRequest {
        client_token: Some("kerf-uid-b-0".into()),
        ..request
    };
    ec2.fail_next_fleets(1);
    ec2.create_fleet(&fresh).await.expect_err("refused");
    assert_eq!(ec2.instances().len(), 1);
    ec2.create_fleet(&fresh).await.expect("launched");
    assert_eq!(ec2.instances().len(), 2);
}

#[tokio::test]
async fn describe_searches_lag_behind_launches_and_create_tags_fails_on_demand() {
    let cloud = cloud();
    let ec2 = cloud.ec2();
    ec2.set_describe_lag(std::time::Duration::from_secs(3600));
    let launched = ec2
        .create_fleet(&fleet(&[("m5.large", ZONE_A)], CapacityType::OnDemand))
        .await
        .expect("launches");
    let id = launched.instances[0].instance_ids[0].clone();
    let search = DescribeInstancesRequest::default();
    assert!(
        ec2.describe_instances(&search)
            .await
            .expect("searched")
            .is_empty()
    );
    let by_id = DescribeInstancesRequest {
        instance_ids: vec![id.clone()],
        ..DescribeInstancesRequest::default()
    };
    assert_eq!(
        ec2.describe_instances(&by_id).await.expect("by id").len(),
        1
    );
    ec2.set_describe_lag(std::time::Duration::ZERO);
    assert_eq!(
        ec2.describe_instances(&search)
            .await
            .expect("searched")
            .len(),
        1
    );

    ec2.fail_next_create_tags(1);
    let tags = std::collections::BTreeMap::from([("Name".to_owned(), "n".to_owned())]);
    let failed = ec2.create_tags(std::slice::from_ref(&id), &tags).await;
    assert_eq!(failed.expect_err("failed").code(), "InternalError");
    assert!(!ec2.instance(&id).expect("exists").tags.contains_key("Name"));
    ec2.create_tags(std::slice::from_ref(&id), &tags)
        .await
        .expect("tagged");
    assert_eq!(ec2.instance(&id).expect("exists").tags["Name"], "n");
}
