//! The NodeClaim lifecycle end to end: the controller launches into the simulated EC2, the
//! simulated kubelets register Nodes, the lifecycle registers and initializes them, and the
//! simulated kube-scheduler binds the pods, which start Running. Also liveness (a Node that
//! never registers) and the termination finalizers (draining, PodDisruptionBudgets).

use std::sync::Arc;
use std::time::Duration;

use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::catalog::Catalog;
use kerf::labels;
use kerf_actors::lifecycle::LifecycleConfig;
use kerf_actors::{Cloud, Daemon};
use kerf_loadtest::apiserver::Cluster;
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig};
use kerf_loadtest::kubelet::KubeletHandle;
use kerf_loadtest::scheduler::SchedulerHandle;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use crate::support::*;

const REGION: &str = "us-east-1";

/// The controller against the emulator, with optional simulated kubelets and scheduler.
struct Stack {
    harness: Harness,
    daemon: Daemon,
    provider: Arc<SimulatedCloudProvider>,
    kubelets: Option<KubeletHandle>,
    scheduler: Option<SchedulerHandle>,
}

impl Stack {
    async fn start(lifecycle: LifecycleConfig, with_nodes: bool) -> Self {
        let harness = start_cluster().await;
        harness
            .cluster()
            .create("karpenter.sh/v1", "nodepools", nodepool("default"))
            .expect("nodepool created");
        let provider = Arc::new(
            SimulatedCloudProvider::for_region(
                REGION,
                Ec2Config::instant(REGION),
                SimulatedCloudProviderConfig::default(),
            )
            .expect("simulated region"),
        );
        let cloud = Cloud {
            provider: provider.clone(),
            catalog: Catalog::embedded(REGION).expect("embedded region"),
            offerings: None,
        };
        let daemon = start_daemon_with_lifecycle(
            &harness,
            settings(&[
                "--disable-leader-election",
                "true",
                "--batch-idle-duration",
                "200ms",
            ]),
            "a",
            cloud,
            lifecycle,
        )
        .await;
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");
        let (kubelets, scheduler) = if with_nodes {
            let (kubelets, scheduler) = node_simulators(&harness, provider.clone());
            (Some(kubelets), Some(scheduler))
        } else {
            (None, None)
        };
        Self {
            harness,
            daemon,
            provider,
            kubelets,
            scheduler,
        }
    }

    fn cluster(&self) -> Cluster {
        self.harness.cluster()
    }

    fn nodeclaims(&self) -> Vec<Value> {
        self.cluster()
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .expect("nodeclaims list")
    }

    fn nodes(&self) -> Vec<Value> {
        self.cluster()
            .list("v1", "nodes", None, "")
            .expect("nodes list")
    }

    fn pod(&self, name: &str) -> Option<Value> {
        self.cluster().get("v1", "pods", Some("default"), name).ok()
    }

    fn instance_state(&self, provider_id: &str) -> Option<String> {
        let instance_id = provider_id.rsplit('/').next()?;
        self.provider
            .ec2()
            .instance(instance_id)
            .map(|i| i.state.as_str().to_owned())
    }

    /// Waits until every pod in `names` is bound and Running.
    async fn wait_running(&self, names: &[&str]) {
        let cluster = self.cluster();
        eventually("pods bound and running", || {
            names.iter().all(|name| {
                cluster
                    .get("v1", "pods", Some("default"), name)
                    .is_ok_and(|p| {
                        p["spec"]["nodeName"].as_str().is_some()
                            && p["status"]["phase"] == "Running"
                    })
            })
        })
        .await;
    }

    async fn delete_nodeclaim(&self, name: &str) {
        let api: Api<NodeClaim> = Api::all(self.harness.client.clone());
        api.delete(name, &DeleteParams::default())
            .await
            .expect("nodeclaim deleted");
    }

    async fn stop(self) {
        drop(self.scheduler);
        drop(self.kubelets);
        self.daemon.stop().await;
        self.harness.stop().await;
    }
}

