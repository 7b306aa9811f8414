//! Pod affinity and anti-affinity, required and preferred, including the inverse
//! anti-affinity of running and pending pods.
use super::*;
use crate::labels::{HOSTNAME, ZONE};

fn db() -> PodBuilder {
    pod("db").labels(&[("app", "db")]).cpu("1")
}

#[test]
fn pod_affinity_on_hostname_colocates_with_the_target() {
    let mut pods = vec![db().build()];
    // The follower is larger so it is tried first, fails, and succeeds on the next pass.
    pods.push(
        pod("follower")
            .cpu("2")
            .affinity_to(HOSTNAME, &[("app", "db")])
            .build(),
    );
    let r = run(&single_pool(pods, fake_instance_types(8)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].pods.len(), 2);
}

#[test]
fn self_affinity_on_zone_keeps_a_deployment_in_one_zone() {
    let pods = pod("w")
        .labels(&[("app", "web")])
        .cpu("1.5")
        .affinity_to(ZONE, &[("app", "web")])
        .replicas("web", 5);
    let r = run(&single_pool(pods, fake_instance_types(2)));
    assert!(r.errors.is_empty());
    assert_eq!(
        zone_counts(&r).len(),
        1,
        "one zone for all: {:?}",
        zone_counts(&r)
    );
    assert_eq!(zone_counts(&r).values().sum::<usize>(), 5);
}

#[test]
fn affinity_to_a_missing_pod_is_unschedulable() {
    let pods = vec![pod("lonely").affinity_to(ZONE, &[("app", "ghost")]).build()];
    let r = run(&single_pool(pods, fake_instance_types(2)));
    assert!(r.new_node_claims.is_empty());
    let err = &r.errors.values().next().expect("error");
    assert!(
        err.contains("unsatisfiable topology constraint for pod affinity"),
        "{err}"
    );
}

#[test]
fn hostname_anti_affinity_separates_pods() {
    let pods = pod("w")
        .labels(&[("app", "web")])
        .cpu("100m")
        .anti_affinity_to(HOSTNAME, &[("app", "web")])
        .replicas("web", 3);
    let r = run(&single_pool(pods, fake_instance_types(8)));
    assert!(r.errors.is_empty());
    assert_eq!(pods_per_claim(&r), vec![1, 1, 1]);
}

#[test]
fn zonal_anti_affinity_commits_late_so_one_pod_per_batch() {
    // Upstream's late committal: the first NodeClaim may still land in any zone, so it blocks
    // them all for the rest of the batch.
    let pods = pod("w")
        .labels(&[("app", "web")])
        .cpu("100m")
        .anti_affinity_to(ZONE, &[("app", "web")])
        .replicas("web", 4);
    let r = run(&single_pool(pods, fake_instance_types(8)));
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(req_values(&r.new_node_claims[0], ZONE).len(), 3);
    assert_eq!(r.errors.len(), 3);
}

#[test]
fn zonal_anti_affinity_is_not_violated_by_pinned_pods() {
    let mut pods: Vec<_> = ZONES
        .iter()
        .map(|z| {
            pod(&format!("pinned-{z}"))
                .labels(&[("security", "s2")])
                .cpu("2")
                .node_selector(&[(ZONE, z)])
                .build()
        })
        .collect();
    pods.push(
        pod("anti")
            .anti_affinity_to(ZONE, &[("security", "s2")])
            .build(),
    );
    let r = run(&single_pool(pods, fake_instance_types(8)));
    assert_eq!(
        zone_counts(&r).into_values().collect::<Vec<_>>(),
        vec![1, 1, 1]
    );
    assert_eq!(
        r.errors.keys().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        vec!["anti"]
    );
}

