//! Decisions per method and per blocking rule, asserting which nodes go and what replaces
//! them, on clusters built from the shared fixtures.

use std::time::Duration;

use serde_json::json;

use super::testing::*;
use super::*;
use crate::api::{ConsolidationPolicy, DisruptionReason, Operator};
use crate::feature_gates::FeatureGates;
use crate::labels;
use crate::scheduling::testing as st;

fn run(cluster: ClusterBuilder) -> DisruptionReport {
    decide(&cluster.build(), options()).expect("valid input")
}

fn run_with(cluster: ClusterBuilder, options: Options) -> DisruptionReport {
    decide(&cluster.build(), options).expect("valid input")
}

fn unlimited() -> PoolBuilder {
    node_pool("default").budgets(json!([{"nodes": "100%"}]))
}

fn reason_of<'a>(report: &'a DisruptionReport, node: &str) -> &'a str {
    report
        .blocked
        .iter()
        .find(|b| b.node == node)
        .map(|b| b.reason.as_str())
        .unwrap_or_else(|| panic!("{node} is not blocked: {report:#?}"))
}

fn methods(report: &DisruptionReport) -> Vec<(Method, Decision, Vec<String>)> {
    report
        .commands
        .iter()
        .map(|c| (c.method, c.decision, c.nodes.clone()))
        .collect()
}

/// The capacity types a replacement's requirements allow.
fn pinned_capacity_types(replacement: &ReplacementReport) -> &[String] {
    &replacement
        .requirements
        .iter()
        .find(|r| r.key == labels::CAPACITY_TYPE)
        .expect("a capacity type requirement")
        .values
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

// Emptiness.

#[test]
fn emptiness_deletes_every_empty_node_the_budget_allows_in_one_command() {
    let report = run(cluster()
        .pool(unlimited())
        .node(node("a"))
        .node(node("b"))
        .node(node("busy").pods(2)));
    let first = &report.commands[0];
    assert_eq!(first.method, Method::Emptiness);
    assert_eq!(first.reason, Reason::Empty);
    assert_eq!(first.decision, Decision::Delete);
    assert_eq!(first.nodes, names(&["a", "b"]));
    assert!(first.replacements.is_empty());
    assert!(first.hourly_savings > 0.0);
}

#[test]
fn a_terminating_statefulset_pod_keeps_its_node_from_being_empty() {
    let terminating = |name: &str, owner: &str| {
        let mut pod = st::pod(name).cpu("100m").memory("128Mi").build();
        pod.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ago(10)),
        );
        pod.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u"}))
            .expect("an owner reference"),
        ]);
        pod
    };
    let report = run(cluster()
        .pool(unlimited())
        .node(node("web").pod(terminating("web-1", "ReplicaSet")))
        .node(node("db").pod(terminating("db-0", "StatefulSet"))));
    let first = &report.commands[0];
    assert_eq!(first.method, Method::Emptiness);
    assert_eq!(
        first.nodes,
        names(&["web"]),
        "the StatefulSet pod still needs a place: {report:#?}"
    );
}

#[test]
fn a_node_a_round_just_planned_pods_onto_is_no_candidate_of_any_method() {
    // Both nodes are empty, consolidatable and drifted: only the nominated one is left
    // alone, by every voluntary method, with upstream's reason. (Expiration is no candidate
    // method, as upstream's: it takes nominated nodes too.)
    let node_of = |name: &str| node(name).size("small").drifted("AMIDrift", ago(60));
    let report = run(cluster()
        .pool(unlimited())
        .node(node_of("planned").nominated())
        .node(node_of("idle")));
    assert_eq!(reason_of(&report, "planned"), NOMINATED);
    assert!(
        report
            .commands
            .iter()
            .all(|c| !c.nodes.contains(&"planned".to_owned())),
        "{report:#?}"
    );
    assert_eq!(
        report.commands.first().map(|c| c.nodes.clone()),
        Some(names(&["idle"])),
        "{report:#?}"
    );
}

#[test]
fn the_default_ten_percent_budget_allows_one_empty_node_per_pass() {
    let report = run(cluster().node(node("a")).node(node("b")).node(node("c")));
    assert_eq!(
        methods(&report),
        vec![
            (Method::Emptiness, Decision::Delete, names(&["a"])),
            (Method::Emptiness, Decision::Delete, names(&["b"])),
            (Method::Emptiness, Decision::Delete, names(&["c"])),
        ]
    );
    assert_eq!(report.summary.nodes, 3);
    assert_eq!(report.summary.nodes_after, 0);
    assert_eq!(report.summary.hourly_cost_after, 0.0);
    let empty = report
        .budgets
        .iter()
        .find(|b| b.reason == DisruptionReason::Empty)
        .expect("budget reported");
    assert_eq!((empty.node_pool.as_str(), empty.allowed), ("default", 1));
}

