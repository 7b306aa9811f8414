//! Taints, weights, relaxation, daemonsets, limits, minValues, truncation and launch choice.
use super::*;
use crate::labels::{ARCH, CAPACITY_TYPE, INSTANCE_FAMILY, INSTANCE_GPU_COUNT, ZONE};

#[test]
fn required_node_affinity_or_terms_are_tried_in_turn() {
    let pods = vec![
        pod("p")
            .cpu("1")
            .required_term(&[(ZONE, "In", &["nowhere"])])
            .required_term(&[(ZONE, "In", &["test-zone-2"])])
            .build(),
    ];
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(zone_counts(&r), [("test-zone-2".to_string(), 1)].into());
}

#[test]
fn deprecated_zone_label_keys_constrain_the_zone() {
    // Upstream reads the beta alias as the zone label in selectors and affinity alike.
    let pods = vec![
        pod("selector")
            .cpu("1")
            .node_selector(&[(crate::labels::ZONE_BETA, "test-zone-3")])
            .build(),
        pod("affinity")
            .cpu("1")
            .required_term(&[(crate::labels::ZONE_BETA, "In", &["test-zone-1"])])
            .build(),
    ];
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        zone_counts(&r),
        [
            ("test-zone-1".to_string(), 1),
            ("test-zone-3".to_string(), 1)
        ]
        .into()
    );
}

#[test]
fn preferred_node_affinity_is_used_then_relaxed() {
    let pods = vec![
        pod("likes-3")
            .cpu("1")
            .preferred_term(10, &[(ZONE, "In", &["test-zone-3"])])
            .build(),
        pod("likes-nowhere")
            .cpu("1")
            .preferred_term(10, &[(ZONE, "In", &["nowhere"])])
            .build(),
    ];
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let claim_of = |name: &str| {
        r.new_node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p.name == name))
            .expect("placed")
    };
    assert_eq!(
        req_values(claim_of("likes-3"), ZONE),
        vec!["test-zone-3".to_string()]
    );
}

#[test]
fn untolerated_taints_are_named_and_tolerations_allow_scheduling() {
    let mut np = node_pool("gpu", fake_instance_types(4));
    np.taints = vec![taint("nvidia.com/gpu", Some("true"), "NoSchedule")];
    let pods = vec![
        pod("plain").cpu("1").build(),
        pod("tolerant")
            .cpu("1")
            .toleration(Some("nvidia.com/gpu"), "Exists", None, None)
            .build(),
    ];
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![np],
        ..Default::default()
    });
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].pods[0].name, "tolerant");
    assert_eq!(r.new_node_claims[0].taints.len(), 1);
    let err = r.errors.values().next().expect("plain fails");
    assert_eq!(
        err,
        r#"incompatible with nodepool "gpu", daemonset overhead={}, did not tolerate taint (taint=nvidia.com/gpu=true:NoSchedule)"#
    );
}

#[test]
fn startup_taints_do_not_block_scheduling() {
    let mut np = node_pool("default", fake_instance_types(4));
    np.startup_taints = vec![taint("cilium.io/agent-not-ready", None, "NoExecute")];
    let r = run(&SchedulingInput {
        pods: vec![pod("p").cpu("1").lean()],
        node_pools: vec![np],
        ..Default::default()
    });
    assert!(r.errors.is_empty());
    assert_eq!(r.new_node_claims[0].startup_taints.len(), 1);
}

#[test]
fn prefer_no_schedule_taints_are_tolerated_after_relaxation() {
    let mut np = node_pool("default", fake_instance_types(4));
    np.taints = vec![taint("soft", None, "PreferNoSchedule")];
    let r = run(&SchedulingInput {
        pods: vec![pod("p").cpu("1").lean()],
        node_pools: vec![np],
        ..Default::default()
    });
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn heavier_nodepools_are_tried_first_and_fallback_follows_weight() {
    let mut heavy = node_pool("heavy", fake_instance_types(4));
    heavy.weight = 50;
    heavy.taints = vec![taint("team", Some("a"), "NoSchedule")];
    let light = node_pool("light", fake_instance_types(4));
    let pods = vec![
        pod("team-a")
            .cpu("2")
            .toleration(Some("team"), "Equal", Some("a"), None)
            .build(),
        pod("other").cpu("1").build(),
    ];
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![light, heavy],
        ..Default::default()
    });
    assert!(r.errors.is_empty());
    let pool_of = |name: &str| {
        r.new_node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p.name == name))
            .map(|c| c.node_pool.clone())
    };
    assert_eq!(pool_of("team-a").as_deref(), Some("heavy"));
    assert_eq!(pool_of("other").as_deref(), Some("light"));
}

