//! `kerf plan`.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("kerf plan: not yet available");
    ExitCode::FAILURE
}
