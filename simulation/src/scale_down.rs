//! `--scale-down FRACTION`: after the scale-out settles, every Deployment is scaled down by
//! FRACTION (replicas × (1 − FRACTION), rounded) and the run goes on until disruption
//! settles — the loop's last pass found nothing, with no `consolidateAfter` about to elapse,
//! no command in flight, no NodeClaim draining and no pod pending, for longer than one
//! polling period (so a change the loop has not looked at yet would have shown) — or the
//! run's `--duration` ends. Every Deployment without a PodDisruptionBudget gets one
//! (`maxUnavailable: 10%`) before the scale-down, so the drains are measured against
//! budgets. The summary gains a disruption section: nodes and $/hour before and after,
//! commands by method, pods evicted and evictions refused by a budget (the controller's
//! `karpenter_pods_eviction_requests_total` by code), how often a budget that met its minimum
//! fell below it (looked at each tick, [`BudgetWatch`]: evictions past a PDB would show
//! there, each logged with where the budget's pods stood), and the time to settle.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use kerf_actors::Daemon;
use kerf_actors::disruption::POLL_PERIOD;
use kerf_loadtest::apiserver::{Cluster, PatchKind};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::budgets::BudgetWatch;
use super::exposition;
use super::figures::{mib, round3};
use super::observe::Tally;
use super::world::World;

/// How often the settle conditions and budgets are sampled.
const TICK: Duration = Duration::from_millis(200);

/// The budget given to Deployments that have none.
const DEFAULT_MAX_UNAVAILABLE: &str = "10%";

/// `--scale-down`'s value: a fraction in (0, 1].
pub fn fraction(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(format!("{value} is not in (0, 1]"))
    }
}

/// The disruption section of the summary.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    pub fraction: f64,
    /// Whether disruption settled before `--duration` ran out.
    pub settled: bool,
    /// From the scale-down to settling (or to the end of the run).
    pub settle_seconds: f64,
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub hourly_cost_before: f64,
    pub hourly_cost_after: f64,
    /// Commands the disruption loop handed to the orchestration queue after the scale-down,
    /// by method.
    pub commands: BTreeMap<String, usize>,
    /// Nodes those commands disrupted.
    pub nodes_disrupted: usize,
    /// Graceful commands dropped after their validation period.
    pub failed_validations: u64,
    /// Evictions the API server accepted.
    pub pods_evicted: u64,
    /// Evictions a PodDisruptionBudget refused (429), retried later.
    pub pdb_blocked_evictions: u64,
    /// Times a budget that met its minimum fell below it.
    pub pdb_violations: u64,
    pub pdbs_added: usize,
    /// Passes that evaluated the methods after the scale-down.
    pub passes: u64,
    /// Their mean time from reading the cluster state to the decision.
    pub mean_pass_seconds: f64,
    /// The longest such pass of the whole run.
    pub longest_pass_seconds: f64,
    /// The controller's heap at its most from the scale-down on (`memory::start_phase`).
    pub controller_heap_peak_bytes: u64,
}

/// Scales the Deployments down and follows disruption until it settles or `deadline`.
pub async fn run(
    world: &World,
    daemon: &Daemon,
    tally: &mut Tally,
    fraction: f64,
    deadline: Instant,
) -> anyhow::Result<Disruption> {
    let cluster = world.cluster();
    let (nodes_before, hourly_cost_before) = fleet(world);
    let pdbs_added = add_budgets(&cluster)?;
    let evictions_before = evictions();
    scale(&cluster, fraction)?;
    let started = Instant::now();
    let handle = daemon
        .disruption
        .as_ref()
        .context("the controller runs without disruption")?;
    // Commands before the scale-down (emptiness during the scale-out) are not its doing.
    let earlier = handle.progress.borrow().clone();
    super::memory::start_phase();
    let mut budgets = BudgetWatch::default();
    let mut violations = 0;
    let mut quiet_since: Option<Instant> = None;
    let settled = loop {
        tokio::time::sleep(TICK).await;
        tally.update(std::time::Instant::now());
        violations += budgets.observe(&cluster);
        let progress = handle.progress.borrow().clone();
        let draining = daemon
            .state
            .nodeclaims
            .snapshot()
            .iter()
            .any(|c| c.metadata.deletion_timestamp.is_some());
        let quiet = progress.idle
            && progress.next_consolidatable.is_none()
            && handle.in_queue.commands() == 0
            && !draining
            && tally.pending().is_empty();
        quiet_since = if quiet {
            quiet_since.or(Some(Instant::now()))
        } else {
            None
        };
        if quiet_since.is_some_and(|q| q.elapsed() > POLL_PERIOD + Duration::from_secs(2)) {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
    };
    let settle = quiet_since.map_or_else(|| started.elapsed(), |q| q.duration_since(started));
    let progress = handle.progress.borrow().clone();
    let since = progress
        .commands
        .get(earlier.commands.len()..)
        .unwrap_or_default();
    let passes = progress.passes - earlier.passes;
    let evaluating = progress.evaluating.saturating_sub(earlier.evaluating);
    let mut commands = BTreeMap::new();
    for (method, _) in since {
        *commands
            .entry(
                serde_json::to_value(method)?
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
            .or_default() += 1;
    }
    let (nodes_after, hourly_cost_after) = fleet(world);
    let evictions_after = evictions();
    Ok(Disruption {
        fraction,
        settled,
        settle_seconds: round3(settle.as_secs_f64()),
        nodes_before,
        nodes_after,
        hourly_cost_before,
        hourly_cost_after,
        commands,
        nodes_disrupted: since.iter().map(|(_, n)| n.len()).sum(),
        failed_validations: progress.failed_validations - earlier.failed_validations,
        pods_evicted: evictions_after.accepted - evictions_before.accepted,
        pdb_blocked_evictions: evictions_after.refused - evictions_before.refused,
        pdb_violations: violations,
        pdbs_added,
        passes,
        mean_pass_seconds: round3(evaluating.as_secs_f64() / passes.max(1) as f64),
        longest_pass_seconds: round3(progress.longest_evaluation.as_secs_f64()),
        controller_heap_peak_bytes: super::memory::phase_peak_bytes(),
    })
}

/// Live instances and their summed hourly price.
fn fleet(world: &World) -> (usize, f64) {
    let instances = world.provider.ec2().instances();
    let live = instances.iter().filter(|i| i.state.is_live());
    let cost: f64 = live.clone().map(|i| i.price).sum();
    (live.count(), (cost * 10_000.0).round() / 10_000.0)
}

fn list(cluster: &Cluster, api_version: &str, plural: &str) -> anyhow::Result<Vec<Value>> {
    cluster
        .list(api_version, plural, None, "")
        .with_context(|| format!("listing {plural}"))
}

/// A `maxUnavailable: 10%` budget for every Deployment no budget selects; returns how many.
fn add_budgets(cluster: &Cluster) -> anyhow::Result<usize> {
    let budgets = list(cluster, "policy/v1", "poddisruptionbudgets")?;
    let mut added = 0;
    for deployment in list(cluster, "apps/v1", "deployments")? {
        let namespace = deployment["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        let covered = budgets.iter().any(|b| {
            b["metadata"]["namespace"] == namespace
                && b["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|m| m.iter().all(|(k, v)| labels[k] == *v))
        });
        if covered {
            continue;
        }
        cluster
            .create(
                "policy/v1",
                "poddisruptionbudgets",
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"maxUnavailable": DEFAULT_MAX_UNAVAILABLE,
                        "selector": deployment["spec"]["selector"].clone()}}),
            )
            .with_context(|| format!("creating a PodDisruptionBudget for {namespace}/{name}"))?;
        added += 1;
    }
    Ok(added)
}