#[test]
fn daemonset_overhead_is_reserved_on_new_nodeclaims() {
    let ds = pod("logging").namespace("kube-system").cpu("1").build();
    let pods = vec![pod("p").cpu("1").build()];
    let input = SchedulingInput {
        pods: shared(pods),
        node_pools: vec![node_pool("default", fake_instance_types(8))],
        daemonsets: vec![ds],
        ..Default::default()
    };
    let r = run(&input);
    let claim = &r.new_node_claims[0];
    // 1 CPU pod + 1 CPU daemon + 100m overhead needs the 3-vCPU type.
    assert_eq!(claim.instance_types[0].name, "fake-it-2");
    assert_eq!(
        claim.requests.get("cpu").map(|q| q.to_string()),
        Some("2".to_string())
    );
}

#[test]
fn daemonset_overhead_only_counts_where_the_daemonset_runs() {
    let mut its = fake_instance_types(4);
    for it in &mut its[..2] {
        it.labels.insert(ARCH.into(), "arm64".into());
    }
    let ds = pod("arm-agent")
        .cpu("1")
        .node_selector(&[(ARCH, "arm64")])
        .toleration(Some("special"), "Exists", None, None)
        .build();
    let untolerated = pod("tainted-agent").cpu("1").build();
    let mut np = node_pool("default", its);
    np.taints = vec![taint("special", None, "NoSchedule")];
    let pods = vec![
        pod("p")
            .cpu("500m")
            .toleration(Some("special"), "Exists", None, None)
            .build(),
    ];
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![np],
        daemonsets: vec![ds, untolerated],
        ..Default::default()
    });
    let claim = &r.new_node_claims[0];
    // The arm64 types carry the arm agent (1 CPU), so the 1-vCPU arm type is too small; the
    // amd64 types carry no daemon at all. The daemon that does not tolerate the pool never counts.
    let names: Vec<&str> = claim
        .instance_types
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert!(!names.contains(&"fake-it-0"), "{names:?}");
    assert!(
        names.contains(&"fake-it-1") && names.contains(&"fake-it-2"),
        "{names:?}"
    );
    assert_eq!(
        claim.requests.get("cpu").map(|q| q.to_string()),
        Some("500m".to_string()),
        "smallest overhead group is zero"
    );
}

#[test]
fn cpu_limits_stop_new_nodeclaims() {
    let mut np = node_pool("default", fake_instance_types(4));
    np.limits = Some(resources(&[("cpu", "8")]));
    let pods = pod("p").cpu("3").replicas("p", 4);
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![np],
        ..Default::default()
    });
    // Each 3-CPU pod needs the 4-vCPU type; 8 CPUs of limit allow two such NodeClaims.
    assert_eq!(r.new_node_claims.len(), 2);
    assert_eq!(r.errors.len(), 2);
    assert!(
        r.errors
            .values()
            .all(|e| e == r#"all available instance types exceed limits for nodepool: "default""#)
    );
}

#[test]
fn node_limits_count_nodes_and_existing_usage() {
    let mut np = node_pool("default", fake_instance_types(4));
    np.limits = Some(resources(&[("nodes", "2")]));
    let existing = ExistingNode {
        name: "old".into(),
        node_pool: Some("default".into()),
        taints: vec![taint("full", None, "NoSchedule")],
        initialized: true,
        ..Default::default()
    };
    let pods = pod("w")
        .labels(&[("app", "w")])
        .cpu("100m")
        .anti_affinity_to(crate::labels::HOSTNAME, &[("app", "w")])
        .replicas("w", 3);
    let r = run(&SchedulingInput {
        pods: shared(pods),
        existing_nodes: vec![existing],
        node_pools: vec![np],
        ..Default::default()
    });
    assert_eq!(
        r.new_node_claims.len(),
        1,
        "one node of the two is already used"
    );
    assert!(
        r.errors
            .values()
            .all(|e| e.contains("node limits have been exhausted")),
        "{:?}",
        r.errors
    );
}

