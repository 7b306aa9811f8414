//! A NodePool's `spec.limits` caps what the controller launches: only as many NodeClaims as
//! fit in the limit (each charged the largest capacity it may launch with), the other pods
//! reported as held back by the limit, no more NodeClaims in later rounds while the first
//! ones are in flight, and the rest provisioned once the limit is raised.

use kerf_actors::state::ObjectKey;
use kerf_loadtest::apiserver::PatchKind;
use kerf_loadtest::ec2::Ec2Config;
use serde_json::json;

use crate::support::*;

const PODS: usize = 6;

fn limit_problems(round: &kerf_actors::provisioner::Round) -> usize {
    round
        .problems
        .iter()
        .filter(|p| p.contains("limits") && p.contains("limited"))
        .count()
}

#[test]
fn a_nodepool_limit_caps_nodeclaims_until_it_is_raised() {
    run(|| limit_then_raise(Ec2Config::instant(REGION)));
}

/// The same with every launch still in flight: a NodeClaim without a machine is charged the
/// largest capacity it may launch with.
#[test]
fn nodeclaims_not_yet_launched_count_against_the_limit() {
    run(|| limit_then_raise(stalled_launches()));
}

async fn limit_then_raise(ec2: Ec2Config) {
    let h = start_cluster().await;
    let cluster = h.cluster();
    create_nodepool(
        &cluster,
        nodepool_with("limited", json!({"spec": {"limits": {"cpu": "4"}}})),
    );
    let (_provider, cloud) = simulated_cloud_with(ec2);
    let catalog = cloud.catalog;
    let daemon = start_provisioner(&h, cloud.clone()).await;
    create_pending_pods(&cluster, "web", PODS, "1", "1Gi");

    let mut rounds = daemon.rounds.clone();
    let first = round_where(&mut rounds, "every pod pending", |r| {
        r.pending.len() == PODS
    })
    .await;
    let expected = one_solve(&cluster, &cloud);
    assert_eq!(
        first.nodeclaims.len(),
        expected.new_node_claims.len(),
        "{first:?}"
    );
    let claims = nodeclaims(&h.client).await;
    assert_eq!(claims.len(), first.nodeclaims.len());
    let covered = usize::try_from(pods_covered(&claims)).expect("a count");
    assert!(
        covered > 0 && covered < PODS,
        "some pods fit in 4 cpu, not all: {first:?}"
    );
    let charged: i64 = claims.iter().map(|c| largest_cpu_milli(c, &catalog)).sum();
    assert!(charged <= 4000, "the limit is 4 cpu, {charged}m charged");
    assert_eq!(limit_problems(&first), PODS - covered, "{first:?}");
    assert_eq!(expected.errors.len(), PODS - covered);

    // The periodic re-trigger brings the pods again: the NodeClaims in flight use up the
    // limit.
    let second = round_where(&mut rounds, "the re-triggered pods", |r| {
        r.number > first.number && r.triggered == PODS
    })
    .await;
    assert!(second.nodeclaims.is_empty(), "{second:?}");
    assert_eq!(limit_problems(&second), PODS - covered, "{second:?}");
    assert_eq!(nodeclaims(&h.client).await.len(), claims.len());

    cluster
        .patch(
            "karpenter.sh/v1",
            "nodepools",
            None,
            "limited",
            PatchKind::Merge,
            &json!({"spec": {"limits": {"cpu": "100"}}}),
        )
        .expect("limit raised");
    let state = daemon.state.clone();
    eventually("the raised limit reaches cluster state", || {
        state
            .nodepools
            .get(&ObjectKey::new(None, "limited"))
            .is_some_and(|p| {
                p.limits()
                    .and_then(|l| l.get("cpu"))
                    .is_some_and(|q| q.0 == "100")
            })
    })
    .await;
    // Nobody touches the pods: the raised limit re-triggers them.
    let third = round_where(&mut rounds, "the pods after the raise", |r| {
        r.number > second.number && r.triggered == PODS
    })
    .await;
    assert!(!third.nodeclaims.is_empty(), "{third:?}");
    assert_eq!(limit_problems(&third), 0, "{third:?}");
    let all = nodeclaims(&h.client).await;
    assert_eq!(all.len(), claims.len() + third.nodeclaims.len());
    assert_eq!(
        pods_covered(&all),
        i64::try_from(PODS).expect("small"),
        "every pod covered once"
    );

    daemon.stop_within(STALLED_DRAIN).await;
    h.stop().await;
}
