//! Leader election on the Lease: one leader among candidates, failover when the leader stops
//! renewing, immediate handover when it releases on shutdown, only the leader provisions,
//! and a leader cut off from the API server steps down within its renew deadline and writes
//! nothing once the new leader holds the Lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kerf_actors::leader::{self, Election};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use crate::support::*;

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
        until_leading(&mut first_leader, true, "first leads in time").await;
        let second = start_daemon(&h, settings(&fast), "second").await;
        tokio::time::timeout(PATIENCE, second.state.wait_synced())
            .await
            .expect("second syncs");
        assert!(!*second.leader.borrow());
        // `/explain` is served off the leader path: the standby answers, saying it follows.
        for (daemon, leads) in [(&first, true), (&second, false)] {
            let (status, body) = http_get(daemon.metrics_addr, "/explain").await;
            assert_eq!(status, 200, "{body}");
            let state: kerf::explain::ControllerState =
                serde_json::from_str(&body).expect("the controller state");
            assert_eq!(state.leader, leads, "{body}");
            assert!(state.synced, "{body}");
        }

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
        until_leading(&mut second_leader, true, "second takes over").await;
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
        until_leading(&mut rx, true, "leads in time").await;
        assert_eq!(holder(&h.client).await.as_deref(), Some("only"));
        stop.send_replace(true);
        task.await.expect("election task ends cleanly");
        assert_eq!(holder(&h.client).await, None);
        assert!(!*leading.borrow());
        h.stop().await;
    });
}

#[test]
fn a_leader_whose_requests_stall_is_replaced_and_mutates_nothing_after() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (_provider, cloud) = simulated_cloud();
        let a_client = named_client(&h, "a").await;
        let a = start_daemon_on(a_client, quick_settings(&[]), "a", Some(cloud.clone())).await;
        let mut a_leads = a.leader.clone();
        until_leading(&mut a_leads, true, "a leads in time").await;
        let b = start_daemon_with(&h, quick_settings(&[]), "b", Some(cloud)).await;
        tokio::time::timeout(PATIENCE, b.state.wait_synced())
            .await
            .expect("b syncs");

        // Every request of a (lease renewals included) hangs from now on; pods arrive while
        // a still believes it leads, so its round's creates hang too.
        let cut = tokio::time::Instant::now();
        h.server.faults().partition("a");
        create_pending_pods(&cluster, "cut", 3, BATCH_POD_CPU, BATCH_POD_MEMORY);
        until_leading(&mut a_leads, false, "a steps down").await;
        let stepped_down = cut.elapsed();
        let mut b_leads = b.leader.clone();
        until_leading(&mut b_leads, true, "b takes over").await;
        let b_acquired = tokio::time::Instant::now();
        assert!(
            stepped_down <= FAST_LEASE.renew_deadline + FAST_LEASE.retry_period,
            "a stepped down {stepped_down:?} after it was cut off"
        );

        // a reaches the API server again, as a standby.
        h.server.faults().heal("a");
        let mut b_rounds = b.rounds.clone();
        let taken_over = round_where(&mut b_rounds, "b provisions the pods", |r| {
            r.pending.len() == 3 && !r.nodeclaims.is_empty()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let late: Vec<_> = h
            .server
            .faults()
            .mutations_from("a")
            .into_iter()
            .filter(|m| m.at >= b_acquired)
            .collect();
        assert!(late.is_empty(), "a wrote after b acquired: {late:?}");
        assert!(!*a.leader.borrow());
        assert_eq!(
            nodeclaims(&h.client).await.len(),
            taken_over.nodeclaims.len(),
            "only b's NodeClaims exist"
        );
        a.stop_within(Duration::ZERO).await;
        b.stop_within(Duration::ZERO).await;
        h.stop().await;
    });
}

#[test]
fn the_fence_refuses_and_abandons_writes_once_leadership_is_lost() {
    fn lease(name: &str) -> Lease {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "karpenter"}
        }))
        .expect("a Lease")
    }

    run(|| async {
        let h = start_cluster().await;
        let (leading, leader) = watch::channel(false);
        let client = leader::fenced(named_client(&h, "fenced").await, leader);
        let client_for_reads = client.clone();
        let leases: Api<Lease> = Api::namespaced(client, "karpenter");

        let refused = leases.create(&PostParams::default(), &lease("one")).await;
        assert!(refused.is_err(), "a standby cannot write: {refused:?}");
        assert!(h.server.faults().mutations_from("fenced").is_empty());
        Api::<k8s_openapi::api::core::v1::Node>::all(client_for_reads)
            .list(&ListParams::default())
            .await
            .expect("reads are not fenced");

        leading.send_replace(true);
        leases
            .create(&PostParams::default(), &lease("two"))
            .await
            .expect("a leader writes");
        assert_eq!(h.server.faults().mutations_from("fenced").len(), 1);

        // In flight (the API server does not answer) when leadership is lost.
        h.server.faults().partition("fenced");
        let in_flight = {
            let leases = leases.clone();
            tokio::spawn(
                async move { leases.create(&PostParams::default(), &lease("three")).await },
            )
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        leading.send_replace(false);
        let abandoned = tokio::time::timeout(Duration::from_secs(2), in_flight)
            .await
            .expect("abandoned as leadership is lost")
            .expect("task ran");
        assert!(abandoned.is_err(), "{abandoned:?}");
        h.stop().await;
    });
}
