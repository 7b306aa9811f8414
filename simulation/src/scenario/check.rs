//! Everything about a scenario that can be wrong is found here, before anything runs: the
//! file's shape ([`format`]), then what the shape cannot say — referenced files exist and
//! hold valid manifests, rates and fractions are in range, offering patterns name pools the
//! region sells, `controller.env` names settings the controller knows with values its own
//! parser accepts. Every problem is reported (not just the first), each as
//! `FILE: PATH: message`. What passes becomes a [`Scenario`] the runner executes as is.

use std::fmt;
use std::path::{Path, PathBuf};

use kerf::catalog::{AllocatableSettings, Catalog};
use kerf::cluster::inventory::{self, Inventory};
use kerf::manifest::Object;
use kerf::wildcard;
use kerf_loadtest::ec2::{CapacityType, OfferingKey, PricedOffering, catalog_offerings};
use serde_json::Value;

use super::super::defaults::REGION;
use super::super::inputs::{self, Inputs, Sources};
use super::super::world::setting_flag;
use super::format::{self, Action, ControllerStep, Expect, Fault, Problem, Step, Wait};
use crate::inputs::read_objects;

/// A checked scenario.
pub struct Scenario {
    pub name: String,
    pub inputs: Inputs,
    pub replicas: usize,
    /// `controller.env` as the settings flags the same parser reads.
    pub flags: Vec<String>,
    /// The capacity reservations the region holds (`reservations:`).
    pub reservations: Vec<super::super::reservations::ReservationSpec>,
    pub steps: Vec<Planned>,
    pub expect: Expect,
}

/// One step with what checking it resolved.
pub struct Planned {
    pub step: Step,
    pub resolved: Resolved,
}

/// What a step needs that was read or computed while checking it.
pub enum Resolved {
    Nothing,
    /// An `apply` step's objects (and their expansion, for StatefulSets and Jobs).
    Objects(Vec<Object>, Box<Inventory>),
    /// An `ice` fault's pools.
    Pools(Vec<OfferingKey>),
}

/// Every problem of one file.
#[derive(Debug)]
pub struct Problems {
    pub file: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if p.path.is_empty() {
                write!(f, "{}: {}", self.file.display(), p.message)?;
            } else {
                write!(f, "{}: {}: {}", self.file.display(), p.path, p.message)?;
            }
        }
        Ok(())
    }
}

/// Reads and checks the scenario at `file`.
pub fn read(file: &Path) -> Result<Scenario, Problems> {
    let fail = |problems| Problems {
        file: file.to_owned(),
        problems,
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| fail(vec![Problem::at("", format!("cannot read it: {e}"))]))?;
    let parsed = format::parse(&text).map_err(|p| fail(vec![p]))?;
    let base = file.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    let scenario = check(parsed, base, &mut problems);
    match scenario {
        Some(scenario) if problems.is_empty() => Ok(scenario),
        _ => Err(fail(problems)),
    }
}

