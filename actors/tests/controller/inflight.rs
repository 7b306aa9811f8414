//! NodeClaims in flight keep the pods they were made for. The first round plans three
//! hostname anti-affine cache pods (1.5 cpu) onto three two-vCPU NodeClaims that launch but
//! never register (no kubelets here), so the cache pods stay pending; the second round
//! brings three 1.8-cpu pods. Solving every pending pod again from scratch puts the larger
//! pods first, one on each in-flight NodeClaim, and pushes the cache pods onto three new
//! NodeClaims (one host each); with the cache pods held on their NodeClaims, only the new
//! pods need capacity, and they share one NodeClaim.

use serde_json::json;

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
