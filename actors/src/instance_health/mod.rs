//! Instance health: upstream's instance-status controller. Every [`PERIOD`], while this
//! replica leads and cluster state has synced, it asks the cloud for the status checks and
//! scheduled events of every instance a live NodeClaim runs on
//! ([`InstanceStatusSource`]: DescribeInstanceStatus), and [`assess`] decides:
//! - an instance whose instance or system check has failed for two minutes is terminated
//!   forcefully: its NodeClaim gets `karpenter.sh/nodeclaim-termination-timestamp` = now
//!   and is deleted, so the termination flow does not wait for a drain a broken machine
//!   cannot finish;
//! - an instance with a scheduled maintenance event is cordoned and drained: its NodeClaim
//!   is deleted, and the termination flow evicts its pods as for a spot interruption.
//!
//! Either way the provisioner replaces the capacity. Each unhealthy (instance, category) is
//! counted once in `karpenter_interruption_instance_status_unhealthy_total{category}` while
//! it stays unhealthy (counted again if it recovers and fails anew), as upstream. A pass is
//! idempotent (a NodeClaim already deleting is left alone), so a failed write is retried by
//! the next one. A role without `ec2:DescribeInstanceStatus` is logged as such each pass and
//! the rest of the controller runs on.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::interruption::instance_status::{
    Category, InstanceStatusSource, Remedy, StatusError, Unhealthy, assess,
};
use kerf::labels;
use kube::Client;
use kube::api::Api;
use tokio::sync::watch;

use crate::events::EventRecorder;
use crate::interruption::events;
use crate::metrics::{INTERRUPTION_INSTANCE_STATUS_UNHEALTHY, nodeclaim_disrupted};
use crate::node_repair::{RepairError, delete_same, terminate_now};
use crate::state::{ClusterState, instance_id};

/// Upstream's controller name.
pub const CONTROLLER: &str = "interruption.instancestatus";

/// How often the statuses are read (upstream's interval): EC2 checks every minute, and a
/// failed check counts only after two.
pub const PERIOD: Duration = Duration::from_secs(60);

/// What the poller needs.
#[derive(Clone)]
pub struct Deps {
    pub source: Arc<dyn InstanceStatusSource>,
    pub state: Arc<ClusterState>,
    /// Fenced: writes only while this replica leads.
    pub client: Client,
    pub events: EventRecorder,
}

/// Why acting on one unhealthy instance failed (the next pass tries again).
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("reading instance statuses: {0}")]
    Describe(#[from] StatusError),
    #[error("terminating unhealthy instance {instance_id}: {source}")]
    Terminate {
        instance_id: String,
        #[source]
        source: RepairError,
    },
    #[error(
        "draining instance {instance_id} with a scheduled event: deleting nodeclaim {name}: {source}"
    )]
    Drain {
        instance_id: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Polls every `period` until `shutdown`.
pub async fn run(
    deps: Deps,
    period: Duration,
    leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let poller = Poller::new(deps);
    let mut seen = HashSet::new();
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if !*leader.borrow() || !poller.deps.state.synced() {
            continue;
        }
        for error in poller.pass(&mut seen).await {
            tracing::error!(%error, controller = CONTROLLER, "checking instance health");
        }
    }
}

struct Poller {
    deps: Deps,
    nodeclaims: Api<NodeClaim>,
}

impl Poller {
    fn new(deps: Deps) -> Self {
        Self {
            nodeclaims: Api::all(deps.client.clone()),
            deps,
        }
    }

    /// One poll: reads the statuses, counts the newly unhealthy into `seen` (and forgets
    /// those healthy again), acts on each unhealthy instance; returns the failures.
    async fn pass(&self, seen: &mut HashSet<(String, Category)>) -> Vec<HealthError> {
        let ids = self.instance_ids();
        if ids.is_empty() {
            seen.clear();
            return Vec::new();
        }
        let statuses = match self.deps.source.describe(&ids).await {
            Ok(statuses) => statuses,
            Err(error) => return vec![error.into()],
        };
        let now = Timestamp::now();
        let unhealthy: Vec<Unhealthy> = statuses.iter().filter_map(|s| assess(s, now)).collect();
        count_new(&unhealthy, seen);
        let mut failures = Vec::new();
        for instance in &unhealthy {
            if let Err(error) = self.act(instance).await {
                failures.push(error);
            }
        }
        failures
    }