fn check(file: format::File, base: &Path, problems: &mut Vec<Problem>) -> Option<Scenario> {
    if file.name.trim().is_empty() {
        problems.push(Problem::at("name", "is empty"));
    }
    if file.pods.is_some() && !file.workload.is_empty() {
        problems.push(Problem::at(
            "workload",
            "`pods` scales the default workload; give `pods` or `workload`, not both",
        ));
    }
    let workload = existing(&file.workload, base, "workload", problems);
    let nodepools = existing(&file.nodepools, base, "nodepools", problems);
    let reservations = match &file.reservations {
        None => Vec::new(),
        Some(path) => super::super::reservations::read(&base.join(path)).unwrap_or_else(|e| {
            problems.push(Problem::at("reservations", e));
            Vec::new()
        }),
    };
    if file.controller.replicas == 0 {
        problems.push(Problem::at("controller.replicas", "must be at least 1"));
    }
    let flags = env_flags(&file.controller.env, problems);
    let offerings = region_offerings(problems);
    let mut steps = Vec::new();
    for (index, value) in file.steps.into_iter().enumerate() {
        match format::step(index, value) {
            Ok(step) => {
                let path = format!("steps[{index}]");
                let resolved = check_step(&step, &path, base, &offerings, problems);
                steps.push(Planned { step, resolved });
            }
            Err(problem) => problems.push(problem),
        }
    }
    if file.controller.replicas < 2 {
        for (index, planned) in steps.iter().enumerate() {
            if matches!(planned.step.action, Action::Fault(Fault::LeaseDelay { .. })) {
                problems.push(Problem::at(
                    format!("steps[{index}].fault.kind"),
                    "lease-delay needs leader election: controller.replicas of 2 or more",
                ));
            }
        }
    }
    check_expect(&file.expect, problems);
    let inputs = inputs::read(&Sources {
        pods: file.pods.unwrap_or(super::super::defaults::DEFAULT_PODS),
        nodepools,
        workload,
    })
    .map_err(|errors| {
        problems.extend(errors.into_iter().map(|e| Problem::at("", e)));
    })
    .ok()?;
    Some(Scenario {
        name: file.name,
        inputs,
        replicas: file.controller.replicas,
        flags,
        reservations,
        steps,
        expect: file.expect,
    })
}

/// The paths resolved against the scenario's folder; a missing one is a problem.
fn existing(paths: &[String], base: &Path, key: &str, problems: &mut Vec<Problem>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let full = base.join(path);
        if full.exists() {
            found.push(full);
        } else {
            problems.push(Problem::at(
                format!("{key}[{i}]"),
                format!("no such file {}", full.display()),
            ));
        }
    }
    found
}

/// `controller.env` as settings flags: each variable must be one the controller reads, and
/// its value must pass the controller's own parser and validation.
fn env_flags(
    env: &std::collections::BTreeMap<String, Value>,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let mut flags = Vec::new();
    for (name, value) in env {
        let path = format!("controller.env.{name}");
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                problems.push(Problem::at(
                    path,
                    format!("expected a scalar, found {other}"),
                ));
                continue;
            }
        };
        match setting_flag(name, &text) {
            Ok(flag) => flags.push(flag),
            Err(error) => problems.push(Problem::at(path, error)),
        }
    }
    flags
}

fn region_offerings(problems: &mut Vec<Problem>) -> Vec<PricedOffering> {
    match Catalog::embedded(REGION) {
        Ok(catalog) => catalog_offerings(&catalog.instance_types(&AllocatableSettings::default())),
        Err(error) => {
            problems.push(Problem::at("", format!("the embedded catalog: {error}")));
            Vec::new()
        }
    }
}

fn check_step(
    step: &Step,
    path: &str,
    base: &Path,
    offerings: &[PricedOffering],
    problems: &mut Vec<Problem>,
) -> Resolved {
    let mut problem = |sub: &str, message: String| {
        problems.push(Problem::at(format!("{path}.{sub}"), message));
    };
    match &step.action {
        Action::Wait(Wait {
            pods_bound,
            settled,
            ..
        }) => match (pods_bound, settled) {
            (Some(_), None) | (None, Some(true)) => {}
            (None, Some(false)) => problem("wait.settled", "only `settled: true` waits".into()),
            _ => problem(
                "wait",
                "give exactly one of `podsBound` and `settled`".into(),
            ),
        },
        Action::Scale(scale) => match (&scale.deployment, &scale.nodepool) {
            (Some(deployment), None) => {
                if deployment.split('/').any(str::is_empty) || deployment.matches('/').count() > 1 {
                    problem(
                        "scale.deployment",
                        format!("{deployment:?} is not NAME or NAMESPACE/NAME"),
                    );
                }
            }
            (None, Some(pool)) => {
                if pool.is_empty() || pool.contains('/') {
                    problem("scale.nodepool", format!("{pool:?} is not a NodePool name"));
                }
            }
            _ => problem(
                "scale",
                "give exactly one of `deployment` and `nodepool`".into(),
            ),
        },
        Action::Apply(file) => {
            let full = base.join(file);
            if !full.exists() {
                problem("apply", format!("no such file {}", full.display()));
                return Resolved::Nothing;
            }
            return match read_objects(std::slice::from_ref(&full)).and_then(|objects| {
                let inventory = inventory::inventory(&objects)
                    .map_err(|ps| ps.iter().map(ToString::to_string).collect::<Vec<_>>())?;
                Ok((objects, inventory))
            }) {
                Ok((objects, inventory)) => Resolved::Objects(objects, Box::new(inventory)),
                Err(errors) => {
                    for error in errors {
                        problem("apply", error);
                    }
                    Resolved::Nothing
                }
            };
        }
        Action::Delete(delete) => {
            if delete.count == 0 {
                problem("delete.count", "must be at least 1".into());
            }
        }
        Action::Fault(fault) => return check_fault(fault, &mut problem, offerings),
        Action::Controller(ControllerStep {
            kill,
            restart,
            when,
            ..
        }) => match (kill, restart) {
            (Some(_), None) => {}
            (None, Some(_)) if when.is_none() => {}
            (None, Some(_)) => problem("controller.when", "only a kill waits for a launch".into()),
            _ => problem(
                "controller",
                "give exactly one of `kill: leader|any` and `restart: all`".into(),
            ),
        },
        Action::Drift(_) => {}
    }
    Resolved::Nothing
}

