//! Fencing that holds, over HTTP against the emulator and the simulated EC2: two replicas,
//! the leader mid-launch when its Lease renewals stall past the renew deadline while its
//! other requests still go through — its CreateFleet applied with the answer held, or still
//! on its way to EC2. It steps down at its deadline, the standby takes over, and by the
//! emulator's request log and EC2's write log no write of the old leader comes after the new
//! leader's first; no NodeClaim gets a second instance.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kerf::api::NodeClaim;
use kerf::catalog::Catalog;
use kerf_actors::mailbox::MailboxDepth;
use kerf_actors::offering_cache::{
    OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache, UNAVAILABLE_OFFERINGS_TTL,
};
use kerf_actors::{Cloud, Daemon};
use kerf_loadtest::ec2::{SimulatedCloudProvider, tags};
use serde_json::json;
use tokio::time::Instant;

use crate::support::*;

/// `provider` as replica `name` sees it: its own unavailable offerings, its EC2 calls made
/// (and logged) under its name.
fn replica_cloud(provider: &SimulatedCloudProvider, name: &str) -> Cloud {
    let offerings = OfferingCache::start(
        UNAVAILABLE_OFFERINGS_TTL,
        MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
    );
    Cloud {
        provider: Arc::new(
            provider
                .for_replica(Arc::new(offerings.clone()))
                .calling_as(name),
        ),
        catalog: Catalog::embedded(REGION).expect("embedded region"),
        offerings: Some(offerings),
    }
}

fn is_lease(path: &str) -> bool {
    path.contains("/leases")
}

/// When `replica` wrote, outside leader election: its mutating requests to the emulator
/// (Lease writes excepted) and its EC2 writes.
fn writes_of(
    h: &Harness,
    provider: &SimulatedCloudProvider,
    replica: &str,
) -> Vec<(Instant, String)> {
    let mut writes: Vec<(Instant, String)> = h
        .server
        .faults()
        .mutations_from(replica)
        .into_iter()
        .filter(|m| !is_lease(&m.path))
        .map(|m| (m.at, format!("{} {}", m.method, m.path)))
        .collect();
    writes.extend(
        provider
            .ec2()
            .writes()
            .into_iter()
            .filter(|w| w.caller.as_deref() == Some(replica))
            .map(|w| (w.at, format!("{} {:?}", w.operation, w.instance_ids))),
    );
    writes.sort();
    writes
}

