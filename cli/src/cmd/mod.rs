//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod catalog;
pub mod controller;
pub mod plan;
pub mod validate;
