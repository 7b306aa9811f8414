//! The four PATCH kinds as kube-rs sends them.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::{code, create, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_json_and_strategic_patches() {
    let h = start().await;
    let nodes: Api<Node> = Api::all(h.client.clone());
    create(
        &nodes,
        json!({"metadata": {"name": "n1", "labels": {"a": "1", "b": "2"}, "finalizers": ["x/one"]},
        "spec": {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]}}),
    )
    .await;
    let pp = PatchParams::default();

    let merged = nodes
        .patch(
            "n1",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": null, "c": "3"}}})),
        )
        .await
        .expect("merge");
    let labels = merged.metadata.labels.expect("labels");
    assert!(!labels.contains_key("a") && labels["b"] == "2" && labels["c"] == "3");

    let json_patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "x/one"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "x/two"},
    ]))
    .expect("json patch");
    let patched = nodes
        .patch("n1", &pp, &Patch::<()>::Json(json_patch))
        .await
        .expect("json patch");
    assert_eq!(
        patched.metadata.finalizers.as_deref(),
        Some(&["x/one".to_string(), "x/two".to_string()][..])
    );
    let failing: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "nope"}]),
    )
    .expect("json patch");
    assert_eq!(
        code(
            &nodes
                .patch("n1", &pp, &Patch::<()>::Json(failing))
                .await
                .expect_err("failed test op")
        ),
        422
    );

    // Strategic merge: finalizers merge as a set, taints are replaced whole (atomic list).
    let strategic = Patch::Strategic(json!({
        "metadata": {"finalizers": ["x/three"]},
        "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}
    }));
    let patched = nodes.patch("n1", &pp, &strategic).await.expect("strategic");
    assert_eq!(patched.metadata.finalizers.map(|f| f.len()), Some(3));
    let taints = patched.spec.and_then(|s| s.taints).expect("taints");
    assert_eq!(taints.len(), 1);
    assert_eq!(taints[0].key, "karpenter.sh/disrupted");
    let removal = Patch::Strategic(
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x/one", "x/two"]}}),
    );
    let patched = nodes
        .patch("n1", &pp, &removal)
        .await
        .expect("delete from list");
    assert_eq!(
        patched.metadata.finalizers.as_deref(),
        Some(&["x/three".to_string()][..])
    );

    // Status conditions merge by type through the status subresource.
    let status = |conditions: serde_json::Value| {
        Patch::Strategic(json!({"status": {"conditions": conditions}}))
    };
    nodes.patch_status("n1", &pp, &status(json!([{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}]))).await.expect("status");
    let node = nodes
        .patch_status(
            "n1",
            &pp,
            &status(json!([{"type": "Ready", "status": "True"}])),
        )
        .await
        .expect("status");
    let conditions = node.status.and_then(|s| s.conditions).expect("conditions");
    assert_eq!(conditions.len(), 2);
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    let ignored = nodes
        .patch(
            "n1",
            &pp,
            &Patch::Merge(json!({"status": {"conditions": []}})),
        )
        .await
        .expect("main endpoint");
    assert_eq!(
        ignored.status.and_then(|s| s.conditions).map(|c| c.len()),
        Some(2),
        "status changes through the main endpoint are ignored"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_of_containers_by_name_and_conflicting_resource_version() {
    let h = start().await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let pod: Pod = create(
        &pods,
        json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "app", "image": "app:1"}, {"name": "sidecar", "image": "side:1"}]}}),
    )
    .await;
    let patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}})),
        )
        .await
        .expect("patch");
    let images: Vec<String> = patched
        .spec
        .expect("spec")
        .containers
        .into_iter()
        .filter_map(|c| c.image)
        .collect();
    assert_eq!(images, ["app:2", "side:1"]);
    let stale = Patch::Merge(
        json!({"metadata": {"resourceVersion": pod.metadata.resource_version, "labels": {"x": "y"}}}),
    );
    assert_eq!(
        code(
            &pods
                .patch("p", &PatchParams::default(), &stale)
                .await
                .expect_err("stale rv in patch")
        ),
        409
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_merges_and_prunes_owned_fields() {
    let h = start().await;
    let maps: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let apply = |data: serde_json::Value| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": data}),
        )
    };
    let me = PatchParams::apply("kerf").force();
    let created = maps
        .patch("applied", &me, &apply(json!({"a": "1", "b": "2"})))
        .await
        .expect("apply creates");
    assert_eq!(created.data.as_ref().map(|d| d.len()), Some(2));
    assert!(
        created
            .metadata
            .managed_fields
            .as_ref()
            .is_some_and(|m| m.iter().any(|f| f.manager.as_deref() == Some("kerf")))
    );
    maps.patch(
        "applied",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"other": "x"}})),
    )
    .await
    .expect("someone else writes");
    let reapplied = maps
        .patch("applied", &me, &apply(json!({"a": "10"})))
        .await
        .expect("re-apply");
    let data = reapplied.data.expect("data");
    assert_eq!(data.get("a").map(String::as_str), Some("10"));
    assert!(
        !data.contains_key("b"),
        "a field the manager stopped applying is removed"
    );
    assert_eq!(
        data.get("other").map(String::as_str),
        Some("x"),
        "fields the manager never applied stay"
    );
    let rival = PatchParams::apply("rival");
    let err = maps
        .patch("applied", &rival, &apply(json!({"a": "rival"})))
        .await
        .expect_err("conflict without force");
    assert_eq!(code(&err), 409);
    let forced = maps
        .patch("applied", &rival.force(), &apply(json!({"a": "rival"})))
        .await
        .expect("forced");
    assert_eq!(
        forced.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("rival")
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_fields_name_the_manager_of_each_write() {
    let h = start().await;
    let nodes: Api<Node> = Api::all(h.client.clone());
    nodes
        .create(
            &kube::api::PostParams {
                field_manager: Some("kerf".into()),
                ..Default::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"a": "1"}},
                "spec": {"providerID": "aws:///us-east-1a/i-1"}}))
            .expect("node"),
        )
        .await
        .expect("created");
    nodes
        .patch_status(
            "n1",
            &PatchParams {
                field_manager: Some("kubelet".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"status": {"nodeInfo": {"kubeletVersion": "v1.33.0"}}})),
        )
        .await
        .expect("status");
    let labelled = nodes
        .patch(
            "n1",
            &PatchParams {
                field_manager: Some("kubectl-label".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {"a": "2"}}})),
        )
        .await
        .expect("labelled");
    let entries: Vec<(String, String, Option<String>, serde_json::Value)> = labelled
        .metadata
        .managed_fields
        .expect("managedFields")
        .into_iter()
        .map(|e| {
            let fields = serde_json::to_value(e.fields_v1.expect("fieldsV1")).expect("JSON");
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
                e.subresource,
                fields,
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (
                "kerf".into(),
                "Update".into(),
                None,
                json!({"f:spec": {"f:providerID": {}}})
            ),
            (
                "kubelet".into(),
                "Update".into(),
                Some("status".into()),
                json!({"f:status": {"f:nodeInfo": {"f:kubeletVersion": {}}}})
            ),
            (
                "kubectl-label".into(),
                "Update".into(),
                None,
                json!({"f:metadata": {"f:labels": {"f:a": {}}}})
            ),
        ],
        "the label changed hands"
    );
    h.stop().await;
}