#[test]
fn emptiness_waits_for_consolidate_after_since_the_last_pod_event() {
    let report = run(cluster()
        .pool(unlimited().consolidate_after("2h"))
        .node(node("recent").last_pod_event(ago(600)))
        .node(node("old").last_pod_event(ago(3 * 3600))));
    assert_eq!(
        methods(&report),
        vec![(Method::Emptiness, Decision::Delete, names(&["old"]))]
    );
    assert!(reason_of(&report, "recent").contains("consolidateAfter 2h has not elapsed"));
}

#[test]
fn consolidate_after_never_disables_emptiness_and_consolidation_but_not_drift_or_expiry() {
    let report = run(cluster()
        .pool(unlimited().consolidate_after("Never"))
        .node(node("empty"))
        .node(node("drifted").drifted("AMIDrift", ago(60)))
        .node(node("old").pods(1).created(ago(800 * 3600))));
    assert_eq!(
        methods(&report),
        vec![
            (Method::Expiration, Decision::Delete, names(&["old"])),
            (Method::Drift, Decision::Delete, names(&["drifted"])),
        ]
    );
    assert!(reason_of(&report, "empty").contains("consolidateAfter: Never"));
}

// Expiration.

#[test]
fn expiration_deletes_regardless_of_budgets_and_blocking_pods() {
    let pinned = annotated(
        st::pod("pinned").cpu("100m").build(),
        labels::DO_NOT_DISRUPT,
        "true",
    );
    let report = run(cluster()
        .pool(node_pool("default").budgets(json!([{"nodes": "0"}])))
        .node(node("old").pod(pinned).created(ago(721 * 3600)))
        .node(node("young").pods(1)));
    assert_eq!(
        methods(&report),
        vec![(Method::Expiration, Decision::Delete, names(&["old"]))]
    );
    assert_eq!(report.commands[0].reason, Reason::Expired);
}

#[test]
fn a_node_without_expiry_never_expires() {
    let report = run(cluster().node(
        node("forever")
            .pods(1)
            .created(ago(10_000 * 3600))
            .expire_after(None),
    ));
    assert!(
        report
            .commands
            .iter()
            .all(|c| c.method != Method::Expiration)
    );
}

// Drift.

#[test]
fn drift_replaces_a_drifted_node_whose_pods_need_capacity() {
    let report = run(cluster()
        .pool(unlimited().consolidate_after("Never"))
        .node(node("drifted").pods(3).drifted("AMIDrift", ago(60))));
    let command = &report.commands[0];
    assert_eq!(
        (command.method, command.reason),
        (Method::Drift, Reason::Drifted)
    );
    assert_eq!(command.decision, Decision::Replace);
    assert_eq!(command.nodes, names(&["drifted"]));
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(command.replacements[0].node_pool, "default");
    assert_eq!(report.summary.nodes_after, 1);
}

#[test]
fn drift_takes_empty_nodes_first_then_the_earliest_drifted() {
    let report = run(cluster()
        .pool(unlimited().consolidate_after("Never"))
        .node(node("late").pods(1).drifted("AMIDrift", ago(60)))
        .node(node("early").pods(1).drifted("AMIDrift", ago(600)))
        .node(node("empty").drifted("AMIDrift", ago(30))));
    assert_eq!(
        methods(&report)
            .into_iter()
            .map(|(_, _, nodes)| nodes)
            .collect::<Vec<_>>(),
        vec![names(&["empty"]), names(&["early"]), names(&["late"])]
    );
}

/// A pod that takes most of a `small` node.
fn big_pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    st::pod(name).cpu("1500m").memory("1Gi").build()
}

#[test]
fn a_second_drifted_node_does_not_count_on_the_first_ones_booting_replacement() {
    // "first" is on its way out under a drift command whose replacement, "booting", is
    // still initializing with room for one big pod: first's, which will move there. So
    // "second" needs a replacement of its own now, rather than waiting for "booting" and
    // then sharing it with first's pod. First's pod is pending (its node tainted, as the
    // controller sees it) or still bound (the command's taint not seen yet).
    let booting = || node("booting").size("small").uninitialized();
    let second = || {
        node("second")
            .size("small")
            .pod(big_pod("second-big"))
            .drifted("AMIDrift", ago(60))
    };
    let pending = cluster()
        .node(node("first").size("small").deleting())
        .pending(big_pod("first-big"));
    let bound = cluster().node(node("first").size("small").pod(big_pod("first-big")).held());
    for cluster in [pending, bound] {
        let report = run(cluster
            .pool(unlimited().consolidate_after("Never"))
            .node(booting())
            .node(second()));
        let command = report
            .commands
            .first()
            .unwrap_or_else(|| panic!("{report:#?}"));
        assert_eq!(command.method, Method::Drift);
        assert_eq!(command.nodes, names(&["second"]));
        assert_eq!(command.decision, Decision::Replace, "{report:#?}");
        assert_eq!(command.replacements.len(), 1);
    }
}

