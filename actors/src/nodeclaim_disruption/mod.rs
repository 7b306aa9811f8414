//! Upstream's `nodeclaim.disruption` and `nodeclaim.podevents` controllers: the status the
//! disruption loop reads off each NodeClaim. Per managed NodeClaim that is not being deleted,
//! one pass
//! - moves `status.lastPodEventTime` forward to the node's last pod event ([`podevents`]),
//!   once the NodeClaim is initialized, and on its own at most once per
//!   [`POD_EVENT_WRITE_PERIOD`];
//! - sets `Drifted=True` with upstream's reason, or removes it, for launched NodeClaims only
//!   ([`drift`]); a newly drifted NodeClaim counts `karpenter_nodeclaims_drifted_total`;
//! - sets `Consolidatable=True` once `consolidateAfter` has passed since the last pod event,
//!   or removes it ([`consolidation`]);
//!
//! and writes the status only when one of these changed, as a merge patch locked to the
//! resourceVersion it read (a concurrent lifecycle write makes it fail with 409; the next
//! pass starts over). It sleeps until the next `Consolidatable` is due, and any NodeClaim,
//! NodePool, node class or pod change wakes it ([`crate::requeue`]).

pub mod consolidation;
pub mod drift;
pub mod podevents;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::types;
use kerf::api::{ConditionStatus, Conditions, NodeClaim, NodeClaimStatus, NodePool};
use kerf::cloudprovider::CloudProvider;
use kerf::labels;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::lifecycle::conditions::ConditionSet;
use crate::lifecycle::patch::locked;
use crate::requeue::{self, MAX_SLEEP, Trigger};
use crate::state::{ClusterState, ObjectKey};
use consolidation::Verdict;
use drift::{CloudAnswers, Inputs};
pub use podevents::Departures;

/// Upstream's controller name (reconcile and cloud provider metrics).
pub const CONTROLLER: &str = "nodeclaim.disruption";
/// Through a scale-up pods bind to a new node one after another for seconds, each a later
/// pod event: a NodeClaim's `lastPodEventTime` alone is written at most once per this
/// period, the latest time when it ends. (Upstream writes it per pod scheduled: at 10,000
/// pods, 10,000 writes out of the NodeClaim budget the launches and registrations share.)
pub const POD_EVENT_WRITE_PERIOD: Duration = Duration::from_secs(10);

/// NodeClaims newly marked drifted (labels `reason`, `nodepool`, `capacity_type`).
pub const NODECLAIMS_DRIFTED: &str = "karpenter_nodeclaims_drifted_total";

/// The controller's memory between passes.
pub struct NodeClaimDisruption {
    client: Client,
    state: Arc<ClusterState>,
    cloud: Option<Arc<dyn CloudProvider>>,
    departures: Departures,
    answers: CloudAnswers,
    /// Each NodePool's instance type names, listed at most once per pass (`None`: the
    /// provider failed).
    types: HashMap<String, Option<Arc<HashSet<String>>>>,
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct Pass {
    /// NodeClaims whose status was written.
    pub written: Vec<String>,
    /// When the next pass has something to do.
    pub next: Option<Duration>,
}

impl NodeClaimDisruption {
    pub fn new(
        client: Client,
        state: Arc<ClusterState>,
        cloud: Option<Arc<dyn CloudProvider>>,
        departures: Departures,
    ) -> Self {
        Self {
            client,
            state,
            cloud,
            departures,
            answers: CloudAnswers::default(),
            types: HashMap::new(),
        }
    }