/// Scales every Deployment to `replicas × (1 − fraction)`, rounded.
fn scale(cluster: &Cluster, fraction: f64) -> anyhow::Result<()> {
    for deployment in list(cluster, "apps/v1", "deployments")? {
        let namespace = deployment["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
        let replicas = deployment["spec"]["replicas"].as_u64().unwrap_or(1);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "replica counts are small non-negative integers"
        )]
        let wanted = (replicas as f64 * (1.0 - fraction)).round() as u64;
        cluster
            .patch(
                "apps/v1",
                "deployments",
                Some(namespace),
                name,
                PatchKind::Merge,
                &json!({"spec": {"replicas": wanted}}),
            )
            .with_context(|| format!("scaling Deployment {namespace}/{name}"))?;
    }
    Ok(())
}

/// Eviction requests the controller counted so far: accepted and refused by a budget.
struct Evictions {
    accepted: u64,
    refused: u64,
}

fn evictions() -> Evictions {
    let text = kerf_actors::metrics::render();
    let mut out = Evictions {
        accepted: 0,
        refused: 0,
    };
    for (name, labels, value) in exposition::samples(&text) {
        if name != kerf_actors::metrics::PODS_EVICTION_REQUESTS {
            continue;
        }
        match exposition::label(labels, "code").unwrap_or_default() {
            "200" | "201" => out.accepted += value,
            "429" => out.refused += value,
            _ => {}
        }
    }
    out
}

impl Disruption {
    /// The section for people.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let how = if self.settled {
            "settled"
        } else {
            "did not settle"
        };
        let _ = writeln!(
            out,
            "scale-down      Deployments ×{:.2}: disruption {how} after {:.1}s",
            1.0 - self.fraction,
            self.settle_seconds
        );
        let _ = writeln!(
            out,
            "  nodes         {} → {} (${:.4}/hour → ${:.4}/hour)",
            self.nodes_before, self.nodes_after, self.hourly_cost_before, self.hourly_cost_after
        );
        let commands = self
            .commands
            .iter()
            .map(|(m, n)| format!("{m}={n}"))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            out,
            "  commands      {} ({} nodes disrupted, {} failed validation)",
            if commands.is_empty() {
                "none".to_owned()
            } else {
                commands
            },
            self.nodes_disrupted,
            self.failed_validations
        );
        let _ = writeln!(
            out,
            "  evictions     {} pods evicted, {} refused by a PodDisruptionBudget, budgets fell below their minimum {} times",
            self.pods_evicted, self.pdb_blocked_evictions, self.pdb_violations
        );
        let _ = writeln!(
            out,
            "  loop          {} passes, {:.3}s each on average (longest of the run {:.3}s); controller heap peak {:.1} MiB",
            self.passes,
            self.mean_pass_seconds,
            self.longest_pass_seconds,
            mib(self.controller_heap_peak_bytes)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fraction_is_in_zero_to_one() {
        assert_eq!(fraction("0.5"), Ok(0.5));
        assert_eq!(fraction("1"), Ok(1.0));
        assert!(fraction("0").is_err());
        assert!(fraction("1.5").is_err());
        assert!(fraction("half").is_err());
    }
}
