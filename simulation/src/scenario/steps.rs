//! Running the steps, in order: a step with `at` waits until that much time has passed since
//! the start, any other follows the previous one. Waits that time out are reported and the run
//! goes on — the expectations judge the outcome — but a step that cannot be carried out (a
//! Deployment that does not exist, a kill waiting for a launch that never comes) ends the run
//! as a failure.
//!
//! `podsBound: all` and `settled` do not wait for pods the controller reported it cannot
//! place, unless a capacity fault may be why ([`super::invariants`]). `settled` is read from
//! what the leading controller exposes: no placeable workload pod pending, every NodeClaim
//! Initialized and none being deleted, the disruption loop idle with no `consolidateAfter`
//! running and no command queued — held for longer than the loop's polling period, so a
//! change the loop has not looked at yet would have shown.

use std::time::Duration;

use anyhow::{Context as _, bail};
use kerf_actors::disruption::POLL_PERIOD;
use kerf_loadtest::apiserver::{Cluster, PatchKind};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::super::apply::apply;
use super::super::report::Mark;
use super::super::world::World;
use super::check::{Planned, Resolved};
use super::controllers::Replicas;
use super::faults::Injector;
use super::format::{
    Action, ControllerStep, Delete, DeleteKind, Drift, Kill, NewAmi, PodsBound, Scale, Wait, When,
};
use super::invariants::{Observer, TICK};

/// How long a kill `when: after-launch` waits for a launch by default.
const LAUNCH_PATIENCE: Duration = Duration::from_secs(120);

/// How long a kill of the leader waits for a replica to lead.
const LEADER_PATIENCE: Duration = Duration::from_secs(30);

/// How long a delete step waits for its objects to be gone (finalizers done: a NodeClaim's
/// node drained and its instance terminated), as `kubectl delete` waits.
const DELETE_PATIENCE: Duration = Duration::from_secs(300);

/// How often a wait says it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The running scenario's moving parts.
pub struct Runner<'w> {
    pub world: &'w World,
    pub replicas: Replicas,
    pub injector: Injector,
    pub observer: Observer,
    pub started: Instant,
    /// The end of the last step that added or displaced pods (the workload's start first).
    pub last_displaced: Instant,
    /// Controller kills and restarts, for the report's time axis.
    pub marks: Vec<Mark>,
}

