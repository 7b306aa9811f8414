//! The TerminationDrainer end to end, against the emulator over HTTP with simulated EC2,
//! kubelets and kube-scheduler: a deleted NodeClaim's Node is tainted, drained through the
//! eviction API in upstream's order, its volumes awaited, its instance terminated and both
//! finalizers released; budgets hold evictions (with an event naming the budget),
//! do-not-disrupt pods hold the drain, the termination timestamp forces what is left, a
//! Node whose instance is already gone skips the drain, and the pods of a terminating Node
//! get replacement capacity before they are evicted.

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::types;
use kerf::labels;
use kube::api::{Api, DeleteParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::stack::*;
use crate::support::*;

/// Creates pod `name` bound to `node` (labelled `app: name` unless `extra` says otherwise).
fn create_bound_pod(stack: &Stack, name: &str, node: &str, extra: Value) -> Value {
    let pod = merged(
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}),
        extra,
    );
    stack
        .cluster()
        .create("v1", "pods", pod)
        .expect("pod created")
}

/// A budget allowing no disruption of the pods labelled `app: app`.
fn create_blocking_pdb(stack: &Stack, name: &str, app: &str) {
    stack
        .cluster()
        .create(
            "policy/v1",
            "poddisruptionbudgets",
            json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
            }),
        )
        .expect("pdb created");
}

async fn delete_pdb(stack: &Stack, name: &str) {
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(stack.harness.client.clone(), "default");
    pdbs.delete(name, &DeleteParams::default())
        .await
        .expect("pdb deleted");
}

fn events_with_reason(stack: &Stack, reason: &str) -> Vec<Value> {
    stack
        .cluster()
        .list("v1", "events", None, "")
        .expect("events list")
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

fn nodeclaim(stack: &Stack, name: &str) -> Option<Value> {
    stack
        .cluster()
        .get("karpenter.sh/v1", "nodeclaims", None, name)
        .ok()
}

fn deleting(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
}

/// Records the order in which pods start terminating (or vanish), and when, from a watch.
struct TerminationOrder(Arc<Mutex<Vec<(String, Timestamp)>>>);

impl TerminationOrder {
    fn watch(stack: &Stack) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let pods: Api<Pod> = Api::namespaced(stack.harness.client.clone(), "default");
        tokio::spawn(async move {
            let mut events = watcher(pods, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = events.next().await {
                let (pod, gone) = match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => (pod, false),
                    watcher::Event::Delete(pod) => (pod, true),
                    _ => continue,
                };
                if gone || pod.metadata.deletion_timestamp.is_some() {
                    let name = pod.metadata.name.unwrap_or_default();
                    let mut seen = record.lock().unwrap_or_else(PoisonError::into_inner);
                    if !seen.iter().any(|(n, _)| *n == name) {
                        seen.push((name, Timestamp::now()));
                    }
                }
            }
        });
        Self(seen)
    }

    fn names(&self) -> Vec<String> {
        self.seen().into_iter().map(|(n, _)| n).collect()
    }

    fn seen(&self) -> Vec<(String, Timestamp)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[test]
fn deleting_a_registered_nodeclaim_drains_and_removes_its_node_and_instance() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;

        stack.delete_nodeclaim(&claim).await;
        wait_all_gone(&stack, &claim, &node, &provider_id).await;
        assert!(!events_with_reason(&stack, "Evicted").is_empty());

        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        for metric in [
            "karpenter_pods_eviction_requests_total{code=\"200\"}",
            "karpenter_pods_drained_total{reason=\"Forceful Termination\"}",
            "karpenter_nodes_drained_total{nodepool=\"default\"}",
            "karpenter_nodes_terminated_total{nodepool=\"default\"",
            // A summary, as upstream's (the performance dashboard reads its quantiles).
            "karpenter_nodes_termination_duration_seconds{nodepool=\"default\",quantile=\"0.5\"}",
            "karpenter_nodes_lifetime_duration_seconds_bucket{nodepool=\"default\",le=\"900\"}",
            "karpenter_nodes_eviction_queue_depth ",
            "karpenter_nodeclaims_termination_duration_seconds_bucket{nodepool=\"default\"",
            "karpenter_nodeclaims_terminated_total{nodepool=\"default\"",
        ] {
            assert!(metrics.contains(metric), "{metric} missing:\n{metrics}");
        }
        stack.stop().await;
    });
}

