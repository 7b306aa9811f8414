//! The events that say why disruption leaves a node alone, as upstream publishes them: a
//! NodePool budget that allows nothing now is a `DisruptionBlocked` event on the Node and
//! its NodeClaim naming the budget; once the budget allows it, the node goes. So is a node
//! a provisioning round just planned pods onto, until its nomination lapses.

use super::*;

#[test]
fn a_budget_that_allows_nothing_is_a_disruption_blocked_event_until_it_changes() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL], json!({"budgets": [{"nodes": "0"}]}))).await;
        let cluster = stack.cluster();
        create_deployment(&cluster, "web", 1, pod_spec("500m", "256Mi", json!({})));
        let node = stack.node_of("web").await;
        let claim = stack.live_claims().remove(0);
        stack.scale("web", 0);

        told_both(&stack, "DisruptionBlocked", &node, claim.name()).await;
        // Until its nomination lapses the node may first be blocked as nominated; then the
        // budget blocks it.
        let names_budget = |e: &Value| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("budget") && m.contains("default"))
        };
        within(
            FLOW,
            "a DisruptionBlocked event naming the NodePool's budget",
            || {
                events_about(&stack, "DisruptionBlocked", &node)
                    .iter()
                    .any(names_budget)
            },
        )
        .await;
        assert!(stack.commands().is_empty(), "{:?}", stack.commands());
        assert!(stack.node(&node).is_some_and(|n| !has_disrupted_taint(&n)));

        stack.patch_pool(json!({"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}}));
        within(FLOW, "the empty node deleted", || {
            stack.nodeclaims().is_empty()
        })
        .await;
        assert_eq!(stack.commands()[0].0, Method::Emptiness);
        stack.stop().await;
    });
}

#[test]
fn a_node_launched_for_pending_pods_is_left_alone_until_its_nomination_lapses() {
    run(|| async {
        let window = Duration::from_secs(4);
        let config = DisruptionConfig {
            nomination_window: window,
            ..quick(VALIDATION)
        };
        let stack = Stack::start(pool(&[SMALL], json!({})), config).await;
        let cluster = stack.cluster();
        create_deployment(&cluster, "web", 1, pod_spec("500m", "256Mi", json!({})));
        let node = stack.node_of("web").await;
        let claim = stack.live_claims().remove(0);
        stack.scale("web", 0);
        stack.pods_gone("web").await;

        let blocked = told_both(&stack, "DisruptionBlocked", &node, claim.name()).await;
        assert!(
            blocked
                .iter()
                .any(|e| e["message"] == kerf::troubleshooting::documented("nominated-node")),
            "upstream's reason: {blocked:#?}"
        );
        assert!(stack.commands().is_empty(), "{:?}", stack.commands());

        within(
            FLOW,
            "the empty node deleted once the window passed",
            || stack.nodeclaims().is_empty(),
        )
        .await;
        let initialized = initialized_at(&claim);
        let waited = Timestamp::now().duration_since(initialized);
        assert!(
            waited >= k8s_openapi::jiff::SignedDuration::try_from(window).expect("a duration"),
            "deleted {waited:?} after its Node was initialized"
        );
        assert_eq!(stack.commands()[0].0, Method::Emptiness);
        stack.stop().await;
    });
}
