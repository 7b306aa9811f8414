//! What triggers the Batcher: provisionable pods, as upstream's provisioner is triggered.
//! A pod triggers when it changes (once cluster state has synced); every pending pod is
//! triggered again every [`RETRIGGER_PERIOD`], when this replica becomes leader (a standby
//! skips its batches, so a new leader starts from every pending pod), and at once when
//! capacity may have been freed for them: a NodeClaim deleted (for example one whose launch
//! was refused for insufficient capacity), a NodePool's limits raised or a node class
//! becoming Ready (its pools were left out until then); when a Node
//! starts deleting, whose pods then need replacement capacity; and when a NodeClaim's
//! nomination window (or its limit) ends, releasing the pods it held. These are
//! subscriptions to the watch streams' changes, wired by the daemon; nothing else needs a
//! hook to get pods provisioned again.
//!
//! A re-trigger of every pending pod waits for room in the Batcher's mailbox rather than
//! dropping, so a burst larger than the mailbox is paced, not lost; re-trigger requests that
//! arrive while one is running coalesce into the next.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kerf::api::{Conditions, EC2NodeClass, NodeClaim, NodePool};
use kerf::pods::{LeanPod, PodLike};
use kerf::resources::Quantity;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::Trigger;
use crate::created_claims::CreatedClaims;
use crate::mailbox::{DeliverError, Outbox};
use crate::metrics::MAILBOX_DROPPED;
use crate::state::{Change, ClusterState, is_provisionable};

/// How often every pending pod is triggered again: upstream's provisioner re-triggers
/// pending pods every 10 s. It also repairs a trigger dropped on a full Batcher mailbox.
pub const RETRIGGER_PERIOD: Duration = Duration::from_secs(10);

/// Asks for every pending pod to be triggered again; cheap to clone, requests coalesce.
#[derive(Clone, Debug, Default)]
pub struct Retrigger(Arc<Notify>);

impl Retrigger {
    pub fn request(&self) {
        self.0.notify_one();
    }

    /// Completes at the next request (or at once, for one made since the last).
    pub(crate) async fn requested(&self) {
        self.0.notified().await;
    }
}

/// The pod subscription: a changed provisionable pod triggers the Batcher once cluster
/// state has synced (before that, the first re-trigger covers every pod).
pub fn on_pod(
    state: Arc<ClusterState>,
    batcher: Outbox<Trigger>,
) -> impl FnMut(&LeanPod, Change) + Send + 'static {
    move |pod, change| {
        if change == Change::Applied && state.synced() && is_provisionable(pod) {
            trigger(&batcher, pod);
        }
    }
}

/// The NodeClaim subscription: a deleted NodeClaim may have held pods' capacity.
pub fn on_node_claim(retrigger: Retrigger) -> impl FnMut(&NodeClaim, Change) + Send + 'static {
    move |_, change| {
        if change == Change::Deleted {
            retrigger.request();
        }
    }
}

/// The Node subscription: a Node that starts deleting has pods to place elsewhere. A Node
/// only tainted for disruption does not trigger at once: the orchestrator that tainted it
/// is creating its replacements, which the next round must see rather than race (its pods
/// still count as pending in every round, see [`crate::state`]).
pub fn on_node(retrigger: Retrigger) -> impl FnMut(&Node, Change) + Send + 'static {
    let mut terminating = std::collections::HashSet::new();
    move |node, change| {
        let name = node.metadata.name.clone().unwrap_or_default();
        if change == Change::Applied && node.metadata.deletion_timestamp.is_some() {
            if terminating.insert(name) {
                retrigger.request();
            }
        } else {
            terminating.remove(&name);
        }
    }
}

/// The NodePool subscription: a NodePool whose limits rose (or was created) may take pods
/// it refused before.
pub fn on_node_pool(retrigger: Retrigger) -> impl FnMut(&NodePool, Change) + Send + 'static {
    let mut seen: HashMap<String, Option<kerf::api::nodeclaim::ResourceList>> = HashMap::new();
    move |pool, change| {
        let name = pool.name().to_owned();
        if change == Change::Deleted {
            seen.remove(&name);
            return;
        }
        let limits = pool.limits().cloned();
        let before = seen.insert(name, limits.clone());
        let rose = match before {
            None => true,
            Some(before) => limits_rose(before.as_ref(), limits.as_ref()),
        };
        if rose {
            retrigger.request();
        }
    }
}

/// The node class subscription: a class that turns Ready opens the pools rounds left out
/// while it was not, so the pods waiting for them are planned at once.
pub fn on_node_class(retrigger: Retrigger) -> impl FnMut(&EC2NodeClass, Change) + Send + 'static {
    let mut ready: HashMap<String, bool> = HashMap::new();
    move |class, change| {
        let name = class.metadata.name.clone().unwrap_or_default();
        if change == Change::Deleted {
            ready.remove(&name);
            return;
        }
        let now = class
            .conditions()
            .condition(kerf::api::condition::types::READY)
            .is_some_and(|c| c.is_true());
        if now && ready.insert(name, now) != Some(true) {
            retrigger.request();
        }
    }
}