#[test]
fn a_disruption_budget_holds_the_drain_until_it_allows_the_eviction() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        create_blocking_pdb(&stack, "web-budget", "web");
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;

        stack.delete_nodeclaim(&claim).await;
        let stats = stack
            .daemon
            .termination_stats
            .clone()
            .expect("the drainer runs with a cloud");
        eventually("evictions refused by the budget, backed off", || {
            stats.evictions_blocked() >= 2
        })
        .await;
        let refusals = events_with_reason(&stack, "FailedEviction");
        assert!(
            refusals
                .iter()
                .any(|e| e["involvedObject"]["name"] == "web-1"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("web-budget")
                            && m.contains(kerf::troubleshooting::documented("pdb-eviction")))),
            "an event on the pod names the budget: {refusals:#?}"
        );
        let draining = events_with_reason(&stack, "FailedDraining");
        assert!(
            draining
                .iter()
                .any(|e| e["involvedObject"]["kind"] == "Node"
                    && e["involvedObject"]["name"] == node.as_str()
                    && e["type"] == "Warning"
                    && e["message"] == kerf::troubleshooting::documented("failed-draining")),
            "the node says what holds its drain: {draining:#?}"
        );
        let node_object = stack
            .cluster()
            .get("v1", "nodes", None, &node)
            .expect("node stays");
        assert!(
            taint_keys(&node_object).contains(&labels::DISRUPTED_TAINT.to_owned()),
            "{node_object:#}"
        );
        assert_eq!(
            node_object["metadata"]["labels"][labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS],
            "karpenter"
        );
        let pod = stack.pod("web-1").expect("the protected pod stays");
        assert!(!deleting(&pod), "not evicted: {pod:#}");
        let waiting = nodeclaim(&stack, &claim).expect("the nodeclaim waits for its node");
        assert_eq!(
            condition_status(&waiting, types::DRAINED).as_deref(),
            Some("Unknown")
        );
        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        assert!(
            metrics.contains("karpenter_pods_eviction_requests_total{code=\"429\"}"),
            "{metrics}"
        );

        // The budget goes away; the next attempt evicts the pod and termination ends.
        delete_pdb(&stack, "web-budget").await;
        wait_all_gone(&stack, &claim, &node, &provider_id).await;
        stack.stop().await;
    });
}

#[test]
fn do_not_disrupt_pods_are_not_evicted_and_hold_the_drain() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;
        create_bound_pod(
            &stack,
            "precious",
            &node,
            json!({"metadata": {"annotations": {labels::DO_NOT_DISRUPT: "true"}}}),
        );
        stack.wait_running(&["precious"]).await;

        stack.delete_nodeclaim(&claim).await;
        eventually("the other pod is evicted", || stack.pod("web-1").is_none()).await;
        eventually("the drain reports it is waiting", || {
            nodeclaim(&stack, &claim)
                .is_some_and(|c| condition_status(&c, types::DRAINED).as_deref() == Some("Unknown"))
        })
        .await;
        let precious = stack.pod("precious").expect("the do-not-disrupt pod stays");
        assert!(!deleting(&precious), "{precious:#}");
        assert!(stack.cluster().get("v1", "nodes", None, &node).is_ok());

        // Once the pod finishes on its own, the drain completes.
        let pods: Api<Pod> = Api::namespaced(stack.harness.client.clone(), "default");
        pods.delete("precious", &DeleteParams::default())
            .await
            .expect("pod deleted");
        let cluster = stack.cluster();
        eventually("nodeclaim and node gone", || {
            nodeclaim(&stack, &claim).is_none() && cluster.get("v1", "nodes", None, &node).is_err()
        })
        .await;
        assert_eq!(
            stack.instance_state(&provider_id).as_deref(),
            Some("terminated")
        );
        stack.stop().await;
    });
}