#[test]
fn an_empty_node_a_waiting_pod_will_fill_is_not_deleted() {
    // On-demand only: with spot allowed, the on-demand node would be replaced by cheaper
    // spot capacity (upstream's launch-price rule), which is not what this test is about.
    let on_demand = st::requirement(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]);
    let waiting = cluster()
        .pool(unlimited().requirement(on_demand))
        .node(node("leaving").size("small").deleting())
        .pending(big_pod("leaving-big"))
        .node(node("spare").size("small"));
    let report = run(waiting);
    assert!(report.commands.is_empty(), "{report:#?}");
    // With nothing waiting, the empty node goes.
    let report = run(cluster()
        .pool(unlimited())
        .node(node("spare").size("small")));
    assert_eq!(methods(&report)[0].0, Method::Emptiness);
}

#[test]
fn a_changed_nodepool_hash_and_unsatisfied_requirements_are_drift() {
    let report = run(cluster()
        .pool(
            unlimited()
                .consolidate_after("Never")
                .hash("new")
                .requirement(st::requirement(labels::ARCH, Operator::In, &["amd64"])),
        )
        .node(node("stale").hash("old"))
        .node(node("current").hash("new"))
        .node(node("arm").hash("new").label(labels::ARCH, "arm64")));
    let drifted: Vec<String> = report
        .commands
        .iter()
        .filter(|c| c.method == Method::Drift)
        .flat_map(|c| c.nodes.clone())
        .collect();
    assert_eq!(drifted, names(&["arm", "stale"]));
    assert!(reason_of(&report, "current").contains("Never"));
}

#[test]
fn drift_respects_blocking_pods_unless_a_termination_grace_period_bounds_it() {
    let pinned = |name: &str| {
        annotated(
            st::pod(name).cpu("100m").build(),
            labels::DO_NOT_DISRUPT,
            "true",
        )
    };
    let report = run(cluster()
        .pool(unlimited().consolidate_after("Never"))
        .node(
            node("graceful")
                .pod(pinned("p1"))
                .drifted("AMIDrift", ago(60)),
        )
        .node(
            node("bounded")
                .pod(pinned("p2"))
                .drifted("AMIDrift", ago(60))
                .termination_grace_period(Duration::from_secs(600)),
        ));
    // Its pod moves to the other node, so no replacement is needed.
    assert_eq!(
        methods(&report),
        vec![(Method::Drift, Decision::Delete, names(&["bounded"]))]
    );
    assert!(
        reason_of(&report, "graceful").contains("default/p1 has the karpenter.sh/do-not-disrupt")
    );
}

// Consolidation.

#[test]
fn multi_node_consolidation_takes_the_longest_prefix_that_consolidates() {
    // Three medium nodes with 3 small pods each: the whole prefix fits one small node.
    let report = run(cluster()
        .pool(unlimited())
        .node(node("a").pods(3))
        .node(node("b").pods(3))
        .node(node("c").pods(3)));
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    let command = &report.commands[0];
    assert_eq!(command.method, Method::MultiNodeConsolidation);
    assert_eq!(command.decision, Decision::Replace);
    assert_eq!(command.nodes.len(), 3);
    assert_eq!(command.replacements[0].launch.instance_type, "small");
    assert_eq!(report.summary.nodes_after, 1);
    assert!(report.summary.hourly_cost_after < report.summary.hourly_cost);
}

#[test]
fn multi_node_consolidation_deletes_when_the_rest_absorb_the_pods() {
    // All three would fit one small node, but the spot small one is among them at that
    // price (the same-type rule), so only the two light nodes go, onto it.
    let report = run(cluster()
        .pool(unlimited())
        .node(node("light1").pods(1))
        .node(node("light2").pods(1))
        .node(node("heavy").size("small").spot().pods(15)));
    let command = &report.commands[0];
    assert_eq!(command.method, Method::MultiNodeConsolidation);
    assert_eq!(command.decision, Decision::Delete, "{report:#?}");
    assert_eq!(command.nodes, names(&["light1", "light2"]));
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    assert!(reason_of(&report, "heavy").contains("SpotToSpotConsolidation"));
}

#[test]
fn multi_node_consolidation_leaves_out_a_candidate_that_fails_every_prefix() {
    // `special` sorts first (the dearest node per pod) and its pod fits nowhere else, so
    // every prefix fails; the four light nodes behind it still go together, onto it.
    let report = run(cluster()
        .pool(unlimited())
        .node(special_node("xlarge"))
        .node(node("light1").pods(1))
        .node(node("light2").pods(1))
        .node(node("light3").pods(1))
        .node(node("light4").pods(1)));
    assert_eq!(
        methods(&report),
        vec![(
            Method::MultiNodeConsolidation,
            Decision::Delete,
            names(&["light1", "light2", "light3", "light4"])
        )],
        "{report:#?}"
    );
    assert!(reason_of(&report, "special").contains("default/picky would not schedule"));
}

