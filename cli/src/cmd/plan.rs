//! `kerf plan -f PATH [-f PATH ...] [--region R] [-o json|table]`: the offline what-if. Reads
//! manifests (files, directories, or `-` for stdin), asks the scheduler what it would do with
//! the pending pods, and prints the NodeClaims it would create, the existing nodes that absorb
//! pods and the pods it cannot place. Valid input exits 0 even when pods are unschedulable;
//! unreadable or invalid input exits 1 with every problem on stderr and nothing on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use kerf::catalog::DEFAULT_VM_MEMORY_OVERHEAD_PERCENT;
use kerf::plan::{self, ControllerSettings, PlanOptions};

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
    let objects = match super::read_objects(&args.files) {
        Ok(objects) => objects,
        Err(errors) => return fail(&errors),
    };
    let options = PlanOptions {
        region: args.region,
        controller: ControllerSettings {
            reserved_enis: args.reserved_enis,
            vm_memory_overhead_percent: args.vm_memory_overhead_percent,
        },
    };
    let outcome = match plan::plan(&objects, &options) {
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

fn fail(errors: &[String]) -> ExitCode {
    for error in errors {
        eprintln!("{error}");
    }
    ExitCode::FAILURE
}
