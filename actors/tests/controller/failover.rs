//! Two controllers on the fast lease: only the leader creates NodeClaims. The leader goes
//! mid-work — its NodeClaims in flight, unlaunched — without releasing the Lease (the API
//! server refuses its last requests), and pods arrive while nobody leads, so the standby
//! skips their batch. Once the Lease lapses the standby leads, provisions exactly the pods
//! the first did not cover, and the cluster ends with what one uninterrupted controller
//! creates for the same pods.

use k8s_openapi::api::coordination::v1::Lease;
use kerf_loadtest::apiserver::InjectedError;
use kube::api::Api;
use serde_json::json;

use crate::support::*;

const FIRST: usize = 5;
const SECOND: usize = 4;

async fn holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "karpenter")
        .get("karpenter-leader-election")
        .await
        .expect("lease exists")
        .spec
        .and_then(|s| s.holder_identity)
}

#[test]
fn the_standby_takes_over_and_provisions_only_what_the_leader_did_not() {
    run(|| async {
        let reference = uninterrupted_two_batches(FIRST, SECOND).await;

        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (_provider, cloud) = simulated_cloud_with(stalled_launches());
        let a = start_daemon_with(&h, quick_settings(&[]), "a", Some(cloud.clone())).await;
        let mut a_leads = a.leader.clone();
        until_leading(&mut a_leads, true, "a leads in time").await;
        let b = start_daemon_with(&h, quick_settings(&[]), "b", Some(cloud)).await;
        tokio::time::timeout(PATIENCE, b.state.wait_synced())
            .await
            .expect("b syncs");

        create_pending_pods(&cluster, "first", FIRST, BATCH_POD_CPU, BATCH_POD_MEMORY);
        let mut a_rounds = a.rounds.clone();
        let first = round_where(&mut a_rounds, "a provisions the first batch", |r| {
            r.pending.len() == FIRST
        })
        .await;
        assert!(!first.nodeclaims.is_empty(), "{first:?}");
        assert_eq!(nodeclaims(&h.client).await.len(), first.nodeclaims.len());
        assert!(b.rounds.borrow().is_none(), "the standby plans nothing");
        assert!(!*b.leader.borrow());

        // a goes down and cannot release the Lease on its way out.
        h.server
            .faults()
            .fail_requests(1.0, InjectedError::ServerError);
        a.stop_within(STALLED_DRAIN).await;
        h.server.faults().clear();
        assert_eq!(holder(&h.client).await.as_deref(), Some("a"));

        // Nobody leads while these arrive: b's batch for them is skipped.
        create_pending_pods(&cluster, "second", SECOND, BATCH_POD_CPU, BATCH_POD_MEMORY);
        let mut b_leads = b.leader.clone();
        until_leading(&mut b_leads, true, "b takes over once the lease lapses").await;
        let mut b_rounds = b.rounds.clone();
        let taken_over = round_where(&mut b_rounds, "b provisions every pending pod", |r| {
            r.pending.len() == FIRST + SECOND
        })
        .await;
        assert!(real_problems(&taken_over).is_empty(), "{taken_over:?}");
        assert_eq!(
            a_rounds.borrow().as_ref().map(|r| r.number),
            Some(first.number),
            "the old leader plans nothing more"
        );

        let claims = nodeclaims(&h.client).await;
        assert_eq!(
            claims.len(),
            reference.len(),
            "after failover: {claims:#?}\nuninterrupted: {reference:#?}"
        );
        assert_eq!(pods_covered(&claims), pods_covered(&reference));
        b.stop_within(STALLED_DRAIN).await;
        h.stop().await;
    });
}