#[test]
fn multi_node_consolidation_takes_no_empty_node_past_the_empty_budget() {
    let report = run(cluster()
        .pool(node_pool("default").budgets(json!([
            {"nodes": "0", "reasons": ["Empty"]},
            {"nodes": "100%"}
        ])))
        .node(node("empty").size("xlarge"))
        .node(node("light1").pods(1))
        .node(node("light2").pods(1)));
    // Only the first command: the later ones may take `empty`, holding the moved pods then.
    assert_eq!(
        methods(&report)[0],
        (
            Method::MultiNodeConsolidation,
            Decision::Delete,
            names(&["light1", "light2"])
        ),
        "{report:#?}"
    );
}

#[test]
fn single_node_consolidation_replaces_on_demand_with_cheaper_spot() {
    let report = run(cluster()
        .pool(unlimited())
        .node(node("big").size("xlarge").pods(4)));
    let command = &report.commands[0];
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    assert_eq!(command.decision, Decision::Replace);
    let replacement = &command.replacements[0];
    assert_eq!(replacement.instance_types[0], "small");
    // Upstream's WorstLaunchPrice judges each option by the capacity type that would launch
    // (spot here), so even xlarge's spot offering undercuts the on-demand xlarge.
    assert!(replacement.instance_types.contains(&"xlarge".to_string()));
    assert_eq!(replacement.launch.capacity_type, "spot");
    assert_eq!(pinned_capacity_types(replacement), ["spot"]);
    let xlarge = st::price_of(16.0, 32.0);
    assert!((command.hourly_savings - (xlarge - replacement.launch.price)).abs() < 1e-6);
}

#[test]
fn the_cheapest_fitting_node_is_kept_with_no_cheaper_replacement() {
    let report = run(cluster()
        .pool(unlimited())
        .node(node("small").size("small").spot().pods(2)));
    assert!(report.commands.is_empty(), "{report:#?}");
    let reason = reason_of(&report, "small");
    assert!(reason.contains("SpotToSpotConsolidation"), "{reason}");
}

#[test]
fn spot_to_spot_needs_the_gate_and_fifteen_cheaper_types() {
    let gated = Options {
        feature_gates: FeatureGates::parse("SpotToSpotConsolidation=true")
            .expect("valid")
            .gates,
        ..options()
    };
    let few = run_with(
        cluster()
            .pool(unlimited())
            .node(node("spot").size("xlarge").spot().pods(2)),
        gated,
    );
    assert!(few.commands.is_empty());
    assert!(reason_of(&few, "spot").contains("needs 15 cheaper instance types, found 3"));

    let many = st::fake_instance_types(40);
    let big = "fake-it-39";
    let report = run_with(
        cluster().pool(unlimited().instance_types(many)).node(
            node("spot")
                .spot()
                .label(labels::INSTANCE_TYPE, big)
                .pods(2),
        ),
        gated,
    );
    let command = &report.commands[0];
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    let replacement = &command.replacements[0];
    assert_eq!(replacement.instance_types.len(), MIN_SPOT_TO_SPOT_TYPES);
    assert_eq!(replacement.launch.capacity_type, "spot");
    assert!(!replacement.instance_types.contains(&big.to_string()));
}

#[test]
fn when_empty_never_consolidates_a_node_with_pods() {
    let report = run(cluster()
        .pool(unlimited().policy(ConsolidationPolicy::WhenEmpty))
        .node(node("busy").size("xlarge").pods(1)));
    assert!(report.commands.is_empty());
    assert!(reason_of(&report, "busy").contains("consolidationPolicy: WhenEmpty"));
}

#[test]
fn balanced_rejects_moves_whose_savings_do_not_justify_the_disruption() {
    // `a` moves 30 pods to save $1.64 of a pool costing $53/hour: its share of the pool's
    // disruption (31 of 51) far exceeds its share of the savings, so Balanced keeps it.
    // Alone in its pool, the same move is approved.
    let busy = || node("a").size("large").pods(30);
    let pool = || {
        unlimited()
            .policy(ConsolidationPolicy::Balanced)
            .consolidate_after("10m")
    };
    let crowded = (0..10).fold(cluster().pool(pool()).node(busy()), |c, i| {
        c.node(
            node(&format!("x{i}"))
                .size("xlarge")
                .pods(1)
                .last_pod_event(ago(60)),
        )
    });
    let report = run(crowded);
    assert!(report.commands.is_empty(), "{report:#?}");
    assert!(reason_of(&report, "a").contains("consolidationPolicy: Balanced"));
    let alone = run(cluster().pool(pool()).node(busy()));
    assert_eq!(
        methods(&alone),
        vec![(
            Method::SingleNodeConsolidation,
            Decision::Replace,
            names(&["a"])
        )]
    );
}

