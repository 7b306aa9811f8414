//! Static NodePools (`spec.replicas`, the `StaticCapacity` gate) and `limits.nodes`, end to
//! end: a static pool is held at its replicas through NodeClaim deletions and scaled through
//! the NodePool's scale subresource (kube-rs `patch_scale` over HTTP), scale-down takes empty
//! nodes first and waits on a PodDisruptionBudget, drifted static nodes are replaced one
//! for one; `limits.nodes` caps provisioning and a drift replacement (no surge past the
//! limit).

use std::collections::BTreeSet;
use std::time::Duration;

use kerf::api::NodePool;
use kerf_actors::Timings;
use kerf_actors::disruption::DisruptionConfig;
use kerf_loadtest::apiserver::DeleteOptions;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::drift_support::*;
use crate::support::*;

const GATE: &[&str] = &["--feature-gates", "StaticCapacity=true"];

/// Reconcilers in milliseconds and a disruption loop polling every 300 ms.
fn timings() -> Timings {
    Timings {
        disruption: DisruptionConfig {
            poll_period: Duration::from_millis(300),
            validation_period: Duration::from_millis(200),
            nomination_window: Duration::ZERO,
            ..DisruptionConfig::default()
        },
        ..fast_timings()
    }
}

/// A static pool of `replicas` m5.large nodes (room for the tests' 1-cpu pods; the template
/// would otherwise offer the cheapest types, too small for them).
fn static_pool(replicas: i64) -> Value {
    json!({"spec": {"replicas": replicas, "template": {"spec": {"requirements": [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}
    ]}}}})
}

/// NodeClaims not being deleted.
fn live(stack: &Stack) -> Vec<Value> {
    live_nodeclaims(&stack.cluster())
}

fn live_names(stack: &Stack) -> BTreeSet<String> {
    live(stack).iter().map(name_of).collect()
}

fn initialized(stack: &Stack) -> usize {
    live(stack)
        .iter()
        .filter(|c| condition(c, "Initialized").is_some_and(|c| c["status"] == "True"))
        .count()
}

async fn scale(stack: &Stack, replicas: i64) {
    let pools: Api<NodePool> = Api::all(stack.harness.client.clone());
    let scale = pools
        .patch_scale(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scaled through the scale subresource");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(replicas as i32));
}

#[test]
fn a_static_pool_is_held_at_its_replicas_through_nodeclaim_deletions() {
    run(|| async {
        let stack = Stack::start_with(static_pool(2), GATE, timings()).await;
        eventually("two initialized nodeclaims", || initialized(&stack) == 2).await;
        let pool = stack.nodepool("default");
        eventually("status.nodes counts them", || {
            stack.nodepool("default")["status"]["nodes"] == 2
        })
        .await;
        assert_eq!(pool["spec"]["replicas"], 2);
        for round in 0..2 {
            let before = live_names(&stack);
            let victim = before.iter().next().expect("a nodeclaim").clone();
            stack
                .cluster()
                .delete(
                    NODECLAIMS.0,
                    NODECLAIMS.1,
                    None,
                    &victim,
                    &DeleteOptions::default(),
                )
                .expect("deleted");
            eventually("the deleted nodeclaim is gone and replaced", || {
                let now = live_names(&stack);
                stack.nodeclaim(&victim).is_none() && now.len() == 2 && !now.contains(&victim)
            })
            .await;
            eventually("the replacement initializes", || initialized(&stack) == 2).await;
            assert_eq!(
                stack.nodeclaims().len(),
                2,
                "round {round}: never more than two"
            );
        }
        stack.stop().await;
    });
}

#[test]
fn the_scale_subresource_scales_a_static_pool_and_scale_down_takes_empty_nodes_first() {
    run(|| async {
        let stack = Stack::start_with(static_pool(2), GATE, timings()).await;
        eventually("two initialized nodeclaims", || initialized(&stack) == 2).await;
        // A pod lands on one of the static nodes (the kube-scheduler places it; no
        // NodeClaim is created for it).
        let busy = stack.running_pod("web").await;
        assert_eq!(live(&stack).len(), 2, "the pod used a static node");

        scale(&stack, 4).await;
        eventually("four initialized nodeclaims", || initialized(&stack) == 4).await;
        let pools: Api<NodePool> = Api::all(stack.harness.client.clone());
        let read = pools.get_scale("default").await.expect("scale read");
        assert_eq!(read.spec.and_then(|s| s.replicas), Some(4));
        eventually("status.nodes follows", || {
            stack.nodepool("default")["status"]["nodes"] == 4
        })
        .await;

        scale(&stack, 1).await;
        eventually("three empty nodeclaims deleted", || {
            stack.nodeclaims().len() == 1
        })
        .await;
        assert_eq!(
            live_names(&stack),
            BTreeSet::from([busy.clone()]),
            "the node running the pod stays"
        );

        // Scaling to zero deletes the last one, past any budget, but the drain waits on the
        // PodDisruptionBudget that allows no eviction.
        stack
            .cluster()
            .create(
                "policy/v1",
                "poddisruptionbudgets",
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {}}}}),
            )
            .expect("pdb created");
        scale(&stack, 0).await;
        eventually("the last nodeclaim is being deleted", || {
            live(&stack).is_empty()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cluster = stack.cluster();
        let pod = cluster
            .get("v1", "pods", Some("default"), "web")
            .expect("the pod was not evicted");
        assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
        assert!(
            stack.nodeclaim(&busy).is_some(),
            "the drain waits on the PDB"
        );
        cluster
            .delete(
                "policy/v1",
                "poddisruptionbudgets",
                Some("default"),
                "web",
                &DeleteOptions::default(),
            )
            .expect("pdb deleted");
        eventually("the drain completes once the PDB is gone", || {
            stack.nodeclaim(&busy).is_none()
        })
        .await;
        stack.stop().await;
    });
}

