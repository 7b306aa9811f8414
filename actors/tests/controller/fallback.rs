//! Fallback across NodePools by weight (the shape of aws#8885): a spot pool (weight 100)
//! over an on-demand pool (weight 10), every spot offering refused by the simulated EC2.
//! The spot NodeClaims a round planned before the refusals reached the OfferingCache are
//! deleted as insufficient capacity (those that reach EC2 and those left with no offering
//! to send alike), and their pods end on the on-demand pool's nodes; no NodeClaim is left
//! `Launched=False` for a fleet without overrides.

use std::sync::Arc;

use kerf::api::NodeClaim;
use kerf::cloudprovider::UNAVAILABLE_OFFERINGS_TTL;
use kerf::labels;
use kerf_actors::mailbox::MailboxDepth;
use kerf_actors::offering_cache::{OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache};
use kerf_loadtest::ec2::{CapacityType, OfferingKey};
use serde_json::{Value, json};

use crate::support::*;

const TYPES: [&str; 2] = ["m5.large", "c5.large"];
const ZONES: [&str; 2] = ["us-east-1a", "us-east-1b"];
const PODS: usize = 12;

fn pool(name: &str, weight: i32, capacity_type: &str) -> Value {
    nodepool_with(
        name,
        json!({"spec": {"weight": weight, "template": {"spec": {"requirements": [
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": [capacity_type]},
            {"key": labels::INSTANCE_TYPE, "operator": "In", "values": TYPES},
            {"key": labels::ZONE, "operator": "In", "values": ZONES},
        ]}}}}),
    )
}

fn no_override_left(text: &str) -> bool {
    text.contains("at least one override")
}

#[test]
fn pods_fall_back_to_the_lighter_pool_when_every_offering_of_the_heavier_is_refused() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, pool("spot-first", 100, "spot"));
        create_nodepool(&cluster, pool("on-demand", 10, "on-demand"));
        let (provider, mut cloud) = simulated_cloud();
        for it in TYPES {
            for zone in ZONES {
                provider.ec2().set_insufficient_capacity(
                    OfferingKey::new(it, zone, CapacityType::Spot),
                    true,
                );
            }
        }
        // One unavailable-offerings state for the controller and the launches, as the AWS
        // provider shares it: launches leave out what earlier refusals marked.
        let offerings = OfferingCache::start(
            UNAVAILABLE_OFFERINGS_TTL,
            MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
        );
        provider.share_unavailable_offerings(Arc::new(offerings.clone()));
        cloud.offerings = Some(offerings);
        let daemon = start_provisioner(&h, cloud).await;
        let _simulators = node_simulators(&h, provider.clone());
        let mut rounds = daemon.rounds.clone();

        // 1.5 CPU each: one pod per node, so the first round plans a spot NodeClaim per pod.
        for i in 0..PODS {
            create_pending_pod(
                &cluster,
                &format!("web-{i}"),
                json!({}),
                pod_spec("1500m", "1Gi", json!({})),
            );
        }
        let first = round_where(&mut rounds, "the web pods", |r| !r.nodeclaims.is_empty()).await;
        assert!(
            first
                .nodeclaims
                .iter()
                .all(|c| c.starts_with("spot-first-")),
            "spot is planned first, by weight: {first:?}"
        );

        let mut seen_launch_failures: Vec<String> = Vec::new();
        eventually("every pod bound", || {
            let claims: Vec<NodeClaim> = cluster
                .list("karpenter.sh/v1", "nodeclaims", None, "")
                .expect("nodeclaims list")
                .into_iter()
                .map(|c| serde_json::from_value(c).expect("a NodeClaim"))
                .collect();
            for claim in &claims {
                for condition in claim.conditions() {
                    if condition.type_ == "Launched"
                        && condition.status == kerf::api::ConditionStatus::False
                    {
                        seen_launch_failures.push(format!(
                            "{}: {}: {}",
                            claim.name(),
                            condition.reason,
                            condition.message
                        ));
                    }
                }
            }
            (0..PODS).all(|i| {
                cluster
                    .get("v1", "pods", Some("default"), &format!("web-{i}"))
                    .is_ok_and(|p| p["spec"]["nodeName"].is_string())
            })
        })
        .await;
        assert!(
            !seen_launch_failures.iter().any(|f| no_override_left(f)),
            "{seen_launch_failures:?}"
        );

        // Every pod runs on an on-demand node of the lighter pool.
        for i in 0..PODS {
            let pod = cluster
                .get("v1", "pods", Some("default"), &format!("web-{i}"))
                .expect("pod");
            let node_name = pod["spec"]["nodeName"].as_str().expect("bound");
            let node = cluster.get("v1", "nodes", None, node_name).expect("node");
            let node_labels = &node["metadata"]["labels"];
            assert_eq!(node_labels[labels::NODEPOOL], "on-demand", "{node:#}");
            assert_eq!(node_labels[labels::CAPACITY_TYPE], "on-demand", "{node:#}");
        }
        let instances = provider.ec2().instances();
        assert!(
            instances
                .iter()
                .all(|i| i.capacity_type == CapacityType::OnDemand),
            "{instances:?}"
        );
        // The spot NodeClaims are gone: none sits waiting on a launch that cannot happen.
        eventually("no spot NodeClaim left", || {
            cluster
                .list("karpenter.sh/v1", "nodeclaims", None, "")
                .expect("nodeclaims list")
                .iter()
                .all(|c| c["metadata"]["labels"][labels::NODEPOOL] == "on-demand")
        })
        .await;
        let events = cluster.list("v1", "events", None, "").expect("events list");
        assert!(
            !events
                .iter()
                .any(|e| no_override_left(e["message"].as_str().unwrap_or_default())),
            "no launch was sent without overrides"
        );
        assert!(
            events
                .iter()
                .any(|e| e["reason"] == "InsufficientCapacityError"
                    && e["involvedObject"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("spot-first-"))),
            "the refused spot NodeClaims are reported"
        );

        daemon.stop().await;
        h.stop().await;
    });
}