#[test]
fn pods_that_fit_nowhere_keep_their_node() {
    let report = run(cluster().pool(unlimited()).node(special_node("large")));
    assert!(report.commands.is_empty());
    assert!(reason_of(&report, "special").contains("default/picky would not schedule"));
    let documented = crate::troubleshooting::documented("consolidation-constraints");
    assert!(reason_of(&report, "special").contains(documented));
}

#[test]
fn a_move_onto_an_uninitialized_node_waits_for_it_instead_of_launching_another() {
    // The booting node has room for big's pods, but is not initialized yet: upstream's
    // simulation fails the move rather than planning around it.
    let report = run(cluster()
        .pool(unlimited())
        .node(node("big").size("xlarge").pods(2))
        .node(node("booting").size("xlarge").uninitialized()));
    assert!(report.commands.is_empty(), "{report:#?}");
    assert!(
        reason_of(&report, "big").contains("would schedule against uninitialized node booting"),
        "{report:#?}"
    );
    assert!(reason_of(&report, "booting").contains("not initialized"));
}

#[test]
fn a_node_inside_its_own_consolidate_after_still_takes_moved_pods() {
    let report = run(cluster()
        .pool(unlimited().consolidate_after("10m"))
        .node(node("big").size("xlarge").pods(2))
        .node(node("fresh").size("xlarge").pods(1).last_pod_event(ago(60))));
    let command = &report.commands[0];
    assert_eq!(command.nodes, names(&["big"]), "{report:#?}");
    assert_eq!(command.decision, Decision::Delete, "{report:#?}");
}

// Blocking rules.

#[test]
fn a_do_not_disrupt_pod_blocks_consolidation_until_its_duration_has_elapsed() {
    let pod = |name: &str, value: &str, started_ago: i64| {
        started(
            annotated(
                st::pod(name).cpu("100m").build(),
                labels::DO_NOT_DISRUPT,
                value,
            ),
            ago(started_ago),
        )
    };
    let report = run(cluster()
        .pool(unlimited())
        .node(
            node("pinned")
                .size("xlarge")
                .pod(pod("forever", "true", 60)),
        )
        .node(node("waiting").size("xlarge").pod(pod("soon", "1h", 60)))
        .node(node("free").size("xlarge").pod(pod("done", "1h", 7200))));
    let moved: Vec<String> = report
        .commands
        .iter()
        .flat_map(|c| c.nodes.clone())
        .collect();
    assert!(moved.contains(&"free".to_string()), "{report:#?}");
    assert!(
        reason_of(&report, "pinned")
            .contains("pod default/forever has the karpenter.sh/do-not-disrupt")
    );
    assert!(reason_of(&report, "waiting").contains("default/soon"));
}

#[test]
fn a_node_annotated_do_not_disrupt_is_not_a_candidate() {
    let report = run(cluster()
        .pool(unlimited())
        .node(node("kept").do_not_disrupt()));
    assert!(report.commands.is_empty());
    assert!(reason_of(&report, "kept").contains("Node has the karpenter.sh/do-not-disrupt"));
}

#[test]
fn a_pdb_that_allows_nothing_or_two_pdbs_on_one_pod_block_the_node() {
    let report = run(cluster()
        .pool(unlimited())
        .node(node("guarded").size("xlarge").pods(1))
        .node(node("double").size("xlarge").pods(1))
        .pdb("strict", "guarded", 0)
        .pdb("one", "double", 1)
        .pdb("two", "double", 1));
    assert!(report.commands.is_empty(), "{report:#?}");
    assert!(
        reason_of(&report, "guarded")
            .contains("PodDisruptionBudget default/strict allows no disruption")
    );
    assert!(
        reason_of(&report, "double")
            .contains("more than one PodDisruptionBudget (default/one, default/two)")
    );
}

#[test]
fn a_zero_budget_blocks_and_names_the_budget() {
    let report = run(cluster()
        .pool(
            node_pool("default")
                .budgets(json!([{"nodes": "0", "reasons": ["Underutilized"]}, {"nodes": "100%"}])),
        )
        .node(node("big").size("xlarge").pods(2))
        .node(node("empty")));
    assert_eq!(
        methods(&report),
        vec![(Method::Emptiness, Decision::Delete, names(&["empty"]))]
    );
    assert!(reason_of(&report, "big").contains("allows no more Underutilized disruptions"));
}