    /// The instances of the NodeClaims not yet deleting.
    fn instance_ids(&self) -> Vec<String> {
        self.deps
            .state
            .nodeclaims
            .snapshot()
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| instance_id(c.provider_id()?))
            .collect()
    }

    async fn act(&self, instance: &Unhealthy) -> Result<(), HealthError> {
        let id = &instance.instance_id;
        let Some(claim) = self.deps.state.nodeclaim_by_instance_id(id) else {
            return Ok(());
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let node = self.deps.state.node_by_instance_id(id);
        let categories: Vec<&str> = instance.categories.iter().map(|c| c.as_str()).collect();
        tracing::info!(
            nodeclaim = claim.name(),
            instance_id = %id,
            categories = ?categories,
            remedy = ?instance.remedy,
            "instance status is unhealthy"
        );
        events::unhealthy(&self.deps.events, &claim, node.as_deref());
        let deleted = match instance.remedy {
            Remedy::Terminate => {
                terminate_now(&self.nodeclaims, &claim)
                    .await
                    .map_err(|source| HealthError::Terminate {
                        instance_id: id.clone(),
                        source,
                    })?
            }
            Remedy::Drain => self.drain(id, &claim).await?,
        };
        if deleted {
            events::terminating(&self.deps.events, &claim, node.as_deref());
            let label = |key| {
                claim
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .map_or("", String::as_str)
            };
            nodeclaim_disrupted(
                instance.categories[0].kind(),
                label(labels::NODEPOOL),
                label(labels::CAPACITY_TYPE),
            );
        }
        Ok(())
    }

    /// Deletes the NodeClaim the ordinary way: the termination flow cordons and drains.
    async fn drain(&self, instance_id: &str, claim: &NodeClaim) -> Result<bool, HealthError> {
        delete_same(&self.nodeclaims, claim)
            .await
            .map_err(|source| HealthError::Drain {
                instance_id: instance_id.to_owned(),
                name: claim.name().to_owned(),
                source,
            })
    }
}

/// Counts each (instance, category) the first pass it is seen unhealthy, and forgets the
/// ones no longer unhealthy so a relapse counts again.
fn count_new(unhealthy: &[Unhealthy], seen: &mut HashSet<(String, Category)>) {
    let now: HashSet<(String, Category)> = unhealthy
        .iter()
        .flat_map(|u| u.categories.iter().map(|c| (u.instance_id.clone(), *c)))
        .collect();
    for key in now.difference(seen) {
        metrics::counter!(INTERRUPTION_INSTANCE_STATUS_UNHEALTHY, "category" => key.1.as_str())
            .increment(1);
    }
    *seen = now;
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::interruption::instance_status::Remedy;

    fn unhealthy(id: &str, categories: &[Category]) -> Unhealthy {
        Unhealthy {
            instance_id: id.into(),
            categories: categories.to_vec(),
            remedy: Remedy::Terminate,
        }
    }

    fn counted(category: &str) -> u64 {
        crate::testing::counter(&format!(
            "{INTERRUPTION_INSTANCE_STATUS_UNHEALTHY}{{category=\"{category}\"}}"
        ))
    }

    #[test]
    fn an_unhealthy_status_is_counted_once_while_it_lasts_and_again_after_a_relapse() {
        crate::metrics::handle();
        let before = counted("InstanceStatus");
        let mut seen = HashSet::new();
        let sick = [unhealthy("i-count-1", &[Category::InstanceStatus])];
        count_new(&sick, &mut seen);
        count_new(&sick, &mut seen);
        assert_eq!(counted("InstanceStatus") - before, 1);
        count_new(&[], &mut seen);
        count_new(&sick, &mut seen);
        assert_eq!(counted("InstanceStatus") - before, 2);
    }
}
