//! NodeClaims in flight keep the pods they were made for. The first round plans three
//! hostname anti-affine cache pods (1.5 cpu) onto three two-vCPU NodeClaims that launch but
//! never register (no kubelets here), so the cache pods stay pending; the second round
//! brings three 1.8-cpu pods. Solving every pending pod again from scratch puts the larger
//! pods first, one on each in-flight NodeClaim, and pushes the cache pods onto three new
//! NodeClaims (one host each); with the cache pods held on their NodeClaims, only the new
//! pods need capacity, and they share one NodeClaim.
//! A pod a later round places in the room left on an in-flight NodeClaim is held there too:
//! its Node's registration nominates it, as it nominates the pods the NodeClaim was made for.

use std::time::Duration;

use kerf_loadtest::kubelet::KubeletConfig;
use serde_json::{Value, json};

use crate::support::*;

const CACHE_PODS: usize = 3;
const BIG_PODS: usize = 3;

fn create_cache_pods(cluster: &kerf_loadtest::apiserver::Cluster) {
    let anti = json!({"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "cache"}}
        }]
    }}});
    for i in 0..CACHE_PODS {
        create_pending_pod(
            cluster,
            &format!("cache-{i}"),
            json!({"app": "cache"}),
            pod_spec("1500m", "1Gi", anti.clone()),
        );
    }
}

#[test]
fn a_later_round_plans_only_pods_no_in_flight_nodeclaim_was_made_for() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud).await;
        let mut rounds = daemon.rounds.clone();

        create_cache_pods(&cluster);
        let first = round_where(&mut rounds, "the cache pods", |r| {
            r.pending.len() == CACHE_PODS
        })
        .await;
        assert!(real_problems(&first).is_empty(), "{first:?}");
        assert_eq!(first.nodeclaims.len(), CACHE_PODS, "one host per cache pod");

        create_pending_pods(&cluster, "big", BIG_PODS, "1800m", "1Gi");
        let second = round_where(&mut rounds, "the big pods", |r| {
            r.pending.len() == CACHE_PODS + BIG_PODS
        })
        .await;
        assert!(real_problems(&second).is_empty(), "{second:?}");
        let created_later: Vec<_> = nodeclaims(&h.client)
            .await
            .into_iter()
            .filter(|c| second.nodeclaims.iter().any(|n| n == c.name()))
            .collect();
        assert_eq!(
            (created_later.len(), pods_covered(&created_later)),
            (1, BIG_PODS as i64),
            "the big pods share one new NodeClaim; the cache pods stay on theirs: {:?}",
            second.nodeclaims
        );
        daemon.stop().await;
        h.stop().await;
    });
}

/// The pod named `name`, as the emulator has it.
fn pod(cluster: &kerf_loadtest::apiserver::Cluster, name: &str) -> Option<Value> {
    cluster.get("v1", "pods", Some("default"), name).ok()
}

#[test]
fn a_pod_a_later_round_placed_on_an_in_flight_nodeclaim_is_nominated_to_its_node() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud).await;
        let mut rounds = daemon.rounds.clone();
        // Nodes register seconds after launch: time for a second round meanwhile.
        let booting = KubeletConfig {
            boot_delay: Duration::from_secs(3),
            ..KubeletConfig::fast()
        };
        let _simulators = node_simulators_with(&h, provider, booting);

        create_pending_pod(
            &cluster,
            "first",
            json!({}),
            pod_spec("1", "1Gi", json!({})),
        );
        let first = round_where(&mut rounds, "the first pod", |r| r.pending.len() == 1).await;
        assert_eq!(first.nodeclaims.len(), 1, "{first:?}");
        let claim = first.nodeclaims[0].clone();

        create_pending_pod(
            &cluster,
            "second",
            json!({}),
            pod_spec("100m", "128Mi", json!({})),
        );
        let second = round_where(&mut rounds, "the second pod", |r| {
            r.pending.iter().any(|p| p.to_string() == "default/second")
        })
        .await;
        assert!(
            second.nodeclaims.is_empty(),
            "the second pod fits the room left on {claim}: {second:?}"
        );
        assert!(
            nodeclaims(&h.client).await.len() == 1,
            "no NodeClaim but the first"
        );

        eventually("both pods bound", || {
            ["first", "second"]
                .iter()
                .all(|name| pod(&cluster, name).is_some_and(|p| p["spec"]["nodeName"].is_string()))
        })
        .await;
        let second = pod(&cluster, "second").expect("second pod");
        let node = second["spec"]["nodeName"].as_str().expect("bound");
        let nomination = second["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kerf::pods::NOMINATION_CONDITION)
            .unwrap_or_else(|| panic!("the second pod was nominated: {second:#}"));
        assert_eq!(nomination["status"], "True", "{second:#}");
        assert_eq!(
            second["status"]["nominatedNodeName"], node,
            "nominated to the node of {claim}: {second:#}"
        );
        daemon.stop().await;
        h.stop().await;
    });
}