impl Runner<'_> {
    fn mark(&mut self, label: String) {
        self.marks.push(Mark {
            label,
            at_seconds: self.started.elapsed().as_secs_f64(),
        });
    }

    fn say(&self, index: usize, text: &str) {
        let m = self.observer.now();
        eprintln!(
            "[{:>7.1}s] steps[{index}] {text}  (pods {}/{} bound, {} nodes)",
            self.started.elapsed().as_secs_f64(),
            m.bound,
            m.pods,
            m.nodes
        );
    }

    /// Runs `step` (its index names it in messages).
    pub async fn run(&mut self, index: usize, planned: &Planned) -> anyhow::Result<()> {
        if let Some(at) = &planned.step.at {
            tokio::time::sleep_until(self.started + at.as_std()).await;
        }
        let cluster = self.world.cluster();
        let displaced = match &planned.step.action {
            Action::Wait(wait) => {
                self.wait(index, wait).await;
                false
            }
            Action::Scale(scale) => {
                self.say(
                    index,
                    &format!("scale {} to {}", scale.target(), scale.replicas),
                );
                apply_scale(&cluster, scale)?;
                // A static pool's nodes hold no workload pod of their own.
                scale.deployment.is_some()
            }
            Action::Apply(file) => {
                self.say(index, &format!("apply {file}"));
                if let Resolved::Objects(objects, inventory) = &planned.resolved {
                    for note in apply(&cluster, objects, inventory)? {
                        eprintln!("{note}");
                    }
                }
                true
            }
            Action::Delete(delete) => {
                let names = delete_some(&cluster, delete)?;
                let what = format!("{:?} {}", delete.kind, names.join(", "));
                self.say(index, &format!("delete {what}"));
                if gone(&cluster, delete.kind, &names, DELETE_PATIENCE).await {
                    self.say(index, &format!("deleted {what}"));
                } else {
                    self.say(
                        index,
                        &format!("{what}: still there after {DELETE_PATIENCE:?}"),
                    );
                }
                true
            }
            Action::Fault(fault) => {
                let pools = match &planned.resolved {
                    Resolved::Pools(pools) => pools.as_slice(),
                    _ => &[],
                };
                let replica = match fault {
                    super::format::Fault::LeaseDelay { replica, .. } => {
                        let leader = *replica == Kill::Leader;
                        if leader {
                            self.until_led().await;
                        }
                        self.replicas.choose(leader)
                    }
                    _ => None,
                };
                if let super::format::Fault::ActorPanic { actor, count } = fault {
                    self.replicas.arm_panics(actor, *count)?;
                }
                let label = self
                    .injector
                    .inject(self.world, fault, pools, replica.as_deref());
                self.say(index, &format!("fault {label}"));
                if let (super::format::Fault::LeaseDelay { .. }, Some(old)) = (fault, &replica) {
                    self.handover(index, old).await;
                }
                matches!(fault, super::format::Fault::SpotInterruption { .. })
            }
            Action::Controller(step) => {
                self.controller(index, step).await?;
                false
            }
            Action::Drift(Drift { ami: NewAmi::New }) => {
                super::super::drift::change_ami(self.world)?;
                self.say(index, "drift: a newer AMI behind the default EC2NodeClass");
                true
            }
        };
        if displaced {
            self.last_displaced = Instant::now();
        }
        Ok(())
    }

    async fn wait(&mut self, index: usize, wait: &Wait) {
        let what = match wait.pods_bound {
            Some(PodsBound::All) => "every pod bound".to_owned(),
            Some(PodsBound::AtLeast(n)) => format!("{n} pods bound"),
            None => "settled".to_owned(),
        };
        self.say(
            index,
            &format!("wait until {what} (at most {})", wait.timeout),
        );
        let deadline = Instant::now() + wait.timeout.as_std();
        let mut since: Option<Instant> = None;
        let mut next_note = Instant::now() + PROGRESS_EVERY;
        let hold = match wait.pods_bound {
            Some(_) => TICK,
            None => POLL_PERIOD + Duration::from_secs(1),
        };
        loop {
            let holds = match wait.pods_bound {
                Some(bound) => {
                    pods_bound(&self.observer, bound) && workloads_made(&self.world.cluster())
                }
                None => self.settled(),
            };
            since = if holds {
                since.or(Some(Instant::now()))
            } else {
                None
            };
            if since.is_some_and(|s| s.elapsed() >= hold) {
                let excluded = self.observer.now().excluded();
                let done = excluded.map_or(String::new(), |e| format!("; {e}"));
                self.say(index, &format!("{what}: done{done}"));
                return;
            }
            if Instant::now() >= deadline {
                self.say(index, &format!("{what}: timed out after {}", wait.timeout));
                return;
            }
            if Instant::now() >= next_note {
                self.say(index, &format!("waiting until {what}"));
                next_note += PROGRESS_EVERY;
            }
            tokio::time::sleep(TICK).await;
        }
    }

    fn settled(&self) -> bool {
        let Some(leader) = self.replicas.leader() else {
            return false;
        };
        let disruption_idle = leader.disruption.as_ref().is_none_or(|d| {
            let progress = d.progress.borrow();
            progress.idle && progress.next_consolidatable.is_none() && d.in_queue.commands() == 0
        });
        let claims = self
            .world
            .cluster()
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .unwrap_or_default();
        let in_flight = claims.iter().any(|c| {
            c["metadata"]["deletionTimestamp"].is_string() || !has_condition(c, "Initialized")
        });
        let pools = self
            .world
            .cluster()
            .list("karpenter.sh/v1", "nodepools", None, "")
            .unwrap_or_default();
        self.observer.now().waiting() == 0
            && !in_flight
            && disruption_idle
            && static_pools_held(&pools, &claims)
    }

    async fn controller(&mut self, index: usize, step: &ControllerStep) -> anyhow::Result<()> {
        if step.restart.is_some() {
            self.say(index, "restart every controller");
            self.mark("restart".to_owned());
            self.replicas.restart(self.world).await?;
            return Ok(());
        }
        let leader = step.kill == Some(Kill::Leader);
        let hold = (step.when == Some(When::AfterLaunch))
            .then(|| self.world.provider.ec2().hold_next_launch());
        let launched = match hold {
            Some(mut hold) => {
                let patience = step
                    .timeout
                    .as_ref()
                    .map_or(LAUNCH_PATIENCE, |t| t.as_std());
                let Ok(Some(ids)) = tokio::time::timeout(patience, hold.launched()).await else {
                    bail!(
                        "steps[{index}]: no CreateFleet launched within {patience:?} to kill after"
                    );
                };
                Some((hold, ids))
            }
            None => None,
        };
        if leader {
            self.until_led().await;
        }
        let killed = self.replicas.kill(self.world, leader);
        let after = launched.map(|(hold, ids)| {
            // Answered only now: the killed replica never records the launch.
            hold.release();
            format!(" after it launched {}", ids.join(", "))
        });
        match killed {
            Some(identity) => {
                self.mark(format!("kill {identity}"));
                self.say(
                    index,
                    &format!("killed controller {identity}{}", after.unwrap_or_default()),
                );
            }
            None => self.say(index, "no controller to kill"),
        }
        Ok(())
    }
}