async fn until_all_launched(h: &Harness, count: usize) -> Vec<NodeClaim> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let claims = nodeclaims(&h.client).await;
        if claims.len() >= count && claims.iter().all(|c| c.provider_id().is_some()) {
            return claims;
        }
        assert!(
            Instant::now() < deadline,
            "NodeClaims launched in time: {claims:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two replicas launching into `provider`, `a` leading, `b` synced.
async fn pair(h: &Harness, provider: &SimulatedCloudProvider) -> (Daemon, Daemon) {
    create_nodepool(&h.cluster(), nodepool_with("default", json!({})));
    let a = start_daemon_on(
        named_client(h, "a").await,
        quick_settings(&[]),
        "a",
        Some(replica_cloud(provider, "a")),
    )
    .await;
    let mut a_leads = a.leader.clone();
    until_leading(&mut a_leads, true, "a leads in time").await;
    let b = start_daemon_on(
        named_client(h, "b").await,
        quick_settings(&[]),
        "b",
        Some(replica_cloud(provider, "b")),
    )
    .await;
    tokio::time::timeout(PATIENCE, b.state.wait_synced())
        .await
        .expect("b syncs");
    (a, b)
}

/// Stalls `a`'s Lease requests; returns once `a` stepped down (checking it did so within its
/// renew deadline) and `b` leads.
async fn stall_renewals(h: &Harness, a: &Daemon, b: &Daemon) {
    let cut = Instant::now();
    h.server.faults().delay_leases("a", Duration::from_secs(30));
    let mut a_leads = a.leader.clone();
    until_leading(&mut a_leads, false, "a steps down").await;
    let stepped_down = cut.elapsed();
    assert!(
        stepped_down <= FAST_LEASE.renew_deadline + FAST_LEASE.retry_period,
        "a stepped down {stepped_down:?} after its renewals stalled"
    );
    let mut b_leads = b.leader.clone();
    until_leading(&mut b_leads, true, "b takes over").await;
}

/// No write of a's at or after b's first; b launched into EC2 itself.
fn assert_no_interleaving(h: &Harness, provider: &SimulatedCloudProvider) {
    let a_writes = writes_of(h, provider, "a");
    let b_writes = writes_of(h, provider, "b");
    let (b_first, b_what) = b_writes.first().expect("b wrote").clone();
    let late: Vec<_> = a_writes.iter().filter(|(at, _)| *at >= b_first).collect();
    assert!(
        late.is_empty(),
        "a wrote after b's first write ({b_what}): {late:?}"
    );
    assert!(
        b_writes.iter().any(|(_, w)| w.starts_with("CreateFleet")),
        "b launched into EC2 too: {b_writes:?}"
    );
}

/// Every instance EC2 ever launched, by the NodeClaim it was tagged with; one each.
fn assert_one_instance_per_nodeclaim(provider: &SimulatedCloudProvider) {
    let mut per_claim: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for instance in provider.ec2().instances() {
        if let Some(claim) = instance.tags.get(tags::NODECLAIM) {
            per_claim
                .entry(claim.clone())
                .or_default()
                .push(instance.instance_id.clone());
        }
    }
    assert!(
        per_claim.values().all(|ids| ids.len() == 1),
        "a NodeClaim launched twice: {per_claim:?}"
    );
}

#[test]
fn a_leader_whose_renewals_stall_mid_launch_writes_nothing_once_the_new_leader_writes() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, _) = simulated_cloud();
        let (a, b) = pair(&h, &provider).await;

        // a launches; EC2 applies the launch and holds the answer: a is mid-launch.
        let mut hold = provider.ec2().hold_next_launch();
        create_pending_pods(&cluster, "first", 3, BATCH_POD_CPU, BATCH_POD_MEMORY);
        let held = tokio::time::timeout(PATIENCE, hold.launched())
            .await
            .expect("a launches in time")
            .expect("a launch");
        assert!(
            provider
                .ec2()
                .writes()
                .iter()
                .any(|w| w.caller.as_deref() == Some("a") && w.instance_ids == held),
            "the held launch is a's"
        );
        stall_renewals(&h, &a, &b).await;

        // b finishes a's launch by adopting its instance, and launches for new pods itself.
        let first = until_all_launched(&h, 1).await;
        create_pending_pods(&cluster, "second", 3, BATCH_POD_CPU, BATCH_POD_MEMORY);
        let all = until_all_launched(&h, first.len() + 1).await;
        hold.release();
        h.server.faults().undelay_leases("a");
        tokio::time::sleep(Duration::from_secs(1)).await;

        assert_no_interleaving(&h, &provider);
        assert!(!*a.leader.borrow(), "a stays a standby");
        assert_one_instance_per_nodeclaim(&provider);
        let adopted = all
            .iter()
            .filter_map(|c| c.provider_id())
            .any(|id| held.iter().any(|i| id.ends_with(i.as_str())));
        assert!(adopted, "the held instance is a NodeClaim's: {all:?}");
        a.stop_within(Duration::ZERO).await;
        b.stop_within(Duration::ZERO).await;
        h.stop().await;
    });
}

#[test]
fn a_launch_on_its_way_when_the_leader_steps_down_never_reaches_ec2() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        // CreateFleet takes two seconds to apply: longer than a's renew deadline.
        let (provider, _) = simulated_cloud_with(kerf_loadtest::ec2::Ec2Config {
            launch_latency: Duration::from_secs(2),
            ..kerf_loadtest::ec2::Ec2Config::instant(REGION)
        });
        let (a, b) = pair(&h, &provider).await;
        create_pending_pods(&cluster, "first", 3, BATCH_POD_CPU, BATCH_POD_MEMORY);
        eventually("a's CreateFleet is on its way", || {
            provider.ec2().api_calls().calls("CreateFleet") >= 1
        })
        .await;
        stall_renewals(&h, &a, &b).await;
        let claims = until_all_launched(&h, 1).await;
        create_pending_pods(&cluster, "second", 3, BATCH_POD_CPU, BATCH_POD_MEMORY);
        until_all_launched(&h, claims.len() + 1).await;
        h.server.faults().undelay_leases("a");
        // Longer than a launch takes: a's abandoned one would have landed by now.
        tokio::time::sleep(Duration::from_secs(3)).await;

        assert_no_interleaving(&h, &provider);
        let a_launches = provider
            .ec2()
            .writes()
            .into_iter()
            .filter(|w| w.caller.as_deref() == Some("a"))
            .count();
        assert_eq!(
            a_launches, 0,
            "a's launch was abandoned before EC2 applied it"
        );
        assert_one_instance_per_nodeclaim(&provider);
        a.stop_within(Duration::ZERO).await;
        b.stop_within(Duration::ZERO).await;
        h.stop().await;
    });
}
