//! Deletion semantics: finalizers, graceful pod termination on an injectable clock,
//! binding, eviction against PodDisruptionBudgets, garbage collection.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kerf_loadtest::apiserver::ManualClock;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::runtime::conditions::is_deleted;
use serde_json::json;

use crate::support::{code, create, start, start_with_clock, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_hold_deletion_until_removed() {
    let h = start().await;
    let maps: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let cm: ConfigMap = create(
        &maps,
        json!({"metadata": {"name": "held", "finalizers": ["kerf.test/hold"]}}),
    )
    .await;
    let uid = cm.metadata.uid.clone().expect("uid");
    let pending = maps
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let marked = pending
        .left()
        .expect("still present, returned as the object");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(
        maps.get("held")
            .await
            .expect("still there")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let err = maps
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["kerf.test/hold", "kerf.test/new"]}})),
        )
        .await
        .expect_err("no new finalizers");
    assert_eq!(code(&err), 422);
    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    wait_for(&maps, "held", is_deleted(&uid)).await;
    assert_eq!(code(&maps.get("held").await.expect_err("gone")), 404);
    h.stop().await;
}

fn running_pod(name: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "app", "image": "app"}]}})
}

async fn make_ready(pods: &Api<Pod>, name: &str) {
    let status = Patch::Merge(
        json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    pods.patch_status(name, &PatchParams::default(), &status)
        .await
        .expect("status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_terminate_after_their_grace_period_on_the_emulated_clock() {
    let clock = Arc::new(ManualClock::new(SystemTime::now()));
    let h = start_with_clock(clock.clone()).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let pod: Pod = create(&pods, running_pod("graceful", json!({}))).await;
    let uid = pod.metadata.uid.clone().expect("uid");
    let deleted = pods
        .delete("graceful", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("pod returned");
    assert_eq!(deleted.metadata.deletion_grace_period_seconds, Some(30));
    assert!(deleted.metadata.deletion_timestamp.is_some());
    clock.advance(Duration::from_secs(29));
    assert!(
        pods.get("graceful").await.is_ok(),
        "still terminating before the grace period ends"
    );
    clock.advance(Duration::from_secs(1));
    wait_for(&pods, "graceful", is_deleted(&uid)).await;

    // A simulated kubelet force-deletes with grace 0.
    let pod: Pod = create(&pods, running_pod("forced", json!({}))).await;
    pods.delete("forced", &DeleteParams::default())
        .await
        .expect("graceful delete");
    pods.delete(
        "forced",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("force");
    assert_eq!(
        code(&pods.get("forced").await.expect_err("gone at once")),
        404
    );
    drop(pod);
    // Unscheduled pods have nothing to terminate and go at once.
    create(
        &pods,
        json!({"metadata": {"name": "pending"}, "spec": {"containers": []}}),
    )
    .await;
    pods.delete("pending", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(code(&pods.get("pending").await.expect_err("gone")), 404);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_assigns_a_node_once() {
    let h = start().await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    create(
        &pods,
        json!({"metadata": {"name": "unbound"}, "spec": {"containers": []}}),
    )
    .await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "unbound"}, "target": {"kind": "Node", "name": "n7"}});
    let status: kube::core::Status = pods
        .create_subresource("binding", "unbound", &PostParams::default(), &binding)
        .await
        .expect("bind");
    assert!(status.is_success());
    let pod = pods.get("unbound").await.expect("get");
    assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("n7"));
    let scheduled = pod.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        scheduled
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    );
    let again = pods
        .create_subresource::<_, kube::core::Status>(
            "binding",
            "unbound",
            &PostParams::default(),
            &binding,
        )
        .await
        .expect_err("already bound");
    assert_eq!(code(&again), 409);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_honours_pod_disruption_budgets() {
    let h = start().await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(h.client.clone(), "default");
    for name in ["db-0", "db-1"] {
        create(&pods, running_pod(name, json!({"app": "db"}))).await;
        make_ready(&pods, name).await;
    }
    create(&pods, running_pod("free", json!({"app": "other"}))).await;
    make_ready(&pods, "free").await;
    create(&pdbs, json!({"metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})).await;
    let allowed = |n: i32| {
        move |pdb: Option<&PodDisruptionBudget>| {
            pdb.and_then(|p| p.status.as_ref()).is_some_and(|s| {
                s.disruptions_allowed == n
                    && s.current_healthy == 2
                    && s.observed_generation.is_some()
            })
        }
    };
    let pdb = wait_for(&pdbs, "db", allowed(1)).await.expect("pdb");
    let status = pdb.status.expect("status");
    assert_eq!((status.desired_healthy, status.expected_pods), (1, 2));

    let evict = EvictParams::default();
    let ok = pods
        .evict("db-0", &evict)
        .await
        .expect("first eviction allowed");
    assert!(ok.is_success());
    let evicted = pods.get("db-0").await.expect("terminating");
    assert!(
        evicted.metadata.deletion_timestamp.is_some(),
        "evicted pods terminate gracefully"
    );
    let refused = pods
        .evict("db-1", &evict)
        .await
        .expect_err("budget exhausted");
    assert_eq!(code(&refused), 429);
    let kube::Error::Api(status) = refused else {
        unreachable!()
    };
    assert_eq!(status.reason, "TooManyRequests");
    assert!(
        status.message.contains("disruption budget"),
        "{}",
        status.message
    );
    let settled = wait_for(&pdbs, "db", |pdb: Option<&PodDisruptionBudget>| {
        pdb.and_then(|p| p.status.as_ref())
            .is_some_and(|s| s.current_healthy == 1 && s.disruptions_allowed == 0)
    })
    .await
    .expect("pdb");
    assert_eq!(settled.status.map(|s| s.desired_healthy), Some(1));
    // Pods no budget covers are evicted freely.
    assert!(
        pods.evict("free", &evict)
            .await
            .expect("no budget")
            .is_success()
    );
    h.stop().await;
}
