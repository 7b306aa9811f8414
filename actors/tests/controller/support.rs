//! Shared setup: an emulator with the Karpenter CRDs, a kube client from its kubeconfig,
//! the daemon started inside an actix system on a multi-threaded runtime, and bounded waits.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kerf::api::NodeClaim;
use kerf::catalog::Catalog;
use kerf::cluster::ControllerSettings;
use kerf::cluster::inventory::Inventory;
use kerf::cluster::snapshot;
use kerf::labels;
use kerf::scheduling::{self, SchedulingResult};
use kerf_actors::leader::Timing;
use kerf_actors::lifecycle::LifecycleConfig;
use kerf_actors::provisioner::{MAX_INSTANCE_TYPES, Round};
use kerf_actors::supervisor::Supervision;
use kerf_actors::termination::TerminationConfig;
use kerf_actors::{Cloud, Daemon, Environment, Settings, Timings, ValidSettings};
use kerf_loadtest::apiserver::faults::CLIENT_HEADER;
use kerf_loadtest::apiserver::rbac::{self, MASTERS, User};
use kerf_loadtest::apiserver::{ApiServer, Cluster, PatchKind, RunningServer, ServerConfig};
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig};
use kerf_loadtest::kubelet::{self, KubeletConfig, KubeletHandle};
use kerf_loadtest::scheduler::{self, SchedulerConfig, SchedulerHandle};
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::conditions::is_crd_established;
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// How long tests whose launches are stalled let a stopping daemon wait for them: not at
/// all, since they never finish (the daemon's own bound is 30 s).
pub const STALLED_DRAIN: Duration = Duration::ZERO;

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
    let system = kerf_actors::supervisor::system(2).expect("tokio runtime builds");
    system.block_on(test());
}

/// The test's own token: `system:masters`, allowed everything (set-up, assertions, the
/// simulated kubelets and scheduler).
pub const ADMIN_TOKEN: &str = "kerf-test-admin";
/// The controller's token: the chart's ServiceAccount, held to the chart's RBAC.
pub const CONTROLLER_TOKEN: &str = "kerf-test-controller";
/// Where the chart is installed for these tests (its Role for the leader Lease lives here).
pub const CONTROLLER_NAMESPACE: &str = "karpenter";

pub struct Harness {
    pub server: RunningServer,
    /// Allowed everything.
    pub client: Client,
    /// The controller's: only what the chart's rendered RBAC grants.
    pub controller: Client,
    kubeconfig: PathBuf,
}

impl Harness {
    pub fn cluster(&self) -> Cluster {
        self.server.cluster()
    }

