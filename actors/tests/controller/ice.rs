//! Insufficient capacity fed back into the solve: a launch the simulated EC2 refuses marks
//! the refused offerings in the OfferingCache and deletes its NodeClaim; the pod is planned
//! again, this time without the refused offerings, and launches elsewhere.

use std::sync::Arc;

use kerf::api::NodeClaim;
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
    requirement_values(claim, labels::CAPACITY_TYPE)
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
fn refused_spot_is_marked_and_the_same_nodeclaim_launches_on_demand_at_once() {
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

        // Every spot offering is refused; the NodeClaim also allows on-demand, so the same
        // NodeClaim is launched again at once, on-demand, and no second one is planned.
        let state = daemon.state.clone();
        let key = ObjectKey::new(None, &refused);
        let mut launched = None;
        eventually("the same nodeclaim launches", || {
            launched = state
                .nodeclaims
                .get(&key)
                .filter(|c| c.provider_id().is_some());
            launched.is_some()
        })
        .await;
        let launched = launched.expect("launched");
        // The marks go through the OfferingCache's mailbox: they land soon after the refusal.
        eventually("the refused spot offerings are marked", || {
            ZONES
                .iter()
                .all(|zone| offerings.is_unavailable(INSTANCE_TYPE, zone, "spot", &[]))
        })
        .await;
        for zone in ZONES {
            assert!(!offerings.is_unavailable(INSTANCE_TYPE, zone, "on-demand", &[]));
        }
        // `/explain` serves the marks with when each expires, for `kerf explain`.
        let (status, body) = http_get(daemon.metrics_addr, "/explain").await;
        assert_eq!(status, 200, "{body}");
        let served: kerf::explain::ControllerState =
            serde_json::from_str(&body).expect("the controller state");
        let now = k8s_openapi::jiff::Timestamp::now();
        let ttl = kerf::cloudprovider::UNAVAILABLE_OFFERINGS_TTL;
        let latest = now
            .checked_add(k8s_openapi::jiff::SignedDuration::try_from(ttl).expect("a TTL"))
            .expect("in range");
        let spot: Vec<_> = served
            .unavailable_offerings
            .iter()
            .filter(|o| o.instance_type == INSTANCE_TYPE && o.capacity_type == "spot")
            .collect();
        assert_eq!(spot.len(), ZONES.len(), "{body}");
        for offering in spot {
            assert!(
                offering.expires > now && offering.expires <= latest,
                "{body}"
            );
        }
        // The store narrows a launched NodeClaim's requirements; the API has what was written.
        let written = api.get(&refused).await.expect("launched");
        assert_eq!(
            capacity_types(&written),
            ["on-demand", "spot"],
            "the NodeClaim's spec is not rewritten"
        );
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
        let claims = api.list(&Default::default()).await.expect("list").items;
        assert_eq!(claims.len(), 1, "no second NodeClaim: {claims:?}");
        eventually("the refusal is published as an event", || {
            cluster
                .list("v1", "events", None, "")
                .expect("events list")
                .iter()
                .any(|e| {
                    e["reason"] == kerf::troubleshooting::documented("spot-ice")
                        && e["involvedObject"]["name"] == refused.as_str()
                })
        })
        .await;

        daemon.stop().await;
        h.stop().await;
    });
}
