//! `--report DIR`: what one run recorded, for people and for tools. The recorder samples the
//! simulated world once a second while the run goes (so a spike that is gone by the end is
//! still seen); a scenario adds the windows its faults were active in and its expectations
//! with what was measured. Written as `report.json` (this module's types, camelCase) and
//! `report.html` (plots, `html`), both by [`write()`]. The types here are the contract between the recorder, the
//! scenario runner and the writers; keep them plain data.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

mod html;
mod recorder;

pub use recorder::{Recorder, Recording};

/// The world as the recorder saw it at one moment of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Seconds since the run started.
    pub at_seconds: f64,
    pub pods_pending: u64,
    pub pods_bound: u64,
    /// On-demand instances outside any capacity reservation.
    pub nodes_on_demand: u64,
    pub nodes_spot: u64,
    /// Instances in a capacity reservation.
    pub nodes_reserved: u64,
    /// NodeClaims by phase (`Launching`, `Registered`, `Initialized`, `Deleting`, ...).
    pub nodeclaims_by_phase: BTreeMap<String, u64>,
    /// Prices of the running instances (a reserved one at upstream's near-zero), in $/hour.
    pub hourly_cost: f64,
    /// The controller's live heap: bytes its threads allocated and had not yet freed
    /// (allocator overhead not included); `None` where it is not measured.
    pub controller_memory_bytes: Option<u64>,
    /// Requests the API emulator served so far.
    pub api_requests: u64,
    /// Calls the simulated EC2 answered so far.
    pub cloud_calls: u64,
    /// The simulated kube-scheduler's work so far; `None` where no scheduler was read.
    pub scheduler: Option<SchedulerSample>,
    /// Labels of the faults active at this moment.
    pub faults_active: Vec<String>,
}

/// The simulated kube-scheduler's totals at one moment, and its longest cycle since the
/// sample before: a cycle decides every due pod before it binds any, so a long one delays
/// the bindings of pods that fit (the pending → bound times a report shows include it).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerSample {
    pub cycles: u64,
    /// Pods tried, a pod counted once per cycle that tried it.
    pub pods_tried: u64,
    pub pods_bound: u64,
    pub pods_marked_unschedulable: u64,
    pub longest_cycle_seconds: f64,
}

/// A fault a scenario injected: from when to when, in seconds since the start (`None`: still
/// active at the end).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultWindow {
    pub label: String,
    pub from_seconds: f64,
    pub to_seconds: Option<f64>,
}

/// A moment a scenario marked on the time axis: a controller killed or restarted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mark {
    pub label: String,
    pub at_seconds: f64,
}

/// One expectation of a scenario: what was wanted, what was measured, whether it held.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectationResult {
    /// The key in the scenario's `expect` (`allPodsBound`, `leakedInstances`, ...).
    pub name: String,
    pub wanted: String,
    pub measured: String,
    pub held: bool,
}

/// Everything one report holds.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The scenario's name, or `simulate` for a run without one.
    pub name: String,
    pub series: Vec<Sample>,
    pub fault_windows: Vec<FaultWindow>,
    /// Controller kills and restarts, in order.
    pub marks: Vec<Mark>,
    pub expectations: Vec<ExpectationResult>,
    /// Every bound pod's pending → bound time, in seconds.
    pub pending_to_bound_seconds: Vec<f64>,
    /// Nearest-rank percentiles of `pending_to_bound_seconds`.
    pub pending_to_bound_percentiles: Percentiles,
    /// Replicas that exhausted an actor's restart budget (`/healthz` failing; `kerf
    /// controller` would have exited): `identity: actor restarted N times ...`.
    pub unhealthy_replicas: Vec<String>,
}

/// Nearest-rank percentiles, in seconds (zeros when nothing was measured).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(samples: &[f64]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |p| crate::figures::nearest_rank(&sorted, p);
        Self {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: rank(1.0),
        }
    }
}

