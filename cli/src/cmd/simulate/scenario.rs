//! `kerf simulate --scenario FILE` in the process: checks the file, plays it in an actix
//! system ([`kerf_simulation::scenario::execute`]), prints the expectations table (or, with
//! `-o json`, the report), writes the report with `--report DIR`, and exits 0 when every
//! expectation held, 1 otherwise (each failed one named) or when the file is bad or a step
//! could not be carried out, 130 after Ctrl-C or SIGTERM, which end the run at once.

use std::path::PathBuf;
use std::process::ExitCode;

use kerf_simulation::report::{self, Report};
use kerf_simulation::scenario::{self, Ran};
use kerf_simulation::world::Pace;

use super::StopSignal;
use crate::cmd::plan::Format;

/// How one scenario run is set up from the command line.
pub struct Config {
    pub file: PathBuf,
    pub pace: Pace,
    pub output: Format,
    pub report: Option<PathBuf>,
}

/// Checks the file, runs it in an actix system, prints and writes the outcome.
pub fn run(config: &Config) -> ExitCode {
    let scenario = match scenario::read(&config.file) {
        Ok(scenario) => scenario,
        Err(problems) => {
            eprintln!("{problems}");
            return ExitCode::FAILURE;
        }
    };
    let pace = config.pace;
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("the tokio runtime builds with default settings")
    });
    let ran = system.block_on(async {
        // Installed before anything starts, so a signal at any moment is seen (at the
        // latest when the steps begin) instead of killing the process mid-way.
        let signal = StopSignal::install()?;
        scenario::execute(scenario, pace, super::startup_reads, signal.wait()).await
    });
    let Ran {
        report,
        failure,
        interrupted,
    } = match ran {
        Ok(ran) => ran,
        Err(error) => {
            eprintln!("kerf simulate: {}: {error:#}", config.file.display());
            return ExitCode::FAILURE;
        }
    };
    print(&report, config.output, interrupted);
    let mut ok = failure.is_none();
    if let Some(failure) = failure {
        eprintln!("kerf simulate: {}: {failure:#}", config.file.display());
    }
    if let Some(dir) = &config.report
        && let Err(error) = report::write(dir, &report)
    {
        eprintln!("kerf simulate: {error}");
        ok = false;
    }
    for failed in report.expectations.iter().filter(|e| !e.held) {
        eprintln!(
            "kerf simulate: {}: expectation {} failed: wanted {}, measured {}",
            config.file.display(),
            failed.name,
            failed.wanted,
            failed.measured
        );
        ok = false;
    }
    if interrupted {
        eprintln!(
            "kerf simulate: {}: stopped by a signal before the scenario finished; the expectations above are judged on what was measured until then",
            config.file.display()
        );
        // 128 + SIGINT, as shells report a command ended by Ctrl-C.
        return ExitCode::from(130);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print(report: &Report, format: Format, interrupted: bool) {
    match format {
        Format::Json => match serde_json::to_string_pretty(report) {
            Ok(json) => println!("{json}"),
            Err(error) => eprintln!("kerf simulate: cannot encode the report as JSON: {error}"),
        },
        Format::Table => {
            let partial = if interrupted {
                " (stopped by a signal: measured until then)"
            } else {
                ""
            };
            println!("scenario {}{partial}", report.name);
            print!("{}", scenario::table(report));
        }
    }
}