    /// Stops the emulator; fails the test when the chart's RBAC refused the controller
    /// anything (the chart must grant what the controller does).
    pub async fn stop(self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        let user = User::service_account(CONTROLLER_NAMESPACE, "karpenter").name;
        let denied = self.server.access().denied_to(&user);
        self.server.shutdown().await;
        let denied: Vec<String> = denied
            .iter()
            .map(|a| {
                format!(
                    "{} {}/{} in {}",
                    a.verb,
                    a.group,
                    a.resource,
                    a.namespace.as_deref().unwrap_or("the cluster")
                )
            })
            .collect();
        assert!(
            denied.is_empty(),
            "the chart's RBAC refused the controller: {denied:#?} (grant them in deploy/chart/templates)"
        );
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

/// Every CRD in `deploy/crds`: Karpenter's, NodeOverlay and CapacityBuffer.
pub const ALL_CRDS: [&str; 5] = [
    "karpenter.sh_nodepools.yaml",
    "karpenter.sh_nodeclaims.yaml",
    "karpenter.k8s.aws_ec2nodeclasses.yaml",
    "karpenter.sh_nodeoverlays.yaml",
    "autoscaling.x-k8s.io_capacitybuffers.yaml",
];

/// A lone provisioning daemon with `FEATURE_GATES` `gates`, once its state synced.
pub async fn start_gated_provisioner(harness: &Harness, cloud: Cloud, gates: &str) -> Daemon {
    start_flagged_provisioner(harness, cloud, &["--feature-gates", gates]).await
}

/// A lone provisioning daemon with `flags` over the quick settings, once its state synced.
pub async fn start_flagged_provisioner(harness: &Harness, cloud: Cloud, flags: &[&str]) -> Daemon {
    let mut argv = vec!["--disable-leader-election", "true"];
    argv.extend_from_slice(flags);
    let settings = quick_settings(&argv);
    let daemon = start_daemon_on(harness.controller.clone(), settings, "solo", Some(cloud)).await;
    tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
        .await
        .expect("cluster state syncs");
    daemon
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
    // The controller's own client (retries, evictions excepted), with no practical rate limit.
    let client_as = |config| kerf_actors::client::build(config, 100_000, 100_000).expect("client");
    let harness = Harness {
        client: client_as(config_as(&kubeconfig, ADMIN_TOKEN).await),
        controller: client_as(config_as(&kubeconfig, CONTROLLER_TOKEN).await),
        server,
        kubeconfig,
    };
    install_chart_rbac(&harness);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for file in crd_files {
        let yaml = std::fs::read_to_string(dir.join(file)).expect("CRD file readable");
        install_crd(&harness, &yaml).await;
    }
    harness
        .cluster()
        .get("v1", "namespaces", None, CONTROLLER_NAMESPACE)
        .expect("the controller's namespace exists");
    harness
}

/// A client configuration for the emulator behind `kubeconfig`, authenticated by `token`.
pub async fn config_as(kubeconfig: &std::path::Path, token: &str) -> kube::Config {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config");
    let bearer = http::HeaderValue::from_str(&format!("Bearer {token}")).expect("a header value");
    config.headers.push((http::header::AUTHORIZATION, bearer));
    config
}

/// The chart's RBAC as `helm template` renders it for release `karpenter` in
/// [`CONTROLLER_NAMESPACE`] (kept current by `cli/tests/chart.rs`), then enforcement: the
/// controller's requests are allowed only what those Roles grant.
fn install_chart_rbac(harness: &Harness) {
    let cluster = harness.cluster();
    for namespace in [CONTROLLER_NAMESPACE, "kube-system", "default"] {
        let _exists_already =
            cluster.create("v1", "namespaces", json!({"metadata": {"name": namespace}}));
    }
    let rendered: Vec<Value> =
        serde_json::from_str(include_str!("../../../deploy/chart-rbac.json"))
            .expect("rendered RBAC");
    for object in rendered {
        let plural = rbac::plural(object["kind"].as_str().unwrap_or("")).expect("an RBAC kind");
        cluster
            .create("rbac.authorization.k8s.io/v1", plural, object)
            .expect("the chart's RBAC object is created");
    }
    harness
        .server
        .access()
        .enforce(std::collections::HashMap::from([
            (
                ADMIN_TOKEN.to_owned(),
                User {
                    name: "kerf-test".to_owned(),
                    groups: vec![MASTERS.to_owned()],
                },
            ),
            (
                CONTROLLER_TOKEN.to_owned(),
                User::service_account(CONTROLLER_NAMESPACE, "karpenter"),
            ),
        ]));
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
    start_daemon_on(harness.controller.clone(), settings, identity, cloud).await
}

/// The daemon launching into `cloud`, every request of it (leader election's included)
/// sent through `client`.
pub async fn start_daemon_on(
    client: Client,
    settings: ValidSettings,
    identity: &str,
    cloud: Option<Cloud>,
) -> Daemon {
    Daemon::start(
        settings,
        Environment {
            client: client.clone(),
            leader_client: client,
            namespace: CONTROLLER_NAMESPACE.into(),
            identity: identity.into(),
            leader_timing: FAST_LEASE,
            bind: Ipv4Addr::LOCALHOST,
            cloud,
        },
    )
    .await
    .expect("daemon starts")
}

/// A controller client whose requests name it `name` to the emulator ([`CLIENT_HEADER`]),
/// so faults can single it out and its writes are logged.
pub async fn named_client(harness: &Harness, name: &str) -> Client {
    let config = config_as(&harness.kubeconfig, CONTROLLER_TOKEN).await;
    let value = http::HeaderValue::from_str(name).expect("a header value");
    let name_it = tower::util::MapRequestLayer::new(move |mut request: http::Request<_>| {
        request.headers_mut().insert(CLIENT_HEADER, value.clone());
        request
    });
    kube::client::ClientBuilder::try_from(config)
        .expect("client builds")
        .with_layer(&name_it)
        .build()
}

/// The daemon launching into `cloud` with the reconcilers' timings `timings`.
pub async fn start_daemon_with_timings(
    harness: &Harness,
    settings: ValidSettings,
    identity: &str,
    cloud: Cloud,
    timings: Timings,
) -> Daemon {
    Daemon::start_with_timings(
        settings,
        Environment {
            client: harness.controller.clone(),
            leader_client: harness.controller.clone(),
            namespace: CONTROLLER_NAMESPACE.into(),
            identity: identity.into(),
            leader_timing: FAST_LEASE,
            bind: Ipv4Addr::LOCALHOST,
            cloud: Some(cloud),
        },
        timings,
    )
    .await
    .expect("daemon starts")
}

/// Timings for tests: upstream's TTLs, with requeues and backoff in milliseconds.
pub fn fast_timings() -> Timings {
    Timings {
        lifecycle: LifecycleConfig {
            resync_period: Duration::from_secs(2),
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
            ..LifecycleConfig::default()
        },
        termination: TerminationConfig {
            resync_period: Duration::from_secs(2),
            drain_requeue: Duration::from_millis(50),
            instance_requeue: Duration::from_millis(50),
            eviction_timeout: Duration::from_millis(300),
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
        },
        ..Timings::default()
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
    judge_unschedulable(cluster, name, "0/0 nodes are available")
}

/// Writes the kube-scheduler's `Unschedulable` verdict on pod `name`, with `message`, as
/// kube-scheduler writes it: a strategic merge of its one condition, which leaves the pod's
/// other conditions (kerf's nomination among them) as they are.
pub fn judge_unschedulable(cluster: &Cluster, name: &str, message: &str) -> Value {
    cluster
        .patch_status(
            "v1",
            "pods",
            Some("default"),
            name,
            PatchKind::Strategic,
            &json!({"status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message
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

// ---- Provisioning fixtures: a simulated region, objects built from defaults plus overrides,
// ---- and what one uninterrupted solve would create.

/// The region every provisioning test launches into.
pub const REGION: &str = "us-east-1";

/// A simulated region (EC2 answering with `ec2`) and the cloud the daemon launches into.
pub fn simulated_cloud_with(ec2: Ec2Config) -> (Arc<SimulatedCloudProvider>, Cloud) {
    let provider = Arc::new(
        SimulatedCloudProvider::for_region(REGION, ec2, SimulatedCloudProviderConfig::default())
            .expect("simulated region"),
    );
    let cloud = Cloud {
        provider: provider.clone(),
        catalog: Catalog::embedded(REGION).expect("embedded region"),
        offerings: None,
    };
    (provider, cloud)
}

/// Launches that do not report within a test: every NodeClaim stays in flight, without a
/// machine or status.
pub fn stalled_launches() -> Ec2Config {
    Ec2Config {
        launch_latency: Duration::from_secs(3600),
        ..Ec2Config::instant(REGION)
    }
}

/// Simulated kubelets for `provider`'s machines and a kube-scheduler, both with millisecond
/// delays, against the emulator `harness` serves.
pub fn node_simulators(
    harness: &Harness,
    provider: Arc<SimulatedCloudProvider>,
) -> (KubeletHandle, SchedulerHandle) {
    node_simulators_with(harness, provider, KubeletConfig::fast())
}

/// [`node_simulators`] with kubelets of `kubelets`' timings.
pub fn node_simulators_with(
    harness: &Harness,
    provider: Arc<SimulatedCloudProvider>,
    kubelets: KubeletConfig,
) -> (KubeletHandle, SchedulerHandle) {
    let kubelets = kubelet::start(harness.client.clone(), provider, kubelets);
    let scheduler = scheduler::start(
        harness.client.clone(),
        SchedulerConfig {
            interval: Duration::from_millis(50),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            ..SchedulerConfig::default()
        },
    );
    (kubelets, scheduler)
}

/// A simulated region whose launches complete at once.
pub fn simulated_cloud() -> (Arc<SimulatedCloudProvider>, Cloud) {
    simulated_cloud_with(Ec2Config::instant(REGION))
}

/// Settings of a daemon that provisions quickly: a short batching window plus `extra`.
pub fn quick_settings(extra: &[&str]) -> ValidSettings {
    let mut argv = vec![
        "--batch-idle-duration",
        "200ms",
        "--batch-max-duration",
        "2s",
    ];
    argv.extend_from_slice(extra);
    settings(&argv)
}

/// A lone daemon (no leader election) launching into `cloud`, once its cluster state synced.
pub async fn start_provisioner(harness: &Harness, cloud: Cloud) -> Daemon {
    start_provisioner_on(harness.controller.clone(), cloud).await
}

/// [`start_provisioner`], every request of the daemon sent through `client`.
pub async fn start_provisioner_on(client: Client, cloud: Cloud) -> Daemon {
    let settings = quick_settings(&["--disable-leader-election", "true"]);
    let daemon = start_daemon_on(client, settings, "solo", Some(cloud)).await;
    tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
        .await
        .expect("cluster state syncs");
    daemon
}

/// [`start_provisioner_on`] with `extra` settings (feature gates, say) and the reconcilers'
/// `timings`.
pub async fn start_provisioner_with(
    client: Client,
    cloud: Cloud,
    extra: &[&str],
    timings: Timings,
) -> Daemon {
    let mut argv = vec!["--disable-leader-election", "true"];
    argv.extend_from_slice(extra);
    let daemon = Daemon::start_with_timings(
        quick_settings(&argv),
        Environment {
            client: client.clone(),
            leader_client: client,
            namespace: CONTROLLER_NAMESPACE.into(),
            identity: "solo".into(),
            leader_timing: FAST_LEASE,
            bind: Ipv4Addr::LOCALHOST,
            cloud: Some(cloud),
        },
        timings,
    )
    .await
    .expect("daemon starts");
    tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
        .await
        .expect("cluster state syncs");
    daemon
}

/// The values a NodeClaim's `In` requirement on `key` allows.
pub fn requirement_values(claim: &NodeClaim, key: &str) -> Vec<String> {
    claim
        .requirements()
        .iter()
        .filter(|r| r.key == key && r.operator == kerf::api::Operator::In)
        .flat_map(|r| r.values.clone())
        .collect()
}

/// The NodeClaims not being deleted.
pub fn live_nodeclaims(cluster: &Cluster) -> Vec<Value> {
    cluster
        .list("karpenter.sh/v1", "nodeclaims", None, "")
        .expect("nodeclaims")
        .into_iter()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// `base` with `overrides` applied as a JSON merge patch (RFC 7386): objects merge key by
/// key, `null` removes a key, anything else (arrays included) replaces.
pub fn merged(mut base: Value, overrides: Value) -> Value {
    merge_into(&mut base, overrides);
    base
}

fn merge_into(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    base.remove(&key);
                } else {
                    merge_into(base.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (base, patch) => *base = patch,
    }
}

/// [`nodepool`] allowing both architectures and capacity types, with `overrides` merged in.
pub fn nodepool_with(name: &str, overrides: Value) -> Value {
    let open = json!({"spec": {"template": {"spec": {"requirements": [
        {"key": labels::ARCH, "operator": "In", "values": ["amd64", "arm64"]},
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}
    ]}}}});
    merged(merged(nodepool(name), open), overrides)
}

pub fn create_nodepool(cluster: &Cluster, pool: Value) -> Value {
    cluster
        .create("karpenter.sh/v1", "nodepools", pool)
        .expect("nodepool created")
}

/// A pod spec of one container requesting `cpu` and `memory`, with `overrides` merged in.
pub fn pod_spec(cpu: &str, memory: &str, overrides: Value) -> Value {
    merged(
        json!({"containers": [{"name": "app", "image": "app",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}),
        overrides,
    )
}

/// Creates pod `name` in `default` with `labels` and `spec`; the kube-scheduler has not
/// judged it yet, so it is not provisionable.
pub fn create_pod_with(cluster: &Cluster, name: &str, labels: Value, spec: Value) -> Value {
    cluster
        .create(
            "v1",
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": labels},
                "spec": spec}),
        )
        .expect("pod created")
}

/// Creates pod `name` in `default` with `labels` and `spec`, marked unschedulable.
pub fn create_pending_pod(cluster: &Cluster, name: &str, labels: Value, spec: Value) -> Value {
    create_pod_with(cluster, name, labels, spec);
    mark_unschedulable(cluster, name)
}

/// Creates Deployment `name` in `default`: `replicas` pods labelled `app: name` with `spec`.
pub fn create_deployment(cluster: &Cluster, name: &str, replicas: u32, spec: Value) -> Value {
    cluster
        .create(
            "apps/v1",
            "deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}),
        )
        .expect("deployment created")
}

/// Waits for the `replicas` pods of Deployment `app` to exist; returns their names.
pub async fn replica_pods(cluster: &Cluster, app: &str, replicas: usize) -> Vec<String> {
    let selector = format!("app={app}");
    let list = || {
        cluster
            .list("v1", "pods", Some("default"), &selector)
            .expect("pods list")
    };
    eventually(&format!("{replicas} pods of {app}"), || {
        list().len() == replicas
    })
    .await;
    list()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// Every NodeClaim in the cluster.
pub async fn nodeclaims(client: &Client) -> Vec<NodeClaim> {
    Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodeclaims list")
        .items
}

/// Waits until `leader` reads `leads` (a replica took or lost the Lease).
pub async fn until_leading(leader: &mut watch::Receiver<bool>, leads: bool, what: &str) {
    tokio::time::timeout(PATIENCE, leader.wait_for(|l| *l == leads))
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
        .expect("election running");
}

/// Waits for the first round published after the current one that satisfies `done`.
pub async fn round_where(
    rounds: &mut watch::Receiver<Option<Round>>,
    what: &str,
    done: impl FnMut(&Round) -> bool,
) -> Round {
    let mut done = done;
    tokio::time::timeout(
        PATIENCE,
        rounds.wait_for(|r| r.as_ref().is_some_and(&mut done)),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for a round: {what}"))
    .expect("provisioner alive")
    .clone()
    .expect("a round")
}

/// What one uninterrupted solve over the cluster's pending pods and NodePools creates, with
/// nothing in flight: the plan `kerf plan` would print for the same objects.
pub fn one_solve(cluster: &Cluster, cloud: &Cloud) -> SchedulingResult {
    fn read<K: serde::de::DeserializeOwned>(objects: Vec<Value>) -> Vec<K> {
        objects
            .into_iter()
            .map(|o| serde_json::from_value(o).expect("object reads as its kind"))
            .collect()
    }
    let pods: Vec<Pod> = read(cluster.list("v1", "pods", None, "").expect("pods"));
    let inventory = Inventory {
        pods: pods
            .into_iter()
            .filter(kerf_actors::state::is_provisionable)
            .map(|pod| Arc::new(pod.into()))
            .collect(),
        node_pools: read(
            cluster
                .list("karpenter.sh/v1", "nodepools", None, "")
                .expect("nodepools"),
        ),
        ..Inventory::default()
    };
    let snapshot = snapshot::build(&inventory, &cloud.catalog, ControllerSettings::default())
        .expect("snapshot builds");
    let mut input = snapshot.input;
    input.options.max_instance_types = MAX_INSTANCE_TYPES;
    scheduling::solve(&input).expect("solves")
}

/// How many pods the NodeClaims were sized for: the sum of their `pods` requests.
pub fn pods_covered(claims: &[NodeClaim]) -> i64 {
    claims
        .iter()
        .filter_map(|c| c.resource_requests()?.get("pods"))
        .map(|q| {
            kerf::resources::Quantity::parse(&q.0)
                .expect("pods quantity")
                .value()
        })
        .sum()
}

/// The most cpu (in millicores) a NodeClaim may launch with: the largest capacity among its
/// instance types, which is what its NodePool's limits are charged.
pub fn largest_cpu_milli(claim: &NodeClaim, catalog: &Catalog) -> i64 {
    let settings = kerf::catalog::AllocatableSettings::default();
    claim
        .requirements()
        .iter()
        .filter(|r| r.key == labels::INSTANCE_TYPE)
        .flat_map(|r| r.values.iter())
        .map(|name| {
            catalog
                .instance_type(name, &settings)
                .unwrap_or_else(|| panic!("unknown instance type {name}"))
                .capacity
                .cpu()
                .milli_value()
        })
        .max()
        .expect("a NodeClaim names its instance types")
}

/// Creates `count` identical pending pods `{prefix}-{i}` requesting `cpu` and `memory`.
pub fn create_pending_pods(cluster: &Cluster, prefix: &str, count: usize, cpu: &str, memory: &str) {
    for i in 0..count {
        create_pending_pod(
            cluster,
            &format!("{prefix}-{i}"),
            json!({"app": prefix}),
            pod_spec(cpu, memory, json!({})),
        );
    }
}

/// Pods of the two-batch scenarios: identical, so how they pack does not depend on order.
pub const BATCH_POD_CPU: &str = "1";
pub const BATCH_POD_MEMORY: &str = "1Gi";

/// The NodeClaims one lone controller, never interrupted, creates for `first` pending pods
/// and then `second` more while the first batch's NodeClaims are still in flight: the
/// reference the restart and failover scenarios must reproduce.
pub async fn uninterrupted_two_batches(first: usize, second: usize) -> Vec<NodeClaim> {
    let h = start_cluster().await;
    let cluster = h.cluster();
    create_nodepool(&cluster, nodepool_with("default", json!({})));
    let (_provider, cloud) = simulated_cloud_with(stalled_launches());
    let daemon = start_provisioner(&h, cloud).await;
    let mut rounds = daemon.rounds.clone();
    create_pending_pods(&cluster, "first", first, BATCH_POD_CPU, BATCH_POD_MEMORY);
    round_where(&mut rounds, "the first batch", |r| r.pending.len() == first).await;
    create_pending_pods(&cluster, "second", second, BATCH_POD_CPU, BATCH_POD_MEMORY);
    round_where(&mut rounds, "the second batch", |r| {
        r.pending.len() == first + second
    })
    .await;
    let claims = nodeclaims(&h.client).await;
    daemon.stop_within(STALLED_DRAIN).await;
    h.stop().await;
    claims
}

/// The round's problems besides the note that no EC2NodeClass is in the cluster.
pub fn real_problems(round: &Round) -> Vec<&String> {
    round
        .problems
        .iter()
        .filter(|p| !p.contains("EC2NodeClass default is not in the input"))
        .collect()
}

/// Events about the object `name` with `reason`, in any namespace.
pub fn events_about(cluster: &Cluster, name: &str, reason: &str) -> Vec<Value> {
    cluster
        .list("v1", "events", None, "")
        .expect("events list")
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .collect()
}

/// `kerf_actor_restarts_total{actor}` as the process renders it. One recorder serves every
/// daemon of this test binary: compare a value before and after.
pub fn actor_restarts(actor: &str) -> u64 {
    let series = format!(
        "{}{{actor=\"{actor}\"}} ",
        kerf_actors::metrics::ACTOR_RESTARTS
    );
    kerf_actors::metrics::render()
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().expect("a counter value"))
}

/// Waits until `scope` recorded `count` panics of `actor` within its window, and no more.
pub async fn restarted(scope: &Supervision, actor: &str, count: usize) {
    eventually(&format!("{actor} restarted {count} times"), || {
        scope.recent_restarts(actor) >= count
    })
    .await;
    assert_eq!(scope.recent_restarts(actor), count, "{actor}");
}
