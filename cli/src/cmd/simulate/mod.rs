//! `kerf simulate`: the whole system on one machine with nothing to set up. Starts the
//! Kubernetes API emulator, simulated EC2, kubelets and kube-scheduler in this process,
//! applies kerf's CRDs, an EC2NodeClass, NodePools and a workload (built-in defaults or the
//! user's files), runs the real controller against the emulator over HTTP, shows progress,
//! and ends with a summary of what happened. Exits 0 when every pod that can fit is bound
//! (pods the controller reports it cannot place do not count), 1 when `--duration` runs out
//! first or the input is bad, 130 after Ctrl-C or SIGTERM, which end the run at once with a
//! summary of what happened until then. The harness is the `kerf-simulation` crate; this
//! module parses the arguments, owns the process (runtime, signals, exit codes) and prints.

mod replay;
mod scenario;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use kerf_simulation::ice::IceTarget;
use kerf_simulation::summary::{self, Outcome};
use kerf_simulation::world::Pace;
use kerf_simulation::{api_only, defaults, inputs, interrupt, reservations, run, scale_down};
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::go_duration;
use super::plan::Format;
use crate::aws::cluster;

#[derive(clap::Args)]
pub struct Args {
    /// Pods in the default workload (six Deployments of mixed shapes).
    #[arg(long, default_value_t = defaults::DEFAULT_PODS, conflicts_with = "workload")]
    pub pods: usize,
    /// NodePools (and EC2NodeClasses) to use instead of the default NodePool; repeatable.
    #[arg(long = "nodepools", value_name = "FILE")]
    pub nodepools: Vec<PathBuf>,
    /// Manifests to apply instead of the default workload (Pods, Deployments, StatefulSets,
    /// Jobs, DaemonSets, PDBs, ...); a file or directory, repeatable.
    #[arg(long = "workload", value_name = "FILE")]
    pub workload: Vec<PathBuf>,
    /// Capacity reservations the simulated region holds: a YAML list of {id, instanceType,
    /// zone, count, type: default|capacity-block, interruptible, endsIn, tags}, selected by
    /// the EC2NodeClass's capacityReservationSelectorTerms.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["scenario", "replay"])]
    pub reservations: Option<PathBuf>,
    /// Make a capacity pool answer InsufficientInstanceCapacity: TYPE:ZONE[:spot|on-demand],
    /// `*` for any type or zone; repeatable.
    #[arg(long = "ice", value_name = "TYPE:ZONE")]
    pub ice: Vec<IceTarget>,
    /// Once every pod that can fit is bound, send spot interruption warnings to this fraction
    /// (0 < FRACTION ≤ 1) of the running spot nodes; EC2 reclaims them two minutes later.
    #[arg(long, value_name = "FRACTION", value_parser = interrupt::parse_fraction)]
    pub interrupt_spot: Option<f64>,
    /// After the scale-out, scale every Deployment down by FRACTION (0.5: to half) and run
    /// until disruption settles; the summary gains a disruption section.
    #[arg(long, value_name = "FRACTION", value_parser = scale_down::fraction)]
    pub scale_down: Option<f64>,
    /// Longest the run may take before it gives up (Go duration: 90s, 10m).
    #[arg(long, default_value = "10m", value_parser = go_duration)]
    pub duration: Duration,
    /// Write a kubeconfig for the simulated cluster to PATH and keep it up after the
    /// summary, until Ctrl-C, for kubectl.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Summary format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Controller logs (upstream's JSON lines) on standard error at this level; off when absent.
    #[arg(long, value_name = "LEVEL", value_parser = ["debug", "info", "warn", "error"])]
    pub log_level: Option<String>,
    /// Serve only the API emulator with kerf's CRDs (no controller, EC2, kubelets or
    /// scheduler) until Ctrl-C, for an external `kerf controller`; needs --kubeconfig-out.
    #[arg(long, requires = "kubeconfig_out")]
    pub api_only: bool,
    /// After the scale-out, publish a newer AMI behind the default EC2NodeClass's alias and
    /// report the rollout (nodes drifted and replaced, pods left without a node).
    #[arg(long)]
    pub drift: bool,
    /// Record the run (pods, nodes, NodeClaims, cost, API and cloud calls, once a second)
    /// and write `report.json` and `report.html` into DIR.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Millisecond delays and short batching windows instead of a real cluster's pace
    /// (instances boot, kubelets report and batches close at once): quick checks and tests;
    /// latencies it reports are not a real cluster's.
    #[arg(long)]
    pub fast: bool,
    /// Run a scenario file: workload, controller replicas, scripted steps and faults, and
    /// expectations judged at the end (exit 1 naming each that failed).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["workload", "nodepools", "ice", "interrupt_spot", "scale_down", "drift", "api_only"])]
    pub scenario: Option<PathBuf>,
    /// Replay a cluster's history: a replay log from `kerf record` or upstream kubereplay
    /// (Deployments created, scaled and deleted, Jobs run), with the log's NodePools when it
    /// has them (else --nodepools or the default), and report its cost, node-hours,
    /// pending→bound times and NodeClaims over the whole log.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["scenario", "workload", "pods", "ice", "interrupt_spot", "scale_down", "drift", "api_only", "kubeconfig_out"])]
    pub replay: Option<PathBuf>,
    /// Replay seconds per wall second (60: an hour of the log in a minute).
    #[arg(long, value_name = "N", default_value = "60", requires = "replay", value_parser = replay::speed)]
    pub speed: f64,
    /// Replay the log a second time with these NodePools (and EC2NodeClasses) and report
    /// both and their difference; repeatable.
    #[arg(long, value_name = "FILE", requires = "replay")]
    pub compare: Vec<PathBuf>,
    /// Replay the log a second time with this controller setting (an environment variable
    /// `kerf controller` reads, e.g. BATCH_MAX_DURATION=30s); repeatable.
    #[arg(long, value_name = "KEY=VALUE", requires = "replay", value_parser = replay::key_value)]
    pub compare_env: Vec<String>,
    /// Sample the controller's allocations (one per 256 KiB allocated, with its backtrace)
    /// and write to FILE the stacks that held its heap at its sampled peak and at the end:
    /// a developer's tool for what the controller keeps; the run is slower.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["scenario", "replay", "api_only"])]
    pub heap_profile: Option<PathBuf>,
}