fn check_fault(
    fault: &Fault,
    problem: &mut impl FnMut(&str, String),
    offerings: &[PricedOffering],
) -> Resolved {
    let mut fraction = |field: &str, value: f64| {
        if !(value > 0.0 && value <= 1.0) {
            problem(
                &format!("fault.{field}"),
                format!("{value} is not in (0, 1]"),
            );
        }
    };
    match fault {
        Fault::Ice {
            offerings: patterns,
            ..
        } => {
            let mut pools = Vec::new();
            for (i, pattern) in patterns.iter().enumerate() {
                match OfferingPattern::parse(pattern) {
                    Ok(p) => {
                        let before = pools.len();
                        pools.extend(
                            offerings
                                .iter()
                                .filter(|o| p.covers(&o.key))
                                .map(|o| o.key.clone()),
                        );
                        if pools.len() == before {
                            problem(
                                &format!("fault.offerings[{i}]"),
                                format!("{pattern:?}: the region sells no such pool"),
                            );
                        }
                    }
                    Err(error) => problem(
                        &format!("fault.offerings[{i}]"),
                        format!("{pattern:?}: {error}"),
                    ),
                }
            }
            if patterns.is_empty() {
                problem("fault.offerings", "names no pool".into());
            }
            pools.sort();
            pools.dedup();
            return Resolved::Pools(pools);
        }
        Fault::Ec2Throttle { rate, .. } => fraction("rate", *rate),
        Fault::ApiErrors { rate, status, .. } => {
            fraction("rate", *rate);
            if let Some(status) = status
                && !matches!(status, 500 | 429)
            {
                problem("fault.status", format!("{status} is not 500 or 429"));
            }
        }
        Fault::WatchDrop { every, .. } => {
            if every.as_std().is_zero() {
                problem("fault.every", "must be longer than zero".into());
            }
        }
        Fault::ApiLatency { .. } => {}
        Fault::SpotInterruption { fraction: f } => fraction("fraction", *f),
        Fault::LeaseDelay { latency, .. } => {
            if latency.as_std().is_zero() {
                problem("fault.latency", "must be longer than zero".into());
            }
        }
        Fault::ReservationEnd { id } | Fault::ReservationInterruption { id } => {
            if !id.starts_with("cr-") {
                problem(
                    "fault.id",
                    format!("{id:?} is not a capacity reservation id"),
                );
            }
        }
        Fault::ActorPanic { actor, count } => {
            if !kerf_actors::supervisor::FAULT_ACTORS.contains(&actor.as_str()) {
                problem(
                    "fault.actor",
                    format!(
                        "unknown actor {actor:?} (expected one of {})",
                        kerf_actors::supervisor::FAULT_ACTORS.join(", ")
                    ),
                );
            }
            if *count == 0 {
                problem("fault.count", "must be at least 1".into());
            }
        }
    }
    Resolved::Nothing
}

