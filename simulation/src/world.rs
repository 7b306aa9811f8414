//! The simulated world and the real controller in one process: the Kubernetes API emulator
//! with kerf's CRDs, kube clients talking to it over HTTP, the simulated EC2 region (with
//! any injected insufficient capacity, and EventBridge rules feeding an in-memory
//! interruption queue), the simulated kubelets and kube-scheduler, and the controller daemon
//! launching into that EC2 and reading that queue — started in dependency order and stopped in
//! reverse. Must run inside an actix `System` on a multi-threaded tokio runtime.

use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kerf::catalog::{AllocatableSettings, Catalog};
use kerf_actors::leader::Timing;
use kerf_actors::mailbox::MailboxDepth;
use kerf_actors::offering_cache::{
    OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache, UNAVAILABLE_OFFERINGS_TTL,
};
use kerf_actors::{Cloud, Daemon, Environment, Settings, Timings};
use kerf_loadtest::apiserver::faults::CLIENT_HEADER;
use kerf_loadtest::apiserver::{ApiServer, Cluster, RunningServer, ServerConfig};
use kerf_loadtest::ec2::{
    Ec2Config, MemoryQueue, OfferingKey, SimulatedCloudProvider, SimulatedCloudProviderConfig,
    catalog_offerings, forward_interruptions,
};
use kerf_loadtest::kubelet::{self, KubeletConfig, KubeletHandle};
use kerf_loadtest::scheduler::{self, SchedulerConfig, SchedulerHandle, SchedulerStats};
use kube::Client;

use super::controller_threads::{Controller, ControllerThreads};
use super::defaults::{CLUSTER_NAME, REGION};
use super::figures::ClientBudget;
use super::ice::{self, IceTarget};
use super::install;
use super::outside;

pub const NODEPOOL_CRD: &str = include_str!("../../deploy/crds/karpenter.sh_nodepools.yaml");
pub const NODECLAIM_CRD: &str = include_str!("../../deploy/crds/karpenter.sh_nodeclaims.yaml");
pub const NODECLASS_CRD: &str =
    include_str!("../../deploy/crds/karpenter.k8s.aws_ec2nodeclasses.yaml");
pub const NODEOVERLAY_CRD: &str = include_str!("../../deploy/crds/karpenter.sh_nodeoverlays.yaml");
pub const CAPACITYBUFFER_CRD: &str =
    include_str!("../../deploy/crds/autoscaling.x-k8s.io_capacitybuffers.yaml");

/// Most changes the emulator keeps per resource for watches to resume from (besides its
/// 75 s window). Watchers here keep up within milliseconds, so a tenth of the emulator's
/// default is plenty, and the default's retained history would dwarf everything else in a
/// large run's process.
const HISTORY_CAPACITY: usize = 20_000;

/// The simulated region's interruption queue (`INTERRUPTION_QUEUE`).
const INTERRUPTION_QUEUE: &str = "kerf-simulate-interruptions";

/// `kerf controller`'s start-up reads (the facts new nodes need: the API server's version,
/// the `kube-dns` and `kubernetes` Services, the `kubernetes` ServiceCIDR), made by each
/// replica with its own client and configuration before its daemon starts, so a simulation
/// makes the requests an installed controller makes under the chart's RBAC. The binary that
/// embeds the simulation passes the controller's own; the error says what could not be read.
pub type StartupReads =
    fn(Client, kube::Config) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// How fast the simulated machines and nodes move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Delays shaped like EC2 and a kubelet's, shortened so a run takes seconds.
    Brisk,
    /// Millisecond delays and short batching windows, for tests.
    Instant,
}

impl Pace {
    fn ec2(self) -> Ec2Config {
        match self {
            Self::Brisk => Ec2Config {
                region: REGION.to_owned(),
                launch_latency: Duration::from_millis(200),
                pending_duration: Duration::from_secs(1),
                shutdown_duration: Duration::from_secs(2),
                interruption_notice: Duration::from_secs(120),
            },
            Self::Instant => Ec2Config::instant(REGION),
        }
    }

    fn kubelet(self) -> KubeletConfig {
        match self {
            Self::Brisk => KubeletConfig {
                boot_delay: Duration::from_secs(2),
                ready_delay: Duration::from_secs(1),
                startup_taint_delay: Duration::from_millis(500),
                pod_start_delay: Duration::from_millis(500),
                shutdown_delay: Duration::from_secs(1),
                detach_delay: Duration::from_secs(2),
                concurrency: 64,
                resync: Duration::from_secs(1),
            },
            Self::Instant => KubeletConfig::fast(),
        }
    }

