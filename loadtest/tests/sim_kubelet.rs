//! The simulated kubelets against the API emulator over HTTP. The test plays kerf's part:
//! it creates a NodeClaim, launches it through the simulated cloud provider and records the
//! providerID; the kubelets then register the Node, make it Ready, drop its startup taints,
//! run daemonset and bound pods, and take the Node and its pods away when the instance ends.

mod sim_support;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf::api::NodeClaim;
use kerf::cloudprovider::CloudProvider;
use kerf::labels;
use kerf_loadtest::ec2::{SimulatedCloudProvider, resource_list};
use kerf_loadtest::kubelet::{self, KubeletConfig};
use kerf_loadtest::scheduler::{self, SchedulerConfig};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use sim_support::{Harness, cloud, create, start, wait_for, wait_gone, wait_list};
use std::sync::Arc;

/// Does what kerf does at launch: creates the NodeClaim, launches it, records the result.
async fn launch(
    h: &Harness,
    cloud: &SimulatedCloudProvider,
    name: &str,
    spec_extra: Value,
) -> (NodeClaim, String) {
    let mut spec = json!({
        "requirements": [
            {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": labels::ZONE, "operator": "In", "values": ["us-east-1a"]},
            {"key": "example.com/team", "operator": "In", "values": ["infra"]}
        ],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    let claims: Api<NodeClaim> = Api::all(h.client.clone());
    let claim: NodeClaim = create(
        &claims,
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
               "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}}, "spec": spec}),
    )
    .await;
    let launched = cloud.create(&claim).await.expect("launches");
    let status = launched.status.clone().expect("hydrated status");
    let patch = json!({"status": {
        "providerID": status.provider_id, "imageID": status.image_id,
        "capacity": status.capacity, "allocatable": status.allocatable
    }});
    let recorded = claims
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("status recorded");
    let provider_id = status.provider_id.clone().expect("providerID");
    let instance_id = provider_id
        .rsplit('/')
        .next()
        .expect("instance id")
        .to_owned();
    let node_name = cloud
        .ec2()
        .instance(&instance_id)
        .expect("instance")
        .private_dns_name;
    (recorded, node_name)
}

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

fn ready_status(node: &Node) -> Option<String> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn is_ready(node: Option<&Node>) -> bool {
    node.and_then(ready_status).as_deref() == Some("True")
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Removes `karpenter.sh/unregistered`, as kerf's registration does.
async fn register_like_kerf(nodes: &Api<Node>, node: &Node) {
    let name = node.metadata.name.clone().expect("name");
    let kept: Vec<_> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != labels::UNREGISTERED_TAINT)
        .collect();
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": kept}})),
        )
        .await
        .expect("taint removed");
}

#[tokio::test]
async fn nodeclaims_with_provider_ids_become_ready_nodes() {
    let h = start().await;
    let cloud = cloud();
    let _kubelets = kubelet::start(h.client.clone(), Arc::clone(&cloud), KubeletConfig::fast());
    let extra = json!({
        "taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
        "startupTaints": [{"key": "example.com/agent-not-ready", "effect": "NoSchedule"}]
    });
    let (claim, node_name) = launch(&h, &cloud, "lifecycle", extra).await;
    let nodes: Api<Node> = Api::all(h.client.clone());

    let registered = wait_for(&nodes, &node_name, |n: Option<&Node>| n.is_some()).await;
    let node_labels = registered.metadata.labels.clone().expect("labels");
    assert_eq!(node_labels[labels::INSTANCE_TYPE], "m5.large");
    assert_eq!(node_labels[labels::ZONE], "us-east-1a");
    assert_eq!(node_labels[labels::CAPACITY_TYPE], "on-demand");
    assert_eq!(node_labels[labels::NODEPOOL], "default");
    assert_eq!(node_labels[labels::HOSTNAME], node_name);
    assert_eq!(node_labels[labels::ARCH], "amd64");
    assert_eq!(node_labels["example.com/team"], "infra");
    assert_eq!(
        registered.spec.as_ref().and_then(|s| s.provider_id.clone()),
        claim.provider_id().map(str::to_owned)
    );
    let taints = taint_keys(&registered);
    for expected in [
        "dedicated:NoSchedule",
        "example.com/agent-not-ready:NoSchedule",
        "karpenter.sh/unregistered:NoExecute",
    ] {
        assert!(
            taints.contains(&expected.to_owned()),
            "{expected} missing from {taints:?}"
        );
    }
    let instance_type = cloud.instance_type("m5.large").expect("catalog type");
    let status = registered.status.clone().expect("status");
    assert_eq!(
        status.allocatable.expect("allocatable"),
        resource_list(&instance_type.allocatable())
    );
    assert_eq!(
        status.capacity.expect("capacity"),
        resource_list(&instance_type.capacity)
    );

    wait_for(&nodes, &node_name, is_ready).await;
    let settled = wait_for(&nodes, &node_name, |n: Option<&Node>| {
        n.is_some_and(|n| {
            !taint_keys(n).contains(&"example.com/agent-not-ready:NoSchedule".to_owned())
        })
    })
    .await;
    assert_eq!(
        taint_keys(&settled),
        [
            "dedicated:NoSchedule",
            "karpenter.sh/unregistered:NoExecute"
        ],
        "only startup taints go"
    );
    h.stop().await;
}

#[tokio::test]
async fn daemonset_and_scheduled_pods_run_on_registered_nodes() {
    let h = start().await;
    let cloud = cloud();
    let _kubelets = kubelet::start(h.client.clone(), Arc::clone(&cloud), KubeletConfig::fast());
    let _scheduler = scheduler::start(
        h.client.clone(),
        SchedulerConfig {
            interval: std::time::Duration::from_millis(20),
            ..SchedulerConfig::default()
        },
    );
    let daemonsets: Api<DaemonSet> = Api::namespaced(h.client.clone(), "default");
    let ds: DaemonSet = create(
        &daemonsets,
        json!({
            "metadata": {"name": "log-agent", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "log-agent"}},
                "template": {
                    "metadata": {"labels": {"app": "log-agent"}},
                    "spec": {"containers": [{"name": "agent", "image": "agent:1",
                             "resources": {"requests": {"cpu": "100m"}}}]}
                }
            }
        }),
    )
    .await;
    let (_, node_name) = launch(&h, &cloud, "daemons", json!({})).await;
    let nodes: Api<Node> = Api::all(h.client.clone());
    let ready = wait_for(&nodes, &node_name, is_ready).await;
    register_like_kerf(&nodes, &ready).await;

    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    create::<Pod>(
        &pods,
        json!({"metadata": {"name": "web", "namespace": "default"},
               "spec": {"containers": [{"name": "web", "image": "web:1", "resources": {"requests": {"cpu": "500m"}}}]}}),
    )
    .await;

    let ds_uid = ds.metadata.uid.clone().expect("uid");
    let settled = wait_list(
        &pods,
        "daemon pod and web pod running",
        |pods: &[Arc<Pod>]| {
            let daemon_running = pods
                .iter()
                .any(|p| owned_by(p, &ds_uid) && on(p, &node_name) && running(p));
            let web_running = pods.iter().any(|p| {
                p.metadata.name.as_deref() == Some("web") && on(p, &node_name) && running(p)
            });
            daemon_running && web_running
        },
    )
    .await;
    let daemon_pods: Vec<_> = settled.iter().filter(|p| owned_by(p, &ds_uid)).collect();
    assert_eq!(daemon_pods.len(), 1, "one daemon pod per node");
    let web = settled
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("web"))
        .expect("web");
    let conditions = web
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .expect("conditions");
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    assert!(web.status.as_ref().and_then(|s| s.pod_ip.clone()).is_some());
    h.stop().await;
}

