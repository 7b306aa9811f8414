//! `kerf validate`.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("kerf validate: not yet available");
    ExitCode::FAILURE
}
