//! Disruption across a leader failover. Commands live in the leader's memory, as upstream's:
//! when the leader goes while a replacement is still booting, the new leader removes the
//! marks the command left (no node stays tainted) and decides afresh on the cluster as it
//! is: a move onto the booting replacement waits for it to initialize (upstream's
//! uninitialized-node rule), then the candidate is deleted onto it — no second replacement
//! is launched.

use std::collections::BTreeSet;

use kerf_loadtest::kubelet::{self, KubeletConfig};

use super::*;

#[test]
fn a_new_leader_finishes_the_disruption_without_a_second_replacement() {
    run(|| async {
        let harness = start_cluster().await;
        // A fresh replacement is not itself emptied before the candidate's pods reach it.
        create_nodepool(
            &harness.cluster(),
            pool(&[SMALL, LARGE], json!({"consolidateAfter": "5s"})),
        );
        let (provider, cloud) = simulated_cloud();
        // Long enough to slow the kubelets down between the decision and the command.
        let config = quick(Duration::from_secs(1));
        let a = start_replica(
            &harness,
            cloud.clone(),
            config.clone(),
            quick_settings(&[]),
            "a",
        )
        .await;
        until_leading(&mut a.leader.clone(), true, "a leads").await;
        let b = start_replica(&harness, cloud, config, quick_settings(&[]), "b").await;
        let (kubelets, scheduler) = node_simulators(&harness, provider.clone());
        let mut stack = Stack {
            harness,
            daemon: a,
            provider,
            _kubelets: kubelets,
            _scheduler: scheduler,
        };
        let original = stack.one_large_node(json!({})).await;
        stack.scale("big", 0);
        stack.pods_gone("big").await;
        // From now on machines take seconds to boot: the replacement is still booting when
        // the leader goes.
        stack._kubelets = kubelet::start(
            stack.harness.client.clone(),
            stack.provider.clone(),
            KubeletConfig {
                boot_delay: Duration::from_secs(3),
                ..KubeletConfig::fast()
            },
        );
        within(
            FLOW,
            "a's command in flight, its replacement booting",
            || {
                let live = stack.live_claims();
                stack.commands().len() == 1
                    && live.len() == 2
                    && live.iter().any(|c| node_name(c).is_empty())
            },
        )
        .await;
        assert_eq!(stack.commands().len(), 1, "{:?}", stack.commands());
        let Stack {
            harness,
            daemon: a,
            provider,
            _kubelets,
            _scheduler,
        } = stack;
        a.stop_within(Duration::ZERO).await;
        until_leading(&mut b.leader.clone(), true, "b takes over").await;
        let stack = Stack {
            harness,
            daemon: b,
            provider,
            _kubelets,
            _scheduler,
        };

        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut most_live = 0;
        within(
            FLOW,
            "the large node gone, its pod on the replacement",
            || {
                let claims = stack.nodeclaims();
                seen.extend(claims.iter().map(|c| c.name().to_owned()));
                let live = stack.live_claims();
                most_live = most_live.max(live.len());
                claims.len() == 1
                    && live.len() == 1
                    && live[0].name() != original.name()
                    && stack.running_now("small")
            },
        )
        .await;
        assert_eq!(
            seen.len(),
            2,
            "the original and one replacement, never a second: {seen:?}"
        );
        assert!(most_live <= 2, "at most one replacement at a time");
        let replacement = stack.live_claims().remove(0);
        assert_eq!(instance_type(&replacement), SMALL);
        let tainted: Vec<String> = stack
            .cluster()
            .list("v1", "nodes", None, "")
            .expect("nodes")
            .into_iter()
            .filter(has_disrupted_taint)
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        assert!(tainted.is_empty(), "no node left tainted: {tainted:?}");
        stack.stop().await;
    });
}