fn owned_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.kind == "DaemonSet")
}

fn on(pod: &Pod, node: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
}

#[tokio::test]
async fn terminated_instances_take_their_nodes_and_pods_away() {
    let h = start().await;
    let cloud = cloud();
    let _kubelets = kubelet::start(h.client.clone(), Arc::clone(&cloud), KubeletConfig::fast());
    let (claim, node_name) = launch(&h, &cloud, "doomed", json!({})).await;
    let nodes: Api<Node> = Api::all(h.client.clone());
    wait_for(&nodes, &node_name, is_ready).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    create::<Pod>(
        &pods,
        json!({"metadata": {"name": "bound", "namespace": "default"},
               "spec": {"nodeName": node_name, "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "app", "image": "app:1"}]}}),
    )
    .await;
    wait_for(&pods, "bound", |p: Option<&Pod>| p.is_some_and(running)).await;

    let (listed, history) = watch_node(&nodes, &node_name);
    listed.await.expect("watch established");
    cloud.delete(&claim).await.expect("instance terminates");
    wait_gone(&nodes, &node_name).await;
    wait_gone(&pods, "bound").await;
    let statuses = tokio::time::timeout(sim_support::PATIENCE, history)
        .await
        .expect("in time")
        .expect("history task");
    assert!(
        statuses.iter().any(|s| s.as_deref() == Some("Unknown")),
        "node went NotReady first: {statuses:?}"
    );
    h.stop().await;
}

/// Every Ready status the node goes through until it is deleted; the first handle
/// resolves once the watch has listed the node.
fn watch_node(
    nodes: &Api<Node>,
    name: &str,
) -> (
    tokio::sync::oneshot::Receiver<()>,
    tokio::task::JoinHandle<Vec<Option<String>>>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(nodes.clone(), config);
    let (listed, on_listed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut listed = Some(listed);
        let mut seen = Vec::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                }
                Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                    seen.push(ready_status(&node))
                }
                Ok(watcher::Event::Delete(_)) => break,
                _ => {}
            }
        }
        seen
    });
    (on_listed, task)
}