#[test]
fn anti_affinity_of_a_running_pod_keeps_others_out_of_its_zone() {
    let guard = pod("guard")
        .labels(&[("app", "guard")])
        .anti_affinity_to(ZONE, &[("app", "web")])
        .build();
    let node = ExistingNode {
        name: "n1".into(),
        labels: [(ZONE.to_string(), "test-zone-1".to_string())].into(),
        allocatable: resources(&[("cpu", "64"), ("memory", "64Gi"), ("pods", "100")]),
        pods: vec![std::sync::Arc::new(guard.into())],
        initialized: true,
        ..Default::default()
    };
    let pods = pod("w")
        .labels(&[("app", "web")])
        .cpu("1.1")
        .replicas("web", 6);
    let r = run(&SchedulingInput {
        pods: shared(pods),
        existing_nodes: vec![node],
        node_pools: vec![node_pool("default", fake_instance_types(2))],
        ..Default::default()
    });
    assert!(r.errors.is_empty());
    assert!(
        r.existing_nodes.is_empty(),
        "web pods must not join the guard's zone"
    );
    assert!(!r.new_node_claims.is_empty());
    for c in &r.new_node_claims {
        let zones = req_values(c, ZONE);
        assert!(
            !zones.is_empty() && !zones.contains(&"test-zone-1".to_string()),
            "{zones:?}"
        );
    }
}

#[test]
fn pending_pod_anti_affinity_is_enforced_in_reverse() {
    // The guard (scheduled first: larger) has anti-affinity to web pods in its zone; the web
    // pods have no constraints of their own but must avoid the guard's zone.
    let mut np = node_pool("default", fake_instance_types(4));
    np.requirements.push(requirement(
        ZONE,
        Operator::In,
        &["test-zone-1", "test-zone-2"],
    ));
    let mut pods = vec![
        pod("guard")
            .cpu("3")
            .labels(&[("app", "guard")])
            .node_selector(&[(ZONE, "test-zone-1")])
            .anti_affinity_to(ZONE, &[("app", "web")])
            .build(),
    ];
    pods.extend(
        pod("w")
            .labels(&[("app", "web")])
            .cpu("1")
            .replicas("web", 3),
    );
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![np],
        ..Default::default()
    });
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for c in &r.new_node_claims {
        if c.pods.iter().any(|p| p.name.starts_with("web")) {
            assert_eq!(req_values(c, ZONE), vec!["test-zone-2".to_string()]);
        }
    }
}

#[test]
fn preferred_anti_affinity_is_violated_when_it_cannot_be_met() {
    let pods = pod("w")
        .labels(&[("app", "web")])
        .cpu("100m")
        .preferred_anti_affinity_to(10, ZONE, &[("app", "web")])
        .replicas("web", 5);
    let r = run(&single_pool(pods, fake_instance_types(8)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        r.new_node_claims
            .iter()
            .map(|c| c.pods.len())
            .sum::<usize>(),
        5
    );
    // The same pods with the term required: only the first fits this batch.
    let pods = pod("w")
        .labels(&[("app", "web")])
        .cpu("100m")
        .anti_affinity_to(ZONE, &[("app", "web")])
        .replicas("web", 5);
    assert_eq!(
        run(&single_pool(pods, fake_instance_types(8))).errors.len(),
        4
    );
}

#[test]
fn preferred_affinity_is_honoured_when_possible() {
    let mut pods = vec![
        db().node_selector(&[(ZONE, "test-zone-2")])
            .cpu("3")
            .build(),
    ];
    pods.push(
        pod("f")
            .cpu("1")
            .preferred_affinity_to(5, ZONE, &[("app", "db")])
            .build(),
    );
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty());
    assert_eq!(zone_counts(&r), [("test-zone-2".to_string(), 2)].into());
}

#[test]
fn affinity_respects_namespaces() {
    let mut pods = vec![db().namespace("other").build()];
    pods.push(
        pod("f")
            .cpu("2")
            .affinity_to(HOSTNAME, &[("app", "db")])
            .build(),
    );
    let r = run(&single_pool(pods, fake_instance_types(8)));
    // The target lives in another namespace, so the follower's term (own namespace) finds nothing.
    assert_eq!(r.errors.len(), 1);
    assert!(r.errors.keys().any(|p| p.name == "f"));
}