#[test]
fn a_drifted_static_pool_is_replaced_one_for_one_within_its_budget() {
    run(|| async {
        // The default budget (10% of two nodes: one) lets one drifted node go at a time.
        let stack = Stack::start_with(static_pool(2), GATE, timings()).await;
        eventually("two initialized nodeclaims", || initialized(&stack) == 2).await;
        let before = live_names(&stack);
        stack.patch_nodepool(
            "default",
            &json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}}),
        );
        let mut most = 0;
        eventually("both nodes replaced by initialized ones", || {
            most = most.max(stack.nodeclaims().len());
            let now = live_names(&stack);
            now.is_disjoint(&before) && initialized(&stack) == 2 && stack.nodeclaims().len() == 2
        })
        .await;
        assert!(
            most <= 3,
            "one replacement staged at a time, none taken back: {most} nodeclaims at once"
        );
        let claims = stack.nodeclaims();
        assert!(
            claims
                .iter()
                .all(|c| c["metadata"]["labels"]["team"] == "blue"),
            "{claims:#?}"
        );
        stack.stop().await;
    });
}

#[test]
fn switching_a_pool_between_static_and_dynamic_is_refused() {
    run(|| async {
        let stack = Stack::start_with(static_pool(0), GATE, timings()).await;
        let refused = stack
            .cluster()
            .patch(
                NODEPOOLS.0,
                NODEPOOLS.1,
                None,
                "default",
                kerf_loadtest::apiserver::PatchKind::Merge,
                &json!({"spec": {"replicas": null}}),
            )
            .expect_err("static to dynamic is refused");
        assert!(
            refused.to_string().contains("Cannot transition NodePool"),
            "{refused}"
        );
        let weighted = stack
            .cluster()
            .patch(
                NODEPOOLS.0,
                NODEPOOLS.1,
                None,
                "default",
                kerf_loadtest::apiserver::PatchKind::Merge,
                &json!({"spec": {"weight": 10}}),
            )
            .expect_err("a static pool has no weight");
        assert!(
            weighted.to_string().contains("'weight' is not supported"),
            "{weighted}"
        );
        stack.stop().await;
    });
}

#[test]
fn limits_nodes_caps_provisioning() {
    run(|| async {
        // Pods that each need a node of their own (hostname anti-affinity).
        let stack =
            Stack::start_with(json!({"spec": {"limits": {"nodes": "2"}}}), &[], timings()).await;
        let cluster = stack.cluster();
        for i in 0..4 {
            create_pending_pod(
                &cluster,
                &format!("web-{i}"),
                json!({"app": "web"}),
                pod_spec(
                    "100m",
                    "128Mi",
                    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
                    ]}}}),
                ),
            );
        }
        let mut rounds = stack.daemon.rounds.clone();
        let round = round_where(&mut rounds, "a round that hit the node limit", |r| {
            r.problems
                .iter()
                .any(|p| p.contains("node limits have been exhausted"))
        })
        .await;
        assert!(round.nodeclaims.len() <= 2, "{round:?}");
        eventually("two nodeclaims", || stack.nodeclaims().len() == 2).await;
        eventually("two pods run", || {
            cluster
                .list("v1", "pods", Some("default"), "")
                .expect("pods")
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count()
                == 2
        })
        .await;
        let later = round_where(&mut rounds, "a later round", |r| r.number > round.number).await;
        assert!(later.nodeclaims.is_empty(), "{later:?}");
        assert_eq!(stack.nodeclaims().len(), 2, "never past limits.nodes");
        stack.stop().await;
    });
}

#[test]
fn limits_nodes_holds_during_drift_until_raised() {
    run(|| async {
        let pool = json!({"spec": {"limits": {"nodes": "1"},
            "disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]}}});
        let stack = Stack::start_with(pool, &[], timings()).await;
        let claim = stack.running_pod("web").await;
        stack.patch_nodepool(
            "default",
            &json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}}),
        );
        until_condition(
            &stack,
            &claim,
            "Drifted",
            "Drifted=NodePoolDrifted",
            drifted("NodePoolDrifted"),
        )
        .await;
        // The replacement would be a second node while the drifted one drains: the loop
        // polls every 300 ms, so two seconds are several passes that must all refuse.
        for _ in 0..20 {
            assert_eq!(stack.nodeclaims().len(), 1, "no surge past limits.nodes: 1");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(live_names(&stack).contains(&claim));
        stack.patch_nodepool("default", &json!({"spec": {"limits": {"nodes": "2"}}}));
        eventually("the drifted nodeclaim is replaced", || {
            stack.nodeclaim(&claim).is_none() && initialized(&stack) == 1
        })
        .await;
        assert!(stack.nodeclaims().len() <= 2);
        stack.stop().await;
    });
}
