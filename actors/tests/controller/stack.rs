//! The controller against the emulator with simulated EC2, kubelets and kube-scheduler:
//! the stack the lifecycle and termination scenarios run on, and what they read back.

use std::sync::Arc;
use std::time::Duration;

use kerf::api::NodeClaim;
use kerf_actors::{Daemon, Timings};
use kerf_loadtest::apiserver::Cluster;
use kerf_loadtest::ec2::SimulatedCloudProvider;
use kerf_loadtest::kubelet::{self, KubeletHandle};
use kerf_loadtest::scheduler::{self, SchedulerConfig, SchedulerHandle};
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use crate::support::*;

/// The controller against the emulator, with optional simulated kubelets and scheduler.
pub struct Stack {
    pub harness: Harness,
    pub daemon: Daemon,
    pub provider: Arc<SimulatedCloudProvider>,
    kubelets: Option<KubeletHandle>,
    scheduler: Option<SchedulerHandle>,
}

impl Stack {
    pub async fn start(timings: Timings, with_nodes: bool) -> Self {
        Self::start_with(timings, with_nodes, with_nodes).await
    }

    /// Kubelets register and run Nodes, but no kube-scheduler binds pods: a test plays it.
    pub async fn start_without_scheduler(timings: Timings) -> Self {
        Self::start_with(timings, true, false).await
    }

    async fn start_with(timings: Timings, with_nodes: bool, with_scheduler: bool) -> Self {
        let harness = start_cluster().await;
        harness
            .cluster()
            .create("karpenter.sh/v1", "nodepools", nodepool("default"))
            .expect("nodepool created");
        let (provider, cloud) = simulated_cloud();
        let daemon = start_daemon_with_timings(
            &harness,
            settings(&[
                "--disable-leader-election",
                "true",
                "--batch-idle-duration",
                "200ms",
            ]),
            "a",
            cloud,
            timings,
        )
        .await;
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");
        let kubelets = with_nodes.then(|| {
            kubelet::start(
                harness.client.clone(),
                provider.clone(),
                kubelet::KubeletConfig::fast(),
            )
        });
        let scheduler = with_scheduler.then(|| {
            scheduler::start(
                harness.client.clone(),
                SchedulerConfig {
                    interval: Duration::from_millis(50),
                    initial_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_millis(500),
                    ..SchedulerConfig::default()
                },
            )
        });
        Self {
            harness,
            daemon,
            provider,
            kubelets,
            scheduler,
        }
    }

    pub fn cluster(&self) -> Cluster {
        self.harness.cluster()
    }

    pub fn nodeclaims(&self) -> Vec<Value> {
        self.cluster()
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .expect("nodeclaims list")
    }

    pub fn nodes(&self) -> Vec<Value> {
        self.cluster()
            .list("v1", "nodes", None, "")
            .expect("nodes list")
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.cluster().get("v1", "pods", Some("default"), name).ok()
    }

    pub fn instance_state(&self, provider_id: &str) -> Option<String> {
        let instance_id = provider_id.rsplit('/').next()?;
        self.provider
            .ec2()
            .instance(instance_id)
            .map(|i| i.state.as_str().to_owned())
    }

    /// Waits until every pod in `names` is bound and Running.
    pub async fn wait_running(&self, names: &[&str]) {
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

    pub async fn delete_nodeclaim(&self, name: &str) {
        let api: Api<NodeClaim> = Api::all(self.harness.client.clone());
        api.delete(name, &DeleteParams::default())
            .await
            .expect("nodeclaim deleted");
    }

    pub async fn stop(self) {
        drop(self.scheduler);
        drop(self.kubelets);
        self.daemon.stop().await;
        self.harness.stop().await;
    }
}

pub fn condition_status(claim: &Value, type_: &str) -> Option<String> {
    claim["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

pub fn is_ready(claim: &Value) -> bool {
    condition_status(claim, kerf::api::condition::types::READY).as_deref() == Some("True")
}

pub fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["key"].as_str().map(str::to_owned))
        .collect()
}

pub fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Runs one pod on a fresh node; returns the NodeClaim's name, providerID and node name.
pub async fn one_running_pod(stack: &Stack, pod_labels: Value) -> (String, String, String) {
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

pub async fn wait_all_gone(stack: &Stack, claim: &str, node: &str, provider_id: &str) {
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
