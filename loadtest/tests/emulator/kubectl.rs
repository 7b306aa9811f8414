//! kubectl against the emulator, when kubectl is installed.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

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
    run_with_input(kubectl, kubeconfig, args, "")
}

/// Runs kubectl with `input` on its standard input; fails the test unless it succeeds.
fn run_with_input(kubectl: &str, kubeconfig: &Path, args: &[&str], input: &str) -> String {
    let out = try_run(kubectl, kubeconfig, args, input);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn try_run(kubectl: &str, kubeconfig: &Path, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input.as_bytes())
        .expect("kubectl reads its input");
    child.wait_with_output().expect("kubectl finishes")
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

const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
";

fn deployment(replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - {{name: web, image: nginx, resources: {{requests: {{cpu: 500m}}}}}}
      - {{name: sidecar, image: envoy}}
"
    )
}

/// `kubectl apply` validates by default: it reads the OpenAPI v3 document of the kind's
/// group-version, sees that the server validates fields, and sends `fieldValidation=Strict`.
/// Without the document it refuses to apply anything unless told `--validate=false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_validates_against_the_served_openapi() {
    let Some(kubectl) = kubectl() else {
        eprintln!("note: kubectl not installed; skipping the kubectl test");
        return;
    };
    let h = start().await;
    install_karpenter_crds(&h.client).await;
    let kubeconfig = h.kubeconfig.clone();
    tokio::task::spawn_blocking(move || {
        let k = |args: &[&str], input: &str| run_with_input(&kubectl, &kubeconfig, args, input);
        let misspelt = NODEPOOL.replace(
            "requirements: []",
            "requirements: []\n      expiresAfter: 1h",
        );
        let refused = try_run(&kubectl, &kubeconfig, &["apply", "-f", "-"], &misspelt);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "an unknown field is refused");
        assert!(
            stderr.contains(r#"unknown field "spec.template.spec.expiresAfter""#),
            "{stderr}"
        );
        assert!(!stderr.contains("--validate=false"), "{stderr}");

        assert_eq!(
            k(&["apply", "-f", "-"], NODEPOOL).trim(),
            "nodepool.karpenter.sh/general created"
        );
        assert_eq!(
            k(&["apply", "-f", "-"], NODEPOOL).trim(),
            "nodepool.karpenter.sh/general unchanged"
        );
        assert_eq!(
            k(&["apply", "-f", "-"], &deployment(2)).trim(),
            "deployment.apps/web created"
        );
        // An update is a strategic merge patch kubectl computes from its own types.
        assert_eq!(
            k(&["apply", "-f", "-"], &deployment(3)).trim(),
            "deployment.apps/web configured"
        );
        let applied: serde_json::Value =
            serde_json::from_str(&k(&["get", "deployment", "web", "-o", "json"], ""))
                .expect("kubectl prints JSON");
        assert_eq!(applied["spec"]["replicas"], 3);
        let containers: Vec<&str> = applied["spec"]["template"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(containers, ["web", "sidecar"]);

        let explained = k(&["explain", "nodepool.spec.disruption"], "");
        assert!(explained.contains("consolidateAfter"), "{explained}");
        assert!(explained.contains("budgets"), "{explained}");
    })
    .await
    .expect("joined");
    h.stop().await;
}