#[test]
fn min_values_keeps_enough_families_or_fails() {
    let mut its = fake_instance_types(6);
    for (i, it) in its.iter_mut().enumerate() {
        it.labels
            .insert(INSTANCE_FAMILY.into(), format!("f{}", i % 3));
    }
    let mut np = node_pool("default", its);
    np.requirements.push(NodeSelectorRequirementWithMinValues {
        key: INSTANCE_FAMILY.into(),
        operator: Operator::Exists,
        values: vec![],
        min_values: Some(3),
    });
    let pods = vec![pod("small").cpu("1").build(), pod("huge").cpu("5").build()];
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![np],
        ..Default::default()
    });
    // The small pod keeps types of all three families; the 5-CPU pod only fits the 6-vCPU type.
    assert_eq!(r.new_node_claims.len(), 1);
    let families: std::collections::BTreeSet<String> = r.new_node_claims[0]
        .instance_types
        .iter()
        .map(|i| i.name.clone())
        .collect();
    assert!(families.len() >= 3);
    assert!(!r.new_node_claims[0].min_values_relaxed);
    let err = r
        .errors
        .iter()
        .find(|(p, _)| p.name == "huge")
        .map(|(_, e)| e.clone())
        .expect("huge fails");
    assert!(err.contains("minValues requirement is not met"), "{err}");
}

#[test]
fn min_values_best_effort_relaxes() {
    let mut its = fake_instance_types(6);
    for (i, it) in its.iter_mut().enumerate() {
        it.labels
            .insert(INSTANCE_FAMILY.into(), format!("f{}", i % 3));
    }
    let mut np = node_pool("default", its);
    np.requirements.push(NodeSelectorRequirementWithMinValues {
        key: INSTANCE_FAMILY.into(),
        operator: Operator::Exists,
        values: vec![],
        min_values: Some(3),
    });
    let options = SchedulingOptions {
        min_values_policy: MinValuesPolicy::BestEffort,
        ..Default::default()
    };
    let r = run(&SchedulingInput {
        pods: vec![pod("huge").cpu("5").lean()],
        node_pools: vec![np],
        options,
        ..Default::default()
    });
    assert!(r.errors.is_empty());
    let fam = r.new_node_claims[0]
        .requirements
        .iter()
        .find(|r| r.key == INSTANCE_FAMILY)
        .expect("kept");
    assert_eq!(fam.min_values, Some(1));
    assert!(r.new_node_claims[0].min_values_relaxed);
}

#[test]
fn a_pool_with_no_available_offering_is_skipped_for_the_next_by_weight() {
    // The shape of aws#8885: a spot pool over an on-demand fallback, every spot offering
    // marked unavailable (refused by EC2 in an earlier round).
    let mut refused = fake_instance_types(4);
    for it in &mut refused {
        for o in &mut it.offerings {
            o.available = o.capacity_type != CapacityType::Spot;
        }
    }
    let mut spot = node_pool("spot-first", refused.clone());
    spot.weight = 100;
    spot.requirements
        .push(requirement(CAPACITY_TYPE, Operator::In, &["spot"]));
    let mut on_demand = node_pool("on-demand", refused);
    on_demand.weight = 10;
    on_demand
        .requirements
        .push(requirement(CAPACITY_TYPE, Operator::In, &["on-demand"]));
    let pods: Vec<_> = (0..3)
        .map(|i| pod(&format!("p{i}")).cpu("1").build())
        .collect();
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![spot, on_demand],
        ..Default::default()
    });
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(!r.new_node_claims.is_empty());
    for claim in &r.new_node_claims {
        assert_eq!(claim.node_pool, "on-demand", "{claim:?}");
        let launch = claim.launch.as_ref().expect("an available offering");
        assert_eq!(launch.capacity_type, "on-demand");
    }
}

#[test]
fn instance_types_are_ordered_by_price_and_truncated() {
    let options = SchedulingOptions {
        max_instance_types: 3,
        ..Default::default()
    };
    let r = run(&SchedulingInput {
        pods: vec![pod("p").cpu("1").lean()],
        node_pools: vec![node_pool("default", fake_instance_types(10))],
        options,
        ..Default::default()
    });
    let names: Vec<&str> = r.new_node_claims[0]
        .instance_types
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(names, vec!["fake-it-1", "fake-it-2", "fake-it-3"]);
    let full = r.new_node_claims[0].node_claim_requirements();
    let it_req = full
        .iter()
        .find(|r| r.key == crate::labels::INSTANCE_TYPE)
        .expect("instance types listed");
    assert_eq!(it_req.values, vec!["fake-it-1", "fake-it-2", "fake-it-3"]);
}

