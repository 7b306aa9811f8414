//! Create, get, list (selectors, pagination), replace with optimistic concurrency, delete.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::support::{code, create, start};

fn pod(name: &str, labels: serde_json::Value, node: Option<&str>) -> serde_json::Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    if let Some(node) = node {
        p["spec"]["nodeName"] = json!(node);
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_and_errors_follow_the_api() {
    let h = start().await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let created = create(&pods, pod("web-1", json!({"app": "web"}), None)).await;
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    assert!(
        meta.resource_version
            .as_deref()
            .is_some_and(|rv| rv.parse::<u64>().is_ok())
    );
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );

    let fetched = pods.get("web-1").await.expect("get");
    assert_eq!(fetched.metadata.uid, meta.uid);
    let missing = pods.get("nope").await.expect_err("404");
    assert_eq!(code(&missing), 404);
    let dup = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("web-1", json!({}), None)).expect("pod"),
        )
        .await
        .expect_err("409");
    assert_eq!(code(&dup), 409);
    let kube::Error::Api(status) = dup else {
        unreachable!()
    };
    assert_eq!(status.reason, "AlreadyExists");

    let generated: Pod = create(
        &pods,
        json!({"metadata": {"generateName": "gen-"}, "spec": {"containers": []}}),
    )
    .await;
    let name = generated.metadata.name.expect("named");
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let elsewhere: Api<Pod> = Api::namespaced(h.client.clone(), "missing-ns");
    let err = elsewhere
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("x", json!({}), None)).expect("pod"),
        )
        .await
        .expect_err("no namespace");
    assert_eq!(code(&err), 404);

    let nodes: Api<Node> = Api::all(h.client.clone());
    let node: Node = create(
        &nodes,
        json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}}),
    )
    .await;
    assert!(node.metadata.namespace.is_none());
    assert_eq!(
        node.status
            .and_then(|s| s.capacity)
            .and_then(|c| c.get("cpu").cloned())
            .map(|q| q.0),
        Some("4".to_string())
    );
    let namespaces: Api<Namespace> = Api::all(h.client.clone());
    let default = namespaces
        .get("default")
        .await
        .expect("bootstrap namespace");
    assert_eq!(
        default.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_filter_by_labels_and_fields_and_paginate() {
    let h = start().await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    for i in 0..7 {
        let tier = if i % 2 == 0 { "front" } else { "back" };
        let node = (i < 3).then_some("n1");
        create(
            &pods,
            pod(
                &format!("p{i}"),
                json!({"app": "shop", "tier": tier, "idx": i.to_string()}),
                node,
            ),
        )
        .await;
    }
    let names = |list: kube::core::ObjectList<Pod>| {
        list.items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect::<Vec<_>>()
    };
    let selected = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(pods.list(&selected("tier=front")).await.expect("list")),
        ["p0", "p2", "p4", "p6"]
    );
    assert_eq!(
        names(
            pods.list(&selected("tier==back,idx!=1"))
                .await
                .expect("list")
        ),
        ["p3", "p5"]
    );
    assert_eq!(
        names(
            pods.list(&selected("idx in (1,2),app"))
                .await
                .expect("list")
        ),
        ["p1", "p2"]
    );
    assert_eq!(
        names(
            pods.list(&selected("idx notin (0,1,2,3,4),!missing"))
                .await
                .expect("list")
        ),
        ["p5", "p6"]
    );
    let on_node = ListParams::default().fields("spec.nodeName=n1");
    assert_eq!(
        names(pods.list(&on_node).await.expect("list")),
        ["p0", "p1", "p2"]
    );
    let unscheduled = ListParams::default().fields("spec.nodeName=,metadata.name!=p6");
    assert_eq!(
        names(pods.list(&unscheduled).await.expect("list")),
        ["p3", "p4", "p5"]
    );
    let bad = pods
        .list(&ListParams::default().fields("spec.bogus=1"))
        .await
        .expect_err("unsupported field");
    assert_eq!(code(&bad), 400);

    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(3);
    let mut pages = 0;
    loop {
        let page = pods.list(&params).await.expect("page");
        pages += 1;
        let token = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        seen.extend(names(page));
        match token {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]);
    let everywhere: Api<Pod> = Api::all(h.client.clone());
    assert_eq!(
        everywhere
            .list(&ListParams::default())
            .await
            .expect("all namespaces")
            .items
            .len(),
        7
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_rejects_stale_resource_versions() {
    let h = start().await;
    let maps: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let original: ConfigMap = create(
        &maps,
        json!({"metadata": {"name": "cfg"}, "data": {"k": "1"}}),
    )
    .await;
    let mut first = original.clone();
    first.data = Some([("k".to_string(), "2".to_string())].into());
    let updated = maps
        .replace("cfg", &PostParams::default(), &first)
        .await
        .expect("fresh update");
    assert_ne!(
        updated.metadata.resource_version,
        original.metadata.resource_version
    );
    let mut stale = original.clone();
    stale.data = Some([("k".to_string(), "3".to_string())].into());
    let err = maps
        .replace("cfg", &PostParams::default(), &stale)
        .await
        .expect_err("stale");
    assert_eq!(code(&err), 409);
    let kube::Error::Api(status) = err else {
        unreachable!()
    };
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        maps.get("cfg")
            .await
            .expect("get")
            .data
            .and_then(|d| d.get("k").cloned())
            .as_deref(),
        Some("2")
    );

    let deleted = maps
        .delete("cfg", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        deleted.is_right(),
        "an immediately deleted configmap answers with a Status"
    );
    assert_eq!(code(&maps.get("cfg").await.expect_err("gone")), 404);
    assert_eq!(
        code(
            &maps
                .delete("cfg", &DeleteParams::default())
                .await
                .expect_err("gone")
        ),
        404
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_counted_failed_ones_too() {
    let h = start().await;
    let counted = h.server.requests();
    let before = counted.get();
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    create(&pods, pod("counted", json!({}), None)).await;
    pods.get("counted").await.expect("get");
    pods.get("missing").await.expect_err("404");
    assert_eq!(
        counted.get() - before,
        3,
        "a create, a get and a failed get"
    );
    h.stop().await;
}
