//! From unschedulable pods to running capacity: the Provisioner solves, the NodeClaimCreator creates
//! NodeClaims and launches them in the simulated EC2, and the simulated kubelets register a
//! Node for each launched machine.

use std::sync::Arc;

use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::catalog::Catalog;
use kerf::labels;
use kerf_actors::Cloud;
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig};
use kerf_loadtest::kubelet;
use kube::api::{Api, ListParams};

use crate::support::*;

const REGION: &str = "us-east-1";

fn bound_pods(cluster: &kerf_loadtest::apiserver::Cluster) -> usize {
    cluster
        .list("v1", "pods", Some("default"), "")
        .expect("pods list")
        .iter()
        .filter(|p| p["spec"]["nodeName"].as_str().is_some())
        .count()
}

#[test]
fn unschedulable_pods_get_launched_nodeclaims() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        cluster
            .create("karpenter.sh/v1", "nodepools", nodepool("default"))
            .expect("nodepool created");
        let provider = Arc::new(
            SimulatedCloudProvider::for_region(
                REGION,
                Ec2Config::instant(REGION),
                SimulatedCloudProviderConfig::default(),
            )
            .expect("simulated region"),
        );
        let cloud = Cloud {
            provider: provider.clone(),
            catalog: Catalog::embedded(REGION).expect("embedded region"),
            offerings: None,
        };
        let daemon = start_daemon_with(
            &h,
            settings(&[
                "--disable-leader-election",
                "true",
                "--batch-idle-duration",
                "300ms",
            ]),
            "a",
            Some(cloud),
        )
        .await;
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");
        for name in ["web-1", "web-2", "web-3"] {
            create_unschedulable_pod(&cluster, name);
        }

        let mut rounds = daemon.rounds.clone();
        let round = tokio::time::timeout(
            PATIENCE,
            rounds.wait_for(|r| r.as_ref().is_some_and(|r| r.pending.len() == 3)),
        )
        .await
        .expect("a round in time")
        .expect("provisioner alive")
        .clone()
        .expect("a round");
        assert!(!round.nodeclaims.is_empty(), "{round:?}");
        // The test creates no EC2NodeClass, so the AL2023 defaults apply (and are reported).
        let unexpected: Vec<&String> = round
            .problems
            .iter()
            .filter(|p| !p.contains("EC2NodeClass default is not in the input"))
            .collect();
        assert!(unexpected.is_empty(), "{round:?}");

        let api: Api<NodeClaim> = Api::all(h.client.clone());
        let pool = cluster
            .get("karpenter.sh/v1", "nodepools", None, "default")
            .expect("nodepool");
        let claims = api.list(&ListParams::default()).await.expect("list");
        assert_eq!(claims.items.len(), round.nodeclaims.len());
        for claim in &claims.items {
            let name = claim.metadata.name.as_deref().unwrap_or_default();
            assert!(name.starts_with("default-"), "{name}");
            let labels = claim.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get(labels::NODEPOOL).map(String::as_str),
                Some("default")
            );
            assert_eq!(
                claim.metadata.finalizers.clone().unwrap_or_default(),
                vec![labels::TERMINATION_FINALIZER.to_string()]
            );
            let owners = claim.metadata.owner_references.clone().unwrap_or_default();
            assert_eq!(owners.len(), 1);
            assert_eq!(owners[0].kind, "NodePool");
            assert_eq!(owners[0].name, "default");
            assert_eq!(
                Some(owners[0].uid.as_str()),
                pool["metadata"]["uid"].as_str()
            );
            assert!(
                claim
                    .spec
                    .requirements
                    .iter()
                    .any(|r| r.key == labels::INSTANCE_TYPE && !r.values.is_empty())
            );
            let requests = claim.resource_requests().cloned().unwrap_or_default();
            assert!(requests.contains_key("cpu"), "{requests:?}");
        }

        // The launch lands in status: providerID and Launched=True on every claim.
        let launched = |claims: &[NodeClaim]| {
            claims.iter().all(|c| {
                c.provider_id().is_some_and(|id| id.starts_with("aws:///"))
                    && c.is_condition_true(types::LAUNCHED)
            })
        };
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let claims = api.list(&ListParams::default()).await.expect("list");
            if launched(&claims.items) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "claims not launched: {claims:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }

        // The pods are judged unschedulable again (as kube-scheduler retries them): the next
        // round sees the in-flight NodeClaims as capacity and creates none. The verdict
        // leaves kerf's nomination, written as each machine launched, in place: a pod
        // nominated by someone else is not kerf's to provision.
        for name in ["web-1", "web-2", "web-3"] {
            judge_unschedulable(&cluster, name, "0/1 nodes are available");
        }
        let second = tokio::time::timeout(
            PATIENCE,
            rounds.wait_for(|r| r.as_ref().is_some_and(|r| r.number == 2)),
        )
        .await
        .expect("a second round in time")
        .expect("provisioner alive")
        .clone()
        .expect("a round");
        assert_eq!(second.pending.len(), 3, "{second:?}");
        assert!(second.nodeclaims.is_empty(), "{second:?}");

        // The simulated kubelets boot every launched instance into a Node with its
        // providerID. (Registration and binding are covered in `lifecycle.rs`.)
        let kubelets = kubelet::start(h.client.clone(), provider, kubelet::KubeletConfig::fast());
        let provider_ids: Vec<String> = api
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .filter_map(|c| c.provider_id().map(str::to_owned))
            .collect();
        eventually("a node per launched nodeclaim", || {
            let nodes = cluster.list("v1", "nodes", None, "").expect("nodes list");
            provider_ids.iter().all(|id| {
                nodes
                    .iter()
                    .any(|n| n["spec"]["providerID"].as_str() == Some(id.as_str()))
            })
        })
        .await;
        // The provisioner counts its NodeClaims as capacity: no second one for these pods.
        let claims = api.list(&ListParams::default()).await.expect("list");
        assert_eq!(claims.items.len(), round.nodeclaims.len());
        assert_eq!(
            bound_pods(&cluster),
            0,
            "no scheduler runs here to bind them"
        );

        kubelets.stop();
        daemon.stop().await;
        h.stop().await;
    });
}