fn condition_status(claim: &Value, type_: &str) -> Option<String> {
    claim["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

fn is_ready(claim: &Value) -> bool {
    condition_status(claim, types::READY).as_deref() == Some("True")
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["key"].as_str().map(str::to_owned))
        .collect()
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn pending_pods_run_on_registered_and_initialized_nodes() {
    run(|| async {
        let stack = Stack::start(fast_lifecycle(), true).await;
        let cluster = stack.cluster();
        let pods = ["web-1", "web-2", "web-3"];
        for name in pods {
            create_pod(&cluster, name, json!({}));
        }
        stack.wait_running(&pods).await;
        eventually("every nodeclaim ready", || {
            let claims = stack.nodeclaims();
            !claims.is_empty() && claims.iter().all(is_ready)
        })
        .await;

        let nodes = stack.nodes();
        let claims = stack.nodeclaims();
        for claim in &claims {
            for type_ in [
                types::LAUNCHED,
                types::REGISTERED,
                types::INITIALIZED,
                types::READY,
            ] {
                assert_eq!(
                    condition_status(claim, type_).as_deref(),
                    Some("True"),
                    "{type_}: {claim:#}"
                );
            }
            let node_name = claim["status"]["nodeName"]
                .as_str()
                .expect("status.nodeName");
            let node = nodes
                .iter()
                .find(|n| name_of(n) == node_name)
                .expect("the claim's node exists");
            assert_eq!(
                node["spec"]["providerID"], claim["status"]["providerID"],
                "{node:#}"
            );
            assert!(
                !taint_keys(node).contains(&labels::UNREGISTERED_TAINT.to_owned()),
                "{node:#}"
            );
            let node_labels = &node["metadata"]["labels"];
            assert_eq!(node_labels[labels::REGISTERED], "true");
            assert_eq!(node_labels[labels::INITIALIZED], "true");
            assert_eq!(node_labels[labels::NODEPOOL], "default");
            assert_eq!(
                node["metadata"]["finalizers"],
                json!([labels::TERMINATION_FINALIZER])
            );
            let owners = node["metadata"]["ownerReferences"]
                .as_array()
                .expect("owner references");
            assert!(
                owners.iter().any(|o| o["kind"] == "NodeClaim"
                    && o["uid"] == claim["metadata"]["uid"]
                    && o["apiVersion"] == "karpenter.sh/v1"),
                "{owners:?}"
            );
        }
        // Every pod runs on one of the claims' nodes.
        let claimed: Vec<&str> = claims
            .iter()
            .filter_map(|c| c["status"]["nodeName"].as_str())
            .collect();
        for name in pods {
            let pod = stack.pod(name).expect("pod");
            let node = pod["spec"]["nodeName"].as_str().expect("bound");
            assert!(
                claimed.contains(&node),
                "{name} on {node}, claims {claimed:?}"
            );
        }

        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        for metric in [
            "karpenter_nodeclaims_registered_total{nodepool=\"default\"}",
            "karpenter_nodeclaims_initialized_total{nodepool=\"default\"}",
            "karpenter_nodes_created_total{nodepool=\"default\",zone=\"us-east-1",
        ] {
            assert!(metrics.contains(metric), "{metric} missing:\n{metrics}");
        }
        stack.stop().await;
    });
}

#[test]
fn a_nodeclaim_whose_node_never_registers_is_deleted_and_its_instance_terminated() {
    run(|| async {
        let lifecycle = LifecycleConfig {
            // Long enough that the launched instance is observed before the TTL ends, even on a
            // loaded machine.
            registration_ttl: Duration::from_secs(3),
            ..fast_lifecycle()
        };
        // No kubelets: the instance launches but no Node ever registers.
        let stack = Stack::start(lifecycle, false).await;
        create_unschedulable_pod(&stack.cluster(), "web-1");
        let mut launched = None;
        eventually("a launched nodeclaim", || {
            launched = stack
                .nodeclaims()
                .into_iter()
                .find(|c| condition_status(c, types::LAUNCHED).as_deref() == Some("True"));
            launched.is_some()
        })
        .await;
        let claim = launched.expect("launched");
        let name = name_of(&claim);
        let provider_id = claim["status"]["providerID"]
            .as_str()
            .expect("providerID")
            .to_owned();
        assert!(matches!(
            stack.instance_state(&provider_id).as_deref(),
            Some("pending" | "running")
        ));
        eventually("the nodeclaim awaits its node", || {
            stack
                .nodeclaims()
                .iter()
                .find(|c| name_of(c) == name)
                .is_some_and(|c| {
                    condition_status(c, types::REGISTERED).as_deref() == Some("Unknown")
                })
        })
        .await;

        let cluster = stack.cluster();
        eventually("the nodeclaim is deleted and released", || {
            cluster
                .get("karpenter.sh/v1", "nodeclaims", None, &name)
                .is_err()
        })
        .await;
        assert_eq!(
            stack.instance_state(&provider_id).as_deref(),
            Some("terminated"),
            "the finalizer is released only once the instance is gone"
        );
        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        assert!(
            metrics.contains("karpenter_nodeclaims_disrupted_total{reason=\"registration_timeout\",nodepool=\"default\""),
            "{metrics}"
        );
        assert!(
            metrics.contains("karpenter_nodeclaims_terminated_total{nodepool=\"default\""),
            "{metrics}"
        );
        stack.stop().await;
    });
}

/// Runs one pod on a fresh node; returns the NodeClaim's name, providerID and node name.
async fn one_running_pod(stack: &Stack, pod_labels: Value) -> (String, String, String) {
    create_pod(&stack.cluster(), "web-1", json!({"labels": pod_labels}));
    stack.wait_running(&["web-1"]).await;
    let mut ready = None;
    eventually("the nodeclaim is ready", || {
        ready = stack.nodeclaims().into_iter().find(is_ready);
        ready.is_some()
    })
    .await;
    let claim = ready.expect("ready");
    let provider_id = claim["status"]["providerID"]
        .as_str()
        .expect("providerID")
        .to_owned();
    let node = claim["status"]["nodeName"]
        .as_str()
        .expect("nodeName")
        .to_owned();
    (name_of(&claim), provider_id, node)
}

async fn wait_all_gone(stack: &Stack, claim: &str, node: &str, provider_id: &str) {
    let cluster = stack.cluster();
    eventually("nodeclaim, node and pod gone", || {
        cluster
            .get("karpenter.sh/v1", "nodeclaims", None, claim)
            .is_err()
            && cluster.get("v1", "nodes", None, node).is_err()
            && stack.pod("web-1").is_none()
    })
    .await;
    assert_eq!(
        stack.instance_state(provider_id).as_deref(),
        Some("terminated")
    );
}

#[test]
fn deleting_a_registered_nodeclaim_drains_and_removes_its_node_and_instance() {
    run(|| async {
        let stack = Stack::start(fast_lifecycle(), true).await;
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;

        stack.delete_nodeclaim(&claim).await;
        wait_all_gone(&stack, &claim, &node, &provider_id).await;

        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        for metric in [
            "karpenter_pods_eviction_requests_total{code=\"200\"}",
            "karpenter_nodes_terminated_total{nodepool=\"default\"",
        ] {
            assert!(metrics.contains(metric), "{metric} missing:\n{metrics}");
        }
        stack.stop().await;
    });
}

#[test]
fn a_disruption_budget_holds_the_drain_until_it_allows_the_eviction() {
    run(|| async {
        let stack = Stack::start(fast_lifecycle(), true).await;
        let cluster = stack.cluster();
        cluster
            .create(
                "policy/v1",
                "poddisruptionbudgets",
                json!({
                    "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
                }),
            )
            .expect("pdb created");
        let (claim, provider_id, node) = one_running_pod(&stack, json!({"app": "web"})).await;

        stack.delete_nodeclaim(&claim).await;
        let stats = stack
            .daemon
            .lifecycle_stats
            .clone()
            .expect("lifecycle runs with a cloud");
        eventually("an eviction refused by the budget", || {
            stats.evictions_blocked() > 0
        })
        .await;
        let node_object = cluster.get("v1", "nodes", None, &node).expect("node stays");
        assert!(
            taint_keys(&node_object).contains(&labels::DISRUPTED_TAINT.to_owned()),
            "{node_object:#}"
        );
        let pod = stack.pod("web-1").expect("the protected pod stays");
        assert!(
            pod["metadata"]["deletionTimestamp"].is_null(),
            "not evicted: {pod:#}"
        );
        assert!(
            cluster
                .get("karpenter.sh/v1", "nodeclaims", None, &claim)
                .is_ok(),
            "the nodeclaim waits for its node"
        );

        // The budget goes away; the next drain step evicts the pod and termination ends.
        let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            Api::namespaced(stack.harness.client.clone(), "default");
        pdbs.delete("web", &DeleteParams::default())
            .await
            .expect("pdb deleted");
        wait_all_gone(&stack, &claim, &node, &provider_id).await;
        stack.stop().await;
    });
}
