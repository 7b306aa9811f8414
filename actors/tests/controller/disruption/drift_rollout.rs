//! Drift carried out end to end: a NodePool requirement change marks the running NodeClaims
//! `Drifted`, and the loop replaces them one command per node — each replacement launched
//! with the new requirements and Initialized before its drifted node is deleted, the pods
//! moving onto the replacements — with upstream's events on the way; as upstream, the loop
//! goes on to the next drifted node while a command is in flight, so as many nodes are
//! replaced at once as the NodePool's budget allows.

use std::collections::HashMap;

use super::*;

#[test]
fn a_requirement_change_replaces_each_drifted_node_after_its_replacement_initialized() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL, MEDIUM], json!({}))).await;
        let cluster = stack.cluster();
        create_deployment(&cluster, "web", 2, spread("500m", "web"));
        let old_nodes = stack.running("web", 2).await;
        let old_claims = stack.live_claims();
        assert!(old_claims.iter().all(|c| instance_type(c) == SMALL));

        stack.patch_pool(json!({"spec": {"template": {"spec": {"requirements": [
            {"key": labels::INSTANCE_TYPE, "operator": "In", "values": [MEDIUM]},
            {"key": labels::ZONE, "operator": "In", "values": [ZONE]},
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
        ]}}}}));

        // When each drifted NodeClaim was first seen deleting.
        let mut deleted_at: HashMap<String, Timestamp> = HashMap::new();
        within(FLOW, "both drifted nodes replaced", || {
            let claims = stack.nodeclaims();
            for c in &claims {
                if let Some(t) = &c.metadata.deletion_timestamp {
                    deleted_at.entry(c.name().to_owned()).or_insert(t.0);
                }
            }
            let live: Vec<&NodeClaim> = claims
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .collect();
            live.len() == 2
                && live.iter().all(|c| instance_type(c) == MEDIUM)
                && claims.len() == 2
                && stack.running_now("web")
        })
        .await;

        let commands = stack.commands();
        assert_eq!(
            commands.len(),
            2,
            "one command per drifted node: {commands:?}"
        );
        assert!(
            commands
                .iter()
                .all(|(m, nodes)| *m == Method::Drift && nodes.len() == 1)
        );
        let replaced: BTreeSet<String> = commands.iter().flat_map(|(_, n)| n.clone()).collect();
        assert_eq!(replaced, old_nodes);

        let new_claims = stack.live_claims();
        let new_nodes: BTreeSet<String> = new_claims.iter().map(node_name).collect();
        assert_eq!(stack.running("web", 2).await, new_nodes, "the pods moved");
        // Each drifted node went only after a replacement had initialized.
        let mut initialized: Vec<Timestamp> = new_claims.iter().map(initialized_at).collect();
        initialized.sort();
        let mut deletions: Vec<Timestamp> =
            old_claims.iter().map(|c| deleted_at[c.name()]).collect();
        deletions.sort();
        for (init, deleted) in initialized.iter().zip(&deletions) {
            assert!(init <= deleted, "{init} > {deleted}");
        }
        for old in &old_claims {
            assert!(
                !events_about(&stack, "DisruptionTerminating", old.name()).is_empty(),
                "DisruptionTerminating on {}",
                old.name()
            );
        }
        for new in &new_claims {
            assert!(
                !events_about(&stack, "DisruptionLaunching", new.name()).is_empty(),
                "DisruptionLaunching on {}",
                new.name()
            );
        }
        stack.stop().await;
    });
}

/// What a rollout of two drifted nodes under a drift budget of `budget` nodes did.
#[derive(Debug)]
struct Rollout {
    /// The most commands in flight at one time.
    commands_at_once: usize,
    /// The most replacements launched and not yet initialized at one time.
    booting_at_once: usize,
    commands: Vec<(Method, Vec<String>)>,
    /// NodeClaims ever seen, old ones included.
    claims_seen: usize,
}

/// How long a node takes from launch to registration in [`roll_out_two_nodes`].
const BOOT: Duration = Duration::from_secs(4);

/// A pod spec of `cpu` that shares no node with another pod of `small` or `big`.
fn apart(cpu: &str) -> Value {
    pod_spec(
        cpu,
        "256Mi",
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [
                {"key": "app", "operator": "In", "values": ["small", "big"]}]},
            "topologyKey": labels::HOSTNAME
        }]}}}),
    )
}

/// Merge-patches the `default` NodePool to on-demand `types` in [`ZONE`].
fn allow_types(stack: &Stack, types: &[&str]) {
    stack.patch_pool(json!({"spec": {"template": {"spec": {"requirements": [
        {"key": labels::INSTANCE_TYPE, "operator": "In", "values": types},
        {"key": labels::ZONE, "operator": "In", "values": [ZONE]},
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
    ]}}}}));
}

/// Whether a `LARGE` NodeClaim (a replacement) has launched and not initialized.
fn booting(claim: &NodeClaim) -> bool {
    instance_type(claim) == LARGE && !claim.is_condition_true(types::INITIALIZED)
}

