//! kubectl against the emulator, when kubectl is installed.

use std::process::Command;

use serde_json::json;

use crate::crds::install_karpenter_crds;
use crate::support::start;

fn kubectl() -> Option<String> {
    let path = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string());
    Command::new(&path)
        .arg("version")
        .arg("--client")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| path)
}

fn run(kubectl: &str, kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_nodes_pods_and_nodepools() {
    let Some(kubectl) = kubectl() else {
        eprintln!("note: kubectl not installed; skipping the kubectl test");
        return;
    };
    let h = start().await;
    let cluster = h.server.cluster();
    cluster
        .create("v1", "nodes", json!({"metadata": {"name": "node-a"}}))
        .expect("node");
    cluster.create("v1", "pods", json!({"metadata": {"name": "pod-a", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).expect("pod");
    let kubeconfig = h.kubeconfig.clone();
    let k = kubectl.clone();
    let out = tokio::task::spawn_blocking(move || run(&k, &kubeconfig, &["get", "nodes,pods"]))
        .await
        .expect("joined");
    eprintln!("{out}");
    assert!(out.contains("node-a") && out.contains("pod-a"), "{out}");
    let kubeconfig = h.kubeconfig.clone();
    let k = kubectl.clone();
    let json_out =
        tokio::task::spawn_blocking(move || run(&k, &kubeconfig, &["get", "pods", "-o", "json"]))
            .await
            .expect("joined");
    let list: serde_json::Value = serde_json::from_str(&json_out).expect("kubectl prints JSON");
    assert_eq!(list["items"][0]["metadata"]["name"], "pod-a");

    install_karpenter_crds(&h.client).await;
    cluster
        .create("karpenter.sh/v1", "nodepools", json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}}}))
        .expect("nodepool");
    let kubeconfig = h.kubeconfig.clone();
    let out =
        tokio::task::spawn_blocking(move || run(&kubectl, &kubeconfig, &["get", "nodepools"]))
            .await
            .expect("joined");
    eprintln!("{out}");
    assert!(out.contains("general"), "{out}");
    h.stop().await;
}

/// kubectl lists in chunks of 500 (`--chunk-size`'s default) and asks for Tables: every
/// page's Table must carry the continue token, or `kubectl get pods` stops at 500 rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_follows_table_pages_past_its_chunk_size() {
    const PODS: usize = 1_234;
    let Some(kubectl) = kubectl() else {
        eprintln!("note: kubectl not installed; skipping the kubectl test");
        return;
    };
    let h = start().await;
    let cluster = h.server.cluster();
    for i in 0..PODS {
        cluster
            .create(
                "v1",
                "pods",
                json!({"metadata": {"name": format!("pod-{i:04}"), "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )
            .expect("pod");
    }
    let kubeconfig = h.kubeconfig.clone();
    let (default_chunks, small_chunks) = tokio::task::spawn_blocking(move || {
        (
            run(&kubectl, &kubeconfig, &["get", "pods", "--no-headers"]),
            run(
                &kubectl,
                &kubeconfig,
                &["get", "pods", "--chunk-size", "100", "--no-headers"],
            ),
        )
    })
    .await
    .expect("joined");
    let expected: Vec<String> = (0..PODS).map(|i| format!("pod-{i:04}")).collect();
    for out in [default_chunks, small_chunks] {
        let names: Vec<String> = out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect();
        assert_eq!(names.len(), PODS, "rows printed");
        assert!(names == expected, "every pod once, in name order");
    }
    h.stop().await;
}
