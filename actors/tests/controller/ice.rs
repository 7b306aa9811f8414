//! Insufficient capacity fed back into the solve: a launch the simulated EC2 refuses marks
//! the refused offerings in the OfferingCache and deletes its NodeClaim; the pod is planned
//! again, this time without the refused offerings, and launches elsewhere.

use std::sync::Arc;

use kerf::api::{NodeClaim, Operator};
use kerf::catalog::Catalog;
use kerf::cloudprovider::UnavailableOfferings;
use kerf::labels;
use kerf_actors::provisioner::Round;
use kerf_actors::state::ObjectKey;
use kerf_actors::{Cloud, Daemon};
use kerf_loadtest::ec2::{
    CapacityType, Ec2Config, OfferingKey, SimulatedCloudProvider, SimulatedCloudProviderConfig,
};
use kube::api::Api;
use serde_json::json;
use tokio::sync::watch;

use crate::support::*;

const REGION: &str = "us-east-1";
const INSTANCE_TYPE: &str = "m5.large";
const ZONES: [&str; 2] = ["us-east-1a", "us-east-1b"];

/// One instance type in two zones, spot or on-demand: spot is cheaper, so it is tried first.
fn narrow_nodepool() -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": labels::INSTANCE_TYPE, "operator": "In", "values": [INSTANCE_TYPE]},
                {"key": labels::ZONE, "operator": "In", "values": ZONES},
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}
            ]
        }}}
    })
}

async fn round(rounds: &mut watch::Receiver<Option<Round>>, number: u64) -> Round {
    tokio::time::timeout(
        PATIENCE,
        rounds.wait_for(|r| r.as_ref().is_some_and(|r| r.number == number)),
    )
    .await
    .unwrap_or_else(|_| panic!("round {number} in time"))
    .expect("provisioner alive")
    .clone()
    .expect("a round")
}

fn capacity_types(claim: &NodeClaim) -> Vec<String> {
    claim
        .requirements()
        .iter()
        .filter(|r| r.key == labels::CAPACITY_TYPE && r.operator == Operator::In)
        .flat_map(|r| r.values.clone())
        .collect()
}

async fn start(h: &Harness, provider: Arc<SimulatedCloudProvider>) -> Daemon {
    let cloud = Cloud {
        provider,
        catalog: Catalog::embedded(REGION).expect("embedded region"),
        offerings: None,
    };
    let daemon = start_daemon_with(
        h,
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
    daemon
}

#[test]
fn a_refused_offering_is_planned_around_and_the_pod_launches_on_another() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        cluster
            .create("karpenter.sh/v1", "nodepools", narrow_nodepool())
            .expect("nodepool created");
        let provider = Arc::new(
            SimulatedCloudProvider::for_region(
                REGION,
                Ec2Config::instant(REGION),
                SimulatedCloudProviderConfig::default(),
            )
            .expect("simulated region"),
        );
        for zone in ZONES {
            provider.ec2().set_insufficient_capacity(
                OfferingKey::new(INSTANCE_TYPE, zone, CapacityType::Spot),
                true,
            );
        }
        let daemon = start(&h, provider.clone()).await;
        let offerings = daemon
            .offerings
            .clone()
            .expect("a cloud has an offering cache");
        create_unschedulable_pod(&cluster, "web-1");

        // Round 1 plans spot (cheapest); every spot offering is refused.
        let mut rounds = daemon.rounds.clone();
        let first = round(&mut rounds, 1).await;
        assert_eq!(first.nodeclaims.len(), 1, "{first:?}");
        let refused = first.nodeclaims[0].clone();
        let api: Api<NodeClaim> = Api::all(h.client.clone());
        let claim = api.get(&refused).await.expect("created");
        assert_eq!(capacity_types(&claim), ["on-demand", "spot"]);

        // The refused offerings are marked before the NodeClaim is deleted; the lifecycle
        // releases a NodeClaim that never launched at once, and a deleting or deleted
        // NodeClaim is no longer capacity.
        let state = daemon.state.clone();
        let key = ObjectKey::new(None, &refused);
        eventually("the unlaunchable nodeclaim is deleted and released", || {
            state.nodeclaims.get(&key).is_none() && state.nodeclaims.recently_deleted(&key)
        })
        .await;
        for zone in ZONES {
            assert!(
                offerings.is_unavailable(INSTANCE_TYPE, zone, "spot", &[]),
                "spot/{INSTANCE_TYPE}/{zone} is marked: {offerings:?}"
            );
            assert!(!offerings.is_unavailable(INSTANCE_TYPE, zone, "on-demand", &[]));
        }

        // Nobody touches the pod: the NodeClaim's deletion re-triggers it.
        let second = round(&mut rounds, 2).await;
        assert_eq!(second.nodeclaims.len(), 1, "{second:?}");
        let replacement = second.nodeclaims[0].clone();
        assert_ne!(replacement, refused);
        let claim = api.get(&replacement).await.expect("created");
        assert_eq!(
            capacity_types(&claim),
            ["on-demand"],
            "spot is unavailable, so the NodeClaim asks for on-demand only"
        );

        // It launches: on-demand, in one of the pool's zones.
        let mut launched = None;
        eventually("the replacement launches", || {
            launched = state
                .nodeclaims
                .get(&ObjectKey::new(None, &replacement))
                .filter(|c| c.provider_id().is_some());
            launched.is_some()
        })
        .await;
        let launched = launched.expect("launched");
        let labels = launched.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(labels::CAPACITY_TYPE).map(String::as_str),
            Some("on-demand")
        );
        assert_eq!(
            labels.get(labels::INSTANCE_TYPE).map(String::as_str),
            Some(INSTANCE_TYPE)
        );
        let zone = labels.get(labels::ZONE).cloned().unwrap_or_default();
        assert!(ZONES.contains(&zone.as_str()), "launched in {zone}");
        let instances = provider.ec2().instances();
        assert_eq!(instances.len(), 1, "{instances:?}");
        assert_eq!(instances[0].capacity_type, CapacityType::OnDemand);
        assert_eq!(instances[0].zone, zone);

        daemon.stop().await;
        h.stop().await;
    });
}