impl Runner<'_> {
    /// After `old`'s Lease requests were slowed: waits (at most [`LEADER_PATIENCE`]) for
    /// another replica to lead, and says which did, or that none did.
    async fn handover(&self, index: usize, old: &str) {
        let deadline = Instant::now() + LEADER_PATIENCE;
        loop {
            let leader = self.replicas.choose(true);
            if let Some(new) = leader.filter(|l| l != old) {
                self.say(index, &format!("controller {new} took over from {old}"));
                return;
            }
            if Instant::now() >= deadline {
                self.say(
                    index,
                    &format!("no other controller took over from {old} within {LEADER_PATIENCE:?}"),
                );
                return;
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// Waits (at most [`LEADER_PATIENCE`]) for a replica to lead: between two Leases, or
    /// while a busy leader's renewal is late, none does.
    async fn until_led(&self) {
        let deadline = Instant::now() + LEADER_PATIENCE;
        while self.replicas.leader().is_none() && Instant::now() < deadline {
            tokio::time::sleep(TICK).await;
        }
    }
}

/// `all` is every pod the controller has not reported it cannot place (see
/// [`super::invariants`]).
fn pods_bound(observer: &Observer, bound: PodsBound) -> bool {
    let m = observer.now();
    match bound {
        PodsBound::All => m.pods > 0 && m.waiting() == 0,
        PodsBound::AtLeast(n) => m.bound >= n,
    }
}

/// Whether every Deployment has made the pods it wants: right after a `scale`, the new pods
/// do not exist yet, and "every pod bound" must not pass before they do.
fn workloads_made(cluster: &Cluster) -> bool {
    let deployments = cluster
        .list("apps/v1", "deployments", None, "")
        .unwrap_or_default();
    deployments.iter().all(|d| {
        let wanted = d["spec"]["replicas"].as_i64().unwrap_or(1);
        d["status"]["observedGeneration"] == d["metadata"]["generation"]
            && d["status"]["replicas"].as_i64() == Some(wanted)
    })
}

/// Whether every static NodePool has as many NodeClaims as its `spec.replicas` (at most its
/// `limits.nodes`): one short or over still has work for the controller.
fn static_pools_held(pools: &[Value], claims: &[Value]) -> bool {
    pools.iter().all(|pool| {
        let Some(replicas) = pool["spec"]["replicas"].as_u64() else {
            return true;
        };
        let limit = pool["spec"]["limits"]["nodes"]
            .as_str()
            .and_then(|n| n.parse::<u64>().ok())
            .or_else(|| pool["spec"]["limits"]["nodes"].as_u64())
            .unwrap_or(u64::MAX);
        let name = pool["metadata"]["name"].as_str();
        let members = claims
            .iter()
            .filter(|c| c["metadata"]["labels"][kerf::labels::NODEPOOL].as_str() == name)
            .count() as u64;
        members == replicas.min(limit)
    })
}

fn has_condition(object: &Value, name: &str) -> bool {
    object["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == name && c["status"] == "True")
    })
}

/// Sets a Deployment's or a static NodePool's `spec.replicas`, the field `kubectl scale`
/// writes through the scale subresource.
fn apply_scale(cluster: &Cluster, scale: &Scale) -> anyhow::Result<()> {
    let replicas = json!({"spec": {"replicas": scale.replicas}});
    if let Some(pool) = &scale.nodepool {
        return cluster
            .patch(
                "karpenter.sh/v1",
                "nodepools",
                None,
                pool,
                PatchKind::Merge,
                &replicas,
            )
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("scaling NodePool {pool}: {e}"));
    }
    let deployment = scale.deployment.as_deref().unwrap_or_default();
    let (namespace, name) = deployment
        .split_once('/')
        .unwrap_or(("default", deployment));
    cluster
        .patch(
            "apps/v1",
            "deployments",
            Some(namespace),
            name,
            PatchKind::Merge,
            &replicas,
        )
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("scaling Deployment {namespace}/{name}: {e}"))
}

