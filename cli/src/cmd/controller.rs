//! `kerf controller`: the daemon. Reads upstream's settings from flags and environment,
//! refuses bad ones by name, logs JSON, connects to the cluster in the kubeconfig (or the
//! in-cluster service account) through a client limited to `KUBE_CLIENT_QPS` /
//! `KUBE_CLIENT_BURST` per kind of object, and to AWS (see [`crate::aws`]; with
//! `INTERRUPTION_QUEUE`, its SQS queue feeds the Interruption actor), runs the actors until
//! SIGTERM or Ctrl-C, then stops them: launches in flight finish first, then the leader
//! Lease is released. An actor past its restart budget stops it the same way, and the
//! process exits 1. [`INJECT_FAULTS`] is a test hook that makes actors panic on purpose.

use std::net::Ipv4Addr;
use std::process::ExitCode;

use anyhow::Context as _;
use kerf_actors::instance_health;
use kerf_actors::leader::Timing;
use kerf_actors::state::ClusterState;
use kerf_actors::{Daemon, Environment, Settings, ValidSettings};

use super::simulate::StopSignal;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    settings: Settings,
}

pub fn run(args: Args) -> ExitCode {
    let settings = match args.settings.validate() {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("kerf controller: invalid settings: {err}");
            return ExitCode::FAILURE;
        }
    };
    kerf_actors::logging::init(settings.log_level);
    kerf_actors::retired::warn_retired_settings();
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("the tokio runtime builds with default settings")
    });
    match system.block_on(serve(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = format!("{err:#}"), "controller stopped");
            ExitCode::FAILURE
        }
    }
}

/// Test hook: `name=count[,name=count…]` arms each named actor or loop
/// (`kerf_actors::supervisor::{FAULT_ACTORS, LOOP_FAULTS}`) to panic on its next `count`
/// messages (a loop: where it waits), as `kerf simulate`'s `actor-panic` fault does, so the
/// binary's tests can show a restart, and an exhausted restart budget's exit, end to end.
/// Unset in any deployment; an unknown name stops start-up.
pub const INJECT_FAULTS: &str = "KERF_INJECT_FAULTS";

/// Arms the faults `spec` ([`INJECT_FAULTS`]) names in the process's supervision scope.
fn inject_faults(spec: &str) -> anyhow::Result<()> {
    let scope = kerf_actors::supervisor::Supervision::current();
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (actor, count) = item
            .split_once('=')
            .with_context(|| format!("{INJECT_FAULTS}: {item:?} is not name=count"))?;
        let count: u32 = count
            .trim()
            .parse()
            .with_context(|| format!("{INJECT_FAULTS}: {item:?} has no count"))?;
        scope
            .faults()
            .arm(actor.trim(), count)
            .with_context(|| INJECT_FAULTS.to_owned())?;
        tracing::warn!(
            actor = actor.trim(),
            count,
            "fault injected: the actor panics on purpose"
        );
    }
    Ok(())
}

async fn serve(settings: ValidSettings) -> anyhow::Result<()> {
    // Before anything starts: until SIGTERM is taken over, it ends the process at once (its
    // default action), and the leader Lease is left to expire instead of being released.
    let stop = StopSignal::install().context("installing the signal handlers")?;
    if let Ok(spec) = std::env::var(INJECT_FAULTS) {
        inject_faults(&spec)?;
    }
    let config = kube::Config::infer()
        .await
        .context("loading kubeconfig or in-cluster configuration")?;
    // The chart sets SYSTEM_NAMESPACE from the downward API, as upstream's does.
    let namespace = std::env::var("SYSTEM_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kerf_actors::client::build(
        config.clone(),
        settings.kube_client_qps,
        settings.kube_client_burst,
    )
    .context("building the Kubernetes client")?;
    let leader_client =
        kube::Client::try_from(config.clone()).context("building the leader election client")?;
    let node_repair = settings.feature_gates.node_repair;
    let (state, writers) = ClusterState::new();
    let aws = crate::aws::connect(&settings, &client, &config, state.clone()).await?;
    let version_client = client.clone();
    let mut daemon = Daemon::start_with_state(
        settings,
        Environment {
            client,
            leader_client,
            namespace,
            identity: identity(),
            leader_timing: Timing::default(),
            bind: Ipv4Addr::UNSPECIFIED,
            cloud: Some(aws.cloud.clone()),
        },
        (state, writers),
    )
    .await
    .context("starting the controller")?;
    if let Some(queue) = aws.interruption_queue.clone() {
        daemon.watch_interruptions(queue);
    }
    daemon.watch_instance_health(aws.instance_status.clone(), instance_health::PERIOD);
    if node_repair {
        daemon.repair_nodes();
    }
    let upkeep = aws.start_upkeep(version_client, daemon.leader.clone());
    // An actor past its restart budget fails /healthz; the process also exits non-zero at
    // once, so Kubernetes restarts the pod even without a liveness probe.
    let mut unhealthy = daemon.unhealthy();
    let exhausted = tokio::select! {
        () = stop.wait() => None,
        exhausted = async {
            match unhealthy.wait_for(Option::is_some).await {
                Ok(exhausted) => exhausted.clone(),
                // The daemon holds the sender; without it there is nothing to wait for.
                Err(_) => std::future::pending().await,
            }
        } => exhausted,
    };
    tracing::info!("stopping controller");
    daemon.stop().await;
    upkeep.iter().for_each(tokio::task::JoinHandle::abort);
    match exhausted {
        Some(exhausted) => anyhow::bail!("restart budget exhausted: {exhausted}"),
        None => Ok(()),
    }
}

/// This replica's leader election identity: its pod (host) name, made unique per process.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "kerf".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{:x}{nanos:08x}", std::process::id())
}
