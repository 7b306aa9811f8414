//! End-to-end packing of simple and benchmark workloads.
use std::sync::Arc;

use super::*;

#[test]
fn packs_small_pods_onto_one_claim_and_picks_the_cheapest_type() {
    let pods = pod("p").cpu("1").memory("1Gi").replicas("web", 3);
    let r = run(&single_pool(pods, fake_instance_types(10)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
    let claim = &r.new_node_claims[0];
    assert_eq!(claim.pods.len(), 3);
    // 3 CPUs of requests need at least the 4-vCPU type (3.9 allocatable after overhead).
    assert_eq!(claim.instance_types[0].name, "fake-it-3");
    let launch = claim.launch.as_ref().expect("offering available");
    assert_eq!(launch.instance_type, "fake-it-3");
    assert_eq!(launch.capacity_type, "spot");
}

#[test]
fn diverse_workload_schedules_everything() {
    let r = run(&single_pool(
        diverse_pods(500, 7),
        benchmark_instance_types(),
    ));
    assert!(r.errors.is_empty(), "{:?}", r.errors.iter().next());
    let placed: usize = r.new_node_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 500);
    // 100 pods with hostname anti-affinity need 100 distinct NodeClaims.
    assert!(r.new_node_claims.len() >= 100);
}

#[test]
fn replicas_with_one_spec_share_one_class_and_the_input_keeps_the_callers_pods() {
    let pods = shared(
        pod("p")
            .cpu("1")
            .spread(crate::labels::ZONE, 1, "ScheduleAnyway", &[("app", "web")])
            .labels(&[("app", "web")])
            .replicas("web", 50),
    );
    let input = single_pool(Vec::new(), fake_instance_types(10));
    let input = SchedulingInput {
        pods: pods.iter().map(Arc::clone).collect(),
        ..input
    };
    let prepared = super::prepare::prepare(&input).expect("prepares");
    // The spec and its one relaxation (the ScheduleAnyway spread dropped): two classes for
    // fifty pods, whatever their count.
    assert_eq!(prepared.classes.len(), 2);
    assert!(
        prepared
            .pods
            .iter()
            .all(|p| p.class == prepared.pods[0].class)
    );
    assert!(
        input.pods.iter().zip(&pods).all(|(a, b)| Arc::ptr_eq(a, b)),
        "the input points at the caller's pods"
    );
}
