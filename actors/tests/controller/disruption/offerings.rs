//! Consolidation reads the OfferingCache as the Provisioner does: an offering EC2 just
//! refused is no replacement, so a node whose only cheaper replacement is unavailable is
//! left alone (and told so with an `Unconsolidatable` event) instead of being tainted,
//! failing its launch and rolled back on every pass.

use kerf::cloudprovider::OfferingRef;
use kerf::cloudprovider::UnavailableOfferings;

use super::*;

/// Events with `reason` about the object named `name`.
pub(super) fn events_about(stack: &Stack, reason: &str, name: &str) -> Vec<Value> {
    stack
        .cluster()
        .list("v1", "events", None, "")
        .expect("events list")
        .into_iter()
        .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == name)
        .collect()
}

#[test]
fn an_unavailable_offering_is_no_replacement() {
    run(|| async {
        let stack = Stack::start(
            pool(&[SMALL, LARGE], json!({})),
            quick(Duration::from_millis(200)),
        )
        .await;
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
        let progress = stack.progress();
        let passes = progress.borrow().passes;

        stack.scale("big", 0);
        within(FLOW, "the scaled-down pods gone", || {
            !stack.running_now("big")
        })
        .await;
        // A pass that found nothing is remembered until the cluster changes, so the pods'
        // last change may be followed by one pass only: wait for an idle pass, not two.
        within(FLOW, "an idle pass after the scale-down", || {
            let p = progress.borrow();
            p.idle && p.passes > passes
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(stack.commands().is_empty(), "{:?}", stack.commands());
        assert!(
            stack.node(&node).is_some_and(|n| !has_disrupted_taint(&n)),
            "never tainted"
        );
        assert_eq!(
            stack
                .live_claims()
                .iter()
                .map(|c| c.name().to_owned())
                .collect::<Vec<_>>(),
            [original.name().to_owned()]
        );
        let told = events_about(&stack, "Unconsolidatable", &node);
        assert!(
            told.iter()
                .any(|e| e["involvedObject"]["kind"] == "Node" && e["type"] == "Normal"),
            "{told:#?}"
        );
        assert!(
            !events_about(&stack, "Unconsolidatable", original.name()).is_empty(),
            "the NodeClaim is told too"
        );
        stack.stop().await;
    });
}
