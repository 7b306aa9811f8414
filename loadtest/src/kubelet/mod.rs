//! Simulated kubelets, with the node-side controllers of a real cluster (daemonset controller,
//! pod garbage collector, cloud node lifecycle). One task plays every node: it watches
//! NodeClaims, Nodes, Pods and DaemonSets through the API server with kube-rs, and the
//! simulated EC2's instances, and drives each machine through its life:
//! 1. a NodeClaim gets `status.providerID` → after `boot_delay` its Node registers with the
//!    instance type's labels, taints (`karpenter.sh/unregistered`, startup taints), capacity;
//! 2. after `ready_delay` it turns Ready, and `startup_taint_delay` later loses its startup
//!    taints, as the agents that own them would remove them;
//! 3. pods of the DaemonSets that select and tolerate it are created on it; pods bound to it
//!    run after `pod_start_delay`; pods deleted on it are removed at once;
//! 4. when its instance terminates the Node goes NotReady, is deleted after `shutdown_delay`,
//!    and the pods still bound to it are deleted.
//!
//! The attach/detach controller ([`volumes`]) runs beside it.

mod node;
mod pods;
pub mod volumes;

pub use node::KUBELET_VERSION;
pub use pods::KubeletPod;

use crate::ec2::{SimulatedCloudProvider, is_instance_id};
use crate::informer::{Informer, any_event};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kerf::api::NodeClaim;
use kerf::cloudprovider::parse_aws_provider_id;
use kerf::taints::taints_match;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Delays of the simulated node lifecycle. The defaults resemble a real EC2 node; tests
/// use [`KubeletConfig::fast`].
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// From providerID to Node registration (instance boot).
    pub boot_delay: Duration,
    /// From registration to Ready.
    pub ready_delay: Duration,
    /// From Ready to the removal of the NodeClaim's startup taints.
    pub startup_taint_delay: Duration,
    /// From a pod being bound to it Running.
    pub pod_start_delay: Duration,
    /// From an instance's termination (Node NotReady) to the Node's deletion.
    pub shutdown_delay: Duration,
    /// From the last pod using a volume on a node being gone to its VolumeAttachment's
    /// deletion (the detach).
    pub detach_delay: Duration,
    /// API requests in flight at once.
    pub concurrency: usize,
    /// Longest sleep without any change (a safety net; changes wake the loop at once).
    pub resync: Duration,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            boot_delay: Duration::from_secs(3),
            ready_delay: Duration::from_secs(2),
            startup_taint_delay: Duration::from_secs(2),
            pod_start_delay: Duration::from_secs(1),
            shutdown_delay: Duration::from_secs(1),
            detach_delay: Duration::from_secs(5),
            concurrency: 32,
            resync: Duration::from_secs(1),
        }
    }
}

impl KubeletConfig {
    /// Millisecond delays, for tests.
    pub fn fast() -> Self {
        let ms = Duration::from_millis(5);
        Self {
            boot_delay: ms,
            ready_delay: ms,
            startup_taint_delay: ms,
            pod_start_delay: ms,
            shutdown_delay: ms,
            // Long enough for a test to see a drained node wait for its volumes.
            detach_delay: Duration::from_secs(1),
            concurrency: 16,
            resync: Duration::from_millis(200),
        }
    }
}

/// Running totals, for reports and tests.
#[derive(Debug, Default)]
pub struct KubeletStats {
    pub nodes_registered: AtomicU64,
    pub nodes_ready: AtomicU64,
    pub nodes_deleted: AtomicU64,
    pub pods_started: AtomicU64,
    pub daemon_pods_created: AtomicU64,
    pub pods_deleted: AtomicU64,
    pub volumes_attached: AtomicU64,
    pub volumes_detached: AtomicU64,
    pub api_errors: AtomicU64,
}

/// The running kubelets; dropping the handle stops them.
pub struct KubeletHandle {
    task: JoinHandle<()>,
    stats: Arc<KubeletStats>,
}