    fn scheduler(self) -> SchedulerConfig {
        match self {
            Self::Brisk => SchedulerConfig {
                concurrency: 64,
                ..SchedulerConfig::default()
            },
            Self::Instant => SchedulerConfig {
                interval: Duration::from_millis(20),
                initial_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_millis(500),
                ..SchedulerConfig::default()
            },
        }
    }

    /// Leader election's timing: upstream's, or a three-second Lease for tests, so a failover
    /// takes seconds rather than a Lease's fifteen while a leader on a busy machine still
    /// renews in time.
    fn leader_timing(self) -> Timing {
        match self {
            Self::Brisk => Timing::default(),
            Self::Instant => Timing {
                lease_duration: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(2),
                retry_period: Duration::from_millis(250),
            },
        }
    }

    /// Controller flags the pace implies, as flag-value pairs (the environment's settings
    /// override them). The fast pace's batching window is half upstream's: wide enough that a
    /// workload's Deployments, whose pods the emulator's controllers create one ReplicaSet
    /// after another, still land in one batch on a busy 2-core machine, where a narrower
    /// window splits them over two rounds that launch more NodeClaims than one batch needs.
    fn controller_flags(self) -> &'static [&'static str] {
        match self {
            Self::Brisk => &[],
            Self::Instant => &[
                "--batch-idle-duration",
                "500ms",
                "--batch-max-duration",
                "5s",
            ],
        }
    }
}

