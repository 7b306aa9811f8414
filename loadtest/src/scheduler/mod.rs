//! The simulated kube-scheduler. It watches nodes and pods through the API server like the
//! real one and every `interval` runs one cycle over the pending pods (as many as its
//! `slice` of time allows, the rest first in the next): each is filtered and scored against
//! the nodes (`cluster`), then bound, or marked `PodScheduled=False,
//! reason=Unschedulable` with kube-scheduler's "0/N nodes are available: ..." message — the
//! signal kerf provisions for. As in kube-scheduler's queues, unschedulable pods are retried
//! with backoff once nodes or pods change (a withdrawn or moved nomination counts, as an
//! `AssignedPodDelete` does upstream), and a cycle with nothing else to do tries the pods still
//! backing off, so many waiting pods do not cost a full pass each cycle. Bindings and
//! `Unschedulable` reports are sent beside the cycles (`dispatcher`), as kube-scheduler's
//! binding cycles and API dispatcher run apart from its scheduling cycle: the next cycle
//! counts a pod whose binding is on its way as placed, and considers it again if it failed.

mod amounts;
mod cached;
mod cluster;
mod dispatcher;
mod nodeinfo;
mod podinfo;
mod reason;
mod score;
mod selector;
mod topology;

use crate::informer::Informer;
use cached::CachedPod;
use cluster::Cluster;
use dispatcher::{Report, Reports};
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::PostParams;
use kube::runtime::watcher::Event;
use kube::{Api, Client};
use nodeinfo::NodeInfo;
use podinfo::{PodInfo, Shapes};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

pub use nodeinfo::is_ready as node_is_ready;

/// Whether `pod` may run on `node` considering cordon, taints (a node that is not Ready
/// counts as tainted `node.kubernetes.io/not-ready:NoSchedule`) and node affinity, but not
/// resources: the check a controller that binds pods itself (daemonsets) makes. The error
/// is kube-scheduler's reason text, or the malformed field.
pub fn fits_node(pod: &Pod, node: &Node) -> Result<(), String> {
    let pod = PodInfo::new(pod)?;
    let node = NodeInfo::new(node)?;
    cluster::static_fit(&pod, &node).map_err(|reason| reason.to_string())
}

/// The name pods select this scheduler by (`spec.schedulerName`, empty meaning it too).
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Knobs of the simulated scheduler; the defaults are kube-scheduler's.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Time between scheduling cycles.
    pub interval: Duration,
    pub scheduler_name: String,
    /// Binding and status requests in flight at once.
    pub concurrency: usize,
    /// The longest a cycle decides (at least one pod) before it sends the bindings it
    /// decided; the pods not yet tried wait for the next cycle, first in line. kube-scheduler binds each pod as
    /// soon as it is placed, so a cycle over tens of thousands of waiting pods must not
    /// hold back the bindings of its first.
    pub slice: Duration,
    /// First retry delay of an unschedulable pod once the cluster changed.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Retry an unschedulable pod after this long even if nothing changed.
    pub unschedulable_flush: Duration,
    /// Once the pods due are tried, try those still backing off that a change may let fit
    /// (kube-scheduler's `SchedulerPopFromBackoffQ`, beta and on since 1.33: it pops the
    /// backoff queue whenever the active queue is empty).
    pub pop_from_backoff: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(100),
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_owned(),
            concurrency: 32,
            slice: Duration::from_millis(250),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            unschedulable_flush: Duration::from_secs(300),
            pop_from_backoff: true,
        }
    }
}

/// Running totals, for reports and tests.
#[derive(Debug, Default)]
pub struct SchedulerStats {
    pub cycles: AtomicU64,
    /// Pods the cycles tried (a pod tried in two cycles counts twice).
    pub tried: AtomicU64,
    pub bound: AtomicU64,
    pub marked_unschedulable: AtomicU64,
    pub api_errors: AtomicU64,
    /// The longest cycle since [`SchedulerStats::take_longest_cycle`] last read it, in
    /// microseconds: a cycle decides every due pod before it binds any, so its length is how
    /// long a pod that fits may wait for its binding.
    longest_cycle_micros: AtomicU64,
}

impl SchedulerStats {
    /// The longest cycle since the last call, resetting it.
    pub fn take_longest_cycle(&self) -> Duration {
        Duration::from_micros(self.longest_cycle_micros.swap(0, Ordering::Relaxed))
    }

