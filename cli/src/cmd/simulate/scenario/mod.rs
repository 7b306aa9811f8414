//! `kerf simulate --scenario FILE`: a scripted run against the simulated cluster. The file
//! ([`format`]) names a workload, NodePools, the controller's replicas and settings, steps
//! (waits, scaling, manifests, deletions, faults, controller kills and restarts, an AMI
//! release) and expectations. It is checked whole before anything starts ([`check`]); then
//! the world starts, the controllers sync, the workload is applied and the steps run in
//! order ([`steps`]) while [`invariants`] watches the world; at the end the expectations are
//! judged ([`expect`]), the table (or, with `-o json`, the report) is printed and, with
//! `--report DIR`, the report is written. Exit 0 when every expectation held, 1 otherwise
//! (each failed one named) or when the file is bad or a step could not be carried out, 130
//! after Ctrl-C or SIGTERM: the signal ends the step under way and the run at once, and the
//! expectations are judged on what was measured until then (leaks without waiting for the
//! garbage collector's grace), printed, and written with `--report`.

mod check;
mod controllers;
mod expect;
mod faults;
mod format;
mod invariants;
mod steps;

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::process::ExitCode;
use std::time::Duration;

use kerf_actors::garbage_collection::{MIN_MACHINE_AGE, PERIOD};
use tokio::time::Instant;

use super::StopSignal;
use super::apply::apply;
use super::report::{self, ActiveFaults, Recorder, Report};
use super::world::{Pace, World};
use crate::cmd::plan::Format;
use check::Scenario;
use controllers::Replicas;
use faults::Injector;
use invariants::Observer;
use steps::Runner;

/// How long a leaked instance is given to be collected before it counts: the garbage
/// collector takes machines older than [`MIN_MACHINE_AGE`] on a pass at most [`PERIOD`]
/// apart. Only waited for while something is leaked.
const LEAK_GRACE: Duration = MIN_MACHINE_AGE.saturating_add(PERIOD);

/// How one scenario run is set up from the command line.
pub struct Config {
    pub file: PathBuf,
    pub pace: Pace,
    pub output: Format,
    pub report: Option<PathBuf>,
}

/// Checks the file, runs it in an actix system, prints and writes the outcome.
pub fn run(config: &Config) -> ExitCode {
    let scenario = match check::read(&config.file) {
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
        execute(scenario, pace, signal.wait()).await
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
            print!("{}", expect::table(&report.expectations));
        }
    }
}

/// What a scenario run measured and how it ended.
struct Ran {
    report: Report,
    /// A step that could not be carried out (the run still reports what it measured).
    failure: Option<anyhow::Error>,
    /// A stop signal ended the run before its steps did.
    interrupted: bool,
}

/// Runs the scenario until its steps end or `stop` completes; the error is one that stops
/// the world from starting.
async fn execute(
    scenario: Scenario,
    pace: Pace,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<Ran> {
    let mut stop = pin!(stop);
    let started = Instant::now();
    let world = World::start(pace, &[]).await?;
    let cluster = world.cluster();
    let inventory = &scenario.inputs.inventory;
    let mut notes = apply(&cluster, &scenario.inputs.setup, inventory)?;
    let active = ActiveFaults::default();
    let injector = Injector::new(started, active.clone());
    let observer = Observer::start(
        cluster.clone(),
        world.provider.ec2().clone(),
        injector.capacity(),
    )?;
    let replicas = Replicas::start(&world, scenario.replicas, scenario.flags.clone()).await?;
    eprintln!(
        "scenario {}: {} controller replica(s) synced: {}",
        scenario.name,
        scenario.replicas,
        replicas.identities().join(", ")
    );
    notes.extend(apply(&cluster, &scenario.inputs.workload, inventory)?);
    for note in notes {
        eprintln!("{note}");
    }
    let recorder = Recorder::start(&world, active, started)
        .map_err(|e| anyhow::anyhow!("recording the run: {e:?}"))?;
    let mut runner = Runner {
        world: &world,
        replicas,
        injector,
        observer,
        started,
        last_displaced: Instant::now(),
        marks: Vec::new(),
    };
    let mut failure = None;
    let mut interrupted = false;
    for (index, planned) in scenario.steps.iter().enumerate() {
        tokio::select! {
            ran = runner.run(index, planned) => if let Err(error) = ran {
                failure = Some(error);
                break;
            },
            () = &mut stop => {
                eprintln!(
                    "[{:>7.1}s] steps[{index}] stopped by a signal",
                    started.elapsed().as_secs_f64()
                );
                interrupted = true;
                break;
            }
        }
    }
    let leaked_now = || invariants::leaked_instances(&world.provider.ec2().instances(), &cluster);
    let leaked = if interrupted {
        leaked_now()
    } else {
        tokio::select! {
            leaked = wait_for_collection(&world) => leaked,
            () = &mut stop => {
                interrupted = true;
                leaked_now()
            }
        }
    };
    let Runner {
        replicas,
        injector,
        observer,
        last_displaced,
        marks,
        ..
    } = runner;
    let measures = observer.finish().await;
    let instances = world.provider.ec2().instances();
    let double_launched = invariants::double_launches(&instances);
    let mut expectations = expect::judge(
        &scenario.expect,
        &expect::End {
            measures: &measures,
            last_displaced,
            leaked: &leaked,
            double_launched: &double_launched,
        },
    );
    expectations.push(expect::chart_rbac(&super::install::usage(&world.server)));
    let mut report = recorder.finish().await.into_report(
        &scenario.name,
        injector.windows(),
        marks,
        expectations,
    );
    // Reported, not fatal: the simulation embeds the controller, which `kerf controller`
    // would have stopped (exit 1) for Kubernetes to restart.
    report.unhealthy_replicas = replicas.unhealthy();
    for unhealthy in &report.unhealthy_replicas {
        eprintln!("scenario {}: unhealthy replica {unhealthy}", scenario.name);
    }
    injector.stop();
    replicas.stop().await;
    world.stop().await;
    Ok(Ran {
        report,
        failure,
        interrupted,
    })
}

/// The instances leaked at the end, after giving garbage collection its grace.
async fn wait_for_collection(world: &World) -> Vec<String> {
    let deadline = Instant::now() + LEAK_GRACE;
    loop {
        let leaked =
            invariants::leaked_instances(&world.provider.ec2().instances(), &world.cluster());
        if leaked.is_empty() || Instant::now() >= deadline {
            return leaked;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
