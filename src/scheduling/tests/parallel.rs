//! Solving independent NodePools on separate threads — or part by part through [`Batch`], in
//! any order — gives exactly the sequential result.
use super::*;
use crate::labels::{HOSTNAME, ZONE};
use proptest::prelude::*;

fn random_input(seed: u64) -> SchedulingInput {
    let mut rng = super::super::testing::Rng::new(seed);
    let teams = ["a", "b", "c"];
    let mut pools = Vec::new();
    for i in 0..1 + rng.below(4) {
        let mut np = node_pool(
            &format!("pool-{i}"),
            fake_instance_types(1 + rng.below(6) as u32),
        );
        np.weight = rng.below(3) as i32;
        if rng.below(2) == 0 {
            np.taints = vec![taint("team", Some(teams[rng.below(3)]), "NoSchedule")];
        }
        if rng.below(2) == 0 {
            let zones: Vec<&str> = ZONES
                .iter()
                .copied()
                .filter(|_| rng.below(2) == 0)
                .collect();
            if !zones.is_empty() {
                np.requirements
                    .push(requirement(ZONE, Operator::In, &zones));
            }
        }
        if rng.below(3) == 0 {
            np.limits = Some(resources(&[("cpu", &format!("{}", 2 + rng.below(20)))]));
        }
        np.labels
            .insert("pool-team".into(), teams[rng.below(3)].into());
        pools.push(np);
    }
    let mut pods = Vec::new();
    for d in 0..1 + rng.below(6) {
        let app = format!("app-{}", rng.below(3));
        let mut b = pod("x")
            .labels(&[("app", &app)])
            .cpu(&format!("{}m", 100 + 100 * rng.below(30)));
        match rng.below(5) {
            0 => b = b.spread(ZONE, 1, "DoNotSchedule", &[("app", &app)]),
            1 => b = b.anti_affinity_to(HOSTNAME, &[("app", &app)]),
            2 => {
                b = b.spread(
                    HOSTNAME,
                    1 + rng.below(2) as i32,
                    "ScheduleAnyway",
                    &[("app", &app)],
                )
            }
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
    SchedulingInput {
        pods: shared(pods),
        node_pools: pools,
        ..Default::default()
    }
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
        prop_assert_eq!(&sequential, &parallel);

        // Part by part, as the controller's NodePool schedulers do: each part solved on its
        // own (here in reverse order), then assembled.
        let batch = Batch::prepare(&input).expect("valid");
        let outcomes: Vec<PartOutcome> =
            batch.parts().iter().rev().map(|p| batch.solve_part(p)).collect();
        prop_assert_eq!(&batch.assemble(outcomes), &sequential);
        let pods: usize = batch.parts().iter().map(Part::pod_count).sum();
        prop_assert_eq!(pods, input.pods.len());
    }
}

#[test]
fn parts_name_their_node_pools_and_cover_each_pool_once() {
    for seed in 0..32 {
        let input = random_input(seed);
        let batch = Batch::prepare(&input).expect("valid");
        let mut named: Vec<&String> = batch.parts().iter().flat_map(|p| p.node_pools()).collect();
        let before = named.len();
        named.sort();
        named.dedup();
        assert_eq!(named.len(), before, "seed {seed}: a pool is in two parts");
        for (i, part) in batch.parts().iter().enumerate() {
            assert_eq!(part.index(), i);
            assert!(part.pod_count() > 0);
        }
    }
}

#[test]
fn a_part_without_an_outcome_reports_its_pods_instead_of_dropping_them() {
    let mut a = node_pool("a", fake_instance_types(4));
    a.taints = vec![taint("team", Some("a"), "NoSchedule")];
    let mut pods = pod("x")
        .cpu("1")
        .toleration(Some("team"), "Equal", Some("a"), None)
        .replicas("a", 2);
    pods.extend(pod("y").cpu("1").replicas("b", 3));
    let input = SchedulingInput {
        pods: shared(pods),
        node_pools: vec![a],
        ..Default::default()
    };
    let batch = Batch::prepare(&input).expect("valid");
    assert_eq!(batch.parts().len(), 2, "{batch:?}");
    let pooled = batch
        .parts()
        .iter()
        .find(|p| p.node_pools() == ["a".to_owned()])
        .expect("a part for pool a");
    let result = batch.assemble(vec![batch.solve_part(pooled)]);
    assert_eq!(result.new_node_claims.len(), 1);
    assert_eq!(result.errors.len(), 3, "{:?}", result.errors);
    assert!(result.errors.values().all(|e| e == UNSOLVED_PART));
}

#[test]
fn independent_pools_split_into_components() {
    let mut a = node_pool("a", fake_instance_types(4));
    a.taints = vec![taint("team", Some("a"), "NoSchedule")];
    let mut b = node_pool("b", fake_instance_types(4));
    b.taints = vec![taint("team", Some("b"), "NoSchedule")];
    let mut pods = pod("x")
        .cpu("1")
        .toleration(Some("team"), "Equal", Some("a"), None)
        .replicas("a", 3);
    pods.extend(
        pod("y")
            .cpu("1")
            .toleration(Some("team"), "Equal", Some("b"), None)
            .replicas("b", 3),
    );
    let input = SchedulingInput {
        pods: shared(pods),
        node_pools: vec![a, b],
        ..Default::default()
    };
    let batch = Batch::prepare(&input).expect("valid");
    assert_eq!(batch.parts().len(), 2);
    assert_eq!(batch.parts()[0].node_pools(), ["a".to_owned()]);
    assert_eq!(batch.parts()[1].node_pools(), ["b".to_owned()]);
    let r = run(&input);
    assert_eq!(r.new_node_claims.len(), 2);
    assert_eq!(r.new_node_claims[0].node_pool, "a");
    assert_eq!(r.new_node_claims[1].node_pool, "b");
}
