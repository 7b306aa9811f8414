//! A NodeOverlay changes a consolidation decision: with the small type priced above the
//! large one by an overlay, an under-used large node is no candidate for replacement; once
//! the overlay is deleted, the same node is replaced by the (really) cheaper small type.

use super::*;

#[test]
fn an_overlay_pricing_the_small_type_up_keeps_the_large_node() {
    run(|| async {
        let stack = Stack::start_gated(
            pool(&[SMALL, LARGE], json!({})),
            quick(VALIDATION),
            "NodeOverlay=true",
        )
        .await;
        let original = stack.one_large_node(json!({})).await;
        stack
            .cluster()
            .create(
                "karpenter.sh/v1alpha1",
                "nodeoverlays",
                json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                    "metadata": {"name": "small-costs-more"},
                    "spec": {"requirements": [
                        {"key": labels::INSTANCE_TYPE, "operator": "In", "values": [SMALL]}],
                        "price": "10"}}),
            )
            .expect("overlay created");
        within(FLOW, "the overlay in cluster state", || {
            stack.daemon.state.node_overlays.len() == 1
        })
        .await;

        stack.scale("big", 0);
        stack.pods_gone("big").await;
        stack.idle_pass_now().await;
        stack.idle_pass_now().await;
        assert!(stack.commands().is_empty(), "{:?}", stack.commands());
        assert_eq!(stack.live_claim_names(), [original.name().to_owned()]);

        stack
            .cluster()
            .delete(
                "karpenter.sh/v1alpha1",
                "nodeoverlays",
                None,
                "small-costs-more",
                &kerf_loadtest::apiserver::DeleteOptions::default(),
            )
            .expect("overlay deleted");
        within(FLOW, "the large node replaced by the small type", || {
            let claims = stack.live_claims();
            claims.len() == 1
                && claims[0].name() != original.name()
                && instance_type(&claims[0]) == SMALL
        })
        .await;
        let commands = stack.commands();
        assert_eq!(
            commands[0].0,
            Method::SingleNodeConsolidation,
            "{commands:?}"
        );
        stack.stop().await;
    });
}