#[test]
fn budgets_round_percentages_up_count_unready_nodes_and_follow_schedules() {
    let cluster = cluster()
        .pool(node_pool("default").budgets(json!([
            {"nodes": "25%"},
            {"nodes": "0", "reasons": ["Drifted"], "schedule": "@daily", "duration": "1h"},
            {"nodes": "0", "reasons": ["Empty"], "schedule": "0 12 * * *", "duration": "1h"}
        ])))
        .node(node("a"))
        .node(node("b").not_ready())
        .node(node("c"))
        .node(node("d"))
        .node(node("e"))
        .node(node("gone").deleting())
        .build();
    // 6 initialized nodes, 25% rounds up to 2, minus 2 disrupting (not Ready, deleting).
    // NOW is midnight: the @daily Drifted window is open, the noon Empty one is not.
    let report = decide(&cluster, options()).expect("valid");
    let allowed = |reason| {
        report
            .budgets
            .iter()
            .find(|b| b.reason == reason)
            .map(|b| b.allowed)
    };
    assert_eq!(allowed(DisruptionReason::Empty), Some(0));
    assert_eq!(allowed(DisruptionReason::Drifted), Some(0));
    assert_eq!(allowed(DisruptionReason::Underutilized), Some(0));
    let loose = cluster_with_budget(json!([{"nodes": "25%"}]));
    let report = decide(&loose, options()).expect("valid");
    assert_eq!(report.budgets[0].allowed, 2);
    let none =
        cluster_with_budget(json!([{"nodes": "1", "schedule": "0 12 * * *", "duration": "1h"}]));
    let report = decide(&none, options()).expect("valid");
    assert_eq!(report.budgets[0].allowed, UNLIMITED);
}

fn cluster_with_budget(budgets: serde_json::Value) -> Cluster {
    (0..5)
        .fold(
            cluster().pool(node_pool("default").budgets(budgets)),
            |c, i| c.node(node(&format!("n{i}")).pods(1)),
        )
        .build()
}

#[test]
fn a_malformed_budget_schedule_is_an_error_naming_the_pool() {
    let cluster = cluster()
        .pool(
            node_pool("default")
                .budgets(json!([{"nodes": "1", "schedule": "nope", "duration": "1h"}])),
        )
        .node(node("a"))
        .build();
    let error = decide(&cluster, options()).expect_err("bad schedule");
    assert!(
        error
            .to_string()
            .contains("NodePool default: spec.disruption.budgets[0].schedule"),
        "{error}"
    );
}

#[test]
fn candidates_are_ordered_by_price_per_disruption_cost() {
    use super::candidate::{Candidate, sort};
    let c = |name: &str, price: f64, cost: f64| Candidate {
        name: name.into(),
        pool: "default".into(),
        instance_type: "medium".into(),
        zone: String::new(),
        capacity_type: "on-demand".into(),
        price: Some(price),
        reschedulable_costs: vec![1.0],
        disruption_cost: cost,
        graceful_block: None,
        drift: None,
        consolidatable: Ok(()),
        termination_grace_period: false,
    };
    let mut list = vec![
        c("cheap-busy", 1.0, 10.0),
        c("pricey-quiet", 4.0, 2.0),
        c("free", 1.0, 0.0),
        c("mid", 2.0, 2.0),
    ];
    sort(&mut list);
    let order: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(order, ["free", "pricey-quiet", "mid", "cheap-busy"]);
}

#[test]
fn eviction_cost_follows_deletion_cost_and_priority() {
    let plain = st::pod("p").build();
    assert_eq!(pods::eviction_cost(&plain), 1.0);
    let costly = annotated(
        st::pod("q").build(),
        pods::POD_DELETION_COST,
        &(1i64 << 27).to_string(),
    );
    assert_eq!(pods::eviction_cost(&costly), 2.0);
    let mut critical = st::pod("r").build();
    critical.spec.as_mut().expect("spec").priority = Some(2_000_000_000);
    assert_eq!(pods::eviction_cost(&critical), 10.0);
}

/// The fixture types plus a reservation of `room` `medium` instances in the first zone.
fn with_reservation(room: u32) -> Vec<crate::catalog::InstanceType> {
    let mut types = instance_types();
    let medium = types
        .iter_mut()
        .find(|t| t.name == "medium")
        .expect("medium");
    let on_demand = medium
        .offerings
        .iter()
        .find(|o| o.capacity_type == crate::catalog::CapacityType::OnDemand)
        .expect("on-demand")
        .clone();
    medium.offerings.push(crate::catalog::Offering {
        zone: st::ZONES[0].into(),
        capacity_type: crate::catalog::CapacityType::Reserved,
        price: on_demand.price / crate::catalog::RESERVED_PRICE_DIVISOR,
        available: room > 0,
        reservation: Some(crate::catalog::ReservedCapacity {
            id: "cr-1".into(),
            reservation_type: "default".into(),
            interruptible: false,
            capacity: room,
        }),
        ..on_demand
    });
    types
}

