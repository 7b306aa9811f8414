//! Shared setup of the simulated-cluster tests: the API emulator reached over HTTP with a
//! kube-rs client built from its kubeconfig (as kerf reaches a cluster), kerf's CRDs
//! installed, a simulated region from the embedded catalog, and waits that follow watches
//! rather than sleeping.

#![allow(dead_code)]

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kerf_loadtest::apiserver::{ApiServer, RunningServer, ServerConfig};
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig};
use kube::api::{Api, PostParams};
use kube::runtime::reflector;
use kube::runtime::wait::{Condition, await_condition};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Guard against hangs only; every wait normally completes in milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub const REGION: &str = "us-east-1";

pub struct Harness {
    pub server: RunningServer,
    pub client: Client,
    kubeconfig: PathBuf,
}

/// An emulator with kerf's CRDs, and a client for it.
pub async fn start() -> Harness {
    let config = ServerConfig {
        bookmark_interval: Duration::from_millis(200),
        ..ServerConfig::default()
    };
    let server = ApiServer::start(config).await.expect("emulator starts");
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-sim-{}-{}.kubeconfig",
        std::process::id(),
        server.addr().port()
    ));
    server
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig written");
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig parses");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config");
    let client = Client::try_from(config).expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kerf::api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD installs");
    }
    Harness {
        server,
        client,
        kubeconfig,
    }
}

impl Harness {
    pub async fn stop(self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        self.server.shutdown().await;
    }
}

/// A simulated us-east-1 whose every delay is zero.
pub fn cloud() -> Arc<SimulatedCloudProvider> {
    let provider = SimulatedCloudProvider::for_region(
        REGION,
        Ec2Config::instant(REGION),
        SimulatedCloudProviderConfig::default(),
    )
    .expect("the embedded catalog has us-east-1");
    Arc::new(provider)
}

/// Waits (bounded by [`PATIENCE`]) until `name` satisfies `condition`.
pub async fn wait_for<K>(api: &Api<K>, name: &str, condition: impl Condition<K>) -> K
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    tokio::time::timeout(PATIENCE, await_condition(api.clone(), name, condition))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {name}"))
        .expect("watch for condition")
        .unwrap_or_else(|| panic!("{name} was deleted while waiting"))
}

/// Waits (bounded by [`PATIENCE`]) until `name` no longer exists.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    tokio::time::timeout(
        PATIENCE,
        await_condition(api.clone(), name, kube::runtime::conditions::is_deleted("")),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {name} to go"))
    .expect("watch for deletion");
}

/// Waits (bounded by [`PATIENCE`]) until the listed objects satisfy `done`; returns them.
pub async fn wait_list<K>(api: &Api<K>, what: &str, done: impl Fn(&[Arc<K>]) -> bool) -> Vec<Arc<K>>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff();
    let wait = async {
        futures::pin_mut!(stream);
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => listed = true,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {}
                _ => continue,
            }
            let state = store.state();
            if listed && done(&state) {
                return state;
            }
        }
        panic!("watch of {what} ended");
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

pub async fn create<K>(api: &Api<K>, object: serde_json::Value) -> K
where
    K: Resource + Clone + Debug + DeserializeOwned + Serialize,
{
    let typed: K = serde_json::from_value(object).expect("test object deserialises");
    api.create(&PostParams::default(), &typed)
        .await
        .expect("create succeeds")
}

/// A NodeClaim of NodePool `default` with the given requirements and resource requests.
pub fn node_claim(
    name: &str,
    requirements: serde_json::Value,
    requests: serde_json::Value,
) -> kerf::api::NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": requirements,
            "resources": {"requests": requests},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }
    }))
    .expect("test NodeClaim deserialises")
}
