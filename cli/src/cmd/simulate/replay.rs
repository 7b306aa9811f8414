//! `kerf simulate --replay FILE` in the process: reads and checks the log and the NodePool
//! files, replays the log (twice with `--compare` or `--compare-env`, one world after the
//! other) in an actix system ([`kerf_simulation::replay::run`]), prints the report (or both
//! and their difference), writes it with `--report DIR`, and exits 0 when the replay reached
//! the log's end, 1 when the input is bad or the world could not start, 130 after Ctrl-C or
//! SIGTERM, which end the replay under way at once with a report of what was replayed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kerf_simulation::inputs;
use kerf_simulation::replay::report::{Comparison, ReplayReport};
use kerf_simulation::replay::run::{self, Config};
use kerf_simulation::replay::setup::Plan;
use kerf_simulation::replay::{self, ReplayLog};
use kerf_simulation::report::{self, Percentiles, Report, Sample};
use kerf_simulation::world::{Pace, setting_flag};

use super::StopSignal;
use crate::cmd::plan::Format;

/// How the replay is set up from the command line.
pub struct Args {
    pub file: PathBuf,
    pub speed: f64,
    pub nodepools: Vec<PathBuf>,
    pub compare: Vec<PathBuf>,
    pub compare_env: Vec<String>,
    pub pace: Pace,
    pub output: Format,
    pub report: Option<PathBuf>,
}

/// `--speed`'s value: a positive number.
pub fn speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(speed) if speed.is_finite() && speed > 0.0 => Ok(speed),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

/// `--compare-env`'s value: `KEY=VALUE`.
pub fn key_value(text: &str) -> Result<String, String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    setting_flag(key, value).map_err(|e| format!("{key}: {e}"))?;
    Ok(text.to_owned())
}

/// The two setups of a replay: A, and B when comparing.
struct Setups {
    a: (String, Plan, Vec<String>),
    b: Option<(String, Plan, Vec<String>)>,
}