/// Whether `after` allows more of some resource than `before` (no limit allows anything;
/// a value that does not parse counts as a rise, so the pods are looked at again).
fn limits_rose(
    before: Option<&kerf::api::nodeclaim::ResourceList>,
    after: Option<&kerf::api::nodeclaim::ResourceList>,
) -> bool {
    let Some(before) = before else { return false };
    let Some(after) = after else { return true };
    before
        .iter()
        .any(|(resource, old)| match after.get(resource) {
            None => true,
            Some(new) => match (Quantity::parse(&old.0), Quantity::parse(&new.0)) {
                (Ok(old), Ok(new)) => new > old,
                _ => old != new,
            },
        })
}

/// Triggers every pending pod once cluster state has synced, then every
/// [`RETRIGGER_PERIOD`], whenever this replica becomes leader, and on each request. A
/// Batcher that refuses (stopped) is warned about and counted, and tried again next time.
pub async fn retrigger(
    state: Arc<ClusterState>,
    batcher: Outbox<Trigger>,
    requests: Retrigger,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        () = state.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    let mut leading = *leader.borrow_and_update();
    loop {
        // CapacityBuffers' virtual pods are pending for good: their round keeps the room.
        for pod in state
            .provisionable_pods()
            .into_iter()
            .chain(state.buffer_pods())
        {
            let Some(uid) = pod.meta().uid.map(str::to_owned) else {
                continue;
            };
            if let Err(err) = batcher.enqueue(Trigger { pod_uid: uid }).await {
                metrics::counter!(MAILBOX_DROPPED, "mailbox" => batcher.depth().name().to_owned())
                    .increment(1);
                tracing::warn!(error = %err, "re-triggering pending pods");
                break;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RETRIGGER_PERIOD) => {}
            () = became_leader(&mut leader, &mut leading) => {}
            () = requests.requested() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Requests a re-trigger as each nomination window of `created` (or its limit) ends: the
/// pods a NodeClaim held are planned afresh at once, not at the next periodic re-trigger up
/// to [`RETRIGGER_PERIOD`] later — the pods the kube-scheduler did not place on it are
/// waiting.
pub async fn on_nomination_lapse(
    created: CreatedClaims,
    requests: Retrigger,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut fired = Instant::now();
    loop {
        let now = Instant::now();
        let horizon = now + RETRIGGER_PERIOD;
        let lapse = created.next_lapse_after(fired).filter(|at| *at <= horizon);
        tokio::select! {
            () = tokio::time::sleep_until(lapse.unwrap_or(horizon)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if let Some(lapse) = lapse {
            requests.request();
            fired = lapse;
        }
    }
}

fn trigger(batcher: &Outbox<Trigger>, pod: &LeanPod) {
    let Some(uid) = pod.meta().uid.map(str::to_owned) else {
        return;
    };
    match batcher.try_deliver(Trigger { pod_uid: uid }) {
        Ok(()) => {}
        // Counted by the outbox; the periodic re-trigger triggers the pod again.
        Err(DeliverError::Full(_)) => {}
        Err(err @ DeliverError::Closed(_)) => tracing::warn!(error = %err, "triggering batcher"),
    }
}

/// Completes when leadership turns from false to true; never, once it can no longer change.
/// `leading` is the last value seen, kept by the caller so that no turn is missed between
/// two calls.
async fn became_leader(leader: &mut watch::Receiver<bool>, leading: &mut bool) {
    loop {
        if leader.changed().await.is_err() {
            return std::future::pending().await;
        }
        let was = std::mem::replace(leading, *leader.borrow_and_update());
        if *leading && !was {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

    use super::*;

    fn limits(cpu: &str) -> kerf::api::nodeclaim::ResourceList {
        BTreeMap::from([("cpu".to_owned(), ApiQuantity(cpu.to_owned()))])
    }

    #[test]
    fn only_a_rise_or_a_removed_limit_counts() {
        assert!(limits_rose(Some(&limits("10")), Some(&limits("20"))));
        assert!(limits_rose(Some(&limits("10")), Some(&limits("10500m"))));
        assert!(!limits_rose(Some(&limits("10")), Some(&limits("10000m"))));
        assert!(!limits_rose(Some(&limits("10")), Some(&limits("5"))));
        assert!(limits_rose(Some(&limits("10")), None));
        assert!(limits_rose(Some(&limits("10")), Some(&BTreeMap::new())));
        assert!(!limits_rose(None, Some(&limits("10"))));
        assert!(!limits_rose(None, None));
    }

    fn class(ready: Option<&str>) -> EC2NodeClass {
        let conditions: Vec<serde_json::Value> = ready
            .map(|status| {
                serde_json::json!({"type": "Ready", "status": status, "reason": "R",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "main"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "s"}], "securityGroupSelectorTerms": [{"id": "g"}]},
            "status": {"conditions": conditions},
        }))
        .expect("a valid EC2NodeClass")
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_class_turning_ready_requests_a_retrigger_once() {
        let retrigger = Retrigger::default();
        let mut on_change = on_node_class(retrigger.clone());
        let requested = |r: &Retrigger| {
            let r = r.clone();
            async move {
                tokio::time::timeout(Duration::from_millis(10), r.requested())
                    .await
                    .is_ok()
            }
        };
        on_change(&class(None), Change::Applied);
        on_change(&class(Some("False")), Change::Applied);
        assert!(!requested(&retrigger).await, "not Ready yet");
        on_change(&class(Some("True")), Change::Applied);
        assert!(requested(&retrigger).await, "turned Ready");
        on_change(&class(Some("True")), Change::Applied);
        assert!(!requested(&retrigger).await, "still Ready: nothing new");
    }
}
