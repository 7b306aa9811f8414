//! CapacityBuffers end to end (`FEATURE_GATES=CapacityBuffer=true`), with simulated kubelets
//! and kube-scheduler: a buffer of two 1-CPU placeholder pods gets a node with room for them
//! though no pod is pending, and no placeholder pod is ever written to the API; real pods
//! then bind into that room at once, and the controller launches capacity to refill the
//! buffer; the buffer's status reports what it resolved and, once a round placed the
//! placeholder pods on the node, `Provisioning=True` (`FitsExistingCapacity`).

use kerf::labels;
use serde_json::{Value, json};

use crate::support::*;

const TYPE: &str = "m5.xlarge";

fn pods_named(cluster: &kerf_loadtest::apiserver::Cluster, prefix: &str) -> Vec<Value> {
    cluster
        .list("v1", "pods", None, "")
        .expect("pods")
        .into_iter()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect()
}

fn live_claims(cluster: &kerf_loadtest::apiserver::Cluster) -> usize {
    live_nodeclaims(cluster).len()
}

#[test]
fn a_buffer_keeps_room_for_its_placeholder_pods_and_refills_it() {
    run(|| async {
        let h = start_cluster_with(&ALL_CRDS).await;
        let cluster = h.cluster();
        create_nodepool(
            &cluster,
            nodepool_with(
                "default",
                json!({"spec": {"template": {"spec": {"requirements": [
                    {"key": labels::INSTANCE_TYPE, "operator": "In", "values": [TYPE]},
                    {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
                ]}}}}),
            ),
        );
        cluster
            .create(
                "v1",
                "podtemplates",
                json!({"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": "slot", "namespace": "default"},
                    "template": {"metadata": {"labels": {"app": "slot"}},
                        "spec": pod_spec("1", "1Gi", json!({}))}}),
            )
            .expect("pod template created");
        cluster
            .create(
                "autoscaling.x-k8s.io/v1beta1",
                "capacitybuffers",
                json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
                    "metadata": {"name": "headroom", "namespace": "default"},
                    "spec": {"podTemplateRef": {"name": "slot"}, "replicas": 2}}),
            )
            .expect("buffer created");
        let (provider, cloud) = simulated_cloud();
        let daemon = start_gated_provisioner(&h, cloud, "CapacityBuffer=true").await;
        let (_kubelets, _scheduler) = node_simulators(&h, provider);

        // Room for two 1-CPU pods: one m5.xlarge (about 3.9 CPUs allocatable).
        eventually("a node for the buffer", || {
            cluster
                .list("v1", "nodes", None, "")
                .is_ok_and(|n| n.len() == 1)
        })
        .await;
        assert_eq!(live_claims(&cluster), 1);
        assert!(
            pods_named(&cluster, "capacity-buffer-").is_empty(),
            "never written"
        );
        eventually("the buffer's status", || {
            cluster
                .get(
                    "autoscaling.x-k8s.io/v1beta1",
                    "capacitybuffers",
                    Some("default"),
                    "headroom",
                )
                .is_ok_and(|b| {
                    b["status"]["replicas"] == 2
                        && b["status"]["podTemplateRef"]["name"] == "slot"
                        && b["status"]["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"
                        && b["status"]["conditions"].as_array().is_some_and(|c| {
                            c.iter().any(|c| {
                                c["type"] == "ReadyForProvisioning"
                                    && c["status"] == "True"
                                    && c["reason"] == "Resolved"
                            })
                        })
                })
        })
        .await;
        // The room stays: later rounds see the placeholder pods fit the node.
        let mut rounds = daemon.rounds.clone();
        let number = rounds.borrow().as_ref().map_or(0, |r| r.number);
        round_where(&mut rounds, "a later round", |r| r.number > number).await;
        assert_eq!(live_claims(&cluster), 1, "no capacity beyond the buffer's");
        // Once a round places the placeholder pods on the node, the buffer says it has room.
        let provisioning = || {
            cluster
                .get(
                    "autoscaling.x-k8s.io/v1beta1",
                    "capacitybuffers",
                    Some("default"),
                    "headroom",
                )
                .ok()
                .and_then(|b| {
                    b["status"]["conditions"].as_array()?.iter().find_map(|c| {
                        (c["type"] == "Provisioning").then(|| {
                            (
                                c["status"].as_str().unwrap_or_default().to_owned(),
                                c["reason"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                    })
                })
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while provisioning() != Some(("True".to_owned(), "FitsExistingCapacity".to_owned())) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "Provisioning: {:?}",
                provisioning()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }

        // Two real pods take the room and bind at once, to the buffer's node.
        let node = cluster.list("v1", "nodes", None, "").expect("nodes")[0]["metadata"]["name"]
            .as_str()
            .expect("named")
            .to_owned();
        for i in 0..2 {
            create_pod_with(
                &cluster,
                &format!("burst-{i}"),
                json!({"app": "burst"}),
                pod_spec("1", "1Gi", json!({})),
            );
        }
        eventually("the burst bound to the buffer's node", || {
            let pods = pods_named(&cluster, "burst-");
            pods.len() == 2 && pods.iter().all(|p| p["spec"]["nodeName"] == node.as_str())
        })
        .await;
        // The buffer is refilled: one node more for the placeholder pods the burst displaced.
        eventually("the buffer refilled", || {
            cluster
                .list("v1", "nodes", None, "")
                .is_ok_and(|n| n.len() == 2)
        })
        .await;
        let number = rounds.borrow().as_ref().map_or(0, |r| r.number);
        round_where(&mut rounds, "a later round", |r| r.number > number).await;
        assert_eq!(live_claims(&cluster), 2, "refilled once, then kept");
        assert!(pods_named(&cluster, "capacity-buffer-").is_empty());
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_scalable_ref_buffer_takes_a_percentage_of_its_workload() {
    run(|| async {
        let h = start_cluster_with(&ALL_CRDS).await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool("default"));
        create_deployment(&cluster, "web", 5, pod_spec("1", "1Gi", json!({})));
        cluster
            .create(
                "autoscaling.x-k8s.io/v1beta1",
                "capacitybuffers",
                json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
                    "metadata": {"name": "web-headroom", "namespace": "default"},
                    "spec": {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"},
                        "percentage": 50}}),
            )
            .expect("buffer created");
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_gated_provisioner(&h, cloud, "CapacityBuffer=true").await;
        // ceil(5 × 50%) = 3 placeholder pods shaped like the Deployment's.
        eventually("the buffer sized from its Deployment", || {
            cluster
                .get(
                    "autoscaling.x-k8s.io/v1beta1",
                    "capacitybuffers",
                    Some("default"),
                    "web-headroom",
                )
                .is_ok_and(|b| {
                    b["status"]["replicas"] == 3 && b["status"]["podTemplateRef"].is_null()
                })
        })
        .await;
        eventually("three placeholder pods in cluster state", || {
            daemon.state.buffer_pods().len() == 3
        })
        .await;
        daemon.stop().await;
        h.stop().await;
    });
}
