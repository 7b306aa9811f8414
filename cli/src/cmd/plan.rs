//! `kerf plan -f PATH [-f PATH ...] [--region R] [-o json|table] [--rounds N] [--disruption
//! [--now T] [--feature-gates G]]`: the offline what-if. Reads manifests (files, directories, or `-` for
//! stdin), asks the scheduler what it would do with the pending pods, and prints the
//! NodeClaims it would create, the existing nodes that absorb pods and the pods it cannot
//! place; with `--disruption`, also the commands the disruption loop would issue, the nodes it
//! keeps and why, and the budgets. Valid input exits 0 even when pods are unschedulable;
//! unreadable or invalid input (a malformed `--now` too) exits 1 with every problem on stderr
//! and nothing on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use k8s_openapi::jiff::Timestamp;
use kerf::catalog::DEFAULT_VM_MEMORY_OVERHEAD_PERCENT;
use kerf::cluster::ControllerSettings;
use kerf::cluster::inventory::{Builder, Inventory};
use kerf::feature_gates::{DEFAULT_FEATURE_GATES, FeatureGates};
use kerf::manifest::{DEFAULT_MAX_YAML_NODES, Limits};
use kerf::plan::{self, PlanOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Manifest file or directory (YAML or JSON, searched recursively); `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    pub files: Vec<PathBuf>,
    /// AWS region whose instance types, zones and prices the plan uses.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// ENIs withheld from the ENI-limited max-pods computation.
    #[arg(long, env = "RESERVED_ENIS", default_value_t = 0)]
    pub reserved_enis: u32,
    /// Share of EC2-reported memory lost to the hypervisor (0 ≤ F < 1).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT)]
    pub vm_memory_overhead_percent: f64,
    /// Also decide what the disruption loop would remove or replace, and why it keeps the rest.
    #[arg(long)]
    pub disruption: bool,
    /// The time disruption decides at (RFC 3339, e.g. 2026-01-01T00:00:00Z); default now.
    #[arg(long, value_name = "RFC3339", requires = "disruption")]
    pub now: Option<String>,
    /// Feature gates as the controller reads them (`StaticCapacity=true` plans static
    /// NodePools to their replicas; `SpotToSpotConsolidation=true` with --disruption).
    #[arg(long, env = "FEATURE_GATES", default_value = DEFAULT_FEATURE_GATES)]
    pub feature_gates: String,
    /// YAML nodes (mappings, sequences, scalars) one document may hold; a guard against
    /// runaway input, sized for a `kind: List` dump of about 200,000 pods.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_YAML_NODES)]
    pub max_yaml_nodes: usize,
    /// Provisioning rounds to plan: each further round sees the NodeClaims planned so far as
    /// launched (their cheapest type charged against NodePool limits) and places what is left.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub rounds: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Table,
}

pub fn run(args: Args) -> ExitCode {
    if !(0.0..1.0).contains(&args.vm_memory_overhead_percent) {
        return fail(&[format!(
            "--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT) must be in [0, 1), got {}",
            args.vm_memory_overhead_percent
        )]);
    }
    let feature_gates = match FeatureGates::parse(&args.feature_gates) {
        Ok(parsed) => parsed.gates,
        Err(e) => return fail(&[format!("--feature-gates (FEATURE_GATES): {e}")]),
    };
    let disruption = if args.disruption {
        match disruption_options(args.now.as_deref(), &args.feature_gates) {
            Ok(options) => Some(options),
            Err(error) => return fail(&[error]),
        }
    } else {
        None
    };
    let limits = Limits {
        max_yaml_nodes: args.max_yaml_nodes,
        // The inventory takes pods typed: no `Value` is built for them.
        typed_pods: true,
    };
    let inventory = match read_inventory(&args.files, limits) {
        Ok(inventory) => inventory,
        Err(errors) => return fail(&errors),
    };
    let options = PlanOptions {
        region: args.region,
        controller: ControllerSettings {
            reserved_enis: args.reserved_enis,
            vm_memory_overhead_percent: args.vm_memory_overhead_percent,
        },
        disruption,
        disruption_limit: None,
        rounds: usize::from(args.rounds),
        feature_gates,
    };
    let outcome = match plan::plan_inventory(inventory, &options) {
        Ok(outcome) => outcome,
        Err(error) => return fail(&[error.to_string()]),
    };
    for ignored in &outcome.ignored {
        eprintln!("{ignored}: ignored (kerf plan does not read this kind)");
    }
    for warning in &outcome.warnings {
        eprintln!("warning: {warning}");
    }
    match args.output {
        Format::Json => match serde_json::to_string_pretty(&outcome.report) {
            Ok(json) => println!("{json}"),
            Err(error) => return fail(&[format!("cannot encode the report as JSON: {error}")]),
        },
        Format::Table => print!("{}", outcome.report.to_table()),
    }
    ExitCode::SUCCESS
}

/// `--now` (default: the clock) and `--feature-gates` (`FEATURE_GATES`), read as the
/// controller reads them; unknown gates are warned about, as upstream ignores them.
fn disruption_options(now: Option<&str>, gates: &str) -> Result<kerf::disruption::Options, String> {
    let now = match now {
        Some(text) => kerf::cluster::disruption::parse_now(text)?,
        None => {
            let since_epoch = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_err(|e| format!("the system clock is before 1970: {e}"))?;
            Timestamp::from_second(since_epoch.as_secs() as i64)
                .map_err(|e| format!("the system clock is out of range: {e}"))?
        }
    };
    let parsed =
        FeatureGates::parse(gates).map_err(|e| format!("--feature-gates (FEATURE_GATES): {e}"))?;
    for name in &parsed.unknown {
        eprintln!(
            "warning: --feature-gates (FEATURE_GATES): unknown feature gate {name:?} is ignored"
        );
    }
    Ok(kerf::disruption::Options {
        now,
        feature_gates: parsed.gates,
    })
}

/// Reads every path straight into the inventory, each object decoded and dropped as soon as
/// it is read; returns every read, parse and object problem.
fn read_inventory(paths: &[PathBuf], limits: Limits) -> Result<Inventory, Vec<String>> {
    let mut builder = Builder::default();
    let mut errors = Vec::new();
    for path in paths {
        let read = super::read_each(path, limits, &mut |object| match object {
            Ok(object) => builder.add(object),
            Err(error) => errors.push(error.to_string()),
        });
        if let Err(failures) = read {
            errors.extend(failures.iter().map(ToString::to_string));
        }
    }
    let inventory = builder.finish();
    if !errors.is_empty() {
        return Err(errors);
    }
    inventory.map_err(|problems| problems.iter().map(ToString::to_string).collect())
}

fn fail(errors: &[String]) -> ExitCode {
    for error in errors {
        eprintln!("{error}");
    }
    ExitCode::FAILURE
}
