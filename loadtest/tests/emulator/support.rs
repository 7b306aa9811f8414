//! Shared setup: a running emulator and a kube-rs client built from its kubeconfig.

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kerf_loadtest::apiserver::{ApiServer, Clock, RunningServer, ServerConfig};
use kube::api::{Api, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Guard against hangs only; every wait below normally completes in milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct Harness {
    pub server: RunningServer,
    pub client: Client,
    pub kubeconfig: PathBuf,
}

pub async fn start() -> Harness {
    start_with(ServerConfig {
        bookmark_interval: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await
}

pub async fn start_with_clock(clock: Arc<dyn Clock>) -> Harness {
    start_with(ServerConfig {
        clock,
        bookmark_interval: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await
}

pub async fn start_with(config: ServerConfig) -> Harness {
    let server = ApiServer::start(config).await.expect("emulator starts");
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-emu-{}-{}.kubeconfig",
        std::process::id(),
        server.addr().port()
    ));
    server
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig written");
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig parses");
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config");
    // kube 5 retries 429/503/504 up to 15 times with exponential backoff by default; the
    // tests assert on those answers themselves.
    config.default_retry = false;
    let client = Client::try_from(config).expect("client");
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

/// Waits (bounded by [`PATIENCE`]) until `name` satisfies `condition`.
pub async fn wait_for<K>(api: &Api<K>, name: &str, condition: impl Condition<K>) -> Option<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    tokio::time::timeout(PATIENCE, await_condition(api.clone(), name, condition))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {name}"))
        .expect("watch for condition")
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

/// The HTTP status code of a kube-rs API error.
pub fn code(err: &kube::Error) -> u16 {
    match err {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}
