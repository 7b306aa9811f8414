//! Consolidation reads the OfferingCache as the Provisioner does: an offering EC2 just
//! refused is no replacement, so a node whose only cheaper replacement is unavailable is
//! left alone (and told so with an `Unconsolidatable` event) instead of being tainted,
//! failing its launch and rolled back on every pass.

use kerf::cloudprovider::OfferingRef;
use kerf::cloudprovider::UnavailableOfferings;

use super::*;

#[test]
fn an_unavailable_offering_is_no_replacement() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL, LARGE], json!({}))).await;
        let original = stack.one_large_node(json!({})).await;
        let node = node_name(&original);
        // EC2 refuses the small type, and a refusal has marked it in the OfferingCache.
        stack
            .provider
            .ec2()
            .set_insufficient_capacity(OfferingKey::new(SMALL, ZONE, CapacityType::OnDemand), true);
        let offerings = stack
            .daemon
            .offerings
            .clone()
            .expect("a cloud has an offering cache");
        offerings.mark_offerings(
            &[OfferingRef::new("on-demand", SMALL, ZONE)],
            "InsufficientInstanceCapacity",
        );
        within(FLOW, "the refusal marked", || {
            offerings.is_unavailable(SMALL, ZONE, "on-demand", &[])
        })
        .await;

        stack.scale("big", 0);
        stack.pods_gone("big").await;
        stack.idle_pass_now().await;
        assert!(stack.commands().is_empty(), "{:?}", stack.commands());
        assert!(
            stack.node(&node).is_some_and(|n| !has_disrupted_taint(&n)),
            "never tainted"
        );
        assert_eq!(stack.live_claim_names(), [original.name()]);
        let told = told_both(&stack, "Unconsolidatable", &node, original.name()).await;
        assert!(
            told.iter()
                .any(|e| e["involvedObject"]["kind"] == "Node" && e["type"] == "Normal"),
            "{told:#?}"
        );
        stack.stop().await;
    });
}