    fn cycle_took(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.longest_cycle_micros
            .fetch_max(micros, Ordering::Relaxed);
    }
}

/// The running scheduler; dropping it stops it.
pub struct SchedulerHandle {
    task: JoinHandle<()>,
    stats: Arc<SchedulerStats>,
}

impl SchedulerHandle {
    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }

    /// The totals, shared with the running scheduler (a report reads them as it samples).
    pub fn shared_stats(&self) -> Arc<SchedulerStats> {
        Arc::clone(&self.stats)
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for SchedulerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the simulated kube-scheduler against the API server `client` talks to.
pub fn start(client: Client, config: SchedulerConfig) -> SchedulerHandle {
    let stats = Arc::new(SchedulerStats::default());
    let task = tokio::spawn(kerf_heap::owned(
        kerf_heap::Owner::SCHEDULER,
        run(client, config, Arc::clone(&stats)),
    ));
    SchedulerHandle { task, stats }
}

async fn run(client: Client, config: SchedulerConfig, stats: Arc<SchedulerStats>) {
    let nodes = Informer::start(Api::<Node>::all(client.clone()), may_open_room);
    let mut shapes = Shapes::default();
    let pods =
        Informer::start_projected(Api::<Pod>::all(client.clone()), may_make_room, move |pod| {
            CachedPod::sharing(pod, &mut shapes)
        });
    nodes.ready().await;
    pods.ready().await;
    let mut scheduler = Scheduler::new(client, config.clone(), stats);
    let mut ticker = tokio::time::interval(config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let epoch = nodes.generation() + pods.generation();
        let started = Instant::now();
        scheduler.cycle(&nodes.store().state(), &pods.store().state(), epoch);
        scheduler.stats.cycle_took(started.elapsed());
    }
}

/// The taints of a node still starting or already going: no workload pod tolerates them.
const PASSING_TAINTS: [&str; 5] = [
    kerf::labels::UNREGISTERED_TAINT,
    kerf::labels::DISRUPTED_TAINT,
    kerf::labels::TAINT_NODE_NOT_READY,
    kerf::labels::TAINT_NODE_UNREACHABLE,
    kerf::labels::TAINT_EXTERNAL_CLOUD_PROVIDER,
];

/// Node events after which a waiting pod may fit: a node that is Ready, schedulable and
/// free of [`PASSING_TAINTS`] (added, or changed), or a relist. As kube-scheduler's queueing
/// hints requeue a pod on a node it may now fit, not on each step of a node still
/// starting: with its backoff queue popped whenever nothing else waits, every such step
/// would otherwise retry every waiting pod.
fn may_open_room(event: &Event<Node>) -> bool {
    match event {
        Event::Apply(node) | Event::InitApply(node) => is_open(node),
        Event::InitDone => true,
        Event::Delete(_) | Event::Init => false,
    }
}

fn is_open(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let passing = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| PASSING_TAINTS.contains(&t.key.as_str()));
    nodeinfo::is_ready(node) && !cordoned && !passing
}

/// Pod events after which a waiting pod may fit: a pod leaving (deleted or finished), or a
/// pod just bound and not yet started — which changes the counts topology spread and pod
/// affinity judge by, as kube-scheduler's queueing hints for those plugins requeue on.
fn may_make_room(event: &Event<CachedPod>) -> bool {
    match event {
        Event::Delete(_) | Event::InitDone => true,
        Event::Apply(pod) => pod.is_terminal() || pod.is_starting(),
        _ => false,
    }
}

struct Attempt {
    epoch: u64,
    at: Instant,
    backoff: Duration,
    priority: i32,
    /// A nomination that held room for pods like this one was released since the attempt.
    moved: bool,
}

impl Attempt {
    /// Whether something that may let the pod fit happened since the attempt.
    fn since_change(&self, epoch: u64) -> bool {
        self.moved || self.epoch != epoch
    }
}

/// A pending pod's nomination as the last cycle saw it.
struct Nomination {
    node: String,
    priority: i32,
}

/// A binding the cycle decided on.
struct Bind {
    namespace: String,
    name: String,
    uid: String,
    node: String,
}