impl KubeletHandle {
    pub fn stats(&self) -> &KubeletStats {
        &self.stats
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for KubeletHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the simulated kubelets for the instances `cloud` launches, against the API
/// server `client` talks to.
pub fn start(
    client: Client,
    cloud: Arc<SimulatedCloudProvider>,
    config: KubeletConfig,
) -> KubeletHandle {
    let stats = Arc::new(KubeletStats::default());
    let task = tokio::spawn(kerf_heap::owned(
        kerf_heap::Owner::KUBELETS,
        run(client, cloud, config, Arc::clone(&stats)),
    ));
    KubeletHandle { task, stats }
}

/// Aborts helper tasks when the kubelet task ends or is aborted.
struct Helpers(Vec<JoinHandle<()>>);

impl Drop for Helpers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

async fn run(
    client: Client,
    cloud: Arc<SimulatedCloudProvider>,
    config: KubeletConfig,
    stats: Arc<KubeletStats>,
) {
    let claims = Informer::start(
        Api::<NodeClaim>::all(client.clone()),
        any_event::<NodeClaim>,
    );
    let nodes = Informer::start(Api::<Node>::all(client.clone()), any_event::<Node>);
    let pods = Informer::start_projected(
        Api::<Pod>::all(client.clone()),
        any_event::<KubeletPod>,
        KubeletPod::of,
    );
    let daemonsets = Informer::start(
        Api::<DaemonSet>::all(client.clone()),
        any_event::<DaemonSet>,
    );
    claims.ready().await;
    nodes.ready().await;
    pods.ready().await;
    daemonsets.ready().await;
    let wake = Arc::new(Notify::new());
    let mut helpers = Helpers(Vec::new());
    for mut changes in [
        claims.changes(),
        nodes.changes(),
        pods.changes(),
        daemonsets.changes(),
    ] {
        let wake = Arc::clone(&wake);
        helpers.0.push(tokio::spawn(kerf_heap::inherit(async move {
            while changes.changed().await.is_ok() {
                wake.notify_one();
            }
        })));
    }
    let mut ec2_events = cloud.ec2().subscribe();
    let ec2_wake = Arc::clone(&wake);
    helpers.0.push(tokio::spawn(kerf_heap::inherit(async move {
        // A lagged receiver only means we missed details; the loop re-reads the instances.
        while !matches!(
            ec2_events.recv().await,
            Err(tokio::sync::broadcast::error::RecvError::Closed)
        ) {
            ec2_wake.notify_one();
        }
    })));
    let resync = config.resync;
    let volume_pods = volumes::Pods {
        store: pods.store().clone(),
        changes: pods.changes(),
    };
    helpers.0.push(tokio::spawn(kerf_heap::inherit(volumes::run(
        client.clone(),
        volume_pods,
        config.detach_delay,
        resync,
        Arc::clone(&stats),
    ))));
    let mut kubelet = Kubelet::new(client, cloud, config, stats);
    loop {
        let view = View {
            claims: claims.store().state(),
            nodes: nodes
                .store()
                .state()
                .into_iter()
                .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
                .collect(),
            pods: pods.store().state(),
            daemonsets: daemonsets.store().state(),
        };
        kubelet.reconcile(&view).await;
        let deadline = kubelet.next_due().map_or(Instant::now() + resync, |due| {
            due.min(Instant::now() + resync)
        });
        tokio::select! {
            () = wake.notified() => {
                // A reconcile reads every pod and a scale-up's pod events come by the
                // thousand a second: one reconcile per event would take the CPU the
                // controller under test needs (`kerf simulate --pods 10000` shows it).
                tokio::time::sleep(WAKE_COALESCE).await;
            }
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// How long the kubelets gather changes after one wakes them, so a burst of events costs one
/// reconcile: well under the delays they simulate (a pod starts a second after binding).
const WAKE_COALESCE: Duration = Duration::from_millis(50);

/// One consistent read of the caches.
struct View {
    claims: Vec<Arc<NodeClaim>>,
    nodes: HashMap<String, Arc<Node>>,
    pods: Vec<Arc<KubeletPod>>,
    daemonsets: Vec<Arc<DaemonSet>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Booting,
    Registered,
    Ready,
    Running,
    Terminating,
    Gone,
}

impl Phase {
    /// The Node object exists and the kubelet runs pods.
    fn hosts_pods(self) -> bool {
        matches!(self, Phase::Registered | Phase::Ready | Phase::Running)
    }
}

struct Machine {
    claim: Arc<NodeClaim>,
    instance_id: String,
    node_name: String,
    host_ip: String,
    phase: Phase,
    due: Instant,
}

enum Action {
    Register {
        provider_id: String,
        node: Box<Node>,
    },
    MarkReady {
        provider_id: String,
        node_name: String,
    },
    RemoveStartupTaints {
        provider_id: String,
        node: Box<Node>,
    },
    MarkNotReady {
        provider_id: String,
        node_name: String,
    },
    DeleteNode {
        provider_id: String,
        node_name: String,
    },
    /// The pod's running status is made as the write goes out, not with the action: a
    /// reconcile after thousands of bindings has thousands of pods to start, `concurrency` at
    /// a time, and patches made up front would all be held at once.
    StartPod {
        pod: Arc<KubeletPod>,
        host_ip: String,
        pod_ip: String,
    },
    DeletePod {
        uid: String,
        namespace: String,
        name: String,
    },
    CreateDaemonPod {
        key: (String, String),
        pod: Box<Pod>,
    },
}

/// The outcome of an action, applied to the kubelet's memory after the writes.
enum Done {
    Phase {
        provider_id: String,
        phase: Phase,
        ok: bool,
    },
    Pod,
    PodDeleteFailed {
        uid: String,
    },
    DaemonPodFailed {
        key: (String, String),
    },
}

/// How long to wait before retrying a write that failed.
const RETRY: Duration = Duration::from_millis(500);
/// How long a created daemon pod may stay unseen before it is created again.
const DAEMON_POD_GRACE: Duration = Duration::from_secs(10);

struct Kubelet {
    client: Client,
    cloud: Arc<SimulatedCloudProvider>,
    config: KubeletConfig,
    stats: Arc<KubeletStats>,
    machines: BTreeMap<String, Machine>,
    pod_first_seen: HashMap<String, Instant>,
    started: HashSet<String>,
    deleting: HashSet<String>,
    daemon_pods: HashMap<(String, String), Instant>,
    next_pod_ip: u32,
}

impl Kubelet {
    fn new(
        client: Client,
        cloud: Arc<SimulatedCloudProvider>,
        config: KubeletConfig,
        stats: Arc<KubeletStats>,
    ) -> Self {
        Self {
            client,
            cloud,
            config,
            stats,
            machines: BTreeMap::new(),
            pod_first_seen: HashMap::new(),
            started: HashSet::new(),
            deleting: HashSet::new(),
            daemon_pods: HashMap::new(),
            next_pod_ip: 0,
        }
    }

    fn next_due(&self) -> Option<Instant> {
        let machines = self
            .machines
            .values()
            .filter(|m| m.phase != Phase::Gone)
            .map(|m| m.due);
        let pods = self
            .pod_first_seen
            .iter()
            .filter(|(uid, _)| !self.started.contains(*uid))
            .map(|(_, seen)| *seen + self.config.pod_start_delay);
        machines.chain(pods).min()
    }

    async fn reconcile(&mut self, view: &View) {
        self.discover(view);
        let mut actions = self.machine_actions(view);
        actions.extend(self.pod_actions(view));
        actions.extend(self.daemon_actions(view));
        self.forget(view);
        if actions.is_empty() {
            return;
        }
        let client = self.client.clone();
        let stats = Arc::clone(&self.stats);
        let done: Vec<Done> = futures::stream::iter(actions)
            .map(|action| perform(client.clone(), Arc::clone(&stats), action))
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        for outcome in done {
            self.apply(outcome);
        }
    }

    /// New machines: NodeClaims with a providerID of a live simulated instance.
    fn discover(&mut self, view: &View) {
        let now = Instant::now();
        for claim in &view.claims {
            let Some(provider_id) = claim.provider_id() else {
                continue;
            };
            if let Some(machine) = self.machines.get_mut(provider_id) {
                machine.claim = Arc::clone(claim);
                continue;
            }
            let Ok(parsed) = parse_aws_provider_id(provider_id) else {
                continue;
            };
            if !is_instance_id(parsed.instance_id) {
                continue;
            }
            let Some(instance) = self.cloud.ec2().instance(parsed.instance_id) else {
                continue;
            };
            if !instance.state.is_live() {
                continue;
            }
            self.machines.insert(
                provider_id.to_owned(),
                Machine {
                    claim: Arc::clone(claim),
                    instance_id: instance.instance_id.clone(),
                    node_name: instance.private_dns_name.clone(),
                    host_ip: instance.private_ip_address.clone(),
                    phase: Phase::Booting,
                    due: now + self.config.boot_delay,
                },
            );
        }
    }

    fn machine_actions(&mut self, view: &View) -> Vec<Action> {
        let now = Instant::now();
        let mut actions = Vec::new();
        for (provider_id, machine) in &mut self.machines {
            let alive = self
                .cloud
                .ec2()
                .instance(&machine.instance_id)
                .is_some_and(|i| i.state.is_live());
            if !alive && machine.phase == Phase::Booting {
                machine.phase = Phase::Gone;
                continue;
            }
            if !alive && machine.phase.hosts_pods() {
                machine.due = now + RETRY;
                actions.push(Action::MarkNotReady {
                    provider_id: provider_id.clone(),
                    node_name: machine.node_name.clone(),
                });
                continue;
            }
            if now < machine.due {
                continue;
            }
            let provider_id = provider_id.clone();
            let node_name = machine.node_name.clone();
            // Until the write's outcome is known, do not issue it again.
            machine.due = now + RETRY;
            match machine.phase {
                Phase::Booting => {
                    let instance = self.cloud.ec2().instance(&machine.instance_id);
                    if let Some(instance) = instance {
                        let instance_type = self.cloud.instance_type(&instance.instance_type);
                        let node =
                            node::registration(&machine.claim, &instance, instance_type.as_deref());
                        actions.push(Action::Register {
                            provider_id,
                            node: Box::new(node),
                        });
                    }
                }
                Phase::Registered => actions.push(Action::MarkReady {
                    provider_id,
                    node_name,
                }),
                Phase::Ready => {
                    match without_startup_taints(&machine.claim, view.nodes.get(&node_name)) {
                        Some(Some(node)) => actions.push(Action::RemoveStartupTaints {
                            provider_id,
                            node: Box::new(node),
                        }),
                        Some(None) => machine.phase = Phase::Running,
                        None => {}
                    }
                }
                Phase::Terminating => actions.push(Action::DeleteNode {
                    provider_id,
                    node_name,
                }),
                Phase::Running | Phase::Gone => {}
            }
        }
        actions
    }

    fn pod_actions(&mut self, view: &View) -> Vec<Action> {
        let now = Instant::now();
        let hosts: HashMap<&str, &Machine> = self
            .machines
            .values()
            .filter(|m| m.phase.hosts_pods())
            .map(|m| (m.node_name.as_str(), m))
            .collect();
        let gone: HashSet<&str> = self
            .machines
            .values()
            .filter(|m| m.phase == Phase::Gone && !view.nodes.contains_key(&m.node_name))
            .map(|m| m.node_name.as_str())
            .collect();
        let mut actions = Vec::new();
        for pod in &view.pods {
            let Some(node_name) = pod.node_name.as_deref() else {
                continue;
            };
            let uid = pod.uid.clone();
            let deleted = pod.deleting;
            if (gone.contains(node_name) || (deleted && hosts.contains_key(node_name)))
                && self.deleting.insert(uid.clone())
            {
                actions.push(Action::DeletePod {
                    uid,
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                });
                continue;
            }
            let Some(machine) = hosts.get(node_name) else {
                continue;
            };
            if deleted || pod.is_started() || self.started.contains(&uid) {
                continue;
            }
            let seen = *self.pod_first_seen.entry(uid.clone()).or_insert(now);
            if now >= seen + self.config.pod_start_delay {
                self.started.insert(uid);
                let pod_ip = pod_ip(self.next_pod_ip);
                self.next_pod_ip += 1;
                actions.push(Action::StartPod {
                    pod: Arc::clone(pod),
                    host_ip: machine.host_ip.clone(),
                    pod_ip,
                });
            }
        }
        actions
    }

    fn daemon_actions(&mut self, view: &View) -> Vec<Action> {
        let now = Instant::now();
        let existing: HashSet<(String, String)> = view
            .pods
            .iter()
            .filter(|p| !p.deleting)
            .filter_map(|p| Some((p.daemonset.clone()?, p.node_name.clone()?)))
            .collect();
        let mut actions = Vec::new();
        for machine in self.machines.values().filter(|m| m.phase.hosts_pods()) {
            let Some(node) = view.nodes.get(&machine.node_name) else {
                continue;
            };
            for daemonset in &view.daemonsets {
                let key = (
                    daemonset.metadata.uid.clone().unwrap_or_default(),
                    machine.node_name.clone(),
                );
                if existing.contains(&key) {
                    self.daemon_pods.remove(&key);
                    continue;
                }
                let recently_created = self
                    .daemon_pods
                    .get(&key)
                    .is_some_and(|at| now < *at + DAEMON_POD_GRACE);
                if recently_created || !pods::should_run(daemonset, node) {
                    continue;
                }
                self.daemon_pods.insert(key.clone(), now);
                let pod = pods::daemon_pod(daemonset, &machine.node_name);
                actions.push(Action::CreateDaemonPod {
                    key,
                    pod: Box::new(pod),
                });
            }
        }
        actions
    }

    /// Drops memory of pods that are gone and of machines whose node and pods are gone.
    fn forget(&mut self, view: &View) {
        let live: HashSet<&str> = view.pods.iter().map(|p| p.uid.as_str()).collect();
        self.pod_first_seen
            .retain(|uid, _| live.contains(uid.as_str()));
        self.started.retain(|uid| live.contains(uid.as_str()));
        self.deleting.retain(|uid| live.contains(uid.as_str()));
        let bound: HashSet<&str> = view
            .pods
            .iter()
            .filter_map(|p| p.node_name.as_deref())
            .collect();
        let retired: Vec<String> = self
            .machines
            .iter()
            .filter(|(_, m)| {
                m.phase == Phase::Gone
                    && !view.nodes.contains_key(&m.node_name)
                    && !bound.contains(m.node_name.as_str())
            })
            .map(|(id, _)| id.clone())
            .collect();
        for provider_id in retired {
            if let Some(machine) = self.machines.remove(&provider_id) {
                self.daemon_pods
                    .retain(|(_, node), _| *node != machine.node_name);
            }
        }
    }

    fn apply(&mut self, done: Done) {
        let now = Instant::now();
        match done {
            Done::Phase {
                provider_id,
                phase,
                ok,
            } => {
                let Some(machine) = self.machines.get_mut(&provider_id) else {
                    return;
                };
                if !ok {
                    machine.due = now + RETRY;
                    return;
                }
                machine.phase = phase;
                machine.due = now
                    + match phase {
                        Phase::Registered => self.config.ready_delay,
                        Phase::Ready => self.config.startup_taint_delay,
                        Phase::Terminating => self.config.shutdown_delay,
                        _ => Duration::ZERO,
                    };
            }
            Done::Pod => {}
            Done::PodDeleteFailed { uid } => {
                self.deleting.remove(&uid);
            }
            Done::DaemonPodFailed { key } => {
                self.daemon_pods.remove(&key);
            }
        }
    }
}

/// The node with the claim's startup taints removed: `None` while the node is not cached
/// yet, `Some(None)` when none is left to remove.
fn without_startup_taints(claim: &NodeClaim, node: Option<&Arc<Node>>) -> Option<Option<Node>> {
    let node = node?;
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let startup = claim.startup_taints();
    let kept: Vec<Taint> = taints
        .iter()
        .filter(|t| !startup.iter().any(|s| taints_match(s, t)))
        .cloned()
        .collect();
    if kept.len() == taints.len() {
        return Some(None);
    }
    let mut updated = (**node).clone();
    if let Some(spec) = updated.spec.as_mut() {
        spec.taints = Some(kept);
    }
    Some(Some(updated))
}

/// Pod addresses from 100.64.0.0/10, the range EKS custom networking commonly uses.
fn pod_ip(n: u32) -> String {
    let host = n.saturating_add(2);
    format!(
        "100.{}.{}.{}",
        64 + ((host >> 16) & 0x3f),
        (host >> 8) & 0xff,
        host & 0xff
    )
}

async fn perform(client: Client, stats: Arc<KubeletStats>, action: Action) -> Done {
    let nodes: Api<Node> = Api::all(client.clone());
    let strategic = PatchParams::default();
    let failed = |what: &str, error: &kube::Error| {
        stats.api_errors.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%error, "{what} failed");
    };
    match action {
        Action::Register { provider_id, node } => {
            let ok = match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => true,
                Err(e) if is_status(&e, 409) => true,
                Err(e) => {
                    failed("registering node", &e);
                    false
                }
            };
            if ok {
                stats.nodes_registered.fetch_add(1, Ordering::Relaxed);
            }
            Done::Phase {
                provider_id,
                phase: Phase::Registered,
                ok,
            }
        }
        Action::MarkReady {
            provider_id,
            node_name,
        } => {
            let patch =
                node::readiness_patch("True", "KubeletReady", "kubelet is posting ready status");
            let result = nodes
                .patch_status(&node_name, &strategic, &Patch::Strategic(&patch))
                .await;
            let ok = result
                .as_ref()
                .map_err(|e| failed("marking node ready", e))
                .is_ok();
            if ok {
                stats.nodes_ready.fetch_add(1, Ordering::Relaxed);
            }
            Done::Phase {
                provider_id,
                phase: Phase::Ready,
                ok,
            }
        }
        Action::RemoveStartupTaints { provider_id, node } => {
            let name = node.metadata.name.clone().unwrap_or_default();
            let result = nodes.replace(&name, &PostParams::default(), &node).await;
            let ok = result
                .as_ref()
                .map_err(|e| failed("removing startup taints", e))
                .is_ok();
            Done::Phase {
                provider_id,
                phase: Phase::Running,
                ok,
            }
        }
        Action::MarkNotReady {
            provider_id,
            node_name,
        } => {
            let patch = node::readiness_patch(
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            );
            match nodes
                .patch_status(&node_name, &strategic, &Patch::Strategic(&patch))
                .await
            {
                Ok(_) => Done::Phase {
                    provider_id,
                    phase: Phase::Terminating,
                    ok: true,
                },
                Err(e) if is_status(&e, 404) => Done::Phase {
                    provider_id,
                    phase: Phase::Gone,
                    ok: true,
                },
                Err(e) => {
                    failed("marking node not ready", &e);
                    Done::Phase {
                        provider_id,
                        phase: Phase::Terminating,
                        ok: false,
                    }
                }
            }
        }
        Action::DeleteNode {
            provider_id,
            node_name,
        } => {
            let ok = match nodes.delete(&node_name, &DeleteParams::default()).await {
                Ok(_) => true,
                Err(e) if is_status(&e, 404) => true,
                Err(e) => {
                    failed("deleting node", &e);
                    false
                }
            };
            if ok {
                stats.nodes_deleted.fetch_add(1, Ordering::Relaxed);
            }
            Done::Phase {
                provider_id,
                phase: Phase::Gone,
                ok,
            }
        }
        Action::StartPod {
            pod,
            host_ip,
            pod_ip,
        } => {
            let patch = pods::running_patch(&pod, &host_ip, &pod_ip);
            let api: Api<Pod> = Api::namespaced(client, &pod.namespace);
            match api
                .patch_status(&pod.name, &strategic, &Patch::Strategic(&patch))
                .await
            {
                Ok(_) => {
                    stats.pods_started.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => failed("starting pod", &e),
            }
            Done::Pod
        }
        Action::DeletePod {
            uid,
            namespace,
            name,
        } => {
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {
                    stats.pods_deleted.fetch_add(1, Ordering::Relaxed);
                    Done::Pod
                }
                Err(e) if is_status(&e, 404) => Done::Pod,
                Err(e) => {
                    failed("deleting pod", &e);
                    Done::PodDeleteFailed { uid }
                }
            }
        }
        Action::CreateDaemonPod { key, pod } => {
            let namespace = pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned());
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            match api.create(&PostParams::default(), &pod).await {
                Ok(_) => {
                    stats.daemon_pods_created.fetch_add(1, Ordering::Relaxed);
                    Done::Pod
                }
                Err(e) => {
                    failed("creating daemon pod", &e);
                    Done::DaemonPodFailed { key }
                }
            }
        }
    }
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}
