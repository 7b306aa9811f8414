//! Shared setup: an emulator with the Karpenter CRDs, a kube client from its kubeconfig,
//! the daemon started inside an actix system on a multi-threaded runtime, and bounded waits.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kerf_actors::leader::Timing;
use kerf_actors::lifecycle::LifecycleConfig;
use kerf_actors::{Cloud, Daemon, Environment, Settings, ValidSettings};
use kerf_loadtest::apiserver::{ApiServer, Cluster, PatchKind, RunningServer, ServerConfig};
use kube::Client;
use kube::api::Api;
use kube::runtime::conditions::is_crd_established;
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Guard against hangs only; every wait below normally completes in milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Fast leader election for tests: a stopped leader is replaced within about a second.
pub const FAST_LEASE: Timing = Timing {
    lease_duration: Duration::from_secs(1),
    renew_deadline: Duration::from_millis(700),
    retry_period: Duration::from_millis(100),
};

/// Runs `test` inside an actix system on a multi-threaded tokio runtime, as `kerf controller`.
pub fn run<F, Fut>(test: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime builds")
    });
    system.block_on(test());
}

pub struct Harness {
    pub server: RunningServer,
    pub client: Client,
    kubeconfig: PathBuf,
}

impl Harness {
    pub fn cluster(&self) -> Cluster {
        self.server.cluster()
    }

    pub async fn stop(self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        self.server.shutdown().await;
    }
}

/// An emulator with the Karpenter CRDs from `deploy/crds` installed.
pub async fn start_cluster() -> Harness {
    start_cluster_with(&[
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
    ])
    .await
}

/// An emulator with only the named CRD files installed (tests add their own).
pub async fn start_cluster_with(crd_files: &[&str]) -> Harness {
    let server = ApiServer::start(ServerConfig {
        bookmark_interval: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await
    .expect("emulator starts");
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-actors-{}-{}.kubeconfig",
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
    let harness = Harness {
        server,
        client,
        kubeconfig,
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for file in crd_files {
        let yaml = std::fs::read_to_string(dir.join(file)).expect("CRD file readable");
        install_crd(&harness, &yaml).await;
    }
    harness
        .cluster()
        .create(
            "v1",
            "namespaces",
            json!({"metadata": {"name": "karpenter"}}),
        )
        .expect("namespace created");
    harness
}

/// Creates a CRD from YAML and waits until it is established.
pub async fn install_crd(harness: &Harness, yaml: &str) {
    let crd = harness
        .cluster()
        .apply_crd_yaml(yaml)
        .expect("CRD accepted");
    let name = crd["metadata"]["name"]
        .as_str()
        .expect("CRD named")
        .to_string();
    let crds: Api<CustomResourceDefinition> = Api::all(harness.client.clone());
    tokio::time::timeout(PATIENCE, await_condition(crds, &name, is_crd_established()))
        .await
        .expect("CRD established in time")
        .expect("CRD watch");
}

/// Settings as the defaults, with a cluster name and ephemeral ports.
pub fn settings(extra: &[&str]) -> ValidSettings {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }
    let mut argv = vec![
        "kerf",
        "--cluster-name",
        "test",
        "--metrics-port",
        "0",
        "--health-probe-port",
        "0",
    ];
    argv.extend_from_slice(extra);
    Cli::try_parse_from(argv)
        .expect("test settings parse")
        .settings
        .validate()
        .expect("test settings valid")
}

pub async fn start_daemon(harness: &Harness, settings: ValidSettings, identity: &str) -> Daemon {
    start_daemon_with(harness, settings, identity, None).await
}

/// The daemon launching into `cloud`.
pub async fn start_daemon_with(
    harness: &Harness,
    settings: ValidSettings,
    identity: &str,
    cloud: Option<Cloud>,
) -> Daemon {
    Daemon::start(
        settings,
        Environment {
            client: harness.client.clone(),
            namespace: "karpenter".into(),
            identity: identity.into(),
            leader_timing: FAST_LEASE,
            bind: Ipv4Addr::LOCALHOST,
            cloud,
        },
    )
    .await
    .expect("daemon starts")
}

/// The daemon launching into `cloud` with the NodeClaim lifecycle's timings `lifecycle`.
pub async fn start_daemon_with_lifecycle(
    harness: &Harness,
    settings: ValidSettings,
    identity: &str,
    cloud: Cloud,
    lifecycle: LifecycleConfig,
) -> Daemon {
    Daemon::start_with_lifecycle(
        settings,
        Environment {
            client: harness.client.clone(),
            namespace: "karpenter".into(),
            identity: identity.into(),
            leader_timing: FAST_LEASE,
            bind: Ipv4Addr::LOCALHOST,
            cloud: Some(cloud),
        },
        lifecycle,
    )
    .await
    .expect("daemon starts")
}

/// Lifecycle timings for tests: upstream's TTLs, with requeues and backoff in milliseconds.
pub fn fast_lifecycle() -> LifecycleConfig {
    LifecycleConfig {
        resync_period: Duration::from_secs(2),
        drain_requeue: Duration::from_millis(50),
        instance_requeue: Duration::from_millis(50),
        eviction_timeout: Duration::from_millis(300),
        backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        ..LifecycleConfig::default()
    }
}

/// Polls `condition` until it holds, failing the test after [`PATIENCE`].
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A minimal valid NodePool.
pub fn nodepool(name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
        }}}
    })
}

/// A pod the kube-scheduler has marked unschedulable.
pub fn create_unschedulable_pod(cluster: &Cluster, name: &str) -> Value {
    create_pod(cluster, name, json!({}));
    mark_unschedulable(cluster, name)
}

pub fn create_pod(cluster: &Cluster, name: &str, metadata: Value) -> Value {
    let mut meta = json!({"name": name, "namespace": "default"});
    if let (Some(m), Value::Object(extra)) = (meta.as_object_mut(), metadata) {
        m.extend(extra);
    }
    cluster
        .create(
            "v1",
            "pods",
            json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": {"containers": [{"name": "app", "image": "app",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
            }),
        )
        .expect("pod created")
}

pub fn mark_unschedulable(cluster: &Cluster, name: &str) -> Value {
    cluster
        .patch_status(
            "v1",
            "pods",
            Some("default"),
            name,
            PatchKind::Merge,
            &json!({"status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/0 nodes are available"
            }]}}),
        )
        .expect("pod status patched")
}

/// `GET path` over plain HTTP/1.1: the status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let request = format!("GET {path} HTTP/1.1\r\nHost: kerf\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request written");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
