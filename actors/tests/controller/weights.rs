//! Two NodePools that could both take a pod: new NodeClaims come from the heavier
//! (`spec.weight` 50 over 10); pods only the lighter one selects go there; and once the heavier pool's limit is used up,
//! the rest spill over to the lighter one rather than waiting.

use std::collections::BTreeMap;

use kerf::api::NodeClaim;
use serde_json::json;

use crate::support::*;

const POOL_LABEL: &str = "kerf.test/pool";

fn pools(cluster: &kerf_loadtest::apiserver::Cluster, heavy_limits: serde_json::Value) {
    create_nodepool(
        cluster,
        nodepool_with(
            "light",
            json!({"spec": {"weight": 10,
                "template": {"metadata": {"labels": {POOL_LABEL: "light"}}}}}),
        ),
    );
    create_nodepool(
        cluster,
        nodepool_with(
            "heavy",
            json!({"spec": {"weight": 50, "limits": heavy_limits}}),
        ),
    );
}

fn claims_of<'a>(claims: &'a [NodeClaim], pool: &str) -> Vec<&'a NodeClaim> {
    claims
        .iter()
        .filter(|c| c.nodepool_name() == Some(pool))
        .collect()
}

/// NodeClaims per NodePool, created and planned by one solve, must agree.
fn assert_pools_match(claims: &[NodeClaim], expected: &kerf::scheduling::SchedulingResult) {
    let mut created: BTreeMap<&str, usize> = BTreeMap::new();
    for claim in claims {
        *created
            .entry(claim.nodepool_name().unwrap_or_default())
            .or_default() += 1;
    }
    let mut planned: BTreeMap<&str, usize> = BTreeMap::new();
    for claim in &expected.new_node_claims {
        *planned.entry(claim.node_pool.as_str()).or_default() += 1;
    }
    assert_eq!(created, planned);
}

#[test]
fn the_heavier_nodepool_wins_and_pods_selecting_the_lighter_go_there() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        pools(&cluster, json!(null));
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud.clone()).await;
        create_pending_pods(&cluster, "web", 4, "1", "1Gi");
        let mut rounds = daemon.rounds.clone();
        let first = round_where(&mut rounds, "the web pods", |r| r.pending.len() == 4).await;
        let claims = nodeclaims(&h.client).await;
        assert_eq!(claims.len(), first.nodeclaims.len(), "{first:?}");
        assert_eq!(
            claims_of(&claims, "heavy").len(),
            claims.len(),
            "pods both pools take go to the heavier: {first:?}"
        );
        assert_eq!(pods_covered(&claims), 4);
        assert_pools_match(&claims, &one_solve(&cluster, &cloud));

        // A pod only the lighter pool selects, in a later batch: the web pods are still
        // pending and the heavy NodeClaims in flight hold them.
        create_pending_pod(
            &cluster,
            "picky",
            json!({}),
            pod_spec("1", "1Gi", json!({"nodeSelector": {POOL_LABEL: "light"}})),
        );
        // (Rounds in between may re-plan the web pods alone: their nominations, written at
        // launch, change them and so trigger them again.)
        let second = round_where(&mut rounds, "the picky pod", |r| {
            r.pending.iter().any(|p| p.to_string() == "default/picky")
        })
        .await;
        assert_eq!(second.pending.len(), 5, "{second:?}");
        let all = nodeclaims(&h.client).await;
        let light = claims_of(&all, "light");
        assert_eq!(light.len(), 1, "{second:?}");
        assert_eq!(second.nodeclaims, [light[0].name().to_owned()]);
        assert_eq!(pods_covered(&[light[0].clone()]), 1);
        assert!(
            light[0]
                .requirements()
                .iter()
                .any(|r| r.key == POOL_LABEL && r.values == ["light"]),
            "{:?}",
            light[0].requirements()
        );

        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn pods_spill_to_the_lighter_nodepool_when_the_heavier_is_at_its_limit() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        pools(&cluster, json!({"cpu": "4"}));
        let (_provider, cloud) = simulated_cloud();
        let catalog = cloud.catalog;
        let daemon = start_provisioner(&h, cloud.clone()).await;
        create_pending_pods(&cluster, "web", 6, "1", "1Gi");

        let mut rounds = daemon.rounds.clone();
        let round = round_where(&mut rounds, "every pod pending", |r| r.pending.len() == 6).await;
        let unexpected: Vec<&String> = round
            .problems
            .iter()
            .filter(|p| !p.contains("EC2NodeClass default is not in the input"))
            .collect();
        assert!(unexpected.is_empty(), "every pod finds a pool: {round:?}");
        let claims = nodeclaims(&h.client).await;
        assert_eq!(claims.len(), round.nodeclaims.len());
        let heavy: Vec<NodeClaim> = claims_of(&claims, "heavy").into_iter().cloned().collect();
        let light: Vec<NodeClaim> = claims_of(&claims, "light").into_iter().cloned().collect();
        assert!(!heavy.is_empty(), "the heavier pool fills up first");
        assert!(!light.is_empty(), "the rest spills over: {round:?}");
        let charged: i64 = heavy.iter().map(|c| largest_cpu_milli(c, &catalog)).sum();
        assert!(
            charged <= 4000,
            "heavy's limit is 4 cpu, {charged}m charged"
        );
        assert_eq!(pods_covered(&heavy) + pods_covered(&light), 6);
        assert_pools_match(&claims, &one_solve(&cluster, &cloud));

        daemon.stop().await;
        h.stop().await;
    });
}
