//! NodeOverlays end to end (`FEATURE_GATES=NodeOverlay=true`): an overlay's price brings an
//! instance type among a NodeClaim's cheapest, an overlay's extended resource makes only the
//! types it selects fit a pod asking for it, and the statuses say which overlay won and
//! which conflicts, in upstream's weight order. (Consolidation with an overlay is in
//! `disruption/overlays.rs`.)

use kerf::api::NodeClaim;
use kerf::labels;
use serde_json::{Value, json};

use crate::support::*;

fn create_overlay(cluster: &kerf_loadtest::apiserver::Cluster, name: &str, spec: Value) {
    cluster
        .create(
            "karpenter.sh/v1alpha1",
            "nodeoverlays",
            json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                "metadata": {"name": name}, "spec": spec}),
        )
        .expect("overlay created");
}

fn types_of(claim: &NodeClaim) -> Vec<String> {
    requirement_values(claim, labels::INSTANCE_TYPE)
}

/// `ValidationSucceeded` of overlay `name`: (status, reason), once written.
fn validation(cluster: &kerf_loadtest::apiserver::Cluster, name: &str) -> Option<(String, String)> {
    let overlay = cluster
        .get("karpenter.sh/v1alpha1", "nodeoverlays", None, name)
        .ok()?;
    overlay["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "ValidationSucceeded")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

const EXPENSIVE: &str = "m5.8xlarge";

/// The `default` NodePool, on-demand amd64 only: prices compare within one capacity type.
fn create_on_demand_pool(cluster: &kerf_loadtest::apiserver::Cluster) {
    create_nodepool(
        cluster,
        nodepool_with(
            "default",
            json!({"spec": {"template": {"spec": {"requirements": [
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                {"key": labels::ARCH, "operator": "In", "values": ["amd64"]}
            ]}}}}),
        ),
    );
}

#[test]
fn a_priced_overlay_brings_a_type_among_the_cheapest_and_the_heavier_one_wins() {
    run(|| async {
        let h = start_cluster_with(&ALL_CRDS).await;
        let cluster = h.cluster();
        create_on_demand_pool(&cluster);
        let select =
            json!([{"key": labels::INSTANCE_TYPE, "operator": "In", "values": [EXPENSIVE]}]);
        create_overlay(
            &cluster,
            "heavy",
            json!({"requirements": select, "price": "0.0001", "weight": 20}),
        );
        create_overlay(
            &cluster,
            "twin-a",
            json!({"requirements": select, "price": "5", "weight": 10}),
        );
        create_overlay(
            &cluster,
            "twin-b",
            json!({"requirements": select, "price": "6", "weight": 10}),
        );
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_gated_provisioner(&h, cloud, "NodeOverlay=true").await;
        eventually("the overlays in cluster state", || {
            daemon.state.node_overlays.len() == 3
        })
        .await;

        create_pending_pods(&cluster, "web", 1, "1", "1Gi");
        eventually("a NodeClaim", || {
            cluster
                .list("karpenter.sh/v1", "nodeclaims", None, "")
                .is_ok_and(|c| !c.is_empty())
        })
        .await;
        let claims = nodeclaims(&h.client).await;
        assert_eq!(claims.len(), 1);
        let types = types_of(&claims[0]);
        assert!(
            types.iter().any(|t| t == EXPENSIVE),
            "priced at 0.0001 by the heaviest overlay, {EXPENSIVE} is among the cheapest: {types:?}"
        );
        assert!(types.len() <= kerf_actors::provisioner::MAX_INSTANCE_TYPES);

        // The heavier overlay prices the offerings first; of the two lighter ones of equal
        // weight, the one later in the alphabet goes first and the other conflicts with it.
        eventually("the overlays' statuses", || {
            validation(&cluster, "heavy").is_some()
                && validation(&cluster, "twin-a").is_some()
                && validation(&cluster, "twin-b").is_some()
        })
        .await;
        assert_eq!(
            validation(&cluster, "heavy"),
            Some(("True".into(), "ValidationSucceeded".into()))
        );
        assert_eq!(
            validation(&cluster, "twin-b"),
            Some(("True".into(), "ValidationSucceeded".into()))
        );
        assert_eq!(
            validation(&cluster, "twin-a"),
            Some(("False".into(), "Conflict".into()))
        );
        let ready = cluster
            .get("karpenter.sh/v1alpha1", "nodeoverlays", None, "twin-a")
            .expect("overlay");
        assert!(
            ready["status"]["conditions"].as_array().is_some_and(|c| c
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "False")),
            "{ready}"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn without_the_gate_overlays_change_nothing() {
    run(|| async {
        let h = start_cluster_with(&ALL_CRDS).await;
        let cluster = h.cluster();
        create_on_demand_pool(&cluster);
        let select =
            json!([{"key": labels::INSTANCE_TYPE, "operator": "In", "values": [EXPENSIVE]}]);
        create_overlay(
            &cluster,
            "heavy",
            json!({"requirements": select, "price": "0.0001"}),
        );
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud).await;
        create_pending_pods(&cluster, "web", 1, "1", "1Gi");
        eventually("a NodeClaim", || {
            cluster
                .list("karpenter.sh/v1", "nodeclaims", None, "")
                .is_ok_and(|c| !c.is_empty())
        })
        .await;
        let claims = nodeclaims(&h.client).await;
        assert!(!types_of(&claims[0]).iter().any(|t| t == EXPENSIVE));
        assert_eq!(daemon.state.node_overlays.len(), 0, "not watched");
        assert_eq!(validation(&cluster, "heavy"), None, "no status written");
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn an_overlays_extended_resource_makes_only_the_types_it_selects_fit() {
    run(|| async {
        let h = start_cluster_with(&ALL_CRDS).await;
        let cluster = h.cluster();
        create_nodepool(
            &cluster,
            nodepool_with(
                "default",
                json!({"spec": {"template": {"spec": {"requirements": [
                    {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
                ]}}}}),
            ),
        );
        create_overlay(
            &cluster,
            "licences",
            json!({"requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
                   "capacity": {"example.com/licence": "2"}}),
        );
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_gated_provisioner(&h, cloud, "NodeOverlay=true").await;
        eventually("the overlay in cluster state", || {
            daemon.state.node_overlays.len() == 1
        })
        .await;
        create_pending_pod(
            &cluster,
            "licensed",
            json!({}),
            json!({"containers": [{"name": "app", "image": "app", "resources": {
                "requests": {"cpu": "1", "memory": "1Gi", "example.com/licence": "1"},
                "limits": {"example.com/licence": "1"}}}]}),
        );
        eventually("a NodeClaim", || {
            cluster
                .list("karpenter.sh/v1", "nodeclaims", None, "")
                .is_ok_and(|c| !c.is_empty())
        })
        .await;
        let claims = nodeclaims(&h.client).await;
        let types = types_of(&claims[0]);
        assert!(!types.is_empty());
        assert!(
            types.iter().all(|t| t.starts_with("m5.")),
            "only the m5 family has the licence: {types:?}"
        );
        daemon.stop().await;
        h.stop().await;
    });
}
