//! A NodePool that does not read as one is reported and skipped; the daemon keeps working.

use kerf_actors::state::ObjectKey;
use kerf_loadtest::apiserver::PatchKind;
use serde_json::json;

use crate::support::{
    PATIENCE, create_unschedulable_pod, eventually, http_get, install_crd, nodepool, run, settings,
    start_cluster_with, start_daemon,
};

/// A NodePool CRD without a schema, as a cluster with a stale or hand-edited CRD may have:
/// the API server stores whatever it is given.
const LOOSE_NODEPOOL_CRD: &str = r"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: nodepools.karpenter.sh
spec:
  group: karpenter.sh
  names: {kind: NodePool, listKind: NodePoolList, plural: nodepools, singular: nodepool}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
    subresources: {status: {}}
";

#[test]
fn malformed_nodepool_is_reported_and_skipped() {
    run(|| async {
        let h = start_cluster_with(&[
            "karpenter.sh_nodeclaims.yaml",
            "karpenter.k8s.aws_ec2nodeclasses.yaml",
        ])
        .await;
        install_crd(&h, LOOSE_NODEPOOL_CRD).await;
        let cluster = h.cluster();
        cluster
            .create("karpenter.sh/v1", "nodepools", nodepool("good"))
            .expect("good nodepool created");
        cluster
            .create(
                "karpenter.sh/v1",
                "nodepools",
                json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                    "metadata": {"name": "broken"}, "spec": {"template": "not an object"}}),
            )
            .expect("broken nodepool stored");

        let daemon = start_daemon(
            &h,
            settings(&[
                "--disable-leader-election",
                "true",
                "--batch-idle-duration",
                "100ms",
            ]),
            "a",
        )
        .await;
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs despite the broken NodePool");
        let state = daemon.state.clone();
        assert!(state.nodepools.get(&ObjectKey::new(None, "good")).is_some());
        assert!(
            state
                .nodepools
                .get(&ObjectKey::new(None, "broken"))
                .is_none()
        );
        let metrics = http_get(daemon.metrics_addr, "/metrics").await.1;
        assert!(
            metrics.contains("kerf_cluster_state_malformed_objects_total{kind=\"NodePool\"}"),
            "{metrics}"
        );

        // Still provisioning.
        create_unschedulable_pod(&cluster, "p");
        let mut rounds = daemon.rounds.clone();
        tokio::time::timeout(PATIENCE, rounds.wait_for(Option::is_some))
            .await
            .expect("a round in time")
            .expect("provisioner alive");

        // Fixed, it is picked up.
        cluster
            .patch(
                "karpenter.sh/v1",
                "nodepools",
                None,
                "broken",
                PatchKind::Merge,
                &json!({"spec": nodepool("broken")["spec"]}),
            )
            .expect("nodepool fixed");
        eventually("fixed nodepool in state", || {
            state
                .nodepools
                .get(&ObjectKey::new(None, "broken"))
                .is_some()
        })
        .await;
        daemon.stop().await;
        h.stop().await;
    });
}