fn check_expect(expect: &Expect, problems: &mut Vec<Problem>) {
    if let Some(cost) = expect.max_hourly_cost
        && !(cost.is_finite() && cost >= 0.0)
    {
        problems.push(Problem::at(
            "expect.maxHourlyCost",
            format!("{cost} is not a price in $/hour"),
        ));
    }
    for pool in expect.node_pool_nodes.iter().flat_map(|pools| pools.keys()) {
        if pool.is_empty() || pool.contains('/') {
            problems.push(Problem::at(
                "expect.nodePoolNodes",
                format!("{pool:?} is not a NodePool name"),
            ));
        }
    }
}

/// `TYPE:ZONE[:CAPACITY]` where TYPE and ZONE may hold AWS wildcards (`c6a.*`, `?`), and
/// CAPACITY (`spot` or `on-demand`) defaults to both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferingPattern {
    instance_type: String,
    zone: String,
    capacity_type: Option<CapacityType>,
}

impl OfferingPattern {
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(':').map(str::trim).collect();
        let (instance_type, zone, capacity) = match parts.as_slice() {
            [t, z] => (*t, *z, None),
            [t, z, c] => (*t, *z, Some(*c)),
            _ => {
                return Err(
                    "expected TYPE:ZONE or TYPE:ZONE:CAPACITY, e.g. c6a.*:us-east-1a:spot".into(),
                );
            }
        };
        if instance_type.is_empty() || zone.is_empty() {
            return Err("an empty type or zone (use * for any)".into());
        }
        let capacity_type = capacity
            .map(|c| {
                CapacityType::parse(c)
                    .ok_or_else(|| format!("capacity type {c:?} is not spot or on-demand"))
            })
            .transpose()?;
        Ok(Self {
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
            capacity_type,
        })
    }

    pub fn covers(&self, key: &OfferingKey) -> bool {
        wildcard::matches(&self.instance_type, &key.instance_type)
            && wildcard::matches(&self.zone, &key.zone)
            && self.capacity_type.is_none_or(|c| c == key.capacity_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario_file(body: &str) -> (PathBuf, PathBuf) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kerf-scenario-check-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("s.yaml");
        std::fs::write(&file, body).expect("written");
        (dir, file)
    }

    fn problems(body: &str) -> Vec<String> {
        let (dir, file) = scenario_file(body);
        let result = read(&file);
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        let problems = result.err().expect("refused");
        problems.to_string().lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_valid_scenario_resolves_its_steps() {
        let (dir, file) = scenario_file(
            "name: t\npods: 4\ncontroller: {replicas: 2, env: {BATCH_IDLE_DURATION: 1s}}\n\
             steps:\n  - wait: {podsBound: all, timeout: 1m}\n  - fault: {kind: ice, offerings: [\"c6a.*:us-east-1a:spot\"], for: 1m}\n\
             expect: {maxNodes: 3}\n",
        );
        let scenario = read(&file).expect("valid");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        assert_eq!(scenario.replicas, 2);
        assert_eq!(scenario.flags, ["--batch-idle-duration=1s"]);
        assert_eq!(scenario.inputs.inventory.pods.len(), 4);
        let Resolved::Pools(pools) = &scenario.steps[1].resolved else {
            panic!("pools resolved");
        };
        assert!(!pools.is_empty());
        assert!(pools.iter().all(|p| p.instance_type.starts_with("c6a.")
            && p.zone == "us-east-1a"
            && p.capacity_type == CapacityType::Spot));
    }

    /// The scenarios shipped in `loadtest/scenarios` all pass the checks a run starts with.
    #[test]
    fn every_built_in_scenario_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../loadtest/scenarios");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("the scenarios folder")
            .map(|entry| entry.expect("an entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        assert!(files.len() >= 10, "{files:?}");
        for file in files {
            if let Err(problems) = read(&file) {
                panic!("{}:\n{problems}", file.display());
            }
        }
    }

    #[test]
    fn every_problem_is_reported_with_file_and_path() {
        let lines = problems(
            "name: t\nworkload: [missing.yaml]\ncontroller: {env: {BATCH_IDLE_DURATON: 1s, BATCH_MAX_DURATION: soon}}\n\
             steps:\n  - fault: {kind: ec2-throttle, rate: 1.5}\n  - fault: {kind: spot-interruption, fraction: 0}\n\
             \x20 - fault: {kind: ice, offerings: [\"m9.*:us-east-1a\", \"bad\"]}\n  - apply: nope.yaml\n\
             \x20 - controller: {kill: leader, restart: all}\n  - wait: {timeout: 1m}\n\
             \x20 - scale: {deployment: web, nodepool: fixed, replicas: 2}\n  - scale: {nodepool: a/b, replicas: 1}\n\
             expect: {nodePoolNodes: {\"\": 1}}\n",
        );
        let expected = [
            "workload[0]: no such file",
            "controller.env.BATCH_IDLE_DURATON: not a setting the controller reads",
            "controller.env.BATCH_MAX_DURATION: \"soon\"",
            "steps[0].fault.rate: 1.5 is not in (0, 1]",
            "steps[1].fault.fraction: 0 is not in (0, 1]",
            "steps[2].fault.offerings[0]: \"m9.*:us-east-1a\": the region sells no such pool",
            "steps[2].fault.offerings[1]: \"bad\": expected TYPE:ZONE",
            "steps[3].apply: no such file",
            "steps[4].controller: give exactly one of",
            "steps[5].wait: give exactly one of",
            "steps[6].scale: give exactly one of `deployment` and `nodepool`",
            "steps[7].scale.nodepool: \"a/b\" is not a NodePool name",
            "expect.nodePoolNodes: \"\" is not a NodePool name",
        ];
        for want in expected {
            assert!(
                lines
                    .iter()
                    .any(|l| l.contains("s.yaml: ") && l.contains(want)),
                "{want:?} not in {lines:#?}"
            );
        }
    }

    #[test]
    fn a_lease_delay_needs_two_replicas_and_a_latency() {
        let lines = problems(
            "name: t\nsteps:\n  - fault: {kind: lease-delay, replica: leader, latency: 0s}\n",
        );
        assert!(
            lines.iter().any(|l| l.ends_with(
                "s.yaml: steps[0].fault.kind: lease-delay needs leader election: controller.replicas of 2 or more"
            )),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.ends_with("s.yaml: steps[0].fault.latency: must be longer than zero")),
            "{lines:#?}"
        );
        let (dir, file) = scenario_file(
            "name: t\ncontroller: {replicas: 2}\nsteps:\n  - fault: {kind: lease-delay, replica: leader, latency: 12s, for: 1m}\n",
        );
        let checked = read(&file);
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        assert!(
            checked.is_ok(),
            "{:?}",
            checked.err().map(|p| p.to_string())
        );
    }

    #[test]
    fn a_bad_manifest_in_an_apply_step_is_named() {
        let (dir, file) = scenario_file("name: t\nsteps:\n  - apply: more.yaml\n");
        std::fs::write(
            dir.join("more.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n      image: i\n      resources: {requests: {cpu: lots}}\n",
        )
        .expect("written");
        let problems = read(&file).err().expect("refused").to_string();
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        assert!(problems.contains("steps[0].apply: "), "{problems}");
        assert!(problems.contains("more.yaml"), "{problems}");
        assert!(problems.contains("Pod/p"), "{problems}");
    }

    #[test]
    fn an_unknown_fault_kind_is_refused_before_anything_runs() {
        let lines = problems(
            "name: t\nsteps:\n  - wait: {settled: true, timeout: 1m}\n  - fault: {kind: icee}\n",
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].ends_with("s.yaml: steps[1].fault.kind: unknown fault \"icee\" (expected one of ice, ec2-throttle, api-errors, watch-drop, api-latency, spot-interruption, lease-delay, actor-panic, reservation-end, reservation-interruption)"),
            "{lines:?}"
        );
    }
}