#[test]
fn the_termination_grace_period_forces_out_what_budgets_and_do_not_disrupt_hold() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        stack
            .cluster()
            .patch(
                "karpenter.sh/v1",
                "nodepools",
                None,
                "default",
                kerf_loadtest::apiserver::PatchKind::Merge,
                &json!({"spec": {"template": {"spec": {"terminationGracePeriod": "3s"}}}}),
            )
            .expect("nodepool patched");
        create_blocking_pdb(&stack, "web-budget", "web");
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;
        create_bound_pod(
            &stack,
            "precious",
            &node,
            json!({"metadata": {"annotations": {labels::DO_NOT_DISRUPT: "true"}},
                   "spec": {"terminationGracePeriodSeconds": 1}}),
        );
        stack.wait_running(&["precious"]).await;
        let order = TerminationOrder::watch(&stack);

        stack.delete_nodeclaim(&claim).await;
        let mut deadline = String::new();
        eventually("the termination timestamp is written", || {
            deadline = nodeclaim(&stack, &claim)
                .and_then(|c| {
                    c["metadata"]["annotations"][labels::NODECLAIM_TERMINATION_TIMESTAMP]
                        .as_str()
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            !deadline.is_empty()
        })
        .await;
        let deadline: Timestamp = deadline.parse().expect("RFC 3339");
        let deleted_at: Timestamp =
            nodeclaim(&stack, &claim).expect("nodeclaim")["metadata"]["deletionTimestamp"]
                .as_str()
                .expect("deleting")
                .parse()
                .expect("RFC 3339");
        assert_eq!(deadline.as_second() - deleted_at.as_second(), 3);

        wait_all_gone(&stack, &claim, &node, &provider_id).await;
        let forced = events_with_reason(&stack, "Disrupted");
        for pod in ["web-1", "precious"] {
            assert!(
                forced.iter().any(|e| e["involvedObject"]["name"] == pod),
                "{pod} was deleted at the termination timestamp: {forced:#?}"
            );
        }
        // The budget-held pod's 30 s grace exceeds the 3 s left: it goes at once, with 3 s.
        // The do-not-disrupt pod's 1 s grace fits: it goes only once no time is left.
        let seen = order.seen();
        let precious = seen
            .iter()
            .find(|(n, _)| n == "precious")
            .map(|(_, at)| *at)
            .expect("precious terminated");
        assert!(
            precious.as_second() >= deadline.as_second(),
            "precious deleted at {precious}, before the termination timestamp {deadline}"
        );
        stack.stop().await;
    });
}

#[test]
fn daemonset_and_critical_pods_drain_last_in_upstreams_order() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;
        // A DaemonSet that runs nowhere by itself: its pods here are placed by the test.
        let ds = stack
            .cluster()
            .create(
                "apps/v1",
                "daemonsets",
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "metadata": {"name": "agent", "namespace": "default"},
                    "spec": {"selector": {"matchLabels": {"app": "agent"}},
                        "template": {"metadata": {"labels": {"app": "agent"}},
                            "spec": {"nodeSelector": {"nowhere": "true"},
                                "containers": [{"name": "a", "image": "a"}]}}}}),
            )
            .expect("daemonset created");
        let owned = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "DaemonSet", "name": "agent", "uid": ds["metadata"]["uid"],
            "controller": true}]}});
        let critical = json!({"spec": {"priorityClassName": "system-node-critical"}});
        create_bound_pod(&stack, "daemon", &node, owned.clone());
        create_bound_pod(&stack, "critical", &node, critical.clone());
        create_bound_pod(&stack, "critical-daemon", &node, merged(owned, critical));
        stack
            .wait_running(&["daemon", "critical", "critical-daemon"])
            .await;
        let order = TerminationOrder::watch(&stack);

        stack.delete_nodeclaim(&claim).await;
        wait_all_gone(&stack, &claim, &node, &provider_id).await;
        assert_eq!(
            order.names(),
            ["web-1", "daemon", "critical", "critical-daemon"]
        );
        stack.stop().await;
    });
}

