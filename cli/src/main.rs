//! The `kerf` binary: a thin dispatcher over the subcommands, each in its own module.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod aws;
mod cmd;

/// mimalloc, plus per-owner accounting of the threads tagged with an owner: `kerf simulate`
/// tags the controller's and each simulated part's, to report their heaps apart. Nothing else
/// tags a thread, so elsewhere every allocation is plain mimalloc.
#[global_allocator]
static GLOBAL: kerf_heap::Accounting = kerf_heap::Accounting;

/// kerf: a drop-in replacement for the Karpenter controller on AWS.
#[derive(Parser)]
#[command(name = "kerf", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check Karpenter manifests the way the API server would.
    Validate(cmd::validate::Args),
    /// List EC2 instance types with their labels, capacity, allocatable and offerings.
    Catalog(cmd::catalog::Args),
    /// Offline what-if: the NodeClaims kerf would create for the pending pods in manifests.
    Plan(cmd::plan::Args),
    /// Live why: why a pod is pending, why a node stays, what a NodePool allows, on the cluster
    /// in the kubeconfig.
    Explain(Box<cmd::explain::Args>),
    /// Run the controller daemon against the cluster in the kubeconfig (or in-cluster).
    Controller(Box<cmd::controller::Args>),
    /// Run the controller against a simulated cluster and EC2, in this process, and report.
    Simulate(Box<cmd::simulate::Args>),
    /// Watch a live cluster read-only and write its history as a replay log for `kerf simulate --replay`.
    Record(cmd::record::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate(args) => cmd::validate::run(args),
        Command::Catalog(args) => cmd::catalog::run(args),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Explain(args) => cmd::explain::run(*args),
        Command::Controller(args) => cmd::controller::run(*args),
        Command::Simulate(args) => cmd::simulate::run(*args),
        Command::Record(args) => cmd::record::run(args),
    }
}
