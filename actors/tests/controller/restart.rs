//! The controller restarts mid-work: its first NodeClaims exist but their launches have not
//! reported, and a second batch of pods is still in its batching window. The new controller
//! counts the NodeClaims in flight as capacity, so the cluster ends with exactly the
//! NodeClaims one uninterrupted controller creates for the same pods; the stopped one plans
//! nothing more.

use serde_json::json;

use crate::support::*;

const FIRST: usize = 5;
const SECOND: usize = 4;

#[test]
fn a_restart_mid_batch_creates_no_duplicate_nodeclaims() {
    run(|| async {
        let reference = uninterrupted_two_batches(FIRST, SECOND).await;

        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (_provider, cloud) = simulated_cloud_with(stalled_launches());
        let daemon = start_provisioner(&h, cloud.clone()).await;
        let mut stopped_rounds = daemon.rounds.clone();
        create_pending_pods(&cluster, "first", FIRST, BATCH_POD_CPU, BATCH_POD_MEMORY);
        let first = round_where(&mut stopped_rounds, "the first batch", |r| {
            r.pending.len() == FIRST
        })
        .await;
        assert!(!first.nodeclaims.is_empty(), "{first:?}");

        // The second batch's window is open when the controller goes.
        create_pending_pods(&cluster, "second", SECOND, BATCH_POD_CPU, BATCH_POD_MEMORY);
        daemon.stop_within(STALLED_DRAIN).await;
        let daemon = start_provisioner(&h, cloud).await;
        let mut rounds = daemon.rounds.clone();
        let last = round_where(&mut rounds, "every pod", |r| {
            r.pending.len() == FIRST + SECOND
        })
        .await;
        assert!(real_problems(&last).is_empty(), "{last:?}");
        let after_stop = stopped_rounds.borrow().as_ref().map(|r| r.number);
        assert_eq!(
            after_stop,
            Some(first.number),
            "a stopped controller plans nothing"
        );

        let claims = nodeclaims(&h.client).await;
        // The second batch may partly fit in the room the first batch's NodeClaims left;
        // either way the restarted controller sizes what the uninterrupted one sized.
        assert_eq!(
            claims.len(),
            reference.len(),
            "restarted: {claims:#?}\nuninterrupted: {reference:#?}"
        );
        assert_eq!(pods_covered(&claims), pods_covered(&reference));
        daemon.stop_within(STALLED_DRAIN).await;
        h.stop().await;
    });
}