#[test]
fn the_node_waits_for_its_drained_pods_volumes_to_detach() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        let cluster = stack.cluster();
        cluster
            .create(
                "v1",
                "persistentvolumeclaims",
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data", "namespace": "default"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-data",
                        "resources": {"requests": {"storage": "1Gi"}}}}),
            )
            .expect("claim created");
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;
        create_bound_pod(
            &stack,
            "db",
            &node,
            json!({"spec": {"volumes": [{"name": "data",
                "persistentVolumeClaim": {"claimName": "data"}}]}}),
        );
        stack.wait_running(&["db"]).await;
        // The simulated attach/detach controller attaches the pod's volume to its node.
        let attached_here = || {
            cluster
                .list("storage.k8s.io/v1", "volumeattachments", None, "")
                .unwrap_or_default()
                .iter()
                .any(|a| {
                    a["spec"]["nodeName"] == node.as_str()
                        && a["spec"]["source"]["persistentVolumeName"] == "pv-data"
                })
        };
        eventually("the volume attached to the node", attached_here).await;

        stack.delete_nodeclaim(&claim).await;
        eventually("drained, waiting for the volume", || {
            stack.pod("db").is_none()
                && nodeclaim(&stack, &claim).is_some_and(|c| {
                    condition_status(&c, types::DRAINED).as_deref() == Some("True")
                        && condition_status(&c, types::VOLUMES_DETACHED).as_deref()
                            == Some("Unknown")
                })
        })
        .await;
        assert!(attached_here(), "still attached while the node waits");
        assert!(cluster.get("v1", "nodes", None, &node).is_ok());
        assert!(!events_with_reason(&stack, "AwaitingVolumeDetachment").is_empty());
        assert_eq!(
            stack.instance_state(&provider_id).as_deref(),
            Some("running"),
            "the instance is kept while the volume is attached"
        );

        // The detach completes on its own a moment after the pod left: termination goes on.
        wait_all_gone(&stack, &claim, &node, &provider_id).await;
        assert!(!attached_here());
        stack.stop().await;
    });
}

#[test]
fn a_not_ready_node_whose_instance_is_gone_skips_the_drain() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        create_blocking_pdb(&stack, "web-budget", "web");
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;
        let instance_id = provider_id
            .rsplit('/')
            .next()
            .expect("instance id")
            .to_owned();

        // The instance dies under the Node: its kubelet goes NotReady and the Node is deleted.
        stack
            .provider
            .ec2()
            .terminate_instances(&[instance_id])
            .await
            .expect("terminated");
        let cluster = stack.cluster();
        eventually("node and nodeclaim gone", || {
            cluster.get("v1", "nodes", None, &node).is_err() && nodeclaim(&stack, &claim).is_none()
        })
        .await;
        let stats = stack
            .daemon
            .termination_stats
            .clone()
            .expect("the drainer runs with a cloud");
        assert_eq!(
            stats.evictions_blocked() + stats.pods_evicted(),
            0,
            "no eviction was attempted"
        );
        stack.stop().await;
    });
}

#[test]
fn pods_of_a_terminating_node_get_replacement_capacity_before_they_are_evicted() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        create_blocking_pdb(&stack, "web-budget", "web");
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;

        stack.delete_nodeclaim(&claim).await;
        eventually("a replacement nodeclaim", || {
            stack.nodeclaims().iter().any(|c| name_of(c) != claim)
        })
        .await;
        let pod = stack.pod("web-1").expect("the pod is still there");
        assert!(!deleting(&pod), "not evicted yet: {pod:#}");
        assert_eq!(pod["spec"]["nodeName"], node.as_str());

        delete_pdb(&stack, "web-budget").await;
        wait_all_gone(&stack, &claim, &node, &provider_id).await;
        stack.stop().await;
    });
}
