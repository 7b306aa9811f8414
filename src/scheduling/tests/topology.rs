//! Topology spread: zones, hostnames, capacity types and custom keys, minDomains,
//! whenUnsatisfiable, nodeAffinityPolicy, nodeTaintsPolicy and matchLabelKeys.
use super::*;
use crate::labels::{CAPACITY_TYPE, HOSTNAME, NODEPOOL, ZONE};
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn web(n: usize) -> PodBuilder {
    let _ = n;
    pod("w").labels(&[("app", "web")])
}

fn zones_pool(name: &str, zones: &[&str]) -> NodePoolInput {
    let mut np = node_pool(name, fake_instance_types(8));
    np.requirements.push(requirement(ZONE, Operator::In, zones));
    np
}

fn existing(name: &str, zone: &str, pods: Vec<k8s_openapi::api::core::v1::Pod>) -> ExistingNode {
    ExistingNode {
        name: name.into(),
        labels: [
            (ZONE.to_string(), zone.to_string()),
            (HOSTNAME.to_string(), name.to_string()),
        ]
        .into(),
        allocatable: resources(&[("cpu", "100"), ("memory", "100Gi"), ("pods", "100")]),
        pods: shared(pods),
        initialized: true,
        ..Default::default()
    }
}

#[test]
fn zonal_spread_balances_across_zones() {
    let pods = web(0)
        .cpu("1.1")
        .spread(ZONE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 4);
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty());
    let mut counts: Vec<usize> = zone_counts(&r).into_values().collect();
    counts.sort();
    assert_eq!(counts, vec![1, 1, 2]);
}

/// A NodePool's zone restriction does not shrink the spread's domains: the zone it cannot
/// reach still counts, so each reachable zone takes one replica and the rest wait.
#[test]
fn nodepool_zone_subset_does_not_shrink_spread_domains() {
    let pods = web(0)
        .cpu("1.1")
        .spread(ZONE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 4);
    let input = SchedulingInput {
        pods: shared(pods),
        node_pools: vec![zones_pool("default", &["test-zone-1", "test-zone-2"])],
        ..Default::default()
    };
    let r = run(&input);
    assert_eq!(
        zone_counts(&r),
        [
            ("test-zone-1".to_string(), 1),
            ("test-zone-2".to_string(), 1)
        ]
        .into()
    );
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    for reason in r.errors.values() {
        assert!(
            reason.contains("unsatisfiable topology constraint for topology spread")
                && reason.contains("test-zone-3: 0"),
            "{reason}"
        );
    }
}

/// The seed case: domains come from every NodePool, and a pod's eligible domains from its own
/// requirements. A pod pinned to a NodePool that covers two of three zones gets two replicas
/// placed; the third would make the skew 2 against the empty third zone.
#[test]
fn eligible_domains_come_from_pod_requirements_not_the_nodepool() {
    let pods = web(0)
        .cpu("1.1")
        .node_selector(&[(NODEPOOL, "two-zones")])
        .spread(ZONE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 3);
    let input = SchedulingInput {
        pods: shared(pods),
        node_pools: vec![
            zones_pool("all-zones", &ZONES),
            zones_pool("two-zones", &["test-zone-1", "test-zone-2"]),
        ],
        ..Default::default()
    };
    let r = run(&input);
    assert_eq!(
        zone_counts(&r),
        [
            ("test-zone-1".to_string(), 1),
            ("test-zone-2".to_string(), 1)
        ]
        .into()
    );
    assert!(r.new_node_claims.iter().all(|c| c.node_pool == "two-zones"));
    assert_eq!(r.errors.len(), 1);
    let err = r.errors.values().next().expect("one error");
    assert!(
        err.contains("unsatisfiable topology constraint for topology spread"),
        "{err}"
    );
    assert!(
        err.contains(r#"incompatible with nodepool "all-zones""#),
        "{err}"
    );
}

#[test]
fn existing_pods_count_towards_spread() {
    let running = web(0).build();
    let pods = web(0)
        .cpu("1.1")
        .spread(ZONE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 6);
    let mut node = existing("old", "test-zone-3", vec![running]);
    node.taints = vec![taint("full", None, "NoSchedule")];
    let input = SchedulingInput {
        pods: shared(pods),
        existing_nodes: vec![node],
        node_pools: vec![zones_pool("default", &["test-zone-1", "test-zone-2"])],
        ..Default::default()
    };
    let r = run(&input);
    // Zone 3 holds one pod and cannot take more, so zones 1 and 2 stop at two each.
    assert_eq!(
        zone_counts(&r),
        [
            ("test-zone-1".to_string(), 2),
            ("test-zone-2".to_string(), 2)
        ]
        .into()
    );
    assert_eq!(r.errors.len(), 2);
}

#[test]
fn hostname_spread_puts_one_matching_pod_per_node() {
    let pods = web(0)
        .cpu("100m")
        .spread(HOSTNAME, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 4);
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty());
    assert_eq!(pods_per_claim(&r), vec![1, 1, 1, 1]);
}