/// Bytes allocated between two samples of `--heap-profile`: a few hundred samples for a
/// 100 MB heap, each backtrace costing tens of microseconds.
const HEAP_PROFILE_INTERVAL: usize = 256 * 1024;

fn pace(fast: bool) -> Pace {
    if fast { Pace::Instant } else { Pace::Brisk }
}

pub fn run(args: Args) -> ExitCode {
    if args.api_only {
        return serve_api_only(&args);
    }
    if let Some(file) = &args.replay {
        if let Some(level) = &args.log_level {
            init_logging(level);
        }
        return replay::run(&replay::Args {
            file: file.clone(),
            speed: args.speed,
            nodepools: args.nodepools.clone(),
            compare: args.compare.clone(),
            compare_env: args.compare_env.clone(),
            pace: pace(args.fast),
            output: args.output,
            report: args.report.clone(),
        });
    }
    if let Some(file) = &args.scenario {
        if let Some(level) = &args.log_level {
            init_logging(level);
        }
        return scenario::run(&scenario::Config {
            file: file.clone(),
            pace: pace(args.fast),
            output: args.output,
            report: args.report.clone(),
        });
    }
    let sources = inputs::Sources {
        pods: args.pods,
        nodepools: args.nodepools.clone(),
        workload: args.workload.clone(),
    };
    let inputs = match inputs::read(&sources) {
        Ok(inputs) => inputs,
        Err(errors) => {
            for error in errors {
                eprintln!("{error}");
            }
            return ExitCode::FAILURE;
        }
    };
    let reservations = match args.reservations.as_deref().map(reservations::read) {
        None => Vec::new(),
        Some(Ok(reservations)) => reservations,
        Some(Err(error)) => {
            eprintln!("--reservations {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(level) = &args.log_level {
        init_logging(level);
    }
    let keep_serving = args.kubeconfig_out.is_some();
    let output = args.output;
    let heap_profile = args.heap_profile.clone();
    if heap_profile.is_some() {
        kerf_heap::profile::start(kerf_heap::Owner::CONTROLLER, HEAP_PROFILE_INTERVAL);
    }
    let (stopped, stop) = tokio::sync::watch::channel(false);
    let config = run::Config {
        inputs,
        ice: args.ice,
        interrupt_spot: args.interrupt_spot,
        reservations,
        scale_down: args.scale_down,
        duration: args.duration,
        kubeconfig_out: args.kubeconfig_out,
        pace: pace(args.fast),
        startup_reads,
        show_progress: output == Format::Table,
        drift: args.drift,
        report: args.report,
        stop: stop.clone(),
    };
    // Everything on this runtime not started as one part's (the emulator, kubelets, scheduler,
    // EC2, observers: see `memory`) counts as simulate's own.
    kerf_heap::set_current(Some(kerf_heap::Owner::SIMULATE));
    // The whole simulated cluster shares this process: keep its resident set near its heap.
    kerf_heap::prefer_footprint();
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .on_thread_start(|| kerf_heap::set_current(Some(kerf_heap::Owner::SIMULATE)))
            .build()
            .expect("the tokio runtime builds with default settings")
    });
    let ran = system.block_on(async move {
        // Installed before anything starts: a signal at any moment ends the run with a
        // summary of what happened so far (and stops a cluster kept up after it), never
        // kills the process mid-way.
        let signal = StopSignal::install()?;
        tokio::spawn(async move {
            signal.wait().await;
            let _ = stopped.send(true);
        });
        let finished = run::simulate(config).await?;
        if let Some(path) = &heap_profile {
            write_heap_profile(path)?;
        }
        print(&finished.summary, output);
        if keep_serving && !*stop.borrow() {
            eprintln!("the simulated cluster keeps running; Ctrl-C stops it");
            let mut stop = stop;
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
        let summary = finished.summary.clone();
        finished.stop().await;
        anyhow::Ok(summary)
    });
    let summary = match ran {
        Ok(summary) => summary,
        Err(error) => {
            eprintln!("kerf simulate: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    match summary.outcome {
        Outcome::Complete => ExitCode::SUCCESS,
        Outcome::Interrupted => {
            eprintln!("kerf simulate: stopped by a signal before the run finished");
            // 128 + SIGINT, as shells report a command ended by Ctrl-C.
            ExitCode::from(130)
        }
        Outcome::TimedOut => {
            eprintln!(
                "kerf simulate: {} pods still pending after {:?} that the controller did not report unschedulable",
                summary.pods.pending - summary.pods.unschedulable.len(),
                args.duration
            );
            ExitCode::FAILURE
        }
    }
}

/// Writes the controller's heap profile (`--heap-profile`) to `path`.
fn write_heap_profile(path: &std::path::Path) -> anyhow::Result<()> {
    let text = kerf_heap::profile::report(25, "kerf")
        .unwrap_or_else(|| "no heap profile was taken\n".to_owned());
    std::fs::write(path, text)
        .with_context(|| format!("--heap-profile: writing {}", path.display()))
}

fn serve_api_only(args: &Args) -> ExitCode {
    let Some(path) = args.kubeconfig_out.clone() else {
        eprintln!("kerf simulate: --api-only needs --kubeconfig-out PATH");
        return ExitCode::FAILURE;
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("kerf simulate: starting the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async {
        // Installed before the emulator starts: a signal sent as soon as its ready line is
        // read must stop it, not kill the process.
        let stop = StopSignal::install().context("installing the signal handlers")?;
        api_only::serve(&path, stop.wait()).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kerf simulate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `kerf controller`'s start-up reads ([`cluster::discover`]), made by each simulated
/// controller replica with its own client; what they find is logged, as `kerf controller`
/// logs it.
fn startup_reads(
    client: kube::Client,
    config: kube::Config,
) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
    Box::pin(async move {
        let configured = cluster::Configured {
            cluster_endpoint: None,
            ca_bundle: None,
            kube_config: &config,
        };
        let facts = cluster::discover(&client, &configured)
            .await
            .map_err(|e| format!("{e:#}"))?;
        tracing::info!(
            kubernetes_version = facts.kubernetes_version,
            kube_dns_ip = facts.kube_dns_ip.as_deref().unwrap_or("unknown"),
            cluster_cidr = facts.cluster_cidr.as_deref().unwrap_or("unknown"),
            "discovered cluster"
        );
        Ok(())
    })
}

/// Ctrl-C or SIGTERM, caught from the moment it is installed.
pub struct StopSignal {
    terminate: Signal,
    interrupt: Signal,
}

impl StopSignal {
    /// Takes over SIGTERM and SIGINT from their default action (ending the process).
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    pub async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

fn print(summary: &summary::Summary, format: Format) {
    match format {
        Format::Json => match serde_json::to_string_pretty(summary) {
            Ok(json) => println!("{json}"),
            Err(error) => eprintln!("kerf simulate: cannot encode the summary as JSON: {error}"),
        },
        Format::Table => print!("{}", summary.to_table()),
    }
}

/// The controller's JSON logs, on standard error so standard output keeps only the summary.
fn init_logging(level: &str) {
    let filter =
        tracing_subscriber::EnvFilter::new(format!("{level},kube=warn,hyper=warn,tower=warn"));
    let _already_installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .event_format(kerf_actors::logging::UpstreamJson)
        .with_writer(std::io::stderr)
        .try_init();
}
