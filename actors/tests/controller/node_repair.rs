//! Node repair against the API emulator: the NodeClaim of a Node whose `Ready` condition has
//! been False past the AWS provider's toleration is annotated with its termination timestamp
//! and deleted; a NodePool with more than a fifth of its Nodes unhealthy is left alone, with
//! upstream's `NodeRepairBlocked` warning.

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kerf::api::NodeClaim;
use kerf::labels;
use kerf_actors::node_repair::{self, policy::AWS_REPAIR_POLICIES};
use kube::api::Api;
use serde_json::{Value, json};

use crate::support::*;

/// `count` launched NodeClaims of NodePool `pool`, each held by a test finalizer so its
/// deletion can be inspected, and a Node for each, Ready or not as `ready` says (for the
/// last 45 minutes).
async fn claims_with_nodes(h: &Harness, pool: &str, ready: &[&str]) -> Vec<Value> {
    let cluster = h.cluster();
    create_nodepool(&cluster, nodepool_with(pool, json!({})));
    for i in 0..ready.len() {
        create_pending_pod(
            &cluster,
            &format!("{pool}-{i}"),
            json!({}),
            pod_spec(
                "1500m",
                "1Gi",
                json!({"nodeSelector": {labels::NODEPOOL: pool, labels::INSTANCE_TYPE: "m5.large"}}),
            ),
        );
    }
    let mut claims = Vec::new();
    eventually("the nodeclaims launch", || {
        claims = cluster
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .expect("list")
            .into_iter()
            .filter(|c| {
                c["metadata"]["labels"][labels::NODEPOOL] == pool
                    && c["status"]["providerID"].is_string()
            })
            .collect();
        claims.len() == ready.len()
    })
    .await;
    let since = (Timestamp::now() - SignedDuration::from_mins(45)).to_string();
    for (claim, ready) in claims.iter().zip(ready) {
        let name = claim["metadata"]["name"].as_str().expect("named");
        cluster
            .patch(
                "karpenter.sh/v1",
                "nodeclaims",
                None,
                name,
                kerf_loadtest::apiserver::PatchKind::Merge,
                &json!({"metadata": {"finalizers": [labels::TERMINATION_FINALIZER, "kerf.test/hold"]}}),
            )
            .expect("finalizer added");
        cluster
            .create(
                "v1",
                "nodes",
                json!({
                    "metadata": {"name": format!("node-{name}"), "labels": {
                        labels::NODEPOOL: pool,
                        labels::CAPACITY_TYPE: claim["metadata"]["labels"][labels::CAPACITY_TYPE],
                    }},
                    "spec": {"providerID": claim["status"]["providerID"]},
                    "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}]},
                }),
            )
            .expect("node created");
    }
    claims
}

fn claim_now(h: &Harness, claim: &Value) -> Value {
    h.cluster()
        .get(
            "karpenter.sh/v1",
            "nodeclaims",
            None,
            claim["metadata"]["name"].as_str().unwrap_or_default(),
        )
        .expect("held by the test finalizer")
}

/// A controller with [`claims_with_nodes`], after one node repair pass (which must not fail).
async fn one_repair_pass(pool: &str, ready: &[&str]) -> (Harness, kerf_actors::Daemon, Vec<Value>) {
    let h = start_cluster().await;
    let (_provider, cloud) = simulated_cloud();
    let daemon = start_provisioner(&h, cloud).await;
    let claims = claims_with_nodes(&h, pool, ready).await;
    eventually("cluster state has the nodes", || {
        daemon.state.nodes.len() == ready.len()
    })
    .await;
    let api: Api<NodeClaim> = Api::all(h.client.clone());
    let failures =
        node_repair::repair(&api, &daemon.state, daemon.events(), &AWS_REPAIR_POLICIES).await;
    assert!(failures.is_empty(), "{failures:?}");
    (h, daemon, claims)
}

#[test]
fn the_nodeclaim_of_a_node_not_ready_past_its_toleration_is_deleted_forcefully() {
    run(|| async {
        let (h, daemon, claims) = one_repair_pass("repair", &["False", "True"]).await;
        let unhealthy = claim_now(&h, &claims[0]);
        assert!(
            unhealthy["metadata"]["deletionTimestamp"].is_string(),
            "{unhealthy:#}"
        );
        assert!(
            unhealthy["metadata"]["annotations"][labels::NODECLAIM_TERMINATION_TIMESTAMP]
                .is_string(),
            "forceful: {unhealthy:#}"
        );
        let healthy = claim_now(&h, &claims[1]);
        assert!(
            healthy["metadata"]["deletionTimestamp"].is_null(),
            "{healthy:#}"
        );
        let text = http_get(daemon.metrics_addr, "/metrics").await.1;
        let line = "karpenter_nodeclaims_disrupted_total{reason=\"unhealthy\",nodepool=\"repair\",capacity_type=\"spot\"} 1";
        assert!(text.contains(line), "{line} missing:\n{text}");
        // Labelled with the NodeClaim's image too, whatever the provider launched it with.
        let unhealthy = "karpenter_nodeclaims_unhealthy_disrupted_total{condition=\"ready\",nodepool=\"repair\",capacity_type=\"spot\",image_id=\"";
        assert!(
            text.lines()
                .any(|l| l.starts_with(unhealthy) && l.ends_with("\"} 1")),
            "{unhealthy}…\"}} 1 missing:\n{text}"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_nodepool_with_more_than_a_fifth_of_its_nodes_unhealthy_is_not_repaired() {
    run(|| async {
        let (h, daemon, claims) = one_repair_pass("outage", &["Unknown", "Unknown"]).await;
        for claim in &claims {
            let now = claim_now(&h, claim);
            assert!(now["metadata"]["deletionTimestamp"].is_null(), "{now:#}");
        }
        // Upstream's warning, on each unhealthy Node, its NodeClaim and the NodePool.
        let cluster = h.cluster();
        let mut blocked: Vec<(String, String)> = Vec::new();
        eventually(
            "NodeRepairBlocked on the nodes, their nodeclaims and the nodepool",
            || {
                blocked = cluster
                    .list("v1", "events", Some("default"), "")
                    .expect("events list")
                    .iter()
                    .filter(|e| e["reason"] == "NodeRepairBlocked")
                    .map(|e| {
                        assert_eq!(e["type"], "Warning");
                        assert_eq!(
                            e["message"],
                            "more than 20% nodes are unhealthy in the nodepool"
                        );
                        let about = &e["involvedObject"];
                        (
                            about["kind"].as_str().unwrap_or_default().to_owned(),
                            about["name"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect();
                blocked.len() == 5
            },
        )
        .await;
        blocked.sort();
        let mut expected: Vec<(String, String)> = claims
            .iter()
            .flat_map(|c| {
                let name = c["metadata"]["name"].as_str().unwrap_or_default();
                [
                    ("Node".to_owned(), format!("node-{name}")),
                    ("NodeClaim".to_owned(), name.to_owned()),
                ]
            })
            .chain([("NodePool".to_owned(), "outage".to_owned())])
            .collect();
        expected.sort();
        assert_eq!(blocked, expected);
        daemon.stop().await;
        h.stop().await;
    });
}