#[test]
fn consolidation_moves_an_on_demand_node_into_a_free_reservation() {
    let capacity_types = st::requirement(
        labels::CAPACITY_TYPE,
        Operator::In,
        &["reserved", "on-demand"],
    );
    let pool = || {
        unlimited()
            .requirement(capacity_types.clone())
            .instance_types(with_reservation(1))
    };
    // A large on-demand node whose pods fit a medium: the reserved medium costs next to
    // nothing, so it replaces the node, pinned to `reserved`.
    let report = run(cluster()
        .pool(pool())
        .node(node("big").size("large").pods(4)));
    let command = &report.commands[0];
    assert_eq!(command.decision, Decision::Replace, "{report:#?}");
    let replacement = &command.replacements[0];
    assert_eq!(replacement.launch.capacity_type, "reserved");
    assert_eq!(replacement.launch.instance_type, "medium");
    assert_eq!(pinned_capacity_types(replacement), ["reserved"]);

    // A full reservation prices nothing: the on-demand medium is the replacement.
    let report = run(cluster()
        .pool(
            unlimited()
                .requirement(capacity_types.clone())
                .instance_types(with_reservation(0)),
        )
        .node(node("big").size("large").pods(4)));
    let replacement = &report.commands[0].replacements[0];
    assert_eq!(replacement.launch.capacity_type, "on-demand", "{report:#?}");
}

#[test]
fn a_reserved_node_is_priced_as_reserved_and_not_replaced_by_on_demand() {
    let capacity_types = st::requirement(
        labels::CAPACITY_TYPE,
        Operator::In,
        &["reserved", "on-demand"],
    );
    let report = run(cluster()
        .pool(
            unlimited()
                .requirement(capacity_types)
                .instance_types(with_reservation(0)),
        )
        .node(
            node("reserved")
                .size("medium")
                .label(labels::CAPACITY_TYPE, "reserved")
                .pods(2),
        ));
    assert!(
        report.commands.is_empty(),
        "nothing undercuts reserved capacity: {report:#?}"
    );
}

#[test]
fn multi_node_consolidation_moves_nodes_into_a_free_reservation() {
    let capacity_types = st::requirement(
        labels::CAPACITY_TYPE,
        Operator::In,
        &["reserved", "on-demand"],
    );
    let nodes = |pool: PoolBuilder| {
        cluster()
            .pool(pool)
            .node(node("a").pods(3))
            .node(node("b").pods(3))
    };
    // Without room the two medium nodes' pods go to one on-demand small node; with a free
    // medium reservation they move into it, pinned there.
    let report = run(nodes(
        unlimited()
            .requirement(capacity_types.clone())
            .instance_types(with_reservation(0)),
    ));
    let command = &report.commands[0];
    assert_eq!(
        command.method,
        Method::MultiNodeConsolidation,
        "{report:#?}"
    );
    assert_eq!(command.replacements[0].launch.capacity_type, "on-demand");
    let report = run(nodes(
        unlimited()
            .requirement(capacity_types)
            .instance_types(with_reservation(1)),
    ));
    let command = &report.commands[0];
    assert_eq!(
        (command.method, command.decision),
        (Method::MultiNodeConsolidation, Decision::Replace),
        "{report:#?}"
    );
    assert_eq!(command.nodes, names(&["a", "b"]));
    let replacement = &command.replacements[0];
    assert_eq!(
        (
            replacement.launch.capacity_type.as_str(),
            replacement.launch.instance_type.as_str()
        ),
        ("reserved", "medium")
    );
    assert_eq!(pinned_capacity_types(replacement), ["reserved"]);
}

// Static NodePools and `limits.nodes`.

fn static_gate() -> Options {
    Options {
        feature_gates: FeatureGates {
            static_capacity: true,
            ..FeatureGates::default()
        },
        ..options()
    }
}

#[test]
fn a_static_pools_nodes_are_never_emptied_or_consolidated() {
    let report = run_with(
        cluster()
            .pool(unlimited().replicas(3))
            .node(node("a"))
            .node(node("b").size("xlarge").pods(1)),
        static_gate(),
    );
    assert!(report.commands.is_empty(), "{report:#?}");
    assert_eq!(
        reason_of(&report, "a"),
        "NodePool default is static (spec.replicas): its nodes are never consolidated"
    );
}

#[test]
fn a_drifted_static_node_is_replaced_one_for_one_from_the_template_under_the_gate() {
    let pool = || unlimited().replicas(2).consolidate_after("Never");
    let nodes = |c: ClusterBuilder| {
        c.node(node("drifted").pods(3).drifted("AMIDrift", ago(60)))
            .node(node("fine"))
    };
    let report = run_with(nodes(cluster().pool(pool())), static_gate());
    let command = &report.commands[0];
    assert_eq!(
        (command.method, command.decision),
        (Method::Drift, Decision::Replace)
    );
    assert_eq!(command.nodes, names(&["drifted"]));
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(command.replacements[0].node_pool, "default");
    assert_eq!(
        command.replacements[0].instance_types.len(),
        4,
        "every type the template allows"
    );
    assert_eq!(report.summary.nodes_after, 2, "replicas kept");
    let off = run(nodes(cluster().pool(pool())));
    assert!(
        off.commands.is_empty(),
        "without StaticCapacity a static node is not drift-disrupted: {off:#?}"
    );
}

