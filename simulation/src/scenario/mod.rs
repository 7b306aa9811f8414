//! `kerf simulate --scenario FILE`: a scripted run against the simulated cluster. The file
//! (`format`) names a workload, NodePools, the controller's replicas and settings, steps
//! (waits, scaling, manifests, deletions, faults, controller kills and restarts, an AMI
//! release) and expectations. It is checked whole before anything starts ([`read`]); then
//! [`execute`] starts the world, the controllers sync, the workload is applied and the steps
//! run in order (`steps`) while `invariants` watches the world; at the end the
//! expectations are judged (`expect`) into the [`Report`]. A stop (Ctrl-C or SIGTERM in the
//! binary) ends the step under way and the run at once, and the expectations are judged on
//! what was measured until then (leaks without waiting for the garbage collector's grace).

mod check;
mod controllers;
mod expect;
mod faults;
mod format;
mod invariants;
mod steps;

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use kerf_actors::garbage_collection::{MIN_MACHINE_AGE, PERIOD};
use tokio::time::Instant;

use super::apply::apply;
use super::report::{ActiveFaults, Recorder, Report};
use super::world::{Pace, StartupReads, World};
pub use check::{Problems, Scenario, read};
use controllers::Replicas;
use faults::Injector;
use invariants::Observer;
use steps::Runner;

/// How long a leaked instance is given to be collected before it counts: the garbage
/// collector takes machines older than [`MIN_MACHINE_AGE`] on a pass at most [`PERIOD`]
/// apart. Only waited for while something is leaked.
const LEAK_GRACE: Duration = MIN_MACHINE_AGE.saturating_add(PERIOD);

/// The expectations of `report` as a table, one row each with what was wanted and measured.
pub fn table(report: &Report) -> String {
    expect::table(&report.expectations)
}

/// What a scenario run measured and how it ended.
pub struct Ran {
    pub report: Report,
    /// A step that could not be carried out (the run still reports what it measured).
    pub failure: Option<anyhow::Error>,
    /// A stop signal ended the run before its steps did.
    pub interrupted: bool,
}

/// Runs the scenario until its steps end or `stop` completes; the error is one that stops
/// the world from starting. Must run inside an actix `System` on a multi-threaded runtime.
pub async fn execute(
    scenario: Scenario,
    pace: Pace,
    startup_reads: StartupReads,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<Ran> {
    let mut stop = pin!(stop);
    let started = Instant::now();
    let world = World::start(pace, &[], startup_reads).await?;
    super::reservations::seed(
        world.provider.ec2(),
        &scenario.reservations,
        std::time::SystemTime::now(),
    );
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
    let pool_nodes = invariants::pool_nodes(&cluster);
    let instances = world.provider.ec2().instances();
    let double_launched = invariants::double_launches(&instances);
    let mut expectations = expect::judge(
        &scenario.expect,
        &expect::End {
            measures: &measures,
            last_displaced,
            leaked: &leaked,
            double_launched: &double_launched,
            pool_nodes: &pool_nodes,
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