#[test]
fn launch_prefers_spot_unless_on_demand_is_required() {
    let mut od = node_pool("od", fake_instance_types(4));
    od.requirements
        .push(requirement(CAPACITY_TYPE, Operator::In, &["on-demand"]));
    let r = run(&SchedulingInput {
        pods: vec![pod("p").cpu("1").lean()],
        node_pools: vec![od],
        ..Default::default()
    });
    assert_eq!(
        r.new_node_claims[0]
            .launch
            .as_ref()
            .map(|l| l.capacity_type.as_str()),
        Some("on-demand")
    );
    let r = run(&single_pool(
        vec![pod("p").cpu("1").build()],
        fake_instance_types(4),
    ));
    let launch = r.new_node_claims[0].launch.clone().expect("launch");
    assert_eq!(
        (launch.capacity_type.as_str(), launch.instance_type.as_str()),
        ("spot", "fake-it-1")
    );
}

#[test]
fn launch_avoids_exotic_types_and_overpriced_spot() {
    let mut its = fake_instance_types(4);
    // The cheapest fitting type is a GPU type; it is skipped for a pod that needs no GPU.
    its[1].labels.insert(INSTANCE_GPU_COUNT.into(), "1".into());
    // Spot for the 3-vCPU type costs more than on-demand of the 4-vCPU type.
    for o in its[2]
        .offerings
        .iter_mut()
        .filter(|o| o.capacity_type == CapacityType::Spot)
    {
        o.price = 100.0;
    }
    let r = run(&single_pool(vec![pod("p").cpu("1").build()], its));
    let launch = r.new_node_claims[0].launch.clone().expect("launch");
    assert_eq!(
        (launch.instance_type.as_str(), launch.capacity_type.as_str()),
        ("fake-it-3", "spot")
    );
}

#[test]
fn oversized_pods_get_upstream_style_reasons() {
    let r = run(&single_pool(
        vec![pod("huge").cpu("100").build()],
        fake_instance_types(4),
    ));
    let err = r.errors.values().next().expect("fails");
    assert!(
        err.starts_with(r#"incompatible with nodepool "default", daemonset overhead={}, no instance type satisfied resources {"cpu":"100","pods":"1"} and requirements "#),
        "{err}"
    );
    assert!(
        err.ends_with(
            r#"(no instance type has enough resources; the largest allowed, fake-it-3, has {"cpu":"3900m","pods":"40"} allocatable after daemonset overhead)"#
        ),
        "{err}"
    );
}

#[test]
fn a_type_that_would_fit_but_exceeds_the_limits_is_named_with_the_limits_left() {
    let mut np = node_pool("default", fake_instance_types(4));
    np.limits = Some(resources(&[("cpu", "2")]));
    let r = run(&SchedulingInput {
        pods: vec![pod("big").cpu("2500m").lean()],
        node_pools: vec![np],
        ..Default::default()
    });
    let err = r.errors.values().next().expect("fails");
    assert!(
        err.ends_with(
            r#"(no instance type has enough resources; 2 instance type(s) that would fit exceed the nodepool's remaining limits (cpu=2); the largest allowed, fake-it-1, has {"cpu":"1900m","pods":"20"} allocatable after daemonset overhead)"#
        ),
        "{err}"
    );
}

#[test]
fn a_resource_no_instance_type_offers_is_named() {
    let r = run(&single_pool(
        vec![
            pod("trunk")
                .cpu("1")
                .resource("vpc.amazonaws.com/pod-eni", "1")
                .build(),
        ],
        fake_instance_types(4),
    ));
    let err = r.errors.values().next().expect("fails");
    assert!(
        err.ends_with("; no instance type offers vpc.amazonaws.com/pod-eni)"),
        "{err}"
    );
}

#[test]
fn requirement_conflicts_are_named() {
    let mut np = node_pool("default", fake_instance_types(4));
    np.requirements
        .push(requirement(ZONE, Operator::In, &["test-zone-1"]));
    let r = run(&SchedulingInput {
        pods: vec![pod("p").node_selector(&[(ZONE, "test-zone-2")]).lean()],
        node_pools: vec![np],
        ..Default::default()
    });
    let err = r.errors.values().next().expect("fails");
    assert!(err.contains("incompatible requirements, key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [test-zone-2] not in topology.kubernetes.io/zone In [test-zone-1]"), "{err}");
    let r = run(&single_pool(
        vec![pod("p").node_selector(&[("team", "a")]).build()],
        fake_instance_types(2),
    ));
    assert!(
        r.errors
            .values()
            .next()
            .expect("fails")
            .contains(r#"label "team" does not have known values"#)
    );
}

#[test]
fn queue_places_larger_pods_first() {
    let mut np = node_pool("default", fake_instance_types(4));
    np.limits = Some(resources(&[("nodes", "1")]));
    // Only one NodeClaim may exist: the 3-CPU pod is first in the queue and takes it.
    let pods = vec![
        pod("small").cpu("1").created(1).build(),
        pod("big").cpu("3").created(2).build(),
        pod("small2").cpu("1").created(0).build(),
    ];
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![np],
        ..Default::default()
    });
    let placed: Vec<&str> = r.new_node_claims[0]
        .pods
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        placed,
        vec!["big"],
        "small pods no longer fit the 4-vCPU type: {:?}",
        r.errors
    );
    assert_eq!(r.errors.len(), 2);
}

