//! `/metrics` as Prometheus scrapes it: the series upstream's dashboards chart, computed
//! from cluster state (pod states, NodePool limits and usage, node allocatable and
//! requests) and from the cloud provider calls, with the daemon's client going through the
//! `KUBE_CLIENT_QPS` / `KUBE_CLIENT_BURST` limiter.

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::catalog::Catalog;
use kerf::cloudprovider::CloudProvider;
use kerf_actors::{Cloud, Daemon, Environment};
use kerf_loadtest::apiserver::DeleteOptions;
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig};
use kerf_loadtest::kubelet;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::support::*;

const REGION: &str = "us-east-1";

/// The value of the series `name` whose labels include `wanted`, if exactly one matches.
fn value(text: &str, name: &str, wanted: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, "}"));
            if metric != name {
                return None;
            }
            let labels: BTreeMap<&str, &str> = labels
                .trim_end_matches('}')
                .split("\",")
                .filter_map(|pair| pair.split_once('='))
                .map(|(k, v)| (k, v.trim_matches('"')))
                .collect();
            wanted
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
                .then(|| value.parse().ok())?
        })
        .collect();
    match matching.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

async fn scrape(daemon: &Daemon) -> String {
    let (status, body) = http_get(daemon.metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    body
}

/// Scrapes until `holds` accepts the text, failing after [`PATIENCE`].
async fn scrape_until(daemon: &Daemon, what: &str, holds: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = scrape(daemon).await;
        if holds(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out: {what}\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A client for the emulator built as `kerf controller` builds it, rate limit included.
async fn limited_client(h: &Harness) -> kube::Client {
    let path = std::env::temp_dir().join(format!(
        "kerf-actors-scrape-{}-{}.kubeconfig",
        std::process::id(),
        h.server.addr().port()
    ));
    h.server
        .write_kubeconfig(&path)
        .expect("kubeconfig written");
    let config = config_as(&path, CONTROLLER_TOKEN).await;
    let _ = std::fs::remove_file(&path);
    kerf_actors::client::build(config, 50, 100).expect("client builds")
}

#[test]
fn metrics_follow_cluster_state_under_upstream_names() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let mut pool = nodepool("default");
        pool["spec"]["limits"] = json!({"cpu": "100", "memory": "400Gi"});
        cluster
            .create("karpenter.sh/v1", "nodepools", pool)
            .expect("nodepool created");
        let provider = Arc::new(
            SimulatedCloudProvider::for_region(
                REGION,
                Ec2Config::instant(REGION),
                SimulatedCloudProviderConfig::default(),
            )
            .expect("simulated region"),
        );
        let cloud = Cloud {
            provider: provider.clone(),
            catalog: Catalog::embedded(REGION).expect("embedded region"),
            offerings: None,
        };
        let daemon = Daemon::start(
            settings(&[
                "--disable-leader-election",
                "true",
                "--batch-idle-duration",
                "300ms",
            ]),
            Environment {
                client: limited_client(&h).await,
                leader_client: h.controller.clone(),
                namespace: "karpenter".into(),
                identity: "a".into(),
                leader_timing: FAST_LEASE,
                bind: std::net::Ipv4Addr::LOCALHOST,
                cloud: Some(cloud),
            },
        )
        .await
        .expect("daemon starts");
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");

        let limit = |text: &str, resource| {
            value(
                text,
                "karpenter_nodepools_limit",
                &[("nodepool", "default"), ("resource_type", resource)],
            )
        };
        let text = scrape_until(&daemon, "the nodepool's limits", |t| {
            limit(t, "cpu").is_some()
        })
        .await;
        assert_eq!(limit(&text, "cpu"), Some(100.0), "spec.limits.cpu");
        assert_eq!(
            limit(&text, "memory"),
            Some(400.0 * 1024.0 * 1024.0 * 1024.0)
        );

        create_unschedulable_pod(&cluster, "web-1");
        let text = scrape_until(&daemon, "the pending pod's state", |t| {
            value(t, "karpenter_pods_state", &[("name", "web-1")]).is_some()
        })
        .await;
        let pending = [
            ("name", "web-1"),
            ("namespace", "default"),
            ("phase", "Pending"),
            ("scheduled", "false"),
            ("ready", "false"),
            ("managed", "false"),
        ];
        assert_eq!(value(&text, "karpenter_pods_state", &pending), Some(1.0));
        scrape_until(&daemon, "the batching queue's depth", |t| {
            value(
                t,
                "karpenter_scheduler_queue_depth",
                &[("controller", "provisioner")],
            )
            .is_some()
        })
        .await;

        // Once launched, the NodeClaim's capacity is the pool's usage.
        let api: Api<NodeClaim> = Api::all(h.client.clone());
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let claim = loop {
            let claims = api.list(&ListParams::default()).await.expect("list");
            if let [claim] = claims.items.as_slice()
                && claim.is_condition_true(types::LAUNCHED)
            {
                break claim.clone();
            }
            assert!(tokio::time::Instant::now() < deadline, "no launched claim");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        let capacity = claim.status.clone().expect("status").capacity;
        let cpu = kerf::resources::Quantity::parse(&capacity["cpu"].0).expect("cpu");
        let expected = cpu.milli_value() as f64 / 1000.0;
        let usage = [("nodepool", "default"), ("resource_type", "cpu")];
        let text = scrape_until(&daemon, "the pool's usage", |t| {
            value(t, "karpenter_nodepools_usage", &usage) == Some(expected)
        })
        .await;
        let create = [
            ("controller", "nodeclaim.lifecycle"),
            ("method", "Create"),
            ("provider", provider.name()),
            ("le", "+Inf"),
        ];
        assert!(
            value(
                &text,
                "karpenter_cloudprovider_duration_seconds_bucket",
                &create
            )
            .is_some_and(|n| n >= 1.0),
            "{text}"
        );

        // Registered nodes report allocatable with their NodePool.
        let kubelets = kubelet::start(
            h.client.clone(),
            provider.clone(),
            kubelet::KubeletConfig::fast(),
        );
        let text = scrape_until(&daemon, "the node's allocatable", |t| {
            value(
                t,
                "karpenter_nodes_allocatable",
                &[("nodepool", "default"), ("resource_type", "cpu")],
            )
            .is_some()
        })
        .await;
        let allocatable = value(
            &text,
            "karpenter_nodes_allocatable",
            &[("nodepool", "default"), ("resource_type", "cpu")],
        )
        .expect("allocatable cpu");
        assert!(
            allocatable > 0.0 && allocatable <= expected,
            "{allocatable}"
        );
        kubelets.stop();

        // Deleted objects leave no series behind.
        let now = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        cluster
            .delete("v1", "pods", Some("default"), "web-1", &now)
            .expect("pod deleted");
        cluster
            .delete("karpenter.sh/v1", "nodepools", None, "default", &now)
            .expect("nodepool deleted");
        scrape_until(&daemon, "the deleted pod's and pool's series gone", |t| {
            value(t, "karpenter_pods_state", &[("name", "web-1")]).is_none()
                && !t.contains("karpenter_nodepools_limit{")
        })
        .await;

        daemon.stop().await;
        h.stop().await;
    });
}