struct Scheduler {
    client: Client,
    config: SchedulerConfig,
    stats: Arc<SchedulerStats>,
    /// Pods bound by us whose binding the pod cache has not shown yet: uid → node.
    assumed: HashMap<String, String>,
    attempts: HashMap<String, Attempt>,
    /// Pending pods with a nominated node, by uid, as of the last cycle.
    nominations: HashMap<String, Nomination>,
    next_start: usize,
    reports: Reports,
    /// Bindings on their way, each answering with its pod's uid if it failed; dropped (and
    /// so aborted) with the scheduler.
    bindings: JoinSet<Option<String>>,
    /// Bindings in flight at once ([`SchedulerConfig::concurrency`]).
    binding_slots: Arc<Semaphore>,
}

impl Scheduler {
    fn new(client: Client, config: SchedulerConfig, stats: Arc<SchedulerStats>) -> Self {
        let reports = Reports::start(client.clone(), Arc::clone(&stats), config.concurrency);
        let binding_slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
        Self {
            client,
            config,
            stats,
            reports,
            assumed: HashMap::new(),
            attempts: HashMap::new(),
            nominations: HashMap::new(),
            next_start: 0,
            bindings: JoinSet::new(),
            binding_slots,
        }
    }

    fn cycle(&mut self, nodes: &[Arc<Node>], pods: &[Arc<CachedPod>], epoch: u64) {
        self.stats.cycles.fetch_add(1, Ordering::Relaxed);
        self.forget_failed_bindings();
        self.observe(pods);
        let pending = self.pending(pods, epoch);
        if pending.is_empty() {
            return;
        }
        let mut cluster = self.snapshot(nodes, pods);
        let started = Instant::now();
        let mut binds = Vec::new();
        let mut tried = 0;
        for pod in pending {
            if tried > 0 && started.elapsed() >= self.config.slice {
                break;
            }
            tried += 1;
            let uid = pod.uid.clone();
            let placed = pod
                .info
                .clone()
                .and_then(|info| cluster.schedule(&info).map(|index| (index, info)));
            match placed {
                Ok((index, info)) => {
                    let node = cluster.node_name(index).to_owned();
                    cluster.assume(index, info);
                    self.attempts.remove(&uid);
                    self.reports.cancel(&uid);
                    self.assumed.insert(uid.clone(), node.clone());
                    binds.push(Bind {
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        uid,
                        node,
                    });
                }
                Err(message) => {
                    self.record_failure(&uid, pod.priority, epoch);
                    if let Some(condition) = unschedulable_condition(&pod, &message) {
                        let report = Report {
                            namespace: pod.namespace.clone(),
                            name: pod.name.clone(),
                            condition,
                        };
                        self.reports.queue(uid, report);
                    }
                }
            }
        }
        self.stats.tried.fetch_add(tried, Ordering::Relaxed);
        self.next_start = cluster.next_start();
        self.bind(binds);
    }

    /// Drops bookkeeping of pods that are gone or whose binding the cache now shows, and
    /// releases the nominations that no longer hold room.
    fn observe(&mut self, pods: &[Arc<CachedPod>]) {
        let mut live: HashMap<&str, bool> = HashMap::with_capacity(pods.len());
        let mut nominations = HashMap::with_capacity(self.nominations.len());
        for pod in pods {
            let bound = pod.node_name.is_some();
            if let Some(node) = pod.nominated_node.as_ref().filter(|_| !bound) {
                let nomination = Nomination {
                    node: node.clone(),
                    priority: pod.priority,
                };
                nominations.insert(pod.uid.clone(), nomination);
            }
            live.insert(&pod.uid, bound);
        }
        self.assumed
            .retain(|uid, _| live.get(uid.as_str()) == Some(&false));
        self.attempts
            .retain(|uid, _| live.contains_key(uid.as_str()));
        let previous = std::mem::replace(&mut self.nominations, nominations);
        // One pass over the waiting pods however many nominations went: the highest
        // priority released moves every pod any of them would.
        let released = previous
            .into_iter()
            .filter(|(uid, before)| match self.nominations.get(uid) {
                Some(now) => now.node != before.node,
                // A binding is no release: the pod takes the room it held (kube-scheduler
                // leaves that case to the binding cycle).
                None => live.get(uid.as_str()) != Some(&true),
            })
            .map(|(_, before)| before.priority)
            .max();
        if let Some(priority) = released {
            self.release(priority);
        }
    }

