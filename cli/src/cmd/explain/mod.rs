//! `kerf explain pod NAMESPACE/NAME | node NAME | nodepool NAME`: the live why. Lists the
//! cluster in the kubeconfig once ([`snapshot`]; no watch), reads what only the running
//! controller knows from its `/explain` endpoint ([`controller`]; said so when it cannot be
//! reached) and prints the answer [`kerf::explain`] gives, as a table or JSON. Exits 0 with
//! an answer, 1 when the cluster cannot be read or the object does not exist.

mod controller;
mod snapshot;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use kerf::catalog::DEFAULT_VM_MEMORY_OVERHEAD_PERCENT;
use kerf::cluster::ControllerSettings;
use kerf::explain::{self, Live};
use kerf::feature_gates::{DEFAULT_FEATURE_GATES, FeatureGates};

use super::plan::Format;

/// Where the controller's metrics port is by default: the chart's `karpenter` Service
/// forwarded by `kubectl port-forward -n kube-system svc/karpenter 8080`.
pub const DEFAULT_CONTROLLER: &str = "http://127.0.0.1:8080";

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
    /// The kubeconfig to read (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// The controller's metrics port, whose `/explain` serves its unavailable-offerings
    /// cache, nominations and last disruption pass (forward it with `kubectl port-forward -n
    /// kube-system svc/karpenter 8080`).
    #[arg(long, global = true, env = "KERF_CONTROLLER", value_name = "URL", default_value = DEFAULT_CONTROLLER)]
    pub controller: String,
    /// AWS region whose instance types and prices the decisions use (default: the nodes'
    /// `topology.kubernetes.io/region`, else us-east-1).
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// Feature gates as the controller reads them.
    #[arg(long, global = true, env = "FEATURE_GATES", default_value = DEFAULT_FEATURE_GATES)]
    pub feature_gates: String,
    /// ENIs withheld from the ENI-limited max-pods computation, as the controller's setting.
    #[arg(long, global = true, env = "RESERVED_ENIS", default_value_t = 0)]
    pub reserved_enis: u32,
    /// How long the disruption decision may search before answering with what it found; the
    /// nodes it did not reach say so (`0s`: the whole decision, as `kerf plan --disruption`,
    /// which takes minutes on a cluster of thousands of nodes).
    #[arg(long, global = true, value_name = "DURATION", default_value = "30s", value_parser = super::go_duration)]
    pub timeout: std::time::Duration,
    /// Share of EC2-reported memory lost to the hypervisor, as the controller's setting.
    #[arg(long, global = true, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT)]
    pub vm_memory_overhead_percent: f64,
}

#[derive(clap::Subcommand)]
pub enum What {
    /// Why a pod is pending (or where it went): each NodePool's verdict.
    Pod {
        /// NAMESPACE/NAME (a bare NAME is in `default`).
        name: String,
    },
    /// Whether disruption would take a node now, or why it stays; its drift, expiry, drain.
    Node {
        /// A Node's or a NodeClaim's name.
        name: String,
    },
    /// A NodePool's budgets now and their windows, its nodes against its limits, its node
    /// class's readiness and its consolidation candidates.
    Nodepool { name: String },
}

pub fn run(args: Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("starting the tokio runtime: {error}")),
    };
    match runtime.block_on(explain(args)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => fail(&format!("{error:#}")),
    }
}

async fn explain(args: Args) -> anyhow::Result<String> {
    if !(0.0..1.0).contains(&args.vm_memory_overhead_percent) {
        anyhow::bail!(
            "--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT) must be in [0, 1), got {}",
            args.vm_memory_overhead_percent
        );
    }
    let gates = FeatureGates::parse(&args.feature_gates)
        .map_err(|e| anyhow::anyhow!("--feature-gates (FEATURE_GATES): {e}"))?;
    let client = snapshot::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    // Asked first: its answer is then no newer than the snapshot it is read beside.
    let reach = controller::read(&args.controller).await;
    let listed = snapshot::list(&client).await?;
    for warning in &listed.warnings {
        eprintln!("warning: {warning}");
    }
    let scheduler_message = match &args.what {
        What::Pod { name } => snapshot::scheduler_message(&client, &pod_key(name)).await?,
        _ => None,
    };
    let region = args
        .region
        .clone()
        .or(listed.region.clone())
        .unwrap_or_else(|| "us-east-1".to_owned());
    let live = Live {
        inventory: listed.inventory,
        region,
        settings: ControllerSettings {
            reserved_enis: args.reserved_enis,
            vm_memory_overhead_percent: args.vm_memory_overhead_percent,
        },
        disruption: kerf::disruption::Options {
            now: k8s_openapi::jiff::Timestamp::now(),
            feature_gates: gates.gates,
        },
        controller: reach,
        disruption_limit: (!args.timeout.is_zero()).then_some(args.timeout),
    };
    let json = args.output == Format::Json;
    match &args.what {
        What::Pod { name } => {
            let answer = explain::explain_pod(&live, &pod_key(name), scheduler_message)?;
            render(&answer, answer.to_table(), json)
        }
        What::Node { name } => {
            let answer = explain::explain_node(&live, name)?;
            render(&answer, answer.to_table(), json)
        }
        What::Nodepool { name } => {
            let answer = explain::explain_nodepool(&live, name)?;
            render(&answer, answer.to_table(), json)
        }
    }
}

/// The answer as JSON, or its table.
fn render<T: serde::Serialize>(answer: &T, table: String, json: bool) -> anyhow::Result<String> {
    if json {
        Ok(serde_json::to_string_pretty(answer).context("encoding the answer as JSON")? + "\n")
    } else {
        Ok(table)
    }
}

/// `NAMESPACE/NAME`, with `default` for a bare name.
fn pod_key(name: &str) -> String {
    if name.contains('/') {
        name.to_owned()
    } else {
        format!("default/{name}")
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("kerf explain: {message}");
    ExitCode::FAILURE
}
