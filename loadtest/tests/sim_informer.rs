//! The simulated actors' informer against the API emulator over HTTP: its cache follows the
//! objects as they change, without their `metadata.managedFields` (which no simulated actor
//! reads), while the emulator keeps serving them.

mod sim_support;

use k8s_openapi::api::core::v1::Pod;
use kerf_loadtest::informer::{Informer, any_event};
use kerf_loadtest::kubelet::KubeletPod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use sim_support::{PATIENCE, create, start};

#[tokio::test]
async fn the_cache_follows_changes_without_managed_fields() {
    let h = start().await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let informer = Informer::start(pods.clone(), any_event::<Pod>);
    informer.ready().await;
    let labelled = PatchParams::apply("a-writer").force();
    let change = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"tier": "front"}}});
    pods.patch("web", &labelled, &Patch::Apply(&change))
        .await
        .expect("applied");
    let served = pods.get("web").await.expect("served");
    assert!(
        served
            .metadata
            .managed_fields
            .as_ref()
            .is_some_and(|m| !m.is_empty()),
        "the emulator keeps the applier's fields: {:?}",
        served.metadata.managed_fields
    );
    let mut changes = informer.changes();
    let cached = tokio::time::timeout(PATIENCE, async {
        loop {
            let cached = informer
                .store()
                .state()
                .into_iter()
                .find(|p| p.metadata.name.as_deref() == Some("web"));
            if let Some(pod) = cached
                && pod.metadata.resource_version == served.metadata.resource_version
            {
                return pod;
            }
            changes.changed().await.expect("the informer runs");
        }
    })
    .await
    .expect("the cache catches up");
    assert_eq!(cached.metadata.managed_fields, None);
    let labels = cached.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("tier").map(String::as_str),
        Some("front"),
        "{labels:?}"
    );
    assert_eq!(cached.spec, served.spec);
    drop(informer);
    h.stop().await;
}

/// The cached projection of the one pod named `name` once `ready` says it caught up.
async fn projected(
    informer: &Informer<KubeletPod>,
    name: &str,
    ready: impl Fn(Option<&KubeletPod>) -> bool,
) -> Option<KubeletPod> {
    let mut changes = informer.changes();
    tokio::time::timeout(PATIENCE, async {
        loop {
            let state = informer.store().state();
            let cached = state.iter().find(|p| p.name == name).map(|p| (**p).clone());
            if ready(cached.as_ref()) {
                return cached;
            }
            changes.changed().await.expect("the informer runs");
        }
    })
    .await
    .expect("the cache catches up")
}

#[tokio::test]
async fn a_projected_cache_follows_changes_and_deletions() {
    let h = start().await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let informer = Informer::start_projected(pods.clone(), any_event, KubeletPod::of);
    informer.ready().await;
    let first = projected(&informer, "web", |p| p.is_some())
        .await
        .expect("cached");
    assert_eq!(first.containers, [("c".to_owned(), "busybox".to_owned())]);
    assert!(!first.is_started());

    let running = json!({"status": {"phase": "Running"}});
    pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&running))
        .await
        .expect("patched");
    let started = projected(&informer, "web", |p| p.is_some_and(KubeletPod::is_started)).await;
    assert_ne!(
        started.and_then(|p| p.resource_version),
        first.resource_version
    );

    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete("web", &now).await.expect("deleted");
    assert_eq!(projected(&informer, "web", |p| p.is_none()).await, None);
    drop(informer);
    h.stop().await;
}
