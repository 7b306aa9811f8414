//! A node's volume attach limits, as the controller reads them from its CSINode: a pending
//! pod whose volume the node cannot attach gets new capacity, while a pod without volumes
//! takes the node's free room. The node is a Node written directly (no kubelet), so only the
//! provisioning round's decision is under test.

use serde_json::{Value, json};

use crate::support::*;

const DRIVER: &str = "ebs.csi.aws.com";

fn create(
    cluster: &kerf_loadtest::apiserver::Cluster,
    api_version: &str,
    plural: &str,
    object: Value,
) {
    cluster
        .create(api_version, plural, object)
        .unwrap_or_else(|e| panic!("{plural} created: {e}"));
}

/// Node `roomy` (8 cpu) whose CSINode lets the EBS driver attach one volume, already
/// holding pod `db-0` with volume `data-0`; claim `data-1` waits for its first consumer.
fn roomy_node_at_its_attach_limit(cluster: &kerf_loadtest::apiserver::Cluster) {
    create(
        cluster,
        "v1",
        "nodes",
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "roomy", "labels": {
                "kubernetes.io/hostname": "roomy", "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "us-east-1a"}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
        }),
    );
    create(
        cluster,
        "storage.k8s.io/v1",
        "csinodes",
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": "roomy"},
            "spec": {"drivers": [{"name": DRIVER, "nodeID": "i-roomy", "allocatable": {"count": 1}}]}
        }),
    );
    create(
        cluster,
        "storage.k8s.io/v1",
        "storageclasses",
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "gp3"}, "provisioner": DRIVER,
            "volumeBindingMode": "WaitForFirstConsumer"
        }),
    );
    create(
        cluster,
        "v1",
        "persistentvolumes",
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-0"},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                     "csi": {"driver": DRIVER, "volumeHandle": "vol-0"}}
        }),
    );
    for (claim, volume) in [("data-0", Some("pv-0")), ("data-1", None)] {
        let mut spec = json!({"storageClassName": "gp3", "accessModes": ["ReadWriteOnce"],
                              "resources": {"requests": {"storage": "10Gi"}}});
        if let Some(volume) = volume {
            spec["volumeName"] = json!(volume);
        }
        create(
            cluster,
            "v1",
            "persistentvolumeclaims",
            json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": "default"}, "spec": spec
            }),
        );
    }
    create_pod_with(
        cluster,
        "db-0",
        json!({"app": "db"}),
        pod_spec(
            "1",
            "1Gi",
            json!({"nodeName": "roomy", "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}]}),
        ),
    );
}

#[test]
fn a_pod_whose_volume_the_node_cannot_attach_gets_new_capacity() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        roomy_node_at_its_attach_limit(&cluster);
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud).await;
        let mut rounds = daemon.rounds.clone();

        create_pending_pod(
            &cluster,
            "db-1",
            json!({"app": "db"}),
            pod_spec(
                "1",
                "1Gi",
                json!({"volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-1"}}]}),
            ),
        );
        create_pending_pod(
            &cluster,
            "web",
            json!({"app": "web"}),
            pod_spec("1", "1Gi", json!({})),
        );
        let round = round_where(&mut rounds, "both pods", |r| r.pending.len() == 2).await;
        assert!(real_problems(&round).is_empty(), "{round:?}");
        let created = nodeclaims(&h.client).await;
        assert_eq!(
            (created.len(), pods_covered(&created)),
            (1, 1),
            "one NodeClaim, for db-1 alone; web fits on roomy: {:?}",
            round.nodeclaims
        );
        daemon.stop().await;
        h.stop().await;
    });
}
