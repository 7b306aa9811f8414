//! The events that say why disruption leaves a node alone, as upstream publishes them: a
//! NodePool budget that allows nothing now is a `DisruptionBlocked` event on the Node and
//! its NodeClaim naming the budget; once the budget allows it, the node goes.

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

        let blocked = told_both(&stack, "DisruptionBlocked", &node, claim.name()).await;
        assert!(
            blocked.iter().any(|e| e["message"]
                .as_str()
                .is_some_and(|m| m.contains("budget") && m.contains("default"))),
            "the event names the NodePool's budget: {blocked:#?}"
        );
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
