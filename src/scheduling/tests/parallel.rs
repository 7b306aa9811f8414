//! Solving independent NodePools on separate threads gives exactly the sequential result.
use super::*;
use crate::labels::{HOSTNAME, ZONE};
use proptest::prelude::*;

fn random_input(seed: u64) -> SchedulingInput {
    let mut rng = super::super::testing::Rng::new(seed);
    let teams = ["a", "b", "c"];
    let mut pools = Vec::new();
    for i in 0..1 + rng.below(4) {
        let mut np = node_pool(&format!("pool-{i}"), fake_instance_types(1 + rng.below(6) as u32));
        np.weight = rng.below(3) as i32;
        if rng.below(2) == 0 {
            np.taints = vec![taint("team", Some(teams[rng.below(3)]), "NoSchedule")];
        }
        if rng.below(2) == 0 {
            let zones: Vec<&str> = ZONES.iter().copied().filter(|_| rng.below(2) == 0).collect();
            if !zones.is_empty() {
                np.requirements.push(requirement(ZONE, Operator::In, &zones));
            }
        }
        if rng.below(3) == 0 {
            np.limits = Some([("cpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(format!("{}", 2 + rng.below(20))))].into());
        }
        np.labels.insert("pool-team".into(), teams[rng.below(3)].into());
        pools.push(np);
    }
    let mut pods = Vec::new();
    for d in 0..1 + rng.below(6) {
        let app = format!("app-{}", rng.below(3));
        let mut b = pod("x").labels(&[("app", &app)]).cpu(&format!("{}m", 100 + 100 * rng.below(30)));
        match rng.below(5) {
            0 => b = b.spread(ZONE, 1, "DoNotSchedule", &[("app", &app)]),
            1 => b = b.anti_affinity_to(HOSTNAME, &[("app", &app)]),
            2 => b = b.spread(HOSTNAME, 1 + rng.below(2) as i32, "ScheduleAnyway", &[("app", &app)]),
            3 => b = b.affinity_to(ZONE, &[("app", &app)]),
            _ => {}
        }
        if rng.below(2) == 0 {
            let t = teams[rng.below(3)];
            b = b.toleration(Some("team"), "Equal", Some(t), None);
            if rng.below(2) == 0 {
                b = b.node_selector(&[("pool-team", t)]);
            }
        }
        pods.extend(b.replicas(&format!("d{d}"), 1 + rng.below(8)));
    }
    SchedulingInput { pods, node_pools: pools, ..Default::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn parallel_solve_equals_sequential(seed in any::<u64>()) {
        let mut input = random_input(seed);
        input.options.parallel = false;
        let sequential = run(&input);
        input.options.parallel = true;
        let parallel = run(&input);
        prop_assert_eq!(sequential, parallel);
    }
}

#[test]
fn independent_pools_split_into_components() {
    let mut a = node_pool("a", fake_instance_types(4));
    a.taints = vec![taint("team", Some("a"), "NoSchedule")];
    let mut b = node_pool("b", fake_instance_types(4));
    b.taints = vec![taint("team", Some("b"), "NoSchedule")];
    let mut pods = pod("x").cpu("1").toleration(Some("team"), "Equal", Some("a"), None).replicas("a", 3);
    pods.extend(pod("y").cpu("1").toleration(Some("team"), "Equal", Some("b"), None).replicas("b", 3));
    let input = SchedulingInput { pods, node_pools: vec![a, b], ..Default::default() };
    let prep = super::super::prepare::prepare(&input).expect("valid");
    assert_eq!(super::super::components(&prep).len(), 2);
    let r = run(&input);
    assert_eq!(r.new_node_claims.len(), 2);
    assert_eq!(r.new_node_claims[0].node_pool, "a");
    assert_eq!(r.new_node_claims[1].node_pool, "b");
}
