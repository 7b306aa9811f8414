//! Instance health end to end: the controller polls the simulated EC2's
//! DescribeInstanceStatus and acts on the NodeClaims of the API emulator over HTTP. An
//! instance whose system check has failed for ten minutes has its NodeClaim terminated
//! forcefully (termination timestamp = now, then deleted); one with a scheduled retirement
//! is drained (deleted without the timestamp); a healthy one is left alone; the displaced
//! pods get replacement NodeClaims, and each unhealthy category is counted once.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kerf::interruption::instance_status::Category;
use kerf::labels;
use kerf_loadtest::apiserver::{Cluster, PatchKind};
use kerf_loadtest::ec2::Ec2Config;
use serde_json::{Value, json};

use crate::interruption::{instance_id, name_of};
use crate::support::*;

/// Polls often enough for a test; the daemon uses upstream's minute.
const POLL: Duration = Duration::from_millis(200);

fn claims(cluster: &Cluster) -> Vec<Value> {
    cluster
        .list("karpenter.sh/v1", "nodeclaims", None, "")
        .expect("nodeclaims list")
}

fn current(cluster: &Cluster, claim: &Value) -> Value {
    cluster
        .get("karpenter.sh/v1", "nodeclaims", None, &name_of(claim))
        .expect("held by the test finalizer")
}

fn counted(metrics: &str, category: Category) -> Option<&str> {
    let prefix = format!(
        "karpenter_interruption_instance_status_unhealthy_total{{category=\"{}\"}} ",
        category.as_str()
    );
    metrics.lines().find_map(|l| l.strip_prefix(&prefix))
}

#[test]
fn an_impaired_instance_is_terminated_a_scheduled_one_drained_and_both_replaced() {
    run(|| async {
        let harness = start_cluster().await;
        let cluster = harness.cluster();
        create_nodepool(&cluster, nodepool_with("health", json!({})));
        let (provider, cloud) = simulated_cloud_with(Ec2Config::instant(REGION));
        let mut daemon = start_provisioner(&harness, cloud).await;
        daemon.watch_instance_health(Arc::new(provider.ec2().clone()), POLL);
        for i in 0..3 {
            create_pending_pod(
                &cluster,
                &format!("health-{i}"),
                json!({}),
                pod_spec(
                    "1500m",
                    "1Gi",
                    json!({"nodeSelector": {labels::INSTANCE_TYPE: "m5.large"}}),
                ),
            );
        }
        let mut launched = Vec::new();
        eventually("three nodeclaims launch", || {
            launched = claims(&cluster)
                .into_iter()
                .filter(|c| c["status"]["providerID"].is_string())
                .collect();
            launched.len() == 3
        })
        .await;
        let state = &daemon.state;
        eventually("cluster state indexes them", || {
            launched
                .iter()
                .all(|c| state.nodeclaim_by_instance_id(&instance_id(c)).is_some())
        })
        .await;
        for claim in &launched {
            cluster
                .patch(
                    "karpenter.sh/v1",
                    "nodeclaims",
                    None,
                    &name_of(claim),
                    PatchKind::Merge,
                    &json!({"metadata": {"finalizers": [labels::TERMINATION_FINALIZER, "kerf.test/hold"]}}),
                )
                .expect("held for inspection");
        }
        let [impaired, scheduled, healthy] = <[Value; 3]>::try_from(launched).expect("three");
        let ec2 = provider.ec2();
        ec2.impair(
            &instance_id(&impaired),
            Category::SystemStatus,
            SystemTime::now() - Duration::from_secs(600),
        )
        .expect("a running instance");
        ec2.schedule_event(
            &instance_id(&scheduled),
            "instance-retirement",
            SystemTime::now() + Duration::from_secs(3600),
        )
        .expect("a running instance");

        eventually("both unhealthy nodeclaims are deleted", || {
            [&impaired, &scheduled]
                .iter()
                .all(|c| current(&cluster, c)["metadata"]["deletionTimestamp"].is_string())
        })
        .await;
        let annotation = |claim: &Value| {
            current(&cluster, claim)["metadata"]["annotations"]
                [labels::NODECLAIM_TERMINATION_TIMESTAMP]
                .clone()
        };
        assert!(
            annotation(&impaired).is_string(),
            "the impaired instance is terminated without waiting for a drain"
        );
        assert!(
            annotation(&scheduled).is_null(),
            "the scheduled one is drained as usual"
        );

        let gone: Vec<String> = [&impaired, &scheduled].iter().map(|c| name_of(c)).collect();
        eventually("replacements launch for the two displaced pods", || {
            claims(&cluster)
                .iter()
                .filter(|c| !gone.contains(&name_of(c)) && name_of(c) != name_of(&healthy))
                .filter(|c| c["status"]["providerID"].is_string())
                .count()
                == 2
        })
        .await;
        // Several more polls see the same unhealthy statuses; each is still counted once.
        tokio::time::sleep(POLL * 5).await;
        assert!(
            current(&cluster, &healthy)["metadata"]["deletionTimestamp"].is_null(),
            "the healthy instance is left alone"
        );
        let metrics = http_get(daemon.metrics_addr, "/metrics").await.1;
        assert_eq!(counted(&metrics, Category::SystemStatus), Some("1"));
        assert_eq!(counted(&metrics, Category::EventStatus), Some("1"));
        assert_eq!(counted(&metrics, Category::InstanceStatus), None);
        let reasons = |reason: &str| {
            metrics.lines().any(|l| {
                l.starts_with("karpenter_nodeclaims_disrupted_total")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
        };
        assert!(reasons("system_status") && reasons("event_status"));
        daemon.stop().await;
        harness.stop().await;
    });
}