    /// One pass over every NodeClaim.
    pub async fn pass(&mut self) -> Result<Pass, kube::Error> {
        let claims = self.state.nodeclaims.snapshot();
        let last_events = podevents::last_events(&self.state.pods.snapshot(), &self.departures);
        let mut pass = Pass::default();
        self.types.clear();
        for claim in claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
        {
            let Some(pool) = claim
                .nodepool_name()
                .and_then(|p| self.state.nodepools.get(&ObjectKey::new(None, p)))
            else {
                continue;
            };
            let now = Timestamp::now();
            let (wanted, wait) = self.wanted(&pool, claim, &last_events, now).await;
            if let Some(wait) = wait {
                pass.next = Some(pass.next.map_or(wait, |n| n.min(wait)));
            }
            if wanted.status == claim.status {
                continue;
            }
            if let Some(hold) = pod_event_hold(claim, &wanted, now) {
                pass.next = Some(pass.next.map_or(hold, |n| n.min(hold)));
            } else if self.write(claim, &wanted).await? {
                count_newly_drifted(claim, &wanted);
                pass.written.push(claim.name_any());
            }
        }
        let live: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
        self.answers.retain(|name| live.contains(name));
        let nodes: HashSet<String> = self
            .state
            .nodes
            .snapshot()
            .iter()
            .map(|n| n.name_any())
            .collect();
        self.departures.retain(|node| nodes.contains(node));
        Ok(pass)
    }

    /// The status `claim` should have, and how long until its `Consolidatable` is due.
    async fn wanted(
        &mut self,
        pool: &NodePool,
        claim: &NodeClaim,
        last_events: &HashMap<String, Timestamp>,
        now: Timestamp,
    ) -> (NodeClaim, Option<Duration>) {
        let mut wanted = claim.clone();
        if let Some(at) = moved_last_pod_event(claim, last_events)
            && let Some(status) = wanted.status.as_mut()
        {
            status.last_pod_event_time = Some(Time(at));
        }
        let tracked = claim.is_condition_true(types::LAUNCHED)
            || claim.conditions().condition(types::DRIFTED).is_some()
            || claim
                .conditions()
                .condition(types::CONSOLIDATABLE)
                .is_some();
        if !tracked {
            return (wanted, None);
        }
        let mut set = ConditionSet::new(claim.conditions(), claim.metadata.generation, now);
        if claim.is_condition_true(types::LAUNCHED) {
            match self.drift(pool, claim).await {
                Some(Some(reason)) => {
                    set.set(types::DRIFTED, ConditionStatus::True, &reason, &reason);
                }
                Some(None) => {
                    set.clear(types::DRIFTED);
                }
                // The cloud could not answer: the condition stays as it is.
                None => {}
            }
        } else {
            set.clear(types::DRIFTED);
        }
        let wait = match consolidation::verdict(pool, &wanted, now) {
            Verdict::Consolidatable => {
                set.set_true(types::CONSOLIDATABLE);
                None
            }
            Verdict::ClearFor(wait) => {
                set.clear(types::CONSOLIDATABLE);
                Some(wait)
            }
            Verdict::Clear => {
                set.clear(types::CONSOLIDATABLE);
                None
            }
        };
        if let Some(status) = wanted.status.as_mut() {
            status.conditions = set.into_vec();
        }
        (wanted, wait)
    }

    /// The drift reason (`Some(None)`: not drifted), `None` when the cloud provider failed.
    async fn drift(&mut self, pool: &NodePool, claim: &NodeClaim) -> Option<Option<String>> {
        if let Some(reason) = drift::static_drift(pool, claim)
            .or_else(|| drift::requirements_drift(pool, &self.node_labels(claim)))
        {
            return Some(Some(reason.to_owned()));
        }
        let Some(cloud) = self.cloud.clone() else {
            return Some(None);
        };
        let inputs = Inputs {
            // The spec's generation, not the resourceVersion, which every status write
            // (nodes, resources) moves.
            nodepool_version: pool.metadata.generation.map(|g| g.to_string()),
            node_class_version: self
                .state
                .nodeclasses
                .get(&ObjectKey::new(None, &claim.node_class_ref().name))
                .and_then(|c| c.metadata.resource_version.clone()),
        };
        let name = claim.name_any();
        if let Some(answer) = self.answers.fresh(&name, &inputs, Instant::now()) {
            return Some(answer);
        }
        let types = self.instance_types(&*cloud, pool).await?;
        let answer = cloud_drift(&*cloud, &types, claim).await?;
        self.answers
            .store(&name, inputs, answer.clone(), Instant::now());
        Some(answer)
    }

