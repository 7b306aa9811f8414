//! NodePool status end to end: `status.nodes` and `status.resources` follow the pool's
//! machines (what `kubectl get nodepools` prints as NODES, CPU, MEMORY), and `Ready`,
//! `NodeClassReady` and `ValidationSucceeded` follow the node class and the pool's spec.

use kerf::resources::Quantity;
use serde_json::{Value, json};

use crate::drift_support::*;
use crate::support::*;

fn status_of<'a>(pool: &'a Value, type_: &str) -> Option<&'a str> {
    condition(pool, type_)?["status"].as_str()
}

fn quantity(value: &Value) -> Quantity {
    Quantity::parse(value.as_str().unwrap_or("0")).expect("a quantity")
}

#[test]
fn status_counts_the_pools_nodes_and_their_capacity_and_reports_readiness() {
    run(|| async {
        let stack = Stack::start(no_disruption()).await;
        let first = stack.running_pod("web-1").await;
        let cluster = stack.cluster();
        // The pool's resources are the sum of its nodes' capacity, and NODES their count.
        eventually("status counts the pool's nodes", || {
            let pool = stack.nodepool("default");
            let nodes: Vec<Value> = cluster.list("v1", "nodes", None, "").unwrap_or_default();
            let cpu = nodes
                .iter()
                .map(|n| quantity(&n["status"]["capacity"]["cpu"]))
                .fold(Quantity::ZERO, |a, b| a.saturating_add(b));
            let memory = nodes
                .iter()
                .map(|n| quantity(&n["status"]["capacity"]["memory"]))
                .fold(Quantity::ZERO, |a, b| a.saturating_add(b));
            let status = &pool["status"];
            !nodes.is_empty()
                && status["nodes"] == json!(nodes.len())
                && status["resources"]["nodes"] == json!(nodes.len().to_string())
                && quantity(&status["resources"]["cpu"]) == cpu
                && quantity(&status["resources"]["memory"]) == memory
                && status["resources"]["ephemeral-storage"].is_string()
                && status_of(&pool, "Ready") == Some("True")
                && status_of(&pool, "NodeClassReady") == Some("True")
                && status_of(&pool, "ValidationSucceeded") == Some("True")
        })
        .await;
        assert!(stack.nodeclaim(&first).is_some());

        // A pool whose node class does not exist is not Ready and says why.
        create_nodepool(
            &cluster,
            nodepool_with(
                "orphan",
                json!({"spec": {"template": {"spec": {"nodeClassRef": {"name": "missing"}}}}}),
            ),
        );
        eventually("the orphan pool reports its missing node class", || {
            let pool = stack.nodepool("orphan");
            condition(&pool, "NodeClassReady").is_some_and(|c| {
                c["status"] == "False"
                    && c["reason"] == "NodeClassNotFound"
                    && c["message"].as_str().is_some_and(|m| m.contains("missing"))
            }) && status_of(&pool, "Ready") == Some("False")
                && pool["status"]["nodes"] == 0
                && pool["status"]["resources"]["cpu"] == "0"
        })
        .await;
        stack.stop().await;
    });
}