fn setups(args: &Args, log: &ReplayLog) -> Result<Setups, Vec<String>> {
    let sources = inputs::Sources {
        pods: 0,
        nodepools: args.nodepools.clone(),
        workload: Vec::new(),
    };
    let fallback = inputs::read(&sources)?.setup;
    let recorded = !log.extensions.node_pools.is_empty();
    if recorded && !args.nodepools.is_empty() {
        eprintln!(
            "kerf simulate: the log carries its NodePools, which the replay uses; --nodepools {} is not (use --compare to replay with them)",
            names(&args.nodepools)
        );
    }
    let label_a = if recorded {
        "the log's NodePools".to_owned()
    } else if args.nodepools.is_empty() {
        "the default NodePool".to_owned()
    } else {
        names(&args.nodepools)
    };
    let a = (
        label_a,
        Plan::of_log(log, fallback, args.speed)?,
        Vec::new(),
    );
    let b = if !args.compare.is_empty() {
        let objects = inputs::read_objects(&args.compare)?;
        let mut problems = Vec::new();
        if !objects.iter().any(|o| o.kind == "NodePool") {
            problems.push(format!(
                "--compare {}: no NodePool in it",
                names(&args.compare)
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let plan = if recorded {
            Plan::fixed(log, objects, args.speed)?
        } else {
            // Without recorded classes, B keeps A's EC2NodeClasses unless it brings them.
            let mut with_classes: Vec<_> =
                a.1.initial
                    .iter()
                    .filter(|o| {
                        o.kind == "EC2NodeClass"
                            && !objects.iter().any(|b| b.kind == o.kind && b.name == o.name)
                    })
                    .cloned()
                    .collect();
            with_classes.extend(objects);
            Plan::fixed(&ReplayLog::default(), with_classes, args.speed)?
        };
        let flags = env_flags(&args.compare_env)?;
        let mut label = names(&args.compare);
        if !args.compare_env.is_empty() {
            label = format!("{label}, {}", args.compare_env.join(" "));
        }
        Some((label, plan, flags))
    } else if !args.compare_env.is_empty() {
        let flags = env_flags(&args.compare_env)?;
        let plan = a.1.clone();
        Some((
            format!("{}, {}", a.0, args.compare_env.join(" ")),
            plan,
            flags,
        ))
    } else {
        None
    };
    Ok(Setups { a, b })
}

fn env_flags(pairs: &[String]) -> Result<Vec<String>, Vec<String>> {
    let mut flags = Vec::new();
    let mut problems = Vec::new();
    for pair in pairs {
        match key_value(pair).and_then(|_| {
            let (key, value) = pair.split_once('=').unwrap_or_default();
            setting_flag(key, value)
        }) {
            Ok(flag) => flags.push(flag),
            Err(error) => problems.push(format!("--compare-env {error}")),
        }
    }
    if problems.is_empty() {
        Ok(flags)
    } else {
        Err(problems)
    }
}

fn names(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads, replays, prints and writes.
pub fn run(args: &Args) -> ExitCode {
    let log = match replay::read(&args.file) {
        Ok(log) => log,
        Err(error) => {
            eprintln!("kerf simulate: {error}");
            return ExitCode::FAILURE;
        }
    };
    for skipped in &log.skipped {
        eprintln!("kerf simulate: {}: skipped {skipped}", args.file.display());
    }
    let Setups { a, b } = match setups(args, &log) {
        Ok(setups) => setups,
        Err(problems) => {
            for problem in problems {
                eprintln!("{problem}");
            }
            return ExitCode::FAILURE;
        }
    };
    let (stopped, stop) = tokio::sync::watch::channel(false);
    let config = |(label, setup, flags): (String, Plan, Vec<String>)| Config {
        label,
        setup,
        speed: args.speed,
        pace: args.pace,
        flags,
        startup_reads: super::startup_reads,
        stop: stop.clone(),
        progress: args.output == Format::Table,
    };
    let config_a = config(a);
    let config_b = b.map(config);
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("the tokio runtime builds with default settings")
    });
    let log_ref = &log;
    let ran = system.block_on(async move {
        let signal = StopSignal::install()?;
        tokio::spawn(async move {
            signal.wait().await;
            let _ = stopped.send(true);
        });
        let a = run::replay(log_ref, config_a).await?;
        let b = match config_b {
            Some(config) if !a.interrupted => Some(run::replay(log_ref, config).await?),
            _ => None,
        };
        anyhow::Ok((a, b))
    });
    let (a, b) = match ran {
        Ok(reports) => reports,
        Err(error) => {
            eprintln!("kerf simulate: {}: {error:#}", args.file.display());
            return ExitCode::FAILURE;
        }
    };
    let interrupted = a.interrupted || b.as_ref().is_some_and(|b| b.interrupted);
    let mut ok = true;
    match b {
        Some(b) => {
            let comparison = Comparison::new(a, b);
            print(args.output, &comparison, Comparison::to_table);
            if let Some(dir) = &args.report {
                ok &= write(&dir.join("a"), &comparison.a)
                    && write(&dir.join("b"), &comparison.b)
                    && write_json(&dir.join("comparison.json"), &comparison);
            }
        }
        None => {
            print(args.output, &a, ReplayReport::to_table);
            if let Some(dir) = &args.report {
                ok &= write(dir, &a);
            }
        }
    }
    if interrupted {
        eprintln!("kerf simulate: stopped by a signal before the replay reached the log's end");
        return ExitCode::from(130);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print<T: serde::Serialize>(format: Format, value: &T, table: fn(&T) -> String) {
    match format {
        Format::Json => match serde_json::to_string_pretty(value) {
            Ok(json) => println!("{json}"),
            Err(error) => eprintln!("kerf simulate: cannot encode the report as JSON: {error}"),
        },
        Format::Table => print!("{}", table(value)),
    }
}

/// `replay.json`, and `report.json` and `report.html` with the replay's series on the log's
/// time axis, into `dir`.
fn write(dir: &Path, replayed: &ReplayReport) -> bool {
    let page = Report {
        name: format!("replay: {}", replayed.label),
        series: replayed
            .series
            .iter()
            .map(|s| Sample {
                at_seconds: s.at_seconds,
                pods_pending: s.pods_pending,
                pods_bound: s.pods - s.pods_pending,
                nodes_on_demand: s.nodes_on_demand,
                nodes_spot: s.nodes_spot,
                hourly_cost: s.hourly_cost,
                ..Sample::default()
            })
            .collect(),
        pending_to_bound_percentiles: Percentiles::of(&replayed.pending_to_bound_seconds),
        pending_to_bound_seconds: replayed.pending_to_bound_seconds.clone(),
        ..Report::default()
    };
    if let Err(error) = report::write(dir, &page) {
        eprintln!("kerf simulate: {error}");
        return false;
    }
    let ok = write_json(&dir.join("replay.json"), replayed);
    if ok {
        eprintln!("report: {}", dir.join("report.html").display());
    }
    ok
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> bool {
    let written = serde_json::to_vec_pretty(value)
        .map_err(std::io::Error::other)
        .and_then(|bytes| {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, bytes)
        });
    match written {
        Ok(()) => true,
        Err(error) => {
            eprintln!("kerf simulate: writing {}: {error}", path.display());
            false
        }
    }
}
