//! `kerf simulate --drift`: once the scale-out has settled, a newer AMI is published behind
//! the default EC2NodeClass's alias (the simulated EC2 answers it from now on and the node
//! class is touched, so its status resolves the new image at once instead of at the next
//! periodic refresh), and the rollout is followed: how many of the nodes launched before the
//! change the controller marks `Drifted`, how many it replaces (the disruption loop's drift
//! method deletes a drifted node once its replacement is Initialized), and how many pods were
//! left without a node at worst, and for how long; and the NodeClaims launched meanwhile, by
//! `karpenter_nodeclaims_created_total`'s reason: the disruption commands' replacements, and
//! what the Provisioner launched besides (pods whose planned place was taken when they were
//! rescheduled). The phase ends when every old node is replaced and every pod bound; when
//! the old nodes are all drifted but none has been replaced for [`REPLACEMENT_PATIENCE`] (no
//! disruption loop, or a budget of zero); or at the run's deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use kerf::disruption::Reason;
use kerf_actors::metrics::NODECLAIMS_CREATED;
use kerf_actors::nodeclaim_creator::CREATED_REASON_PROVISIONING;
use kerf_actors::orchestrator::reason_label;
use kerf_loadtest::apiserver::{Cluster, PatchKind};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::exposition;
use super::observe::Tally;
use super::world::World;

/// The image the simulated EC2 answers for the alias after the change.
pub const NEW_AMI: &str = "ami-0000000000000d71f";
/// The EC2NodeClass whose AMI changes.
pub const NODE_CLASS: &str = "default";
/// How long the rollout may make no replacement progress once every old node is drifted.
pub const REPLACEMENT_PATIENCE: Duration = Duration::from_secs(60);
const TICK: Duration = Duration::from_millis(200);

/// What the summary reports about the rollout.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// NodeClaims that existed when the AMI changed.
    pub old_nodes: usize,
    /// Of those, marked `Drifted` (reason `AMIDrift` or another).
    pub drifted: usize,
    /// Of those, deleted (or being deleted) by the controller.
    pub replaced: usize,
    /// From the AMI change until every old node was marked drifted.
    pub seconds_to_all_drifted: Option<f64>,
    /// From the AMI change until every old node was gone.
    pub seconds_to_all_replaced: Option<f64>,
    /// The most workload pods unbound at one time during the rollout.
    pub max_pending_pods: usize,
    /// The longest time any pod stayed unbound during the rollout.
    pub longest_pending_seconds: f64,
    /// Workload pods unbound when the phase ended.
    pub pending_at_end: usize,
    /// NodeClaims created during the rollout as drift replacements.
    pub replacements_launched: u64,
    /// NodeClaims the Provisioner created during the rollout.
    pub provisioned: u64,
}

/// `karpenter_nodeclaims_created_total` so far, summed by its `reason` label.
fn created_by_reason() -> BTreeMap<String, u64> {
    count_by_reason(&kerf_actors::metrics::render())
}

/// `karpenter_nodeclaims_created_total` in the exposition `text`, by `reason`.
fn count_by_reason(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (name, labels, value) in exposition::samples(text) {
        if name != NODECLAIMS_CREATED {
            continue;
        }
        if let Some(reason) = exposition::label(labels, "reason") {
            *out.entry(reason.to_owned()).or_default() += value;
        }
    }
    out
}

/// How many more NodeClaims `now` counts than `before` under `reason`.
fn created_since(before: &BTreeMap<String, u64>, now: &BTreeMap<String, u64>, reason: &str) -> u64 {
    let count = |m: &BTreeMap<String, u64>| m.get(reason).copied().unwrap_or(0);
    count(now).saturating_sub(count(before))
}

fn claims(cluster: &Cluster) -> Vec<Value> {
    cluster
        .list("karpenter.sh/v1", "nodeclaims", None, "")
        .unwrap_or_default()
}

fn name_of(v: &Value) -> String {
    v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn is_drifted(claim: &Value) -> bool {
    claim["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Drifted" && c["status"] == "True")
    })
}

/// Publishes the new AMI and makes the node class resolve it.
pub(super) fn change_ami(world: &World) -> anyhow::Result<()> {
    world.provider.set_image_id(NEW_AMI);
    world
        .cluster()
        .patch(
            "karpenter.k8s.aws/v1",
            "ec2nodeclasses",
            None,
            NODE_CLASS,
            PatchKind::Merge,
            &json!({"metadata": {"annotations": {"kerf.dev/simulate-ami": NEW_AMI}}}),
        )
        .map_err(|e| anyhow::anyhow!("touching EC2NodeClass {NODE_CLASS}: {e}"))?;
    Ok(())
}

