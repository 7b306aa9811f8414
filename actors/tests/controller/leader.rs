//! Leader election on the Lease: one leader among candidates, failover when the leader stops
//! renewing, immediate handover when it releases on shutdown, and only the leader provisions.

use k8s_openapi::api::coordination::v1::Lease;
use kerf_actors::leader::{self, Election};
use kube::api::Api;
use tokio::sync::watch;

use crate::support::{
    FAST_LEASE, PATIENCE, create_unschedulable_pod, eventually, run, settings, start_cluster,
    start_daemon,
};

fn election(identity: &str) -> Election {
    Election {
        namespace: "karpenter".into(),
        name: "karpenter-leader-election".into(),
        identity: identity.into(),
        timing: FAST_LEASE,
    }
}

async fn holder(client: &kube::Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "karpenter");
    leases
        .get("karpenter-leader-election")
        .await
        .expect("lease exists")
        .spec
        .and_then(|s| s.holder_identity)
}

#[test]
fn one_leader_and_failover_when_it_stops_renewing() {
    run(|| async {
        let h = start_cluster().await;
        let (_stop_a, stop_rx_a) = watch::channel(false);
        let (_stop_b, stop_rx_b) = watch::channel(false);
        let (a, task_a) = leader::spawn(h.client.clone(), election("a"), stop_rx_a);
        let (b, task_b) = leader::spawn(h.client.clone(), election("b"), stop_rx_b);
        eventually("a leader", || *a.borrow() || *b.borrow()).await;
        assert!(!(*a.borrow() && *b.borrow()), "two leaders");
        let (leader_rx, leader_task, standby, standby_name) = if *a.borrow() {
            (a, task_a, b, "b")
        } else {
            (b, task_b, a, "a")
        };
        // The leader's process dies: no release, it simply stops renewing.
        leader_task.abort();
        let _ = leader_task.await;
        eventually("standby takes over after the lease lapses", || {
            *standby.borrow()
        })
        .await;
        assert_eq!(holder(&h.client).await.as_deref(), Some(standby_name));
        drop(leader_rx);
        h.stop().await;
    });
}

#[test]
fn leader_releases_on_shutdown_and_only_the_leader_provisions() {
    run(|| async {
        let h = start_cluster().await;
        let fast = ["--batch-idle-duration", "100ms"];
        let first = start_daemon(&h, settings(&fast), "first").await;
        let mut first_leader = first.leader.clone();
        tokio::time::timeout(PATIENCE, first_leader.wait_for(|l| *l))
            .await
            .expect("first leads in time")
            .expect("election running");
        let second = start_daemon(&h, settings(&fast), "second").await;
        tokio::time::timeout(PATIENCE, second.state.wait_synced())
            .await
            .expect("second syncs");
        assert!(!*second.leader.borrow());

        create_unschedulable_pod(&h.cluster(), "p");
        let mut rounds = first.rounds.clone();
        tokio::time::timeout(PATIENCE, rounds.wait_for(Option::is_some))
            .await
            .expect("leader provisions")
            .expect("provisioner alive");

        let leases: Api<Lease> = Api::namespaced(h.client.clone(), "karpenter");
        let transitions = |l: Lease| l.spec.and_then(|s| s.lease_transitions).unwrap_or(0);
        let before = transitions(
            leases
                .get("karpenter-leader-election")
                .await
                .expect("lease"),
        );
        first.stop().await;
        let mut second_leader = second.leader.clone();
        tokio::time::timeout(PATIENCE, second_leader.wait_for(|l| *l))
            .await
            .expect("second takes over")
            .expect("election running");
        let after = transitions(
            leases
                .get("karpenter-leader-election")
                .await
                .expect("lease"),
        );
        assert_eq!(after, before + 1);
        assert_eq!(holder(&h.client).await.as_deref(), Some("second"));
        second.stop().await;
        h.stop().await;
    });
}

#[test]
fn shutdown_releases_the_lease() {
    run(|| async {
        let h = start_cluster().await;
        let (stop, stop_rx) = watch::channel(false);
        let (leading, task) = leader::spawn(h.client.clone(), election("only"), stop_rx);
        let mut rx = leading.clone();
        tokio::time::timeout(PATIENCE, rx.wait_for(|l| *l))
            .await
            .expect("leads in time")
            .expect("election running");
        assert_eq!(holder(&h.client).await.as_deref(), Some("only"));
        stop.send_replace(true);
        task.await.expect("election task ends cleanly");
        assert_eq!(holder(&h.client).await, None);
        assert!(!*leading.borrow());
        h.stop().await;
    });
}