#[test]
fn a_static_pool_at_its_node_limit_cannot_stage_a_drift_replacement() {
    let report = run_with(
        cluster()
            .pool(unlimited().replicas(2).node_limit(2))
            .node(node("drifted").pods(1).drifted("AMIDrift", ago(60)))
            .node(node("fine")),
        static_gate(),
    );
    assert!(report.commands.is_empty(), "{report:#?}");
    assert_eq!(reason_of(&report, "drifted"), methods::STATIC_AT_LIMIT);
}

#[test]
fn drift_of_a_dynamic_pool_never_surges_past_its_node_limit() {
    // One drifted node whose pods need a new node: at `nodes: 2` with two nodes (the other
    // full), the replacement would be a third node while the drifted one drains.
    let full = || {
        node("full")
            .size("small")
            .pods_of(1, |i| big_pod(&format!("full-{i}")))
    };
    let drifted = || {
        node("drifted")
            .size("small")
            .pods_of(1, |i| big_pod(&format!("d-{i}")))
            .drifted("AMIDrift", ago(60))
    };
    let pool = |limit| unlimited().consolidate_after("Never").node_limit(limit);
    let at_limit = run(cluster().pool(pool(2)).node(full()).node(drifted()));
    assert!(at_limit.commands.is_empty(), "{at_limit:#?}");
    assert!(
        reason_of(&at_limit, "drifted").contains("node limits have been exhausted"),
        "{at_limit:#?}"
    );
    let room = run(cluster().pool(pool(3)).node(full()).node(drifted()));
    assert_eq!(
        methods(&room),
        vec![(Method::Drift, Decision::Replace, names(&["drifted"]))]
    );
}

#[test]
fn a_pass_simulates_each_candidate_on_the_forms_the_one_before_prepared() {
    use super::candidate::{Candidate, candidates};
    use super::simulate::simulate;
    let cluster = benchmark_cluster(12, 7);
    let nodes = cluster.scheduling.existing_nodes.len() as u64;
    let mut kept = State::new(&cluster, options()).expect("valid input");
    let found = candidates(&kept, &mut Blocks::default());
    let picks: [Vec<&Candidate>; 4] = [
        vec![&found[0]],
        vec![&found[1]],
        vec![&found[0], &found[2]],
        vec![&found[3]],
    ];
    let (mut reused, mut removed_before) = (0, None);
    for pick in &picks {
        let again = simulate(&mut kept, pick).expect("simulates");
        let mut fresh = State::new(&cluster, options()).expect("valid input");
        let once = simulate(&mut fresh, pick).expect("simulates");
        assert_eq!(format!("{again:?}"), format!("{once:?}"));
        // Every node but this simulation's candidates and the last one's is reused.
        let now = kept.forms.nodes_reused();
        if let Some(before) = removed_before {
            assert!(now - reused >= nodes - pick.len() as u64 - before, "{now}");
        }
        (reused, removed_before) = (now, Some(pick.len() as u64));
    }
    assert!(reused > 0);
}

#[test]
fn a_limited_decision_keeps_the_commands_it_found_and_says_which_nodes_it_did_not_reach() {
    let cluster = (0..4)
        .fold(cluster().pool(unlimited()).node(node("empty")), |c, i| {
            c.node(node(&format!("light{i}")).pods(1))
        })
        .build();
    let whole = decide(&cluster, options()).expect("valid input");
    assert_eq!(
        whole.commands.iter().map(|c| c.method).collect::<Vec<_>>(),
        [Method::Emptiness, Method::MultiNodeConsolidation]
    );
    assert_eq!(whole.stopped, None);

    // 25 s per look at the clock: emptiness's command is found within the minute, the
    // consolidation searches after it find their time over at their first look.
    let limit = Limit {
        limit: Duration::from_secs(60),
        clock: ticking,
    };
    let cut = play(&cluster, options(), Some(limit)).expect("valid input");
    assert_eq!(methods(&cut), methods(&whole)[..1]);
    assert!(
        cut.stopped
            .as_deref()
            .is_some_and(|s| s.starts_with("stopped at its 60 s limit after 1 command")),
        "{:?}",
        cut.stopped
    );
    for i in 0..4 {
        assert_eq!(
            reason_of(&cut, &format!("light{i}")),
            "not reached: the decision stopped at its 60 s limit"
        );
    }
    assert!(
        cut.to_table()
            .contains("note: the decision stopped at its 60 s limit")
    );

    // With no time left at the start no pass runs: nothing is decided, nothing reached.
    let none = play(
        &cluster,
        options(),
        Some(Limit {
            limit: Duration::from_secs(20),
            ..limit
        }),
    )
    .expect("valid input");
    assert!(none.commands.is_empty());
    assert_eq!(
        reason_of(&none, "empty"),
        "not reached: the decision stopped at its 20 s limit"
    );
}
