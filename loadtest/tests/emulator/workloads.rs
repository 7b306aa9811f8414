//! Deployments become a ReplicaSet and pods; scaling works; deleting cascades.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kerf_loadtest::apiserver::BURST_REPLICAS;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::conditions::is_deleted;
use serde_json::json;

use crate::support::{create, start, wait_for};

fn replicas_settled(n: i32) -> impl Fn(Option<&Deployment>) -> bool {
    move |d| {
        d.and_then(|d| d.status.as_ref())
            .is_some_and(|s| s.replicas == Some(n) && s.updated_replicas == Some(n))
    }
}

async fn active_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .expect("list")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_scale_through_a_replicaset() {
    let h = start().await;
    let deployments: Api<Deployment> = Api::namespaced(h.client.clone(), "default");
    let replicasets: Api<ReplicaSet> = Api::namespaced(h.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    create(&deployments, json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "web:1",
            "resources": {"requests": {"cpu": "500m"}}}]}}}})).await;
    let deployment = wait_for(&deployments, "web", replicas_settled(3))
        .await
        .expect("deployment");
    let rs_list = replicasets
        .list(&ListParams::default())
        .await
        .expect("rs")
        .items;
    assert_eq!(rs_list.len(), 1);
    let rs = &rs_list[0];
    let owner = &rs.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        (
            "Deployment",
            deployment.metadata.uid.as_deref().unwrap_or_default()
        )
    );
    let hash = rs
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"))
        .expect("hash label")
        .clone();
    let current = active_pods(&pods).await;
    assert_eq!(current.len(), 3);
    for pod in &current {
        let labels = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get("pod-template-hash"), Some(&hash));
        let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("ReplicaSet", Some(true))
        );
        assert!(
            pod.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!(
                    "{}-",
                    rs.metadata.name.as_deref().unwrap_or_default()
                )))
        );
    }

    let scale = |n: i32| Patch::Merge(json!({"spec": {"replicas": n}}));
    deployments
        .patch("web", &PatchParams::default(), &scale(5))
        .await
        .expect("scale up");
    wait_for(&deployments, "web", replicas_settled(5)).await;
    assert_eq!(active_pods(&pods).await.len(), 5);
    deployments
        .patch("web", &PatchParams::default(), &scale(1))
        .await
        .expect("scale down");
    wait_for(&deployments, "web", replicas_settled(1)).await;
    assert_eq!(active_pods(&pods).await.len(), 1);

    let remaining = active_pods(&pods).await;
    let rs_uid = rs.metadata.uid.clone().expect("uid");
    deployments
        .delete("web", &DeleteParams::background())
        .await
        .expect("delete");
    wait_for(
        &replicasets,
        rs.metadata.name.as_deref().unwrap_or_default(),
        is_deleted(&rs_uid),
    )
    .await;
    for pod in remaining {
        let uid = pod.metadata.uid.clone().expect("uid");
        wait_for(
            &pods,
            pod.metadata.name.as_deref().unwrap_or_default(),
            is_deleted(&uid),
        )
        .await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_orphan_and_namespace_deletion() {
    let h = start().await;
    let maps: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let owner: ConfigMap = create(&maps, json!({"metadata": {"name": "owner"}})).await;
    let owner_uid = owner.metadata.uid.clone().expect("uid");
    let owned = |name: &str| json!({"metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}]}});
    let child: ConfigMap = create(&maps, owned("child")).await;
    maps.delete("owner", &DeleteParams::orphan())
        .await
        .expect("orphan delete");
    let orphan = wait_for(&maps, "child", |c: Option<&ConfigMap>| {
        c.is_some_and(|c| {
            c.metadata
                .owner_references
                .as_ref()
                .is_none_or(Vec::is_empty)
        })
    })
    .await;
    assert_eq!(orphan.and_then(|c| c.metadata.uid), child.metadata.uid);

    let owner: ConfigMap = create(&maps, json!({"metadata": {"name": "owner2"}})).await;
    let owner_uid = owner.metadata.uid.clone().expect("uid");
    let dependent: ConfigMap = create(&maps, json!({"metadata": {"name": "child2", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner_uid}]}})).await;
    maps.delete("owner2", &DeleteParams::foreground())
        .await
        .expect("foreground delete");
    wait_for(
        &maps,
        "child2",
        is_deleted(dependent.metadata.uid.as_deref().unwrap_or_default()),
    )
    .await;
    wait_for(&maps, "owner2", is_deleted(&owner_uid)).await;

    let namespaces: Api<Namespace> = Api::all(h.client.clone());
    let ns: Namespace = create(&namespaces, json!({"metadata": {"name": "scratch"}})).await;
    let scratch: Api<ConfigMap> = Api::namespaced(h.client.clone(), "scratch");
    create(&scratch, json!({"metadata": {"name": "inside"}})).await;
    namespaces
        .delete("scratch", &DeleteParams::default())
        .await
        .expect("delete namespace");
    wait_for(
        &namespaces,
        "scratch",
        is_deleted(ns.metadata.uid.as_deref().unwrap_or_default()),
    )
    .await;
    assert!(
        scratch
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    h.stop().await;
}

fn replica_set(name: &str, replicas: usize) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": {"replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicasets_scaled_together_create_their_pods_in_turn() {
    let h = start().await;
    let replicasets: Api<ReplicaSet> = Api::namespaced(h.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let replicas = 4 * BURST_REPLICAS;
    for name in ["a", "b"] {
        create(&replicasets, replica_set(name, replicas)).await;
    }
    let all_created = |rs: Option<&ReplicaSet>| {
        rs.and_then(|rs| rs.status.as_ref())
            .is_some_and(|s| usize::try_from(s.replicas).ok() == Some(replicas))
    };
    for name in ["a", "b"] {
        wait_for(&replicasets, name, all_created).await;
    }
    // Nothing else writes these pods: their resourceVersions are their creation order.
    let mut created: Vec<(u64, String)> = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|p| {
            let version = p.metadata.resource_version.as_deref().unwrap_or_default();
            let app = p.labels().get("app").cloned().unwrap_or_default();
            (version.parse().expect("a numeric resourceVersion"), app)
        })
        .collect();
    created.sort();
    assert_eq!(created.len(), 2 * replicas);
    // Whole, the first ReplicaSet's pods would all come first. In bursts, the second's
    // start within the first's second burst (its first, if both were seen at once).
    let second = if created[0].1 == "a" { "b" } else { "a" };
    let first_of_second = created.iter().position(|(_, app)| app == second);
    assert!(
        first_of_second.is_some_and(|i| i <= 2 * BURST_REPLICAS),
        "{second}'s first pod is #{first_of_second:?} of {}",
        created.len()
    );
    h.stop().await;
}