#[test]
fn hostname_spread_allows_max_skew_per_node() {
    let pods = web(0)
        .cpu("100m")
        .spread(HOSTNAME, 2, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 4);
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert_eq!(pods_per_claim(&r), vec![2, 2]);
}

#[test]
fn min_domains_limits_pods_when_domains_are_missing() {
    let pods = web(0)
        .cpu("1.1")
        .spread_with(TopologySpreadConstraint {
            topology_key: ZONE.into(),
            max_skew: 1,
            min_domains: Some(3),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), "web".to_string())].into()),
                match_expressions: None,
            }),
            ..Default::default()
        })
        .replicas("web", 4);
    let input = SchedulingInput {
        pods: shared(pods),
        node_pools: vec![zones_pool("default", &["test-zone-1", "test-zone-2"])],
        ..Default::default()
    };
    let r = run(&input);
    assert_eq!(
        zone_counts(&r),
        [
            ("test-zone-1".to_string(), 1),
            ("test-zone-2".to_string(), 1)
        ]
        .into()
    );
    assert_eq!(r.errors.len(), 2);
}

fn tainted_three_zone_pool_and_zone_one_pool() -> Vec<NodePoolInput> {
    let mut tainted = zones_pool("tainted", &ZONES);
    tainted.taints = vec![taint("dedicated", Some("x"), "NoSchedule")];
    vec![tainted, zones_pool("zone-one", &["test-zone-1"])]
}

#[test]
fn do_not_schedule_spread_fails_when_only_one_zone_is_usable() {
    let pods = web(0)
        .cpu("1.1")
        .spread(ZONE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 3);
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: tainted_three_zone_pool_and_zone_one_pool(),
        ..Default::default()
    });
    assert_eq!(zone_counts(&r), [("test-zone-1".to_string(), 1)].into());
    assert_eq!(r.errors.len(), 2);
}

#[test]
fn schedule_anyway_spread_is_relaxed() {
    let pods = web(0)
        .cpu("1.1")
        .spread(ZONE, 1, "ScheduleAnyway", &[("app", "web")])
        .replicas("web", 3);
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: tainted_three_zone_pool_and_zone_one_pool(),
        ..Default::default()
    });
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(zone_counts(&r), [("test-zone-1".to_string(), 3)].into());
}

#[test]
fn node_taints_policy_honor_ignores_domains_of_untolerated_pools() {
    let pods = web(0)
        .cpu("1.1")
        .spread_with(TopologySpreadConstraint {
            topology_key: ZONE.into(),
            max_skew: 1,
            when_unsatisfiable: "DoNotSchedule".into(),
            node_taints_policy: Some("Honor".into()),
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), "web".to_string())].into()),
                match_expressions: None,
            }),
            ..Default::default()
        })
        .replicas("web", 3);
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: tainted_three_zone_pool_and_zone_one_pool(),
        ..Default::default()
    });
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(zone_counts(&r), [("test-zone-1".to_string(), 3)].into());
}

