//! `kerf simulate`'s harness: the whole system in one process with nothing to set up. It
//! starts the Kubernetes API emulator, simulated EC2, kubelets and kube-scheduler
//! (`kerf-loadtest`) and runs the real controller (`kerf-actors`) against them over HTTP
//! ([`world`]), then either follows one run from scale-out to summary ([`run`], [`summary`],
//! with the `--interrupt-spot`, `--scale-down` and `--drift` phases) or plays a scenario file
//! with its steps, faults and expectations ([`scenario`]), or replays a cluster's history
//! ([`replay`], recorded by [`record`]); [`report`] records them as JSON and HTML. The
//! `kerf` binary is a thin layer over this crate: it parses the arguments, owns the process
//! (runtime, signals, exit codes) and prints what comes back.
//!
//! A library rather than the binary's module, so the harness is built and unit-tested as
//! one piece next to the scenarios it runs (`loadtest/scenarios/`).

pub mod api_only;
mod apply;
mod budgets;
mod controller_threads;
pub mod defaults;
mod drift;
mod exposition;
pub mod figures;
pub mod ice;
pub mod inputs;
mod install;
pub mod interrupt;
mod memory;
mod observe;
mod outside;
mod planned;
mod progress;
pub mod record;
pub mod replay;
pub mod report;
pub mod reservations;
pub mod run;
pub mod scale_down;
pub mod scenario;
pub mod summary;
pub mod world;
mod writes;

/// The tests of the controller's heap need the accounting allocator, as in the binary.
#[cfg(test)]
#[global_allocator]
static GLOBAL: kerf_heap::Accounting = kerf_heap::Accounting;
