//! Cluster state follows the API through the PodWatcher's watches, and readiness waits for
//! every kind to have listed.

use kerf_actors::state::ObjectKey;
use kerf_loadtest::apiserver::DeleteOptions;
use serde_json::json;

use crate::support::{
    create_unschedulable_pod, eventually, http_get, nodepool, run, settings, start_cluster,
    start_cluster_with, start_daemon,
};

fn node(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
}

#[test]
fn state_syncs_from_watches_and_follows_changes() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        cluster
            .create("karpenter.sh/v1", "nodepools", nodepool("default"))
            .expect("nodepool created");
        cluster
            .create("v1", "nodes", node("n1"))
            .expect("node created");
        create_unschedulable_pod(&cluster, "p1");

        let daemon = start_daemon(&h, settings(&["--disable-leader-election", "true"]), "a").await;
        tokio::time::timeout(crate::support::PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");
        let state = daemon.state.clone();
        assert!(
            state
                .nodepools
                .get(&ObjectKey::new(None, "default"))
                .is_some()
        );
        assert!(state.nodes.get(&ObjectKey::new(None, "n1")).is_some());
        assert!(
            state
                .pods
                .get(&ObjectKey::new(Some("default"), "p1"))
                .is_some()
        );
        assert_eq!(state.provisionable_pods().len(), 1);

        cluster
            .create("v1", "nodes", node("n2"))
            .expect("node created");
        eventually("second node in state", || state.nodes.len() == 2).await;
        cluster
            .delete(
                "v1",
                "pods",
                Some("default"),
                "p1",
                &DeleteOptions::default(),
            )
            .expect("pod deleted");
        eventually("deleted pod gone from state", || state.pods.is_empty()).await;

        assert_eq!(http_get(daemon.probes_addr, "/healthz").await.0, 200);
        assert_eq!(http_get(daemon.probes_addr, "/readyz").await.0, 200);
        let (code, metrics) = http_get(daemon.metrics_addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(
            metrics.contains("karpenter_cluster_state_synced 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("kerf_cluster_state_objects{kind=\"Node\"}"),
            "{metrics}"
        );

        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn not_ready_while_a_kind_cannot_be_listed() {
    run(|| async {
        // No Karpenter CRDs: NodePools, NodeClaims and EC2NodeClasses cannot be listed.
        let h = start_cluster_with(&[]).await;
        let daemon = start_daemon(&h, settings(&["--disable-leader-election", "true"]), "a").await;
        let state = daemon.state.clone();
        eventually("pods and nodes listed", || {
            state.pods.is_synced() && state.nodes.is_synced()
        })
        .await;
        assert!(!state.synced());
        let (code, body) = http_get(daemon.probes_addr, "/readyz").await;
        assert_eq!(code, 503, "{body}");
        assert_eq!(http_get(daemon.probes_addr, "/healthz").await.0, 200);
        daemon.stop().await;
        h.stop().await;
    });
}