/// Two nodes, a small pod's and a big pod's, drift at once to the only type left, `LARGE`,
/// big enough for either pod; the pods share no node. Drift's budget is one node until the
/// first replacement is booting, then `budget`. The first is the small pod's: its node,
/// launched first, is marked first or, in the same second, named first.
/// That booting replacement is room the big pod would take if its simulation did not know
/// the small pod is already bound for it (the big pod comes first in the solver's order),
/// so a second replacement launched while the first boots shows the loop planning around
/// the command in flight.
async fn roll_out_two_nodes(budget: &str) -> Rollout {
    let stack = Stack::start_with(
        pool(
            &[SMALL, MEDIUM, LARGE],
            json!({"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}),
        ),
        quick(VALIDATION),
        KubeletConfig {
            boot_delay: BOOT,
            ..KubeletConfig::fast()
        },
    )
    .await;
    let cluster = stack.cluster();
    create_deployment(&cluster, "small", 1, apart("500m"));
    stack.running("small", 1).await;
    create_deployment(&cluster, "big", 1, apart("2500m"));
    stack.running("big", 1).await;
    let types_before: BTreeSet<String> = stack.live_claims().iter().map(instance_type).collect();
    assert_eq!(types_before, BTreeSet::from([SMALL.into(), MEDIUM.into()]));
    allow_types(&stack, &[LARGE]);
    within(FLOW, "the first replacement booting", || {
        stack.nodeclaims().iter().any(booting)
    })
    .await;
    stack.patch_pool(json!({"spec": {"disruption": {"budgets": [{"nodes": budget}]}}}));
    let mut rollout = Rollout {
        commands_at_once: 0,
        booting_at_once: 0,
        commands: Vec::new(),
        claims_seen: 0,
    };
    let mut seen = BTreeSet::new();
    within(FLOW, "both drifted nodes replaced", || {
        let claims = stack.nodeclaims();
        seen.extend(claims.iter().map(|c| c.name().to_owned()));
        let booting = claims.iter().filter(|c| booting(c)).count();
        rollout.booting_at_once = rollout.booting_at_once.max(booting);
        rollout.commands_at_once = rollout.commands_at_once.max(stack.in_flight());
        claims.len() == 2
            && claims
                .iter()
                .all(|c| instance_type(c) == LARGE && c.metadata.deletion_timestamp.is_none())
            && stack.running_now("small")
            && stack.running_now("big")
    })
    .await;
    rollout.commands = stack.commands();
    rollout.claims_seen = seen.len();
    stack.stop().await;
    rollout
}

#[test]
fn drifted_nodes_are_replaced_at_once_as_far_as_the_budget_allows() {
    run(|| async {
        let two = roll_out_two_nodes("2").await;
        assert_eq!(two.commands_at_once, 2, "both commands in flight together");
        assert_eq!(
            two.booting_at_once, 2,
            "both replacements launched before either initialized"
        );
        let one = roll_out_two_nodes("1").await;
        assert_eq!(one.commands_at_once, 1, "one command at a time");
        assert_eq!(one.booting_at_once, 1, "one replacement at a time");
        for rollout in [two, one] {
            assert_eq!(rollout.commands.len(), 2, "{:?}", rollout.commands);
            assert!(
                rollout
                    .commands
                    .iter()
                    .all(|(m, nodes)| *m == Method::Drift && nodes.len() == 1)
            );
            // Two old nodes and one replacement each: no node launched for pods that found
            // their planned place taken.
            assert_eq!(rollout.claims_seen, 4);
        }
    });
}

/// Two nodes drift together, each running one pod too large to share a `SMALL` node with
/// the other. The loop's second pass starts the moment the first command is queued, and
/// the first node's pod is already waiting for a place: unless that pass sees the first
/// replacement, its simulation plans the waiting pod again, onto the second replacement
/// (one `MEDIUM` node for both pods), and the cluster pays for a node the first command
/// already launched. Queueing a command returns once its replacements exist, as
/// upstream's queue starts a command by creating them, so each pod lands on its own
/// node's replacement and nothing else is launched.
#[test]
fn a_drifted_nodes_pods_land_on_its_replacement_and_nothing_else_is_launched() {
    run(|| async {
        let stack = Stack::quick(pool(
            &[SMALL, MEDIUM],
            json!({"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}),
        ))
        .await;
        let cluster = stack.cluster();
        for app in ["first", "second"] {
            create_deployment(&cluster, app, 1, pod_spec("1500m", "256Mi", json!({})));
            stack.running(app, 1).await;
        }
        let old_claims = stack.live_claims();
        assert_eq!(old_claims.len(), 2, "a node each");
        assert!(old_claims.iter().all(|c| instance_type(c) == SMALL));

        stack.patch_pool(json!({"spec": {"template": {"metadata": {"labels": {"rollout": "2"}}}}}));
        within(FLOW, "both nodes drifted", || {
            let claims = stack.live_claims();
            claims.len() == 2 && claims.iter().all(|c| c.is_condition_true(types::DRIFTED))
        })
        .await;
        stack.patch_pool(json!({"spec": {"disruption": {"budgets": [{"nodes": "2"}]}}}));

        let mut seen = BTreeSet::new();
        within(FLOW, "both drifted nodes replaced", || {
            let claims = stack.nodeclaims();
            seen.extend(claims.iter().map(|c| c.name().to_owned()));
            claims.len() == 2
                && claims.iter().all(|c| {
                    c.metadata.deletion_timestamp.is_none()
                        && !old_claims.iter().any(|o| o.name() == c.name())
                })
                && stack.running_now("first")
                && stack.running_now("second")
        })
        .await;
        let commands = stack.commands();
        assert_eq!(commands.len(), 2, "{commands:?}");
        assert!(
            commands.iter().all(|(m, _)| *m == Method::Drift),
            "{commands:?}"
        );
        assert_eq!(
            seen.len(),
            4,
            "two old nodes and a replacement each: {seen:?}"
        );
        let new_claims = stack.live_claims();
        assert!(
            new_claims.iter().all(|c| instance_type(c) == SMALL),
            "a small replacement per pod: {:?}",
            new_claims.iter().map(instance_type).collect::<Vec<_>>()
        );
        let mut on: BTreeSet<String> = stack.running("first", 1).await;
        on.extend(stack.running("second", 1).await);
        let new_nodes: BTreeSet<String> = new_claims.iter().map(node_name).collect();
        assert_eq!(on, new_nodes, "each pod on a replacement of its own");
        stack.stop().await;
    });
}