    /// The names of `pool`'s instance types, asked of the provider once per pass.
    async fn instance_types(
        &mut self,
        cloud: &dyn CloudProvider,
        pool: &NodePool,
    ) -> Option<Arc<HashSet<String>>> {
        if let Some(known) = self.types.get(pool.name()) {
            return known.clone();
        }
        let listed = match cloud.get_instance_types(pool).await {
            Ok(types) => Some(Arc::new(types.iter().map(|t| t.name.clone()).collect())),
            Err(error) => {
                tracing::warn!(%error, nodepool = pool.name(), "listing instance types for drift");
                None
            }
        };
        self.types.insert(pool.name().to_owned(), listed.clone());
        listed
    }

    /// The NodeClaim's labels with its Node's over them.
    fn node_labels(&self, claim: &NodeClaim) -> BTreeMap<String, String> {
        let mut labels = claim.labels().clone();
        if let Some(node) = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| self.state.nodes.get(&ObjectKey::new(None, n)))
        {
            labels.extend(node.labels().clone());
        }
        labels
    }

    /// Writes `wanted`'s status; `false` when the NodeClaim changed or went meanwhile.
    async fn write(&self, read: &NodeClaim, wanted: &NodeClaim) -> Result<bool, kube::Error> {
        let Some(patch) = locked(read, wanted, read.metadata.resource_version.as_deref()) else {
            return Ok(false);
        };
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        match api
            .patch_status(
                &read.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The time `claim`'s `lastPodEventTime` moves forward to: its node's last pod event, when
/// later. Only once the NodeClaim is initialized, the first time consolidation reads it: the
/// time is the pods' own, so waiting loses nothing, and through a scale-up a write as pods
/// bind would land between the lifecycle's reading of the NodeClaim and its locked
/// registration and initialization writes, failing them with 409. (A NodeClaim with no
/// status yet, just created, is not written at all.)
fn moved_last_pod_event(
    claim: &NodeClaim,
    last_events: &HashMap<String, Timestamp>,
) -> Option<Timestamp> {
    if !claim.is_condition_true(types::INITIALIZED) {
        return None;
    }
    let status = claim.status.as_ref()?;
    let at = *last_events.get(status.node_name.as_deref()?)?;
    let recorded = status.last_pod_event_time.as_ref().map(|t| t.0);
    recorded.is_none_or(|t| t < at).then_some(at)
}

/// How long `wanted` waits to be written when all it changes is `lastPodEventTime`, moved on
/// from a time under [`POD_EVENT_WRITE_PERIOD`] old; `None` to write it now.
fn pod_event_hold(read: &NodeClaim, wanted: &NodeClaim, now: Timestamp) -> Option<Duration> {
    let (Some(read), Some(wanted)) = (&read.status, &wanted.status) else {
        return None;
    };
    let recorded = read.last_pod_event_time.as_ref()?.0;
    let only_the_time = NodeClaimStatus {
        last_pod_event_time: read.last_pod_event_time.clone(),
        ..wanted.clone()
    } == *read;
    if !only_the_time {
        return None;
    }
    let age = Duration::try_from(now.duration_since(recorded)).unwrap_or_default();
    POD_EVENT_WRITE_PERIOD
        .checked_sub(age)
        .filter(|hold| !hold.is_zero())
}

/// The instance type check, then the provider's own; `None` when the provider failed.
async fn cloud_drift(
    cloud: &dyn CloudProvider,
    types: &HashSet<String>,
    claim: &NodeClaim,
) -> Option<Option<String>> {
    if let Some(reason) = drift::instance_type_drift(claim, types) {
        return Some(Some(reason.to_owned()));
    }
    match cloud.is_drifted(claim).await {
        Ok(reason) => Some(reason.map(|r| r.as_str().to_owned())),
        Err(e) if e.is_not_found() => Some(None),
        Err(error) => {
            tracing::warn!(%error, nodeclaim = claim.name_any(), "checking drift");
            None
        }
    }
}

fn count_newly_drifted(read: &NodeClaim, written: &NodeClaim) {
    let was = read.conditions().condition(types::DRIFTED).is_some();
    let Some(now) = written.conditions().condition(types::DRIFTED) else {
        return;
    };
    if was {
        return;
    }
    let label = |key: &str| written.labels().get(key).cloned().unwrap_or_default();
    tracing::info!(
        nodeclaim = written.name_any(),
        reason = now.reason,
        "marking drifted"
    );
    metrics::counter!(
        NODECLAIMS_DRIFTED,
        "reason" => now.reason.clone(),
        "nodepool" => label(labels::NODEPOOL),
        "capacity_type" => label(labels::CAPACITY_TYPE)
    )
    .increment(1);
}

/// Runs passes until `shutdown`.
pub async fn run(
    controller: NodeClaimDisruption,
    trigger: Trigger,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let state = Arc::clone(&controller.state);
    // The pass future borrows the controller; the mutex is never contended (one loop).
    let controller = Arc::new(tokio::sync::Mutex::new(controller));
    requeue::run(state, trigger, leader, shutdown, move || {
        let controller = Arc::clone(&controller);
        async move {
            let mut controller = controller.lock().await;
            match crate::metrics::reconcile(CONTROLLER, controller.pass()).await {
                Ok(pass) => pass.next.unwrap_or(MAX_SLEEP),
                Err(error) => {
                    tracing::warn!(%error, "nodeclaim disruption conditions");
                    requeue::MIN_GAP
                }
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn claim(status: Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "a"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                "name": "default"}, "requirements": []},
            "status": status,
        }))
        .expect("valid nodeclaim")
    }

    fn condition(type_: &str, status: &str) -> Value {
        json!({"type": type_, "status": status, "reason": type_, "message": "",
            "lastTransitionTime": "2026-12-01T10:00:00Z"})
    }

    #[test]
    fn the_last_pod_event_is_recorded_once_the_nodeclaim_is_initialized() {
        let at: Timestamp = "2026-12-01T10:00:05Z".parse().expect("a time");
        let events = HashMap::from([("node-a".to_owned(), at)]);
        let registered = claim(json!({"nodeName": "node-a", "conditions": [
            condition("Launched", "True"), condition("Registered", "True"),
            condition("Initialized", "Unknown")]}));
        assert_eq!(moved_last_pod_event(&registered, &events), None);

        let initialized = claim(json!({"nodeName": "node-a", "conditions": [
            condition("Launched", "True"), condition("Registered", "True"),
            condition("Initialized", "True")]}));
        assert_eq!(moved_last_pod_event(&initialized, &events), Some(at));

        let recorded = claim(
            json!({"nodeName": "node-a", "lastPodEventTime": at.to_string(),
            "conditions": [condition("Initialized", "True")]}),
        );
        assert_eq!(
            moved_last_pod_event(&recorded, &events),
            None,
            "already there"
        );
    }

    #[test]
    fn a_moved_pod_event_alone_waits_out_the_write_period_of_the_last_one() {
        let recorded: Timestamp = "2026-12-01T10:00:00Z".parse().expect("a time");
        let read = claim(
            json!({"nodeName": "node-a", "lastPodEventTime": recorded.to_string(),
            "conditions": [condition("Initialized", "True")]}),
        );
        let later = |secs: i64| recorded + k8s_openapi::jiff::SignedDuration::from_secs(secs);
        let mut wanted = read.clone();
        if let Some(status) = wanted.status.as_mut() {
            status.last_pod_event_time = Some(Time(later(3)));
        }
        assert_eq!(
            pod_event_hold(&read, &wanted, later(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(
            pod_event_hold(&read, &wanted, later(10)),
            None,
            "period over"
        );

        let mut consolidatable = wanted.clone();
        if let Some(status) = consolidatable.status.as_mut() {
            status.conditions.push(
                serde_json::from_value(condition("Consolidatable", "True")).expect("condition"),
            );
        }
        assert_eq!(
            pod_event_hold(&read, &consolidatable, later(4)),
            None,
            "a condition changing writes the time with it"
        );
    }
}