impl Recording {
    /// The report of this recording, with what a scenario adds (nothing for a plain run).
    pub fn into_report(
        self,
        name: &str,
        fault_windows: Vec<FaultWindow>,
        marks: Vec<Mark>,
        expectations: Vec<ExpectationResult>,
    ) -> Report {
        Report {
            name: name.to_owned(),
            pending_to_bound_percentiles: Percentiles::of(&self.pending_to_bound_seconds),
            series: self.series,
            fault_windows,
            marks,
            expectations,
            pending_to_bound_seconds: self.pending_to_bound_seconds,
            unhealthy_replicas: Vec::new(),
        }
    }
}

/// The labels of the faults active now: the scenario runner adds and removes them, the
/// recorder copies them into each sample.
#[derive(Debug, Clone, Default)]
pub struct ActiveFaults(Arc<Mutex<BTreeSet<String>>>);

#[allow(
    dead_code,
    reason = "start and end are the scenario runner's (issue 17)"
)]
impl ActiveFaults {
    pub fn start(&self, label: &str) {
        self.labels().insert(label.to_owned());
    }

    pub fn end(&self, label: &str) {
        self.labels().remove(label);
    }

    pub fn now(&self) -> Vec<String> {
        self.labels().iter().cloned().collect()
    }

    fn labels(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // A panic while holding the lock leaves a plain set behind: still usable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("creating the report directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("rendering report.html: {0}")]
    Html(#[from] html::PlotError),
}

/// Writes `report.json` and `report.html` into `dir` (created if missing).
pub fn write(dir: &Path, report: &Report) -> Result<(), ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir {
        path: dir.to_owned(),
        source,
    })?;
    let json = serde_json::to_vec_pretty(report).map_err(std::io::Error::other);
    write_file(&dir.join("report.json"), json)?;
    let page = html::render(report)?;
    write_file(&dir.join("report.html"), Ok(page.into_bytes()))
}

fn write_file(path: &Path, bytes: std::io::Result<Vec<u8>>) -> Result<(), ReportError> {
    bytes
        .and_then(|bytes| std::fs::write(path, bytes))
        .map_err(|source| ReportError::Write {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_report_reads_back_with_its_series_faults_and_expectations() {
        let dir = std::env::temp_dir().join(format!("kerf-report-{}", std::process::id()));
        let faults = ActiveFaults::default();
        faults.start("ice c6a.*:us-east-1a:spot");
        let report = Report {
            name: "spot-storm".into(),
            series: vec![Sample {
                at_seconds: 1.0,
                pods_pending: 3,
                faults_active: faults.now(),
                ..Sample::default()
            }],
            fault_windows: vec![FaultWindow {
                label: "ice c6a.*:us-east-1a:spot".into(),
                from_seconds: 0.5,
                to_seconds: None,
            }],
            marks: vec![Mark {
                label: "kill kerf-0".into(),
                at_seconds: 0.8,
            }],
            expectations: vec![ExpectationResult {
                name: "leakedInstances".into(),
                wanted: "0".into(),
                measured: "0".into(),
                held: true,
            }],
            pending_to_bound_seconds: vec![12.5],
            pending_to_bound_percentiles: Percentiles::of(&[12.5]),
            unhealthy_replicas: vec!["kerf-1-0: actor lifecycle restarted 6 times".into()],
        };
        write(&dir, &report).expect("writes");
        let page = std::fs::read_to_string(dir.join("report.html")).expect("the page");
        assert!(page.contains("<td>leakedInstances</td>"));
        let text = std::fs::read_to_string(dir.join("report.json")).expect("reads");
        let json: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(json["series"][0]["podsPending"], 3);
        assert_eq!(
            json["series"][0]["faultsActive"][0],
            "ice c6a.*:us-east-1a:spot"
        );
        assert_eq!(
            json["faultWindows"][0]["toSeconds"],
            serde_json::Value::Null
        );
        assert_eq!(json["marks"][0]["label"], "kill kerf-0");
        assert_eq!(json["expectations"][0]["held"], true);
        assert_eq!(json["pendingToBoundPercentiles"]["p99"], 12.5);
        faults.end("ice c6a.*:us-east-1a:spot");
        assert!(faults.now().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn percentiles_are_nearest_rank_over_unsorted_times() {
        let times: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = Percentiles::of(&times);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
    }
}
