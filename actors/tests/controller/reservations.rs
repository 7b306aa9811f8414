//! Capacity reservations through the controller, against the emulator and the simulated
//! EC2 (its reservations stand for EC2's; nothing else is mocked): a pod lands on a node in
//! the reservation its class selects, pinned to it; a Capacity Block's node is drained and
//! drained ahead of the block's end; a node whose ODCR ended is relabelled on-demand; an
//! interruptible reservation's warning, forwarded from the simulated EC2 as EventBridge
//! JSON through an in-memory queue, drains its node before EC2 reclaims it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kerf::catalog::CAPACITY_BLOCK_EXPIRATION_WINDOW;
use kerf::labels;
use kerf_loadtest::apiserver::PatchKind;
use kerf_loadtest::ec2::{
    CapacityReservation, Ec2Config, MemoryQueue, ReservationType, forward_interruptions,
};
use serde_json::{Value, json};

use crate::drift_support::*;
use crate::support::*;

const ZONE: &str = "us-east-1a";

/// A NodePool that takes reservations first, then on-demand, on m5.large in one zone.
fn reserved_first() -> Value {
    json!({"spec": {
    "disruption": {"consolidateAfter": "Never"},
    "template": {"spec": {"requirements": [
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["reserved", "on-demand"]},
        {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
        {"key": labels::ZONE, "operator": "In", "values": [ZONE]},
    ]}}}})
}

/// Selects reservation `id` in the node class `default` and waits for its status to list it.
async fn select(stack: &Stack, id: &str) {
    let cluster = stack.cluster();
    cluster
        .patch(
            EC2NODECLASSES.0,
            EC2NODECLASSES.1,
            None,
            "default",
            PatchKind::Merge,
            &json!({"spec": {"capacityReservationSelectorTerms": [{"id": id}]}}),
        )
        .expect("node class patched");
    eventually("the node class status lists the reservation", || {
        cluster
            .get(EC2NODECLASSES.0, EC2NODECLASSES.1, None, "default")
            .is_ok_and(|nc| {
                nc["status"]["capacityReservations"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|r| r["id"] == id))
            })
    })
    .await;
}

fn label(object: &Value, key: &str) -> Option<String> {
    object["metadata"]["labels"][key]
        .as_str()
        .map(str::to_owned)
}

#[test]
fn a_capacity_block_node_is_drained_ahead_of_the_blocks_end() {
    run(|| async {
        let stack = Stack::start(reserved_first()).await;
        // The block enters its expiration window 20 s from now: time to launch into it.
        let drain_at = SystemTime::now() + Duration::from_secs(20);
        let end = drain_at + CAPACITY_BLOCK_EXPIRATION_WINDOW;
        let block = "cr-0000000000000b10c";
        stack
            .provider
            .ec2()
            .add_capacity_reservation(CapacityReservation {
                reservation_type: ReservationType::CapacityBlock,
                end_time: Some(end),
                ..CapacityReservation::new(block, "m5.large", ZONE, 2)
            });
        select(&stack, block).await;
        let claim = stack.running_pod("train").await;
        let read = stack.nodeclaim(&claim).expect("nodeclaim");
        assert_eq!(
            label(&read, labels::CAPACITY_TYPE).as_deref(),
            Some("reserved")
        );
        assert_eq!(
            label(&read, labels::CAPACITY_RESERVATION_ID).as_deref(),
            Some(block)
        );
        assert_eq!(
            label(&read, labels::CAPACITY_RESERVATION_TYPE).as_deref(),
            Some("capacity-block")
        );
        // Pinned to its reservation, as upstream pins a reserved NodeClaim.
        let pinned = read["spec"]["requirements"]
            .as_array()
            .expect("requirements")
            .iter()
            .any(|r| r["key"] == labels::CAPACITY_RESERVATION_ID && r["values"] == json!([block]));
        assert!(pinned, "{read:#}");
        assert!(SystemTime::now() < drain_at, "launched before the window");

        // Once the window opens the NodeClaim goes, long before EC2 would reclaim it.
        tokio::time::sleep(
            drain_at
                .duration_since(SystemTime::now())
                .unwrap_or_default(),
        )
        .await;
        eventually("the block's nodeclaim is deleted", || {
            stack.nodeclaim(&claim).is_none()
        })
        .await;
        assert!(SystemTime::now() < end, "drained before the block's end");
        // Its pod was evicted (a bare pod: nothing recreates it) and the instance
        // terminated while the block still ran.
        let cluster = stack.cluster();
        let instance = read["status"]["providerID"]
            .as_str()
            .and_then(|p| p.rsplit('/').next())
            .expect("providerID")
            .to_owned();
        eventually("the pod is evicted and the instance terminated", || {
            cluster.get("v1", "pods", Some("default"), "train").is_err()
                && stack
                    .provider
                    .ec2()
                    .instance(&instance)
                    .is_none_or(|i| !i.state.is_live() || i.state.as_str() == "shutting-down")
        })
        .await;
        assert!(SystemTime::now() < end, "drained before the block's end");
        stack.stop().await;
    });
}