/// Why the world did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("starting the API emulator: {0}")]
    ApiServer(#[from] kerf_loadtest::apiserver::StartError),
    #[error("installing the {crd} CRD: {error}")]
    Crd {
        crd: &'static str,
        error: Box<kerf_loadtest::apiserver::ApiError>,
    },
    #[error("building a Kubernetes client for the emulator: {0}")]
    Client(String),
    #[error("the embedded catalog: {0}")]
    Catalog(#[from] kerf::catalog::CatalogError),
    #[error(transparent)]
    Ice(#[from] ice::IceError),
    #[error("controller settings: {0}")]
    Settings(String),
    #[error("starting the controller: {0}")]
    Controller(#[from] kerf_actors::StartError),
    #[error("installing the chart's RBAC: {0}")]
    Install(#[from] install::InstallError),
    #[error("the controller's start-up reads: {0}")]
    Discovery(String),
    #[error("starting the controller's threads: {0}")]
    Threads(std::io::Error),
}

/// The running simulated cluster (the controller starts separately, see [`World::start_controller`]).
pub struct World {
    pub server: RunningServer,
    pub provider: Arc<SimulatedCloudProvider>,
    pub catalog: Catalog,
    /// The pools answering with insufficient capacity.
    pub ice: Vec<OfferingKey>,
    /// The region's interruption queue, fed by its EventBridge rules.
    pub interruptions: Arc<MemoryQueue>,
    forwarding: tokio::task::JoinHandle<()>,
    kubelets: KubeletHandle,
    scheduler: SchedulerHandle,
    pace: Pace,
    startup_reads: StartupReads,
}

impl World {
    /// Starts the emulator with kerf's CRDs, the simulated EC2 (with `ice` applied), the
    /// kubelets and the scheduler; each controller replica started in it makes
    /// `startup_reads` first.
    pub async fn start(
        pace: Pace,
        ice: &[IceTarget],
        startup_reads: StartupReads,
    ) -> Result<Self, StartError> {
        let catalog = Catalog::embedded(REGION)?;
        let offerings = catalog_offerings(&catalog.instance_types(&AllocatableSettings::default()));
        let ice = ice::pools(ice, &offerings)?;
        let server = ApiServer::start(ServerConfig {
            history_capacity: HISTORY_CAPACITY,
            ..ServerConfig::default()
        })
        .await?;
        install_crds(&server.cluster())?;
        install::install(&server)?;
        let kubelet_client = client_for(&server, KUBELET_AGENT).await?;
        let scheduler_client = client_for(&server, SCHEDULER_AGENT).await?;
        let provider = Arc::new(SimulatedCloudProvider::for_region(
            REGION,
            pace.ec2(),
            SimulatedCloudProviderConfig {
                cluster_name: CLUSTER_NAME.to_owned(),
                ..SimulatedCloudProviderConfig::default()
            },
        )?);
        for pool in &ice {
            provider.ec2().set_insufficient_capacity(pool.clone(), true);
        }
        let kubelets = kubelet::start(kubelet_client, Arc::clone(&provider), pace.kubelet());
        let scheduler = scheduler::start(scheduler_client, pace.scheduler());
        let interruptions = Arc::new(MemoryQueue::new(INTERRUPTION_QUEUE));
        let forwarding = forward_interruptions(provider.ec2(), Arc::clone(&interruptions));
        Ok(Self {
            server,
            provider,
            interruptions,
            forwarding,
            catalog,
            ice,
            kubelets,
            scheduler,
            pace,
            startup_reads,
        })
    }

    pub fn cluster(&self) -> Cluster {
        self.server.cluster()
    }

    /// The simulated kube-scheduler's running totals.
    pub fn scheduler_stats(&self) -> Arc<SchedulerStats> {
        self.scheduler.shared_stats()
    }

    /// Starts the controller against the emulator over HTTP, launching into the simulated
    /// EC2, and waits until its cluster state has synced. It gets its own client, limited to
    /// `KUBE_CLIENT_QPS`/`KUBE_CLIENT_BURST` as `kerf controller`'s is, authenticated as the
    /// chart's ServiceAccount under the chart's RBAC (`install`); the simulated kubelets
    /// and scheduler stand for the rest of a cluster and are neither limited nor restricted.
    pub async fn start_controller(&self) -> Result<Controller, StartError> {
        self.start_replica(&Replica::alone(&controller_identity()))
            .await
    }

    /// The client budget [`World::start_controller`]'s controller runs with.
    pub fn client_budget(&self) -> Result<ClientBudget, StartError> {
        let settings = controller_settings(self.pace, &Replica::alone(&controller_identity()))?;
        Ok(ClientBudget {
            qps: settings.kube_client_qps,
            burst: settings.kube_client_burst,
        })
    }

    /// [`World::start_controller`] for one replica of several: its requests name it to the
    /// emulator (so a scenario can cut it off as a crash would), and with leader election on
    /// it leads only while it holds the Lease. Each replica runs on threads of its own
    /// (`ControllerThreads`), whose allocations count as the controller's.
    pub async fn start_replica(&self, replica: &Replica) -> Result<Controller, StartError> {
        let settings = controller_settings(self.pace, replica)?;
        let mut config = kube_config(&self.server).await?;
        install::authenticate(&mut config).map_err(|e| StartError::Client(e.to_string()))?;
        let name = http::HeaderValue::from_str(&replica.identity)
            .map_err(|e| StartError::Client(format!("identity {:?}: {e}", replica.identity)))?;
        config
            .headers
            .push((http::HeaderName::from_static(CLIENT_HEADER), name));
        let start = ReplicaStart {
            settings,
            config,
            identity: replica.identity.clone(),
            leader_timing: self.pace.leader_timing(),
            timings: replica.timings.clone(),
            provider: Arc::clone(&self.provider),
            catalog: self.catalog,
            interruptions: Arc::clone(&self.interruptions),
            startup_reads: self.startup_reads,
        };
        let threads = ControllerThreads::start().map_err(StartError::Threads)?;
        match threads.run(move || start.run()).await {
            Ok(Ok(daemon)) => Ok(Controller::new(daemon, threads)),
            Ok(Err(error)) => {
                threads.stop().await;
                Err(error)
            }
            Err(stopped) => Err(StartError::Threads(std::io::Error::other(stopped))),
        }
    }

    /// Stops the simulated components and the emulator.
    pub async fn stop(self) {
        self.forwarding.abort();
        self.kubelets.stop();
        self.scheduler.stop();
        self.server.shutdown().await;
    }
}

/// The name [`World::start_controller`]'s controller gives the emulator: its writes are
/// logged under it.
pub fn controller_identity() -> String {
    format!("kerf-simulate-{}", std::process::id())
}

/// What a replica starts from, moved onto its own threads.
struct ReplicaStart {
    settings: kerf_actors::ValidSettings,
    config: kube::Config,
    identity: String,
    leader_timing: Timing,
    timings: Timings,
    provider: Arc<SimulatedCloudProvider>,
    catalog: Catalog,
    interruptions: Arc<MemoryQueue>,
    startup_reads: StartupReads,
}

impl ReplicaStart {
    /// Builds the replica's clients and starts its daemon (on the controller's threads), then
    /// waits until its cluster state has synced. Each replica is supervised in a scope of its
    /// own: its restart budget and armed faults are its own, as in separate processes.
    async fn run(self) -> Result<Daemon, StartError> {
        kerf_actors::supervisor::Supervision::new()
            .scope(self.start())
            .await
    }

    async fn start(self) -> Result<Daemon, StartError> {
        let Self {
            settings,
            config,
            identity,
            leader_timing,
            timings,
            provider,
            catalog,
            interruptions,
            startup_reads,
        } = self;
        // The region follows the controller's gate, as the AWS provider does.
        provider.set_reserved_capacity(settings.feature_gates.reserved_capacity);
        let leader_client = kube::Client::try_from(config.clone())
            .map_err(|e| StartError::Client(e.to_string()))?;
        let client = kerf_actors::client::build(
            config.clone(),
            settings.kube_client_qps,
            settings.kube_client_burst,
        )
        .map_err(|e| StartError::Client(e.to_string()))?;
        startup_reads(client.clone(), config.clone())
            .await
            .map_err(StartError::Discovery)?;
        // One unavailable-offerings state for the replica and its launches, as the AWS
        // provider shares it: interrupted and refused offerings are left out of launches.
        // Each replica has its own, as each upstream replica has its own cache.
        let offerings = OfferingCache::start(
            UNAVAILABLE_OFFERINGS_TTL,
            MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
        );
        // Its EC2 calls carry its identity, so the region's write log names the replica.
        let provider = Arc::new(
            provider
                .for_replica(Arc::new(offerings.clone()))
                .calling_as(&identity),
        );
        let ec2 = provider.ec2().clone();
        let mut daemon = Daemon::start_with_timings(
            settings,
            Environment {
                client,
                leader_client,
                namespace: install::NAMESPACE.to_owned(),
                identity,
                leader_timing,
                bind: Ipv4Addr::LOCALHOST,
                cloud: Some(Cloud {
                    provider: Arc::new(outside::Cloud::new(provider)),
                    catalog,
                    offerings: Some(offerings),
                }),
            },
            timings,
        )
        .await?;
        daemon.watch_interruptions(Arc::new(outside::Queue(interruptions)));
        daemon.watch_instance_health(
            Arc::new(outside::Statuses(ec2)),
            kerf_actors::instance_health::PERIOD,
        );
        daemon.state.wait_synced().await;
        Ok(daemon)
    }
}

/// Installs kerf's CRDs (the vendored upstream ones) in the emulator.
pub fn install_crds(cluster: &Cluster) -> Result<(), StartError> {
    for (crd, yaml) in [
        ("NodePool", NODEPOOL_CRD),
        ("NodeClaim", NODECLAIM_CRD),
        ("EC2NodeClass", NODECLASS_CRD),
        ("NodeOverlay", NODEOVERLAY_CRD),
        ("CapacityBuffer", CAPACITYBUFFER_CRD),
    ] {
        cluster
            .apply_crd_yaml(yaml)
            .map_err(|error| StartError::Crd {
                crd,
                error: Box::new(error),
            })?;
    }
    Ok(())
}

/// The client configuration a kubeconfig for the emulator gives, sending the controller's
/// User-Agent (a simulated component's client replaces it, see [`client_for`]).
async fn kube_config(server: &RunningServer) -> Result<kube::Config, StartError> {
    let text = kerf_loadtest::apiserver::kubeconfig::render(&server.url());
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)
        .map_err(|e| StartError::Client(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| StartError::Client(e.to_string()))?;
    set_user_agent(&mut config, CONTROLLER_AGENT)?;
    Ok(config)
}

/// The User-Agents sent to the emulator, which records each client's writes in
/// `managedFields` under the agent's name (`kerf`, `kubelet`, `kube-scheduler`) as a real
/// API server does.
const CONTROLLER_AGENT: &str = concat!("kerf/", env!("CARGO_PKG_VERSION"));
const KUBELET_AGENT: &str = "kubelet/v1.33.0 (linux/amd64) kubernetes/kerf-sim";
const SCHEDULER_AGENT: &str = "kube-scheduler/v1.33.0 (linux/amd64) kubernetes/kerf-sim";

fn set_user_agent(config: &mut kube::Config, agent: &str) -> Result<(), StartError> {
    let header = "user-agent"
        .parse()
        .map_err(|e| StartError::Client(format!("{e}")))?;
    let value = agent
        .parse()
        .map_err(|e| StartError::Client(format!("{agent}: {e}")))?;
    config
        .headers
        .retain(|(name, _)| name.as_str() != "user-agent");
    config.headers.push((header, value));
    Ok(())
}

/// An unlimited client for a simulated component, sending `agent` as its User-Agent.
async fn client_for(server: &RunningServer, agent: &str) -> Result<Client, StartError> {
    let mut config = kube_config(server).await?;
    set_user_agent(&mut config, agent)?;
    Client::try_from(config).map_err(|e| StartError::Client(e.to_string()))
}

/// One controller replica to start.
#[derive(Debug, Clone)]
pub struct Replica {
    /// Its Lease holder identity, also the name its requests carry to the emulator.
    pub identity: String,
    /// Settings flags on top of the pace's (a scenario's `controller.env`, as flags).
    pub flags: Vec<String>,
    pub leader_election: bool,
    /// The reconcilers' timings (a replay paces disruption to its speed).
    pub timings: Timings,
}

impl Replica {
    /// The only replica, without leader election.
    pub fn alone(identity: &str) -> Self {
        Self {
            identity: identity.to_owned(),
            flags: Vec::new(),
            leader_election: false,
            timings: Timings::default(),
        }
    }
}

/// The flags and environment the controller's settings are parsed from.
#[derive(Parser)]
pub struct Flags {
    #[command(flatten)]
    pub settings: Settings,
}

/// The settings flag for the environment variable `name` set to `value` (`BATCH_IDLE_DURATION`
/// and `2s` give `--batch-idle-duration=2s`), checked by the controller's own parser and
/// validation; the error says why it is refused.
pub fn setting_flag(name: &str, value: &str) -> Result<String, String> {
    use clap::CommandFactory as _;
    let command = Flags::command();
    let long = command.get_arguments().find_map(|arg| {
        (arg.get_env().and_then(|e| e.to_str()) == Some(name))
            .then(|| arg.get_long())
            .flatten()
    });
    let Some(long) = long else {
        return Err("not a setting the controller reads".to_owned());
    };
    let flag = format!("--{long}={value}");
    Flags::try_parse_from(["kerf", "--cluster-name", CLUSTER_NAME, flag.as_str()])
        .map_err(|e| e.kind().to_string())
        .and_then(|f| f.settings.validate().map(|_| ()).map_err(|e| e.to_string()))
        .map_err(|error| format!("{value:?}: {error}"))?;
    Ok(flag)
}

/// The environment variable of the settings flag `flag` (`--batch-idle-duration`:
/// `BATCH_IDLE_DURATION`).
fn environment_variable(flag: &str) -> Option<std::ffi::OsString> {
    use clap::CommandFactory as _;
    let long = flag.trim_start_matches("--");
    Flags::command()
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))
        .and_then(|arg| arg.get_env())
        .map(ToOwned::to_owned)
}

fn set_in_environment(flag: &str) -> bool {
    environment_variable(flag).is_some_and(|name| std::env::var_os(name).is_some())
}

/// The controller's settings: its defaults, the pace's flags, then the environment
/// (`BATCH_IDLE_DURATION`, ...), then the replica's, endpoints on free ports. A setting in
/// the environment beats the pace's, as a user who sets one expects.
fn controller_settings(
    pace: Pace,
    replica: &Replica,
) -> Result<kerf_actors::ValidSettings, StartError> {
    let mut argv = vec![
        "kerf",
        "--cluster-name",
        CLUSTER_NAME,
        "--metrics-port",
        "0",
        "--health-probe-port",
        "0",
        "--disable-leader-election",
        if replica.leader_election {
            "false"
        } else {
            "true"
        },
    ];
    // The replica's settings and the environment's win over the pace's (clap takes each
    // flag once, and a flag over its environment variable).
    let set_by_replica = |flag: &str| {
        replica
            .flags
            .iter()
            .any(|f| f.split('=').next() == Some(flag))
    };
    for pair in pace.controller_flags().chunks(2) {
        if !set_by_replica(pair[0]) && !set_in_environment(pair[0]) {
            argv.extend_from_slice(pair);
        }
    }
    argv.extend(replica.flags.iter().map(String::as_str));
    Flags::try_parse_from(argv)
        .map_err(|e| StartError::Settings(e.to_string()))?
        .settings
        .validate()
        .map_err(|e| StartError::Settings(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_of_a_pace_yields_to_its_environment_variable() {
        for pace in [Pace::Brisk, Pace::Instant] {
            for pair in pace.controller_flags().chunks(2) {
                assert!(environment_variable(pair[0]).is_some(), "{}", pair[0]);
            }
        }
        assert_eq!(
            environment_variable("--batch-idle-duration").as_deref(),
            Some(std::ffi::OsStr::new("BATCH_IDLE_DURATION"))
        );
        assert_eq!(environment_variable("--no-such-setting"), None);
    }
}
