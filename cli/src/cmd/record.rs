//! `kerf record`: watches a live cluster read-only and writes its history as a replay log for
//! `kerf simulate --replay` (the harness is [`kerf_simulation::record`]). Runs until `--for`
//! expires or Ctrl-C / SIGTERM, then writes what it recorded; exits 0 when the file is
//! written, 1 when the kubeconfig cannot be read or the file cannot be written. Needs only
//! list and watch on Deployments, Jobs, NodePools, EC2NodeClasses and Nodes (the ClusterRole
//! is in the docs: "Try kerf on your cluster's history").

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use kerf_simulation::record::{self, Options};

use super::simulate::StopSignal;

#[derive(clap::Args)]
pub struct Args {
    /// Kubeconfig of the cluster to record (default: $KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Where to write the replay log (JSON).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Stop after this long (Go duration: 30m, 24h); without it, until Ctrl-C.
    #[arg(long = "for", value_name = "DURATION", value_parser = positive_duration)]
    pub duration: Option<Duration>,
    /// How often the cluster's nodes are sampled.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = positive_duration)]
    pub node_sample_every: Duration,
}

/// A Go duration longer than zero.
fn positive_duration(text: &str) -> Result<Duration, String> {
    super::go_duration(text).and_then(|d| {
        if d.is_zero() {
            Err("must be longer than 0s".to_owned())
        } else {
            Ok(d)
        }
    })
}

pub fn run(args: Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("kerf record: starting the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(record(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kerf record: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn record(args: &Args) -> anyhow::Result<()> {
    // Installed first: a signal at any moment ends the recording with a file, never without.
    let signal = StopSignal::install().context("installing the signal handlers")?;
    let (config, cluster) = client_config(args).await?;
    let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
    let options = Options {
        cluster,
        node_sample_every: args.node_sample_every,
    };
    let limit = args.duration;
    let stop = async move {
        match limit {
            Some(limit) => {
                tokio::select! {
                    () = signal.wait() => {}
                    () = tokio::time::sleep(limit) => {}
                }
            }
            None => signal.wait().await,
        }
    };
    eprintln!(
        "kerf record: recording {} into {} ({})",
        options.cluster,
        args.out.display(),
        limit.map_or_else(
            || "until Ctrl-C".to_owned(),
            |d| format!("for {d:?} or until Ctrl-C")
        )
    );
    let log = record::record(client, options, stop).await;
    record::write(&args.out, &log)?;
    let events = log["events"].as_array().map_or(0, Vec::len);
    let sets = log["kerf"]["nodePools"].as_array().map_or(0, Vec::len);
    eprintln!(
        "kerf record: wrote {}: {events} events, {sets} NodePool sets",
        args.out.display()
    );
    Ok(())
}

/// The client configuration and the cluster's name (the kubeconfig context's).
async fn client_config(args: &Args) -> anyhow::Result<(kube::Config, String)> {
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let kubeconfig = match &args.kubeconfig {
        Some(path) => Some(
            kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?,
        ),
        None => kube::config::Kubeconfig::read().ok(),
    };
    match kubeconfig {
        Some(kubeconfig) => {
            let name = args
                .context
                .clone()
                .or_else(|| kubeconfig.current_context.clone())
                .unwrap_or_default();
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .context("the kubeconfig")?;
            Ok((config, name))
        }
        None => Ok((
            kube::Config::infer()
                .await
                .context("finding a kubeconfig")?,
            "in-cluster".to_owned(),
        )),
    }
}
