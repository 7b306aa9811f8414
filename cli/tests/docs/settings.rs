//! The settings page: every flag and environment variable of `kerf controller`, from its
//! clap definition (`kerf_actors::Settings`); every feature gate with its default and
//! whether kerf acts on it (asked of `kerf_actors::divergences`, which warns at start-up
//! about the gates it does not act on); the environment upstream's chart sets that the
//! settings do not read; and the pre-v1 names kerf warns about (`kerf_actors::retired`).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Parser};
use kerf_actors::divergences::{default_gate_notes, ignored_settings};
use kerf_actors::retired::RETIRED;
use kerf_actors::settings::{DEFAULT_FEATURE_GATES, FeatureGates, Settings};
use regex::Regex;

use super::reference::GENERATED;
use super::{cell, repo};

/// kerf's own gates, beside upstream's (whose names `DEFAULT_FEATURE_GATES` carries).
const KERF_GATES: &[&str] = &["NominatePods"];

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
}

pub fn page() -> String {
    let mut out = format!(
        "{GENERATED}\n\n# Controller settings\n\n\
         `kerf controller` reads upstream Karpenter's settings under upstream's names and \
         defaults: each is a flag and an environment variable (the Helm chart sets the \
         variables from its [values](helm-values.md)). A bad value stops the controller at \
         start-up with an error naming the setting.\n\n\
         | environment variable | flag | default | what it sets |\n|---|---|---|---|\n"
    );
    let command = Settings::augment_args(clap::Command::new("controller"));
    let mut read = Vec::new();
    for arg in command.get_arguments() {
        let env = arg.get_env().unwrap().to_string_lossy().into_owned();
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match default.join(",") {
            d if d.is_empty() => "(empty)".to_owned(),
            d => format!("`{d}`"),
        };
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        writeln!(
            out,
            "| `{env}` | `--{}` | {} | {} |",
            arg.get_long().unwrap(),
            cell(&default),
            cell(&help)
        )
        .unwrap();
        read.push(env);
    }
    out.push_str(&gates());
    out.push_str(&chart_env_not_read(&read));
    out.push_str(&retired());
    out
}

/// Every gate: its default and whether kerf acts on it when on.
fn gates() -> String {
    let mut out = String::from(
        "\n## Feature gates\n\n\
         `FEATURE_GATES` takes `Name=true|false` pairs separated by commas, on top of the \
         defaults. A gate kerf does not act on is accepted so that upstream's values work, \
         and named in a warning at start-up when turned on (at info level when on by \
         upstream's default).\n\n\
         | gate | default | origin | acted on by kerf |\n|---|---|---|---|\n",
    );
    let upstream = DEFAULT_FEATURE_GATES
        .split(',')
        .map(|entry| entry.split_once('=').unwrap().0);
    let defaults = FeatureGates::parse("").unwrap();
    for (gate, origin) in upstream
        .map(|g| (g, "upstream"))
        .chain(KERF_GATES.iter().map(|g| (*g, "kerf")))
    {
        let on = FeatureGates::parse(&format!("{gate}=true")).unwrap();
        let default = if on == defaults { "on" } else { "off" };
        let acted_on = if unacted(gate) { "no" } else { "yes" };
        writeln!(out, "| `{gate}` | {default} | {origin} | {acted_on} |").unwrap();
    }
    out
}

/// Whether the controller's start-up says it does not act on `gate` when it is on.
fn unacted(gate: &str) -> bool {
    let argv = [
        "kerf",
        "--cluster-name",
        "docs",
        "--feature-gates",
        &format!("{gate}=true"),
    ];
    let settings = Cli::try_parse_from(argv)
        .unwrap()
        .settings
        .validate()
        .unwrap();
    let named = format!("FEATURE_GATES {gate}");
    ignored_settings(&settings)
        .iter()
        .chain(default_gate_notes(&settings).iter())
        .any(|line| line.starts_with(&named))
}

/// The variables upstream's chart sets (deploy/chart's Deployment) that are not settings
/// above, and whether the controller's code reads them.
fn chart_env_not_read(settings: &[String]) -> String {
    let root = repo();
    let template =
        std::fs::read_to_string(root.join("deploy/chart/templates/deployment.yaml")).unwrap();
    // `- name: NAME` entries, and the names the settings loop takes from its `dict`.
    let entry = Regex::new(r"(?m)^\s*- name: ([A-Z][A-Z0-9_]+)\s*$").unwrap();
    let quoted = Regex::new(r#""([A-Z][A-Z0-9_]+)""#).unwrap();
    let dict = template.lines().filter(|l| l.contains(":= dict "));
    let mut names: Vec<String> = entry
        .captures_iter(&template)
        .chain(dict.flat_map(|l| quoted.captures_iter(l)))
        .map(|c| c[1].to_owned())
        .filter(|n| !settings.contains(n))
        .collect();
    names.sort();
    names.dedup();
    let sources = rust_sources(&[
        root.join("cli/src"),
        root.join("actors/src"),
        root.join("aws/src"),
    ]);
    let mut out = String::from(
        "\n## Other variables the chart sets\n\n\
         Upstream's chart sets these too, so kerf's chart does. They are not settings of \
         kerf's; \"read\" says whether any code of the controller reads the variable. The \
         [Helm values](helm-values.md) page says what kerf does with each value behind them.\n\n\
         | environment variable | read by kerf |\n|---|---|\n",
    );
    for name in names {
        let quoted = format!("\"{name}\"");
        let read = if sources.iter().any(|(_, s)| s.contains(&quoted)) {
            "yes"
        } else {
            "no"
        };
        writeln!(out, "| `{name}` | {read} |").unwrap();
    }
    out
}

/// Every `.rs` file under `dirs`, with its text.
pub fn rust_sources(dirs: &[PathBuf]) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for dir in dirs {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(rust_sources(&[path]));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out
}

fn retired() -> String {
    let mut out = String::from(
        "\n## Names from before Karpenter v1\n\n\
         Neither upstream v1 nor kerf reads these; kerf names each one set in a start-up \
         warning with what replaced it.\n\n\
         | environment variable | replaced by |\n|---|---|\n",
    );
    for r in RETIRED {
        let by = r.replaced_by.unwrap_or("nothing");
        writeln!(out, "| `{}` | {} |", r.name, cell(by)).unwrap();
    }
    out
}
