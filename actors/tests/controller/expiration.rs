//! Expiration end to end: a NodeClaim older than its NodePool's `expireAfter` is deleted
//! even with a disruption budget of zero, its node drained and its instance terminated, and
//! the deletion is counted under upstream's `reason="expired"`.

use kerf::labels;
use serde_json::json;

use crate::drift_support::*;
use crate::support::*;

#[test]
fn a_nodeclaim_past_expire_after_is_deleted_regardless_of_budgets() {
    run(|| async {
        let stack = Stack::start(json!({"spec": {
            "disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]},
            "template": {"spec": {"expireAfter": "4s"}}}}))
        .await;
        let claim = stack.running_pod("web").await;
        let read = stack.nodeclaim(&claim).expect("nodeclaim");
        assert_eq!(read["spec"]["expireAfter"], "4s", "{read:#}");
        let capacity_type = read["metadata"]["labels"][labels::CAPACITY_TYPE]
            .as_str()
            .expect("capacity type")
            .to_owned();
        eventually("the expired nodeclaim is gone", || {
            stack.nodeclaim(&claim).is_none()
        })
        .await;
        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        let line = format!(
            "karpenter_nodeclaims_disrupted_total{{reason=\"expired\",nodepool=\"default\",capacity_type=\"{capacity_type}\"}}"
        );
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
        // The termination finalizer drained the node and terminated its instance.
        let node = read["status"]["nodeName"]
            .as_str()
            .expect("node name")
            .to_owned();
        let instance = read["status"]["providerID"]
            .as_str()
            .and_then(|p| p.rsplit('/').next())
            .expect("providerID")
            .to_owned();
        let cluster = stack.cluster();
        eventually("the node is gone and its instance terminated", || {
            cluster.get("v1", "nodes", None, &node).is_err()
                && stack
                    .provider
                    .ec2()
                    .instance(&instance)
                    .is_none_or(|i| matches!(i.state.as_str(), "shutting-down" | "terminated"))
        })
        .await;
        stack.stop().await;
    });
}