#[test]
fn planned_nodeclaims_fill_fewest_pods_first() {
    let pods = vec![
        pod("a")
            .labels(&[("app", "x")])
            .cpu("1")
            .anti_affinity_to(crate::labels::HOSTNAME, &[("app", "x")])
            .build(),
        pod("b")
            .labels(&[("app", "x")])
            .cpu("1")
            .anti_affinity_to(crate::labels::HOSTNAME, &[("app", "x")])
            .build(),
        pod("c").cpu("500m").build(),
        pod("d").cpu("500m").build(),
    ];
    let r = run(&single_pool(pods, fake_instance_types(8)));
    assert_eq!(pods_per_claim(&r), vec![2, 2]);
}

#[test]
fn numeric_requirements_filter_instance_types() {
    let mut its = fake_instance_types(8);
    for it in &mut its {
        let cpu = it.capacity.get("cpu").map_or(0, |q| q.value());
        it.labels
            .insert(crate::labels::INSTANCE_CPU.into(), cpu.to_string());
    }
    let pods = vec![
        pod("p")
            .cpu("1")
            .required_term(&[(crate::labels::INSTANCE_CPU, "Gt", &["4"])])
            .build(),
    ];
    let r = run(&single_pool(pods, its));
    let names: Vec<&str> = r.new_node_claims[0]
        .instance_types
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    // fake-it-i has i+1 vCPUs: only 5 and more pass Gt 4.
    assert_eq!(
        names,
        vec!["fake-it-4", "fake-it-5", "fake-it-6", "fake-it-7"]
    );
}

#[test]
fn zone_id_requirements_pick_the_matching_offering() {
    let pods = vec![
        pod("p")
            .cpu("1")
            .node_selector(&[(crate::labels::ZONE_ID, "tz2")])
            .build(),
    ];
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        r.new_node_claims[0]
            .launch
            .as_ref()
            .map(|l| l.zone.as_str()),
        Some("test-zone-2")
    );
}

#[test]
fn default_truncation_keeps_the_600_cheapest_types() {
    let r = run(&single_pool(
        vec![pod("p").cpu("1").build()],
        fake_instance_types(700),
    ));
    let claim = &r.new_node_claims[0];
    assert_eq!(claim.instance_types.len(), 600);
    assert_eq!(claim.instance_types[0].name, "fake-it-1");
    assert!(
        claim
            .instance_types
            .windows(2)
            .all(|w| w[0].price <= w[1].price)
    );
}

#[test]
fn nodepool_labels_can_be_selected() {
    let mut a = node_pool("a", fake_instance_types(4));
    a.labels.insert("team".into(), "a".into());
    let mut b = node_pool("b", fake_instance_types(4));
    b.labels.insert("team".into(), "b".into());
    b.weight = 10;
    let pods = vec![
        pod("p").cpu("1").node_selector(&[("team", "a")]).build(),
        pod("q")
            .cpu("1")
            .node_selector(&[(crate::labels::NODEPOOL, "a")])
            .build(),
    ];
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![a, b],
        ..Default::default()
    });
    assert!(r.errors.is_empty());
    assert!(
        r.new_node_claims
            .iter()
            .all(|c| c.node_pool == "a" && c.labels.get("team").map(String::as_str) == Some("a"))
    );
}