#[test]
fn node_affinity_policy_decides_whether_non_matching_nodes_count() {
    let run_with = |policy: Option<&str>| {
        let running: Vec<_> = web(0).replicas("old", 3);
        let pods = web(0)
            .cpu("1.1")
            .node_selector(&[("team", "a")])
            .spread_with(TopologySpreadConstraint {
                topology_key: ZONE.into(),
                max_skew: 1,
                when_unsatisfiable: "DoNotSchedule".into(),
                node_affinity_policy: policy.map(Into::into),
                label_selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), "web".to_string())].into()),
                    match_expressions: None,
                }),
                ..Default::default()
            })
            .replicas("web", 3);
        let mut np = zones_pool("default", &ZONES);
        np.labels.insert("team".into(), "a".into());
        let mut node = existing("old", "test-zone-2", running);
        node.taints = vec![taint("full", None, "NoSchedule")];
        run(&SchedulingInput {
            pods: shared(pods),
            existing_nodes: vec![node],
            node_pools: vec![np],
            ..Default::default()
        })
    };
    let honor = run_with(None);
    assert_eq!(honor.errors.len(), 0);
    assert_eq!(
        zone_counts(&honor).get("test-zone-2"),
        Some(&1),
        "the old node does not match the pod's selector"
    );
    let ignore = run_with(Some("Ignore"));
    assert_eq!(
        zone_counts(&ignore).get("test-zone-2"),
        None,
        "the old node's three pods count"
    );
}

#[test]
fn match_label_keys_spread_each_revision_separately() {
    let old: Vec<_> = web(0).labels(&[("rev", "x")]).replicas("old", 2);
    let pods = web(0)
        .labels(&[("rev", "y")])
        .cpu("1.1")
        .spread_with(TopologySpreadConstraint {
            topology_key: ZONE.into(),
            max_skew: 1,
            when_unsatisfiable: "DoNotSchedule".into(),
            match_label_keys: Some(vec!["rev".into()]),
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), "web".to_string())].into()),
                match_expressions: None,
            }),
            ..Default::default()
        })
        .replicas("web", 3);
    let mut node = existing("old", "test-zone-1", old);
    node.taints = vec![taint("full", None, "NoSchedule")];
    let r = run(&SchedulingInput {
        pods: shared(pods),
        existing_nodes: vec![node],
        node_pools: vec![zones_pool("default", &ZONES)],
        ..Default::default()
    });
    assert!(r.errors.is_empty());
    assert_eq!(
        zone_counts(&r).into_values().collect::<Vec<_>>(),
        vec![1, 1, 1]
    );
}

#[test]
fn capacity_type_spread_uses_spot_and_on_demand() {
    let pods = web(0)
        .cpu("1.1")
        .spread(CAPACITY_TYPE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 2);
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert!(r.errors.is_empty());
    let mut cts: Vec<String> = r
        .new_node_claims
        .iter()
        .flat_map(|c| req_values(c, CAPACITY_TYPE))
        .collect();
    cts.sort();
    assert_eq!(cts, vec!["on-demand".to_string(), "spot".to_string()]);
}

#[test]
fn custom_key_spread_balances_nodepool_values() {
    let pods = web(0)
        .cpu("1.1")
        .spread("team", 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", 4);
    let mut np = node_pool("default", fake_instance_types(4));
    np.requirements
        .push(requirement("team", Operator::In, &["a", "b"]));
    let r = run(&SchedulingInput {
        pods: shared(pods),
        node_pools: vec![np],
        ..Default::default()
    });
    assert!(r.errors.is_empty());
    let mut teams: Vec<String> = r
        .new_node_claims
        .iter()
        .flat_map(|c| c.labels.get("team").cloned())
        .collect();
    teams.sort();
    // Each claim is pinned to one team and the teams hold two pods each.
    let per_team = |t: &str| {
        r.new_node_claims
            .iter()
            .filter(|c| c.labels.get("team").map(String::as_str) == Some(t))
            .map(|c| c.pods.len())
            .sum::<usize>()
    };
    assert_eq!((per_team("a"), per_team("b")), (2, 2));
}