    /// Moves the waiting pods of `priority` or lower, for which a nomination of that
    /// priority held room, to be retried once their backoff ends.
    fn release(&mut self, priority: i32) {
        for attempt in self.attempts.values_mut() {
            if attempt.priority <= priority {
                attempt.moved = true;
            }
        }
    }

    /// The pods this cycle tries: those due (never tried, or past their backoff since a
    /// change), by priority then age; then, with [`SchedulerConfig::pop_from_backoff`],
    /// those backing off since a change, soonest due first.
    fn pending(&self, pods: &[Arc<CachedPod>], epoch: u64) -> Vec<Arc<CachedPod>> {
        let now = Instant::now();
        let mut due = Vec::new();
        let mut backing_off = Vec::new();
        for pod in pods {
            if !self.is_ours(pod) || self.assumed.contains_key(&pod.uid) {
                continue;
            }
            match self.attempts.get(&pod.uid) {
                Some(a) if !self.due(a, epoch, now) => {
                    if self.config.pop_from_backoff && a.since_change(epoch) {
                        backing_off.push((a.at + a.backoff, Arc::clone(pod)));
                    }
                }
                _ => due.push(Arc::clone(pod)),
            }
        }
        due.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.created.cmp(&b.created))
                .then_with(|| a.name.cmp(&b.name))
        });
        backing_off.sort_by(|(a_due, a), (b_due, b)| a_due.cmp(b_due).then(a.name.cmp(&b.name)));
        due.extend(backing_off.into_iter().map(|(_, pod)| pod));
        due
    }

    fn is_ours(&self, pod: &CachedPod) -> bool {
        pod.node_name.is_none()
            && pod.scheduler_name() == self.config.scheduler_name
            && !pod.deleting
            && !pod.gated
            && !pod.is_terminal()
    }

    fn due(&self, attempt: &Attempt, epoch: u64, now: Instant) -> bool {
        let since = now.duration_since(attempt.at);
        (attempt.since_change(epoch) && since >= attempt.backoff)
            || since >= self.config.unschedulable_flush
    }

    fn record_failure(&mut self, uid: &str, priority: i32, epoch: u64) {
        let backoff = self
            .attempts
            .get(uid)
            .map_or(self.config.initial_backoff, |a| {
                (a.backoff * 2).min(self.config.max_backoff)
            });
        self.attempts.insert(
            uid.to_owned(),
            Attempt {
                epoch,
                at: Instant::now(),
                backoff,
                priority,
                moved: false,
            },
        );
    }

    /// Nodes with the pods bound (or assumed bound) to them.
    fn snapshot(&mut self, nodes: &[Arc<Node>], pods: &[Arc<CachedPod>]) -> Cluster {
        let mut infos = Vec::with_capacity(nodes.len());
        for node in nodes {
            match NodeInfo::new(node) {
                Ok(info) => infos.push(info),
                Err(error) => tracing::warn!(%error, "skipping node"),
            }
        }
        let index: HashMap<String, usize> = infos
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let mut nominated = Vec::new();
        for pod in pods {
            if pod.is_terminal() {
                continue;
            }
            let target = pod
                .node_name
                .as_ref()
                .or_else(|| self.assumed.get(&pod.uid));
            let (slot, placed) = match target.and_then(|n| index.get(n).copied()) {
                Some(slot) => (slot, true),
                None => match pod
                    .nominated_node
                    .as_ref()
                    .and_then(|n| index.get(n).copied())
                {
                    Some(slot) if self.is_ours(pod) => (slot, false),
                    _ => continue,
                },
            };
            match &pod.info {
                Ok(info) if placed => infos[slot].add_pod(Arc::clone(info)),
                Ok(info) => nominated.push((slot, Arc::clone(info))),
                Err(error) => tracing::warn!(%error, "not accounting pod"),
            }
        }
        let mut cluster = Cluster::new(infos, self.next_start);
        for (slot, info) in nominated {
            cluster.nominate(slot, info);
        }
        cluster
    }

    /// Sends the cycle's bindings, [`SchedulerConfig::concurrency`] at a time, without
    /// waiting for them.
    fn bind(&mut self, binds: Vec<Bind>) {
        for bind in binds {
            let (client, stats) = (self.client.clone(), Arc::clone(&self.stats));
            let slots = Arc::clone(&self.binding_slots);
            self.bindings.spawn(kerf_heap::inherit(async move {
                // Taken in the order the cycle decided; the semaphore is never closed.
                let _slot = slots.acquire_owned().await.ok();
                // Boxed, so a task waiting for its slot holds the binding, not room for the
                // request in flight: a cycle that places thousands of pods leaves thousands
                // waiting.
                Box::pin(apply(client, stats, bind)).await
            }));
        }
    }

    /// Forgets the assumed placement of the pods whose binding failed, so this cycle
    /// considers them again.
    fn forget_failed_bindings(&mut self) {
        while let Some(done) = self.bindings.try_join_next() {
            if let Ok(Some(failed_uid)) = done {
                self.assumed.remove(&failed_uid);
            }
        }
    }
}