#[test]
fn a_node_whose_reservation_ended_is_relabelled_on_demand() {
    run(|| async {
        let stack = Stack::start(reserved_first()).await;
        let odcr = "cr-00000000000000dc0";
        stack
            .provider
            .ec2()
            .add_capacity_reservation(CapacityReservation::new(odcr, "m5.large", ZONE, 1));
        select(&stack, odcr).await;
        let claim = stack.running_pod("web").await;
        let read = stack.nodeclaim(&claim).expect("nodeclaim");
        assert_eq!(
            label(&read, labels::CAPACITY_TYPE).as_deref(),
            Some("reserved")
        );
        let node = read["status"]["nodeName"]
            .as_str()
            .expect("node name")
            .to_owned();
        let cluster = stack.cluster();
        eventually(
            "the node is reserved and registered in cluster state",
            || {
                stack.daemon.state.nodes.snapshot().iter().any(|n| {
                    n.metadata.name.as_deref() == Some(node.as_str())
                        && n.metadata.labels.as_ref().is_some_and(|l| {
                            l.get(labels::CAPACITY_TYPE).map(String::as_str) == Some("reserved")
                                && l.get(labels::REGISTERED).map(String::as_str) == Some("true")
                        })
                })
            },
        )
        .await;

        // Nothing to do while the instance is in its reservation.
        let demoted = kerf_actors::capacity_type::demote(
            &stack.harness.controller,
            &stack.daemon.state,
            &*stack.provider,
        )
        .await
        .expect("a pass");
        assert_eq!(demoted, Default::default());

        // EC2 ends the ODCR: the instance runs on as on-demand, and the pass relabels.
        let ended = stack.provider.ec2().end_capacity_reservation(odcr);
        assert_eq!(ended.len(), 1);
        let demoted = kerf_actors::capacity_type::demote(
            &stack.harness.controller,
            &stack.daemon.state,
            &*stack.provider,
        )
        .await
        .expect("a pass");
        assert_eq!(demoted.node_claims, std::slice::from_ref(&claim));
        assert_eq!(demoted.nodes, std::slice::from_ref(&node));
        let read = stack.nodeclaim(&claim).expect("still there");
        let node_object = cluster.get("v1", "nodes", None, &node).expect("node");
        for object in [&read, &node_object] {
            assert_eq!(
                label(object, labels::CAPACITY_TYPE).as_deref(),
                Some("on-demand")
            );
            for key in [
                labels::CAPACITY_RESERVATION_ID,
                labels::CAPACITY_RESERVATION_TYPE,
                labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
            ] {
                assert_eq!(label(object, key), None, "{key}");
            }
        }
        stack.stop().await;
    });
}

#[test]
fn an_interruptible_reservations_warning_drains_its_node_before_ec2_reclaims_it() {
    run(|| async {
        // EC2 reclaims an interrupted reservation's instances two minutes after the warning.
        let notice = Duration::from_secs(120);
        let mut stack = Stack::start_on(
            reserved_first(),
            Ec2Config {
                interruption_notice: notice,
                ..Ec2Config::instant(REGION)
            },
        )
        .await;
        let queue = Arc::new(MemoryQueue::new("kerf-test"));
        stack.daemon.watch_interruptions(queue.clone());
        let _forwarding = forward_interruptions(stack.provider.ec2(), queue);
        let odcr = "cr-000000000000001e7";
        stack
            .provider
            .ec2()
            .add_capacity_reservation(CapacityReservation {
                interruptible: true,
                ..CapacityReservation::new(odcr, "m5.large", ZONE, 2)
            });
        select(&stack, odcr).await;
        let claim = stack.running_pod("batch").await;
        let read = stack.nodeclaim(&claim).expect("nodeclaim");
        assert_eq!(
            label(&read, labels::CAPACITY_TYPE).as_deref(),
            Some("reserved")
        );
        assert_eq!(
            label(&read, labels::CAPACITY_RESERVATION_INTERRUPTIBLE).as_deref(),
            Some("true")
        );
        let instance = read["status"]["providerID"]
            .as_str()
            .and_then(|p| p.rsplit('/').next())
            .expect("providerID")
            .to_owned();

        // The reservation's owner takes it back: one warning, for this node's instance.
        let warned = stack
            .provider
            .ec2()
            .interrupt_reservation(odcr)
            .expect("interruptible");
        let warned_at = Instant::now();
        assert_eq!(warned, [instance]);
        eventually("the interrupted nodeclaim is deleted", || {
            stack.nodeclaim(&claim).is_none()
        })
        .await;
        assert!(warned_at.elapsed() < notice, "drained before EC2's reclaim");
        let cluster = stack.cluster();
        eventually("its pod is evicted", || {
            cluster.get("v1", "pods", Some("default"), "batch").is_err()
        })
        .await;
        eventually("the upstream event names the interruption", || {
            cluster
                .list("v1", "events", Some("default"), "")
                .expect("events list")
                .iter()
                .any(|e| {
                    e["involvedObject"]["name"] == claim.as_str()
                        && e["reason"] == "CapacityReservationInstanceInterrupted"
                })
        })
        .await;

        // The reservation is gone: the next pod falls back to on-demand.
        let next = stack.running_pod("batch-2").await;
        let read = stack.nodeclaim(&next).expect("nodeclaim");
        assert_eq!(
            label(&read, labels::CAPACITY_TYPE).as_deref(),
            Some("on-demand")
        );
        assert_eq!(label(&read, labels::CAPACITY_RESERVATION_ID), None);
        stack.stop().await;
    });
}