/// Runs the rollout until it settles or `deadline`.
pub async fn rollout(
    world: &World,
    tally: &mut Tally,
    deadline: Instant,
) -> anyhow::Result<Rollout> {
    let cluster = world.cluster();
    let old: BTreeSet<String> = claims(&cluster).iter().map(name_of).collect();
    let created_before = created_by_reason();
    change_ami(world)?;
    let started = Instant::now();
    let mut report = Rollout {
        old_nodes: old.len(),
        drifted: 0,
        replaced: 0,
        seconds_to_all_drifted: None,
        seconds_to_all_replaced: None,
        max_pending_pods: 0,
        longest_pending_seconds: 0.0,
        pending_at_end: 0,
        replacements_launched: 0,
        provisioned: 0,
    };
    let mut ever_drifted: BTreeSet<String> = BTreeSet::new();
    let mut pending_since: std::collections::HashMap<String, Instant> = Default::default();
    let mut last_progress = Instant::now();
    loop {
        tokio::time::sleep(TICK).await;
        tally.update(std::time::Instant::now());
        let now = Instant::now();
        let pending = tally.pending();
        report.max_pending_pods = report.max_pending_pods.max(pending.len());
        pending_since.retain(|p, _| pending.contains(p));
        for pod in &pending {
            let since = *pending_since.entry(pod.clone()).or_insert(now);
            report.longest_pending_seconds = report
                .longest_pending_seconds
                .max(now.duration_since(since).as_secs_f64());
        }
        let live = claims(&cluster);
        let live_old: Vec<&Value> = live.iter().filter(|c| old.contains(&name_of(c))).collect();
        ever_drifted.extend(
            live_old
                .iter()
                .filter(|c| is_drifted(c))
                .map(|c| name_of(c)),
        );
        let replaced = old.len()
            - live_old
                .iter()
                .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
                .count();
        if replaced > report.replaced {
            last_progress = now;
        }
        report.replaced = replaced;
        report.drifted = ever_drifted.len();
        let elapsed = now.duration_since(started).as_secs_f64();
        if report.seconds_to_all_drifted.is_none() && ever_drifted.len() == old.len() {
            report.seconds_to_all_drifted = Some(elapsed);
            last_progress = now;
        }
        let all_gone = live_old.is_empty();
        if all_gone && report.seconds_to_all_replaced.is_none() {
            report.seconds_to_all_replaced = Some(elapsed);
        }
        let stalled = report.seconds_to_all_drifted.is_some()
            && now.duration_since(last_progress) >= REPLACEMENT_PATIENCE;
        if (all_gone && pending.is_empty()) || stalled || now >= deadline {
            report.pending_at_end = pending.len();
            let created = created_by_reason();
            let drifted = reason_label(Reason::Drifted);
            report.replacements_launched = created_since(&created_before, &created, drifted);
            report.provisioned =
                created_since(&created_before, &created, CREATED_REASON_PROVISIONING);
            return Ok(report);
        }
    }
}

impl Rollout {
    /// The summary's drift section.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let secs =
            |s: Option<f64>| s.map_or_else(|| "not reached".to_owned(), |s| format!("{s:.1}s"));
        let _ = writeln!(
            out,
            "drift (AMI)     {} old node(s): {} drifted in {}, {} replaced in {}",
            self.old_nodes,
            self.drifted,
            secs(self.seconds_to_all_drifted),
            self.replaced,
            secs(self.seconds_to_all_replaced),
        );
        let _ = writeln!(
            out,
            "drift pods      at most {} unbound at once, longest {:.1}s; {} unbound at the end",
            self.max_pending_pods, self.longest_pending_seconds, self.pending_at_end
        );
        let _ = writeln!(
            out,
            "drift launches  {} replacement(s), {} more NodeClaim(s) by the provisioner",
            self.replacements_launched, self.provisioned
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_what_was_not_reached() {
        let rollout = Rollout {
            old_nodes: 4,
            drifted: 4,
            replaced: 0,
            seconds_to_all_drifted: Some(2.25),
            seconds_to_all_replaced: None,
            max_pending_pods: 0,
            longest_pending_seconds: 0.0,
            pending_at_end: 0,
            replacements_launched: 0,
            provisioned: 0,
        };
        let table = rollout.to_table();
        assert!(
            table.contains("4 old node(s): 4 drifted in 2.2s, 0 replaced in not reached"),
            "{table}"
        );
    }

    #[test]
    fn launches_are_counted_by_reason_since_the_rollout_began() {
        let before = count_by_reason(
            "# TYPE karpenter_nodeclaims_created_total counter\n\
             karpenter_nodeclaims_created_total{reason=\"provisioning\",nodepool=\"a\",min_values_relaxed=\"false\"} 7\n\
             karpenter_nodeclaims_created_total{reason=\"provisioning\",nodepool=\"b\",min_values_relaxed=\"false\"} 3\n\
             karpenter_nodeclaims_terminated_total{reason=\"drifted\",nodepool=\"a\"} 9\n",
        );
        assert_eq!(before, BTreeMap::from([("provisioning".to_owned(), 10)]));
        let now = BTreeMap::from([("provisioning".to_owned(), 12), ("drifted".to_owned(), 4)]);
        assert_eq!(created_since(&before, &now, "drifted"), 4);
        assert_eq!(created_since(&before, &now, "provisioning"), 2);
        assert_eq!(created_since(&before, &now, "expired"), 0);
    }
}
