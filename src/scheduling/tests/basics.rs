use super::*;
use crate::labels;

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
    let r = run(&single_pool(diverse_pods(500, 7), benchmark_instance_types()));
    assert!(r.errors.is_empty(), "{:?}", r.errors.iter().next());
    let placed: usize = r.new_node_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 500);
    // 100 pods with hostname anti-affinity need 100 distinct NodeClaims.
    assert!(r.new_node_claims.len() >= 100);
    let _ = labels::ZONE;
}
