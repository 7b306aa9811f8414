//! Graceful shutdown: a leader stopped while a launch is slow finishes the launch before it
//! lets go of its Lease, so the NodeClaim ends launched — neither lost nor launched twice by
//! the replica that takes over.

use std::sync::Arc;
use std::time::Duration;

use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::catalog::Catalog;
use kerf_actors::Cloud;
use kerf_loadtest::apiserver::PatchKind;
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig};
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::support::*;

const REGION: &str = "us-east-1";

/// Long enough that the daemon is surely stopped mid-launch, short enough for the test.
const SLOW_LAUNCH: Duration = Duration::from_millis(1500);

fn settings_with_election() -> kerf_actors::ValidSettings {
    settings(&["--batch-idle-duration", "300ms"])
}

async fn lead(daemon: &kerf_actors::Daemon) {
    let mut leader = daemon.leader.clone();
    tokio::time::timeout(PATIENCE, leader.wait_for(|l| *l))
        .await
        .expect("leads in time")
        .expect("election alive");
}

#[test]
fn a_stopping_leader_finishes_its_launches_before_handing_over() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        cluster
            .create("karpenter.sh/v1", "nodepools", nodepool("default"))
            .expect("nodepool created");
        let provider = Arc::new(
            SimulatedCloudProvider::for_region(
                REGION,
                Ec2Config {
                    launch_latency: SLOW_LAUNCH,
                    ..Ec2Config::instant(REGION)
                },
                SimulatedCloudProviderConfig::default(),
            )
            .expect("simulated region"),
        );
        let cloud = || Cloud {
            provider: provider.clone(),
            catalog: Catalog::embedded(REGION).expect("embedded region"),
            offerings: None,
        };
        let first = start_daemon_with(&h, settings_with_election(), "a", Some(cloud())).await;
        lead(&first).await;
        tokio::time::timeout(PATIENCE, first.state.wait_synced())
            .await
            .expect("cluster state syncs");
        create_unschedulable_pod(&cluster, "web-1");

        // Stop as soon as the NodeClaim exists: its machine is still being launched.
        eventually("the nodeclaim is created", || {
            !cluster
                .list("karpenter.sh/v1", "nodeclaims", None, "")
                .expect("nodeclaims list")
                .is_empty()
        })
        .await;
        let api: Api<NodeClaim> = Api::all(h.client.clone());
        let claims = api.list(&ListParams::default()).await.expect("list");
        assert!(
            !claims.items[0].is_condition_true(types::LAUNCHED),
            "the launch is still in flight when the daemon stops"
        );
        first.stop().await;

        let claims = api.list(&ListParams::default()).await.expect("list").items;
        assert_eq!(claims.len(), 1, "{claims:?}");
        assert!(claims[0].is_condition_true(types::LAUNCHED), "{claims:?}");
        assert!(claims[0].provider_id().is_some(), "{claims:?}");
        assert_eq!(provider.ec2().instances().len(), 1);

        // The next leader counts the launched NodeClaim as capacity for the pod.
        let second = start_daemon_with(&h, settings_with_election(), "b", Some(cloud())).await;
        lead(&second).await;
        tokio::time::timeout(PATIENCE, second.state.wait_synced())
            .await
            .expect("cluster state syncs");
        cluster
            .patch_status(
                "v1",
                "pods",
                Some("default"),
                "web-1",
                // By condition type, as the kube-scheduler writes it: kerf's nomination
                // condition (written once the machine launched) stays beside it.
                PatchKind::Strategic,
                &json!({"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/0 nodes are available (retried)"
                }]}}),
            )
            .expect("pod status patched");
        let mut rounds = second.rounds.clone();
        let round = tokio::time::timeout(PATIENCE, rounds.wait_for(|r| r.is_some()))
            .await
            .expect("a round in time")
            .expect("provisioner alive")
            .clone()
            .expect("a round");
        let pending: Vec<String> = round.pending.iter().map(ToString::to_string).collect();
        assert_eq!(pending, ["default/web-1"], "{round:?}");
        assert!(round.nodeclaims.is_empty(), "{round:?}");
        let claims = api.list(&ListParams::default()).await.expect("list").items;
        assert_eq!(claims.len(), 1, "{claims:?}");
        assert_eq!(provider.ec2().instances().len(), 1);

        second.stop().await;
        h.stop().await;
    });
}
