//! Rounds solved through the kept forms ([`PodForms`], [`NodeForms`]), as the controller's
//! Provisioner solves them, give exactly a fresh solve's result after every kind of change
//! between rounds; and the node forms kept are only the latest round's nodes.
use super::*;
use crate::labels::{HOSTNAME, ZONE};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use proptest::prelude::*;
use std::sync::Arc;

use crate::pods::{LeanPod, PodLike};

/// A pod as the cluster state holds it: with a resourceVersion, so its form may be kept.
fn versioned(mut p: Pod) -> Pod {
    p.metadata.resource_version = Some("1".into());
    p
}

fn agent(name: &str) -> Pod {
    let mut p = versioned(pod(name).cpu("250m").build());
    p.metadata.owner_references = Some(vec![OwnerReference {
        kind: "DaemonSet".into(),
        name: "agent".into(),
        ..Default::default()
    }]);
    p
}

fn node(i: usize, pods: Vec<Arc<LeanPod>>) -> ExistingNode {
    let name = format!("n-{i}");
    let room = resources(&[("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]);
    ExistingNode {
        labels: [
            (ZONE.to_string(), ZONES[i % 3].to_string()),
            (HOSTNAME.to_string(), name.clone()),
        ]
        .into(),
        name,
        allocatable: room.clone(),
        capacity: room,
        pods,
        initialized: true,
        node_pool: Some("default".into()),
        ..Default::default()
    }
}

/// Six nodes over three zones holding web replicas, db replicas that repel each other by
/// hostname, the agent daemonset on some and a finished pod; pending pods spread over zones
/// against the web replicas, more db replicas, and plain ones.
fn cluster() -> SchedulingInput {
    let mut placed: Vec<Pod> = pod("web")
        .cpu("1")
        .labels(&[("app", "web")])
        .replicas("web", 7)
        .into_iter()
        .map(versioned)
        .collect();
    placed.extend(
        pod("db")
            .cpu("500m")
            .labels(&[("app", "db")])
            .anti_affinity_to(HOSTNAME, &[("app", "db")])
            .replicas("db", 2)
            .into_iter()
            .map(versioned),
    );
    placed.extend([agent("agent-0"), agent("agent-1")]);
    let mut done = versioned(pod("done").cpu("3").build());
    done.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    placed.push(done);
    let placed = shared(placed);
    let on = |names: &[&str]| -> Vec<Arc<LeanPod>> {
        names
            .iter()
            .map(|n| {
                Arc::clone(
                    placed
                        .iter()
                        .find(|p| p.meta().name == Some(*n))
                        .expect("placed"),
                )
            })
            .collect()
    };
    let nodes = vec![
        node(0, on(&["web-00000", "web-00001", "db-00000", "agent-0"])),
        node(1, on(&["web-00002", "done"])),
        node(2, on(&["web-00003", "web-00004", "db-00001", "agent-1"])),
        node(3, on(&["web-00005"])),
        node(4, on(&["web-00006"])),
        node(5, Vec::new()),
    ];
    let mut pending: Vec<Pod> = pod("spread")
        .cpu("500m")
        .labels(&[("app", "web")])
        .spread(ZONE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("spread", 4)
        .into_iter()
        .map(versioned)
        .collect();
    pending.extend(
        pod("db")
            .cpu("500m")
            .labels(&[("app", "db")])
            .anti_affinity_to(HOSTNAME, &[("app", "db")])
            .replicas("db-new", 2)
            .into_iter()
            .map(versioned),
    );
    pending.extend(
        pod("plain")
            .cpu("1500m")
            .replicas("plain", 3)
            .into_iter()
            .map(versioned),
    );
    SchedulingInput {
        pods: shared(pending),
        existing_nodes: nodes,
        node_pools: vec![node_pool("default", fake_instance_types(8))],
        daemonsets: vec![pod("agent").cpu("250m").build()],
        ..Default::default()
    }
}

/// The caches of one controller, round after round.
#[derive(Default)]
struct Rounds {
    pods: PodForms,
    nodes: NodeForms,
}

impl Rounds {
    /// Solves `input` through the kept forms, asserts the result is a fresh solve's and
    /// returns it with how many node forms were reused.
    fn solve(&mut self, input: &SchedulingInput) -> (SchedulingResult, u64) {
        let before = self.nodes.reused();
        let kept = solve_with(input, &mut self.pods, &mut self.nodes).expect("valid");
        assert_eq!(kept, run(input), "the kept forms changed the result");
        (kept, self.nodes.reused() - before)
    }
}

fn placed_on<'r>(result: &'r SchedulingResult, node: &str) -> Vec<&'r str> {
    result
        .existing_nodes
        .iter()
        .filter(|n| n.name == node)
        .flat_map(|n| n.pods.iter().map(|p| p.name.as_str()))
        .collect()
}

/// A round after `change`, from a warm cache: equal to a fresh solve, and different from the
/// round before (so the change matters and a stale form would have shown).
fn after(change: impl FnOnce(&mut SchedulingInput)) -> (SchedulingResult, u64) {
    let mut input = cluster();
    let mut rounds = Rounds::default();
    let (first, reused) = rounds.solve(&input);
    assert_eq!(reused, 0, "a cold cache");
    change(&mut input);
    let (second, reused) = rounds.solve(&input);
    assert_ne!(first, second, "the change made no difference to the round");
    (second, reused)
}

#[test]
fn an_unchanged_round_reuses_every_node_form() {
    let input = cluster();
    let mut rounds = Rounds::default();
    let (first, _) = rounds.solve(&input);
    assert!(!first.existing_nodes.is_empty(), "{first:?}");
    let (again, reused) = rounds.solve(&input);
    assert_eq!(reused, 6);
    assert_eq!(again, first);
    assert_eq!(rounds.nodes.len(), 6);
}

#[test]
fn a_pod_bound_to_a_node_is_counted_there() {
    let (result, reused) = after(|input| {
        let big = pod("big").cpu("2500m").labels(&[("app", "web")]).build();
        input.existing_nodes[4]
            .pods
            .extend(shared(vec![versioned(big)]));
    });
    assert_eq!(reused, 5, "only n-4's form is built again");
    assert!(
        placed_on(&result, "n-4").is_empty(),
        "n-4 is full: {result:?}"
    );
}

#[test]
fn a_deleted_pod_frees_its_room() {
    let (result, reused) = after(|input| {
        // Deleting: a new object with a deletionTimestamp, which placement does not count.
        let mut web = pod("web").cpu("1").labels(&[("app", "web")]).build();
        web.metadata.name = Some("web-00000".into());
        web.metadata.uid = Some("web-00000".into());
        web.metadata.resource_version = Some("2".into());
        web.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        input.existing_nodes[0].pods[0] = Arc::new(LeanPod::from(web));
        // Gone from the node altogether.
        input.existing_nodes[2].pods.remove(0);
    });
    assert_eq!(reused, 4);
    assert!(!result.existing_nodes.is_empty());
}

#[test]
fn a_node_added_or_removed_is_seen_and_a_removed_ones_form_dropped() {
    let mut input = cluster();
    let mut rounds = Rounds::default();
    let (first, _) = rounds.solve(&input);
    let web = pod("web-x").cpu("1").labels(&[("app", "web")]).build();
    input
        .existing_nodes
        .push(node(6, shared(vec![versioned(web)])));
    let (added, reused) = rounds.solve(&input);
    assert_eq!((reused, rounds.nodes.len()), (6, 7));
    assert_ne!(added, first);
    input
        .existing_nodes
        .retain(|n| n.name != "n-5" && n.name != "n-6");
    let (removed, reused) = rounds.solve(&input);
    assert_eq!(reused, 5);
    assert_eq!(
        rounds.nodes.len(),
        5,
        "the removed nodes' forms are dropped"
    );
    assert!(placed_on(&removed, "n-5").is_empty());
}

#[test]
fn a_nodes_labels_taints_or_allocatable_changing_is_seen() {
    let (relabelled, _) = after(|input| {
        let n = &mut input.existing_nodes[0];
        n.labels.insert(ZONE.into(), ZONES[2].into());
    });
    let (tainted, _) = after(|input| {
        for n in &mut input.existing_nodes {
            n.taints = vec![taint("dedicated", Some("x"), "NoSchedule")];
        }
    });
    assert!(tainted.existing_nodes.is_empty(), "{tainted:?}");
    let (shrunk, reused) = after(|input| {
        for n in &mut input.existing_nodes {
            n.allocatable = resources(&[("cpu", "1"), ("memory", "16Gi"), ("pods", "110")]);
        }
    });
    assert_eq!(reused, 0, "every allocatable changed");
    assert_ne!(relabelled, shrunk);
}

#[test]
fn pending_pods_with_a_new_resource_or_label_are_solved_as_fresh() {
    let (result, reused) = after(|input| {
        let more = vec![
            versioned(pod("gpu").cpu("1").resource("example.com/gpu", "1").build()),
            versioned(
                pod("picky")
                    .cpu("1")
                    .node_selector(&[("never-seen", "before")])
                    .build(),
            ),
        ];
        input.pods.extend(shared(more));
    });
    assert_eq!(reused, 6);
    assert_eq!(result.errors.len(), 2, "{:?}", result.errors);
}

/// One random change to the cluster between rounds.
fn change(input: &mut SchedulingInput, rng: &mut super::super::testing::Rng, step: usize) {
    let nodes = input.existing_nodes.len();
    match rng.below(7) {
        0 => {}
        1 if nodes > 0 => {
            // Bind a pending pod where it was not placed.
            if !input.pods.is_empty() {
                let p = input.pods.remove(rng.below(input.pods.len()));
                input.existing_nodes[rng.below(nodes)].pods.push(p);
            }
        }
        2 if nodes > 0 => {
            let n = &mut input.existing_nodes[rng.below(nodes)];
            if !n.pods.is_empty() {
                n.pods.remove(rng.below(n.pods.len()));
            }
        }
        3 => input.existing_nodes.push(node(10 + step, Vec::new())),
        4 if nodes > 0 => {
            input.existing_nodes.remove(rng.below(nodes));
        }
        5 if nodes > 0 => {
            let n = &mut input.existing_nodes[rng.below(nodes)];
            match rng.below(3) {
                0 => {
                    n.labels
                        .insert(ZONE.into(), ZONES[rng.below(3)].to_string());
                }
                1 => n.taints = vec![taint("dedicated", Some("x"), "NoSchedule")],
                _ => {
                    let cpu = format!("{}", 1 + rng.below(6));
                    n.allocatable = resources(&[("cpu", &cpu), ("memory", "16Gi"), ("pods", "9")]);
                }
            }
        }
        _ => {
            let fresh = pod("late")
                .cpu(&format!("{}m", 250 * (1 + rng.below(8))))
                .labels(&[("app", ["web", "db", "late"][rng.below(3)])])
                .resource(&format!("example.com/r{}", rng.below(3)), "1")
                .replicas(&format!("late-{step}"), 1 + rng.below(3));
            input
                .pods
                .extend(shared(fresh.into_iter().map(versioned).collect()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn every_round_of_a_random_sequence_equals_a_fresh_solve(seed in any::<u64>()) {
        let mut rng = super::super::testing::Rng::new(seed);
        let mut input = cluster();
        input.options.parallel = rng.below(2) == 0;
        let mut rounds = Rounds::default();
        for step in 0..8 {
            let kept = solve_with(&input, &mut rounds.pods, &mut rounds.nodes).expect("valid");
            prop_assert_eq!(&kept, &run(&input), "step {}", step);
            let names: std::collections::BTreeSet<&str> =
                input.existing_nodes.iter().map(|n| n.name.as_str()).collect();
            prop_assert!(rounds.nodes.len() <= names.len(), "only this round's nodes are kept");
            change(&mut input, &mut rng, step);
        }
    }
}
