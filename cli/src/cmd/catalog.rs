//! `kerf catalog`.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("kerf catalog: not yet available");
    ExitCode::FAILURE
}