/// Performs one binding; returns the pod's uid if it failed.
async fn apply(client: Client, stats: Arc<SchedulerStats>, bind: Bind) -> Option<String> {
    let Bind {
        namespace,
        name,
        uid,
        node,
    } = bind;
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            kind: Some("Node".to_owned()),
            api_version: Some("v1".to_owned()),
            name: Some(node.clone()),
            ..ObjectReference::default()
        },
    };
    let result: Result<serde_json::Value, _> = api
        .create_subresource("binding", &name, &PostParams::default(), &binding)
        .await;
    match result {
        Ok(_) => {
            stats.bound.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(error) => {
            stats.api_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%error, pod = %format!("{namespace}/{name}"), %node, "binding failed");
            Some(uid)
        }
    }
}

/// The `PodScheduled=False, reason=Unschedulable` condition to report for `pod`; `None`
/// when the pod already says exactly that (no write needed).
fn unschedulable_condition(pod: &CachedPod, message: &str) -> Option<PodCondition> {
    let current = pod.scheduled.as_ref();
    let unchanged = current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message)
    });
    (!unchanged).then(|| PodCondition {
        type_: "PodScheduled".to_owned(),
        status: "False".to_owned(),
        reason: Some("Unschedulable".to_owned()),
        message: Some(message.to_owned()),
        // As kube-scheduler's `UpdatePodCondition`: the transition time stays while the
        // status does.
        last_transition_time: current
            .filter(|c| c.status == "False")
            .and_then(|c| c.last_transition_time.clone())
            .or_else(|| Some(Time(now()))),
        ..PodCondition::default()
    })
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_with(ready: bool, unschedulable: bool, taint: Option<&str>) -> Node {
        let taints: Vec<serde_json::Value> = taint
            .map(|key| serde_json::json!({"key": key, "effect": "NoSchedule"}))
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"unschedulable": unschedulable, "taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .expect("a node")
    }

    #[test]
    fn only_a_node_pods_may_now_use_requeues_the_waiting_pods() {
        let applied = |node: Node| may_open_room(&Event::Apply(node));
        assert!(applied(node_with(true, false, None)));
        assert!(
            applied(node_with(true, false, Some("gpu"))),
            "a taint some pods tolerate"
        );
        assert!(!applied(node_with(false, false, None)), "not ready");
        assert!(!applied(node_with(true, true, None)), "cordoned");
        for passing in PASSING_TAINTS {
            assert!(!applied(node_with(true, false, Some(passing))), "{passing}");
        }
        assert!(may_open_room(&Event::InitDone), "a relist");
        assert!(!may_open_room(&Event::Delete(node_with(true, false, None))));
    }

    #[test]
    fn a_report_is_written_when_its_message_changes_and_keeps_the_transition_time() {
        let reported: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/1 nodes are available.",
                "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
        }))
        .expect("a pod");
        let reported = CachedPod::of(reported);
        assert_eq!(
            unschedulable_condition(&reported, "0/1 nodes are available."),
            None,
            "nothing new to write"
        );
        let rewritten =
            unschedulable_condition(&reported, "0/2 nodes are available.").expect("a report");
        assert_eq!(
            rewritten.last_transition_time.map(|t| t.0.to_string()),
            Some("2020-01-01T00:00:00Z".to_owned())
        );
        let first =
            unschedulable_condition(&CachedPod::of(Pod::default()), "no nodes").expect("a report");
        let stamped = first.last_transition_time.expect("a transition time").0;
        assert!(stamped > "2020-01-01T00:00:00Z".parse().expect("a time"));
    }
}