fn resource(kind: DeleteKind) -> (&'static str, &'static str) {
    match kind {
        DeleteKind::NodeClaim => ("karpenter.sh/v1", "nodeclaims"),
        DeleteKind::Node => ("v1", "nodes"),
        DeleteKind::Pod => ("v1", "pods"),
    }
}

/// Whether every object named ([`qualified`]) is gone within `patience`.
async fn gone(cluster: &Cluster, kind: DeleteKind, names: &[String], patience: Duration) -> bool {
    let (api_version, plural) = resource(kind);
    let deadline = Instant::now() + patience;
    loop {
        let live = cluster
            .list(api_version, plural, None, "")
            .unwrap_or_default();
        if !live.iter().any(|o| names.contains(&qualified(o))) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(TICK).await;
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn qualified(object: &Value) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// Deletes `count` objects of the kind (workload pods only: not a DaemonSet's), picked by
/// uid — random, as uids are — among those not already being deleted; returns their
/// [`qualified`] names.
fn delete_some(cluster: &Cluster, delete: &Delete) -> anyhow::Result<Vec<String>> {
    let (api_version, plural) = resource(delete.kind);
    let mut objects: Vec<Value> = cluster
        .list(api_version, plural, None, "")
        .map_err(|e| anyhow::anyhow!("listing {plural}: {e}"))?
        .into_iter()
        .filter(|o| !o["metadata"]["deletionTimestamp"].is_string())
        .filter(|o| {
            !o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["kind"] == "DaemonSet"))
        })
        .collect();
    objects.sort_by(|a, b| {
        a["metadata"]["uid"]
            .as_str()
            .cmp(&b["metadata"]["uid"].as_str())
    });
    let mut names = Vec::new();
    for object in objects.iter().take(delete.count) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"].as_str();
        cluster
            .delete(api_version, plural, namespace, name, &Default::default())
            .map_err(|e| anyhow::anyhow!("deleting {plural} {name}: {e}"))
            .context("a delete step")?;
        names.push(qualified(object));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims_of(pool: &str, n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| {
                json!({"metadata": {"name": format!("{pool}-{i}"),
                    "labels": {"karpenter.sh/nodepool": pool}}})
            })
            .collect()
    }

    #[test]
    fn a_static_pool_is_held_only_at_its_replicas_within_its_node_limit() {
        let fixed = |spec: Value| json!({"metadata": {"name": "fixed"}, "spec": spec});
        let dynamic = json!({"metadata": {"name": "default"}, "spec": {}});
        let mut claims = claims_of("fixed", 2);
        claims.extend(claims_of("default", 5));
        let pools = |spec: Value| [fixed(spec), dynamic.clone()];
        assert!(static_pools_held(&pools(json!({"replicas": 2})), &claims));
        assert!(
            !static_pools_held(&pools(json!({"replicas": 3})), &claims),
            "short"
        );
        assert!(
            !static_pools_held(&pools(json!({"replicas": 1})), &claims),
            "over"
        );
        assert!(static_pools_held(
            &pools(json!({"replicas": 5, "limits": {"nodes": "2"}})),
            &claims
        ));
        assert!(
            static_pools_held(&[dynamic], &claims),
            "dynamic pools scale with pods"
        );
    }
}
