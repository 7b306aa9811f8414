//! Wiring: starts every actor and task of the controller against one Kubernetes client —
//! metrics and probe endpoints, leader election, the event recorder, the PodWatcher's watch
//! streams, the Batcher, the Provisioner with its NodePoolSchedulers and (with a cloud
//! provider) the OfferingCache, the NodeClaimCreator, the NodeClaim lifecycle and the
//! TerminationDrainer — and stops them in
//! reverse order, letting provisioning finish first ([`crate::shutdown`]). Must be called inside
//! an actix `System` running on a multi-threaded tokio runtime (`System::with_tokio_rt`):
//! each actor lives on its own arbiter thread under a supervisor ([`crate::supervisor`]),
//! watch streams and HTTP on the runtime's workers.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kerf::catalog::Catalog;
use kerf::cloudprovider::CloudProvider;
use kerf::cluster::ControllerSettings;
use kerf::interruption::InterruptionQueue;
use kerf::interruption::instance_status::InstanceStatusSource;
use kerf::scheduling::SolvePolicies;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batcher::triggers::{self, Retrigger};
use crate::batcher::{self, BATCHER_MAILBOX_CAPACITY, BatchLimits, Batcher};
use crate::capacity_type;
use crate::cloud_metrics::MeteredCloudProvider;
use crate::cluster_metrics::{ConditionTracker, StartupTracker};
use crate::created_claims::CreatedClaims;
use crate::disruption::{self, DisruptionConfig, DisruptionDeps, Generation, Progress};
use crate::expiration;
use crate::garbage_collection;
use crate::launch_template_cache::{
    self, LAUNCH_TEMPLATE_CACHE_MAILBOX_CAPACITY, LaunchTemplateCache,
};
use crate::leader::{self, Election, Timing};
use crate::lifecycle::Changed;
use crate::lifecycle::{
    LIFECYCLE_MAILBOX_CAPACITY, LaunchDeps, LifecycleConfig, LifecycleDeps, NodeClaimLifecycle,
};
use crate::mailbox::DeliverError;
use crate::mailbox::{MailboxDepth, Outbox};
use crate::nodeclaim_creator::{NODECLAIM_CREATOR_MAILBOX_CAPACITY, NodeClaimCreator};
use crate::nodeclaim_disruption::{self, Departures, NodeClaimDisruption, podevents};
use crate::nodepool_status;
use crate::offering_cache::{
    OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache, OfferingCacheHandle, UNAVAILABLE_OFFERINGS_TTL,
};
use crate::orchestrator::{self, InQueue, OrchestratorConfig, OrchestratorDeps};
use crate::pod_watcher::Subscribers;
use crate::provisioner::{
    self, InstanceTypeCache, PROVISIONER_MAILBOX_CAPACITY, Provisioner, Provisioning, Round,
};
use crate::requeue::{self, Trigger};
use crate::settings::{FeatureGates, ValidSettings};
use crate::shutdown::{GracefulShutdown, InFlight, SHUTDOWN_TIMEOUT};
use crate::state::{ClusterState, Writers};
use crate::static_capacity::{self, StaticCapacityDeps};
use crate::storage_advice;
use crate::supervisor::{self, Exhausted, Supervised, Supervision};
use crate::tagging::{self, TAGGER_MAILBOX_CAPACITY, Tagger};
use crate::termination::{
    TERMINATION_MAILBOX_CAPACITY, TerminationConfig, TerminationDeps, TerminationDrainer,
    TerminationStats,
};
use crate::{
    capacity_buffer, divergences, events, instance_health, interruption, node_overlay, pod_watcher,
    server, shutdown,
};

/// Upstream's name for the controller that launches NodeClaims: the `controller` label of
/// the NodeClaim lifecycle's cloud provider metrics (launch, termination, lookups).
const LAUNCH_CONTROLLER: &str = "nodeclaim.lifecycle";

/// The reconcilers' timings; the defaults are upstream's, tests shorten them.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    pub lifecycle: LifecycleConfig,
    pub termination: TerminationConfig,
    pub disruption: DisruptionConfig,
    pub orchestrator: OrchestratorConfig,
}

/// What the daemon needs besides its settings.
#[derive(Clone)]
pub struct Environment {
    pub client: Client,
    /// Leader election's own client: not the rate-limited one, so a renewal never waits
    /// behind creates and patches.
    pub leader_client: Client,
    /// The namespace the controller runs in (its leader Lease lives there by default).
    pub namespace: String,
    /// This replica's name in leader election (unique per process).
    pub identity: String,
    /// Leader election timing (controller-runtime's defaults outside tests).
    pub leader_timing: Timing,
    /// Address the metrics and probe listeners bind to.
    pub bind: Ipv4Addr,
    /// Where capacity comes from; without it rounds are observed but nothing is launched.
    pub cloud: Option<Cloud>,
}

/// The cloud the controller launches into.
#[derive(Clone)]
pub struct Cloud {
    pub provider: Arc<dyn CloudProvider>,
    /// The region's embedded catalog, which the scheduler plans with until `provider`'s
    /// first refresh ([`CloudProvider::catalog`]).
    pub catalog: Catalog,
    /// The unavailable-offerings state to share with `provider` (start it with
    /// [`OfferingCache::start`] and hand the provider a clone); `None`: the daemon starts
    /// its own, which only the NodeClaimCreator writes.
    pub offerings: Option<OfferingCacheHandle>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding the metrics endpoint on {0}: {1}")]
    MetricsPort(SocketAddr, #[source] std::io::Error),
    #[error("binding the health probe endpoint on {0}: {1}")]
    HealthProbePort(SocketAddr, #[source] std::io::Error),
}

/// A running controller.
pub struct Daemon {
    pub state: Arc<ClusterState>,
    /// True while this replica leads.
    pub leader: watch::Receiver<bool>,
    /// The latest provisioning round.
    pub rounds: watch::Receiver<Option<Round>>,
    /// NodePools with a running NodePoolScheduler.
    pub node_pool_schedulers: watch::Receiver<Vec<String>>,
    /// Offerings that recently failed to launch (with a cloud provider).
    pub offerings: Option<OfferingCacheHandle>,
    /// The TerminationDrainer's totals (with a cloud provider).
    pub termination_stats: Option<Arc<TerminationStats>>,
    /// The disruption loop and its commands in flight (with a cloud provider).
    pub disruption: Option<DisruptionHandle>,
    /// The instance types the provisioning rounds and the disruption passes resolve, one
    /// cache for both (with a cloud provider).
    pub instance_types: Option<InstanceTypeCache>,
    pub metrics_addr: SocketAddr,
    pub probes_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    leader_task: Option<JoinHandle<()>>,
    /// Leadership of a replica without election, withdrawn on stop.
    lone_leader: Option<watch::Sender<bool>>,
    /// Where this replica's actors and loops are supervised.
    supervision: Supervision,
    actors: Actors,
    graceful: GracefulShutdown,
    /// The fenced client and the event recorder, for actors attached after start.
    client: Client,
    events: events::EventRecorder,
}

/// What the disruption loop publishes.
#[derive(Clone, Debug)]
pub struct DisruptionHandle {
    pub progress: watch::Receiver<Progress>,
    /// The nodes of the commands the Orchestrator is carrying out.
    pub in_queue: InQueue,
}

/// The actors' handles the daemon keeps until it stops (senders keep an actor alive).
#[allow(
    dead_code,
    reason = "held, not read: dropping them lets the actors stop"
)]
struct Actors {
    batcher: Supervised<Batcher>,
    provisioner: Supervised<Provisioner>,
    creator: Option<Supervised<NodeClaimCreator>>,
    lifecycle: Option<Supervised<NodeClaimLifecycle>>,
    termination: Option<Supervised<TerminationDrainer>>,
}

impl Daemon {
    /// Starts everything; returns once the endpoints are bound (cluster state syncs after).
    pub async fn start(settings: ValidSettings, env: Environment) -> Result<Self, StartError> {
        Self::start_with(settings, env, Timings::default(), ClusterState::new()).await
    }

    /// [`Self::start`] with the reconcilers' timings (tests shorten TTLs and requeues).
    pub async fn start_with_timings(
        settings: ValidSettings,
        env: Environment,
        timings: Timings,
    ) -> Result<Self, StartError> {
        Self::start_with(settings, env, timings, ClusterState::new()).await
    }

    /// [`Self::start`] filling a cluster state made by the caller, who may have handed it to
    /// the cloud provider already (the AWS provider reads EC2NodeClasses from it).
    pub async fn start_with_state(
        settings: ValidSettings,
        env: Environment,
        state: (Arc<ClusterState>, Writers),
    ) -> Result<Self, StartError> {
        Self::start_with(settings, env, Timings::default(), state).await
    }

    async fn start_with(
        settings: ValidSettings,
        env: Environment,
        timings: Timings,
        (state, writers): (Arc<ClusterState>, Writers),
    ) -> Result<Self, StartError> {
        divergences::warn_ignored_settings(&settings);
        // Destructured field by field: a setting added without being wired fails to compile.
        let ValidSettings {
            cluster_name,
            cluster_endpoint: _cluster_endpoint_for_launcher,
            cluster_ca_bundle: _cluster_ca_bundle_for_launcher,
            interruption_queue: _interruption_queue_opened_by_the_binary,
            batch_idle_duration,
            batch_max_duration,
            vm_memory_overhead_percent,
            reserved_enis,
            isolated_vpc: _isolated_vpc_for_pricing,
            log_level: _log_level_applied_by_the_binary,
            feature_gates,
            metrics_port,
            health_probe_port,
            kube_client_qps: _kube_client_qps_applied_by_the_binary,
            kube_client_burst: _kube_client_burst_applied_by_the_binary,
            leader_election,
            preference_policy,
            min_values_policy,
            cluster_state_observability,
        } = settings;
        let Environment {
            client,
            leader_client,
            namespace,
            identity,
            leader_timing,
            bind,
            cloud,
        } = env;
        tracing::info!(cluster = %cluster_name, identity = %identity, "starting controller");
        let (shutdown, shutdown_rx) = watch::channel(false);
        crate::metrics::handle();
        // Every actor and loop below is supervised in the caller's scope (one per replica in
        // `kerf simulate`, the process's in `kerf controller`).
        let supervision = Supervision::current();
        let ports = (metrics_port, health_probe_port);
        let explain = Arc::new(server::ExplainSources::default());
        let instance_types = Arc::new(std::sync::OnceLock::new());
        let served = server::Served {
            state: state.clone(),
            explain: explain.clone(),
            observability: cluster_state_observability,
            instance_types: instance_types.clone(),
        };
        let endpoints = Endpoints::serve(bind, ports, served, &supervision, &shutdown_rx).await?;
        let election = leader_election.map(|lease| Election {
            namespace: lease.namespace.unwrap_or(namespace),
            name: lease.name,
            identity: identity.clone(),
            timing: leader_timing,
        });
        let leadership = Leadership::start(leader_client, election, &shutdown_rx);
        let _ = explain.leader.set(leadership.leader.clone());
        let (wiring, events_task) = Wiring::new(
            client,
            state,
            leadership.leader.clone(),
            identity,
            shutdown_rx,
        );
        let cloud = cloud.map(|cloud| wiring.fence(cloud));
        let provider = cloud.as_ref().map(|c| Arc::clone(&c.provider));
        let (mut subscribers, cloud_tasks) = start_cloud_loops(
            &wiring.client,
            &wiring.state,
            provider.clone(),
            &wiring.leader,
            &wiring.shutdown,
        );
        let solving = Solving {
            controller: ControllerSettings {
                reserved_enis,
                vm_memory_overhead_percent,
            },
            policies: SolvePolicies {
                preference: preference_policy,
                min_values: min_values_policy,
            },
            nominate_pods: feature_gates.nominate_pods,
            reserved_capacity: feature_gates.reserved_capacity,
        };
        let launching = cloud.map(|cloud| {
            LaunchingActors::start(&wiring, cloud, provider.clone(), &timings, solving)
        });
        let provisioning = launching.as_ref().map(|l| l.provisioning.clone());
        if let Some(provisioning) = &provisioning {
            let _ = instance_types.set(provisioning.instance_types.clone());
            let _ = explain.nominations.set(provisioning.created.clone());
            if let Some(offerings) = &provisioning.offerings {
                let _ = explain.offerings.set(offerings.view());
            }
        }
        let limits = BatchLimits {
            idle: batch_idle_duration,
            max: batch_max_duration,
        };
        let launches = launching.as_ref().map(|l| l.launches.clone());
        let provisioners =
            ProvisioningActors::start(&wiring, provisioning.clone(), launches, limits);
        let generation = Generation::default();
        let disruption = provisioning.as_ref().map(|provisioning| {
            start_disruption(&wiring, provisioning, &timings, feature_gates, &generation)
        });
        let (disruption, disruption_tasks) = match disruption {
            Some((handle, tasks)) => {
                let _ = explain.disruption.set(handle.progress.clone());
                (Some(handle), tasks)
            }
            None => (None, Vec::new()),
        };
        let static_task = provisioning
            .as_ref()
            .filter(|_| feature_gates.static_capacity)
            .map(|provisioning| start_static_capacity(&wiring, provisioning, &mut subscribers));
        if !feature_gates.static_capacity {
            subscribers.nodepools.push(static_capacity::warn_gate_off());
        }
        subscribe_generation(&mut subscribers, &generation);
        if cluster_state_observability {
            subscribe_observability(&mut subscribers, &wiring.state);
        }
        let retrigger = Retrigger::default();
        subscribe_triggers(
            &mut subscribers,
            &wiring,
            &provisioners.to_batcher,
            &retrigger,
        );
        if let Some(launching) = &launching {
            launching.subscribe(&mut subscribers);
        }
        let status_tasks = start_status_loops(
            &wiring.client,
            &wiring.state,
            provider,
            &mut subscribers,
            &wiring.leader,
            &wiring.shutdown,
        );
        let alpha_tasks = start_alpha_loops(
            &wiring,
            provisioning.as_ref(),
            feature_gates,
            &retrigger,
            &mut subscribers,
        );
        let alpha = pod_watcher::AlphaKinds {
            node_overlays: feature_gates.node_overlay,
            capacity_buffers: feature_gates.capacity_buffer,
        };
        let mut tasks = pod_watcher::spawn(
            &wiring.client,
            writers,
            subscribers,
            alpha,
            &wiring.shutdown,
        );
        tasks.extend(alpha_tasks);
        tasks.extend(status_tasks);
        tasks.extend(static_task);
        let created = provisioning.as_ref().map(|p| p.created.clone());
        tasks.extend(start_trigger_loops(
            &wiring,
            created,
            retrigger,
            provisioners.to_batcher.clone(),
        ));
        tasks.push(start_storage_advice(&wiring));
        tasks.extend(cloud_tasks);
        tasks.extend(disruption_tasks);
        tasks.extend(endpoints.tasks);
        tasks.push(events_task);
        tasks.push(provisioners.gate_task);
        let (creator, lifecycle, termination, termination_stats) = match launching {
            Some(l) => (
                Some(l.creator),
                Some(l.lifecycle),
                Some(l.termination),
                Some(l.termination_stats),
            ),
            None => (None, None, None, None),
        };
        let Wiring {
            client,
            state,
            leader,
            events,
            ..
        } = wiring;
        Ok(Self {
            client,
            events,
            state,
            leader,
            rounds: provisioners.provisioner.rounds,
            node_pool_schedulers: provisioners.provisioner.node_pool_schedulers,
            offerings: provisioning.as_ref().and_then(|p| p.offerings.clone()),
            termination_stats,
            disruption,
            instance_types: provisioning.as_ref().map(|p| p.instance_types.clone()),
            metrics_addr: endpoints.metrics_addr,
            probes_addr: endpoints.probes_addr,
            shutdown,
            tasks,
            leader_task: leadership.task,
            lone_leader: leadership.lone,
            supervision,
            actors: Actors {
                batcher: provisioners.batcher,
                provisioner: provisioners.provisioner.addr,
                creator,
                lifecycle,
                termination,
            },
            graceful: provisioners.graceful,
        })
    }

    /// Starts the Interruption actor on `queue` (the binary opens the SQS queue named by
    /// `INTERRUPTION_QUEUE`; the simulated cluster hands in its in-memory queue). It marks
    /// interrupted offerings in this daemon's OfferingCache and stops with the daemon.
    pub fn watch_interruptions(&mut self, queue: Arc<dyn InterruptionQueue>) {
        let handler = interruption::Handler::new(interruption::HandlerDeps {
            queue: Arc::clone(&queue),
            state: self.state.clone(),
            client: self.client.clone(),
            events: self.events.clone(),
            offerings: self.offerings.clone(),
        });
        let tasks = self.supervision.sync_scope(|| {
            interruption::spawn(
                queue,
                handler,
                self.leader.clone(),
                self.shutdown.subscribe(),
            )
        });
        self.tasks.extend(tasks);
    }

    /// The recorder this daemon publishes Kubernetes Events through.
    pub fn events(&self) -> &events::EventRecorder {
        &self.events
    }

    /// This replica's supervision: its fault hooks (tests and `kerf simulate`) and whether
    /// an actor exhausted its restart budget.
    pub fn supervision(&self) -> &Supervision {
        &self.supervision
    }

    /// Set once an actor or loop of this replica exhausted its restart budget (`/healthz`
    /// fails from then on); `kerf controller` exits on it, `kerf simulate` reports it.
    pub fn unhealthy(&self) -> watch::Receiver<Option<Exhausted>> {
        self.supervision.exhausted()
    }

    /// Starts node repair (the binary does with `FEATURE_GATES` `NodeRepair=true`): it
    /// deletes the NodeClaims of Nodes unhealthy past their toleration, and stops with the
    /// daemon. Supervised: a panicking pass is restarted and counted.
    pub fn repair_nodes(&mut self) {
        let (client, state) = (self.client.clone(), self.state.clone());
        let (leader, shutdown) = (self.leader.clone(), self.shutdown.subscribe());
        let events = self.events.clone();
        let task = self.supervision.sync_scope(|| {
            supervisor::task("node_repair", move || {
                crate::node_repair::run(
                    client.clone(),
                    state.clone(),
                    events.clone(),
                    leader.clone(),
                    shutdown.clone(),
                )
            })
        });
        self.tasks.push(task);
    }

    /// Starts the instance-health poller on `source` every `period` (the binary hands in
    /// EC2's DescribeInstanceStatus every [`instance_health::PERIOD`]; the simulated
    /// cluster its simulated EC2). Supervised; stops with the daemon.
    pub fn watch_instance_health(
        &mut self,
        source: Arc<dyn InstanceStatusSource>,
        period: Duration,
    ) {
        let deps = instance_health::Deps {
            source,
            state: self.state.clone(),
            client: self.client.clone(),
            events: self.events.clone(),
        };
        let (leader, shutdown) = (self.leader.clone(), self.shutdown.subscribe());
        let task = self.supervision.sync_scope(|| {
            supervisor::task(instance_health::CONTROLLER, move || {
                instance_health::run(deps.clone(), period, leader.clone(), shutdown.clone())
            })
        });
        self.tasks.push(task);
    }

    /// Stops every task and actor: first provisioning drains (no new rounds; the current
    /// round and its launches finish, for at most [`SHUTDOWN_TIMEOUT`]), then a leader releases
    /// its Lease before this returns, so a standby can take over at once. No round starts
    /// after this: a batch the Batcher still hands over finds the replica no longer leading.
    pub async fn stop(self) {
        self.stop_within(SHUTDOWN_TIMEOUT).await;
    }

    /// [`Daemon::stop`], waiting at most `drain` for in-flight launches (a replica that must
    /// go at once, or a test of what a crash leaves behind, passes zero).
    pub async fn stop_within(self, drain: Duration) {
        self.graceful.run(&self.actors.provisioner, drain).await;
        self.shutdown.send_replace(true);
        if let Some(lone) = &self.lone_leader {
            lone.send_replace(false);
        }
        if let Some(task) = self.leader_task {
            stop_or_abort("leader election", task).await;
        }
        for task in self.tasks {
            stop_or_abort("controller loop", task).await;
        }
        // The lifecycle and the drainer stop themselves on the shutdown signal; the others
        // stop once their senders are gone.
        drop(self.actors);
    }
}

/// How long a task may take to end after the shutdown signal: releasing the Lease is one
/// request (bounded by the leader's attempt timeout) and every loop selects on the signal,
/// so a task still running after this is stuck, and is aborted rather than left to hang the
/// process's exit.
pub const TASK_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The metrics and probe endpoints, bound.
struct Endpoints {
    metrics_addr: SocketAddr,
    probes_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Endpoints {
    /// Binds `/metrics` and the probes on `bind` at `(metrics, probes)` ports.
    async fn serve(
        bind: Ipv4Addr,
        (metrics_port, health_probe_port): (u16, u16),
        served: server::Served,
        supervision: &Supervision,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Self, StartError> {
        let metrics_at = SocketAddr::from((bind, metrics_port));
        let state = served.state.clone();
        let (metrics_addr, metrics_task) =
            server::serve_metrics(metrics_at, served, shutdown.clone())
                .await
                .map_err(|e| StartError::MetricsPort(metrics_at, e))?;
        let probes_at = SocketAddr::from((bind, health_probe_port));
        let (probes_addr, probes_task) = server::serve_probes(
            probes_at,
            state.clone(),
            supervision.exhausted(),
            shutdown.clone(),
        )
        .await
        .map_err(|e| StartError::HealthProbePort(probes_at, e))?;
        tracing::info!(metrics = %metrics_addr, probes = %probes_addr, "serving endpoints");
        Ok(Self {
            metrics_addr,
            probes_addr,
            tasks: vec![metrics_task, probes_task],
        })
    }
}

/// Whether this replica leads: elected through a Lease, or alone from the start.
struct Leadership {
    leader: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
    /// A lone replica's leadership, withdrawn on stop.
    lone: Option<watch::Sender<bool>>,
}

impl Leadership {
    fn start(client: Client, election: Option<Election>, shutdown: &watch::Receiver<bool>) -> Self {
        match election {
            Some(election) => {
                let (leader, task) = leader::spawn(client, election, shutdown.clone());
                Self {
                    leader,
                    task: Some(task),
                    lone: None,
                }
            }
            // A lone replica leads from the start until it stops.
            None => {
                let (lone, leader) = watch::channel(true);
                Self {
                    leader,
                    task: None,
                    lone: Some(lone),
                }
            }
        }
    }
}

/// What every actor and loop is started with.
struct Wiring {
    /// Fenced: no write goes through once this replica stops leading ([`leader::fenced`]).
    client: Client,
    state: Arc<ClusterState>,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    events: events::EventRecorder,
}

impl Wiring {
    fn new(
        client: Client,
        state: Arc<ClusterState>,
        leader: watch::Receiver<bool>,
        reporting_instance: String,
        shutdown: watch::Receiver<bool>,
    ) -> (Self, JoinHandle<()>) {
        let client = leader::fenced(client, leader.clone());
        // Events spend a budget of their own (the client's is per kind), as upstream's event
        // recorder writes through a clientset of its own.
        let (events, events_task) =
            events::spawn(client.clone(), reporting_instance, shutdown.clone());
        let wiring = Self {
            client,
            state,
            leader,
            shutdown,
            events,
        };
        (wiring, events_task)
    }

    /// `cloud` with every write going through the fence, as every Kubernetes write does.
    fn fence(&self, cloud: Cloud) -> Cloud {
        Cloud {
            provider: Arc::new(leader::FencedCloudProvider::new(
                cloud.provider,
                self.leader.clone(),
            )),
            ..cloud
        }
    }
}

/// The settings a solve and a launch are made with.
#[derive(Clone, Copy)]
struct Solving {
    controller: ControllerSettings,
    policies: SolvePolicies,
    nominate_pods: bool,
    /// The `ReservedCapacity` gate: plan with the node classes' capacity reservations.
    reserved_capacity: bool,
}

/// The actors that exist only with a cloud: the NodeClaimCreator, the NodeClaim lifecycle
/// and the TerminationDrainer, and what the Provisioner launches through.
struct LaunchingActors {
    creator: Supervised<NodeClaimCreator>,
    lifecycle: Supervised<NodeClaimLifecycle>,
    lifecycle_depth: MailboxDepth,
    termination: Supervised<TerminationDrainer>,
    termination_depth: MailboxDepth,
    termination_stats: Arc<TerminationStats>,
    provisioning: Provisioning,
    /// The lifecycle's launches in flight, which a stopping daemon waits for.
    launches: InFlight,
}

impl LaunchingActors {
    fn start(
        w: &Wiring,
        cloud: Cloud,
        provider: Option<Arc<dyn CloudProvider>>,
        timings: &Timings,
        solving: Solving,
    ) -> Self {
        let lifecycle_depth = MailboxDepth::new("lifecycle", LIFECYCLE_MAILBOX_CAPACITY);
        let termination_depth = MailboxDepth::new("termination", TERMINATION_MAILBOX_CAPACITY);
        let creator_depth =
            MailboxDepth::new("nodeclaim_creator", NODECLAIM_CREATOR_MAILBOX_CAPACITY);
        let offerings = cloud.offerings.unwrap_or_else(|| {
            OfferingCache::start(
                UNAVAILABLE_OFFERINGS_TTL,
                MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
            )
        });
        let creator = NodeClaimCreator::new(w.client.clone(), creator_depth.clone())
            .with_events(w.events.clone());
        let created = creator.created_claims();
        let metered = MeteredCloudProvider::new(cloud.provider, LAUNCH_CONTROLLER);
        let metered: Arc<dyn CloudProvider> = Arc::new(metered);
        let resolves_node_classes = metered.node_class_reconciler().is_some();
        let deps = LifecycleDeps {
            state: w.state.clone(),
            client: w.client.clone(),
            cloud: Arc::clone(&metered),
            leader: w.leader.clone(),
            shutdown: w.shutdown.clone(),
            depth: lifecycle_depth.clone(),
            launch: LaunchDeps {
                events: w.events.clone(),
                offerings: Some(offerings.clone()),
                created: created.clone(),
                nominate_pods: solving.nominate_pods,
            },
        };
        let lifecycle = NodeClaimLifecycle::new(deps, timings.lifecycle);
        let launches = lifecycle.launches();
        let launching = lifecycle.launching();
        let lifecycle = supervisor::start(
            "lifecycle",
            lifecycle_depth.clone(),
            supervisor::rebuilding(lifecycle, NodeClaimLifecycle::restarted),
        );
        let (termination, termination_stats) = TerminationDrainer::new(
            TerminationDeps {
                state: w.state.clone(),
                client: w.client.clone(),
                cloud: metered,
                events: w.events.clone(),
                launching,
                leader: w.leader.clone(),
                shutdown: w.shutdown.clone(),
                depth: termination_depth.clone(),
            },
            timings.termination,
        );
        let termination = supervisor::start(
            "termination",
            termination_depth.clone(),
            supervisor::rebuilding(termination, TerminationDrainer::restarted),
        );
        let creator = supervisor::start(
            "nodeclaim_creator",
            creator_depth.clone(),
            supervisor::rebuilding(creator, NodeClaimCreator::restarted),
        );
        let provisioning = Provisioning {
            creator: Outbox::new(&creator, creator_depth),
            created,
            offerings: Some(offerings),
            catalog: cloud.catalog,
            controller: solving.controller,
            policies: solving.policies,
            events: w.events.clone(),
            instance_types: InstanceTypeCache::following(provider)
                .with_reserved_capacity(solving.reserved_capacity),
            resolves_node_classes,
        };
        Self {
            creator,
            lifecycle,
            lifecycle_depth,
            termination,
            termination_depth,
            termination_stats,
            provisioning,
            launches,
        }
    }

    /// Tells the lifecycle and the TerminationDrainer what changed.
    fn subscribe(&self, subscribers: &mut Subscribers) {
        let lifecycle = Outbox::new(&self.lifecycle, self.lifecycle_depth.clone());
        subscribe_changes(subscribers, &lifecycle);
        let termination = Outbox::new(&self.termination, self.termination_depth.clone());
        subscribe_changes(subscribers, &termination);
    }
}

/// The Batcher and the Provisioner, gated on leadership and shutdown.
struct ProvisioningActors {
    provisioner: provisioner::Started,
    batcher: Supervised<Batcher>,
    to_batcher: Outbox<batcher::Trigger>,
    graceful: GracefulShutdown,
    gate_task: JoinHandle<()>,
}

impl ProvisioningActors {
    fn start(
        w: &Wiring,
        provisioning: Option<Provisioning>,
        launches: Option<InFlight>,
        limits: BatchLimits,
    ) -> Self {
        let created = provisioning.as_ref().map(|p| shutdown::Created {
            claims: p.created.clone(),
            state: w.state.clone(),
        });
        let (graceful, draining) = GracefulShutdown::new(launches.unwrap_or_default(), created);
        // The Provisioner runs rounds only while this replica leads and is not stopping.
        let (may_provision, gate_task) =
            shutdown::gate(w.leader.clone(), draining, w.shutdown.clone());
        let provisioner_depth = MailboxDepth::new("provisioner", PROVISIONER_MAILBOX_CAPACITY);
        let provisioner = Provisioner::start(
            w.state.clone(),
            may_provision,
            provisioner_depth.clone(),
            provisioning,
        );
        let batcher_depth = MailboxDepth::new("batcher", BATCHER_MAILBOX_CAPACITY);
        let to_provisioner = Outbox::new(&provisioner.addr, provisioner_depth);
        let mailbox = batcher_depth.clone();
        let batcher = supervisor::start("batcher", batcher_depth.clone(), move || {
            Some(Batcher::new(
                limits,
                to_provisioner.clone(),
                mailbox.clone(),
            ))
        });
        let to_batcher = Outbox::new(&batcher, batcher_depth);
        Self {
            provisioner,
            batcher,
            to_batcher,
            graceful,
            gate_task,
        }
    }
}

/// The Orchestrator and the disruption loop over the Provisioner's solving parts.
fn start_disruption(
    w: &Wiring,
    provisioning: &Provisioning,
    timings: &Timings,
    feature_gates: FeatureGates,
    generation: &Generation,
) -> (DisruptionHandle, Vec<JoinHandle<()>>) {
    let (orchestrator, orchestrator_task) = orchestrator::spawn(
        OrchestratorDeps {
            client: w.client.clone(),
            state: w.state.clone(),
            creator: provisioning.creator.clone(),
            events: w.events.clone(),
            config: timings.orchestrator,
        },
        w.shutdown.clone(),
    );
    let (progress, progress_rx) = watch::channel(Progress::default());
    let handle = DisruptionHandle {
        progress: progress_rx,
        in_queue: orchestrator.in_queue().clone(),
    };
    let deps = DisruptionDeps {
        client: w.client.clone(),
        state: w.state.clone(),
        catalog: provisioning.catalog,
        offerings: provisioning.offerings.clone(),
        instance_types: provisioning.instance_types.clone(),
        controller: provisioning.controller,
        policies: provisioning.policies,
        feature_gates: disruption::core_gates(feature_gates),
        orchestrator,
        nominations: provisioning.created.clone(),
        events: w.events.clone(),
        leader: w.leader.clone(),
        generation: generation.clone(),
        config: timings.disruption.clone(),
    };
    let shutdown = w.shutdown.clone();
    let loop_task = supervisor::task("disruption", move || {
        disruption::run(deps.clone(), progress.clone(), shutdown.clone())
    });
    (handle, vec![orchestrator_task, loop_task])
}

/// With their gates: the NodeOverlay status loop (over the Provisioner's instance types, so
/// only with a cloud provider) and the CapacityBuffer controller, each woken by its kind's
/// changes (overlays also by NodePools and node classes, whose types they select).
fn start_alpha_loops(
    w: &Wiring,
    provisioning: Option<&Provisioning>,
    gates: FeatureGates,
    retrigger: &Retrigger,
    hooks: &mut Subscribers,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if gates.node_overlay
        && let Some(provisioning) = provisioning
    {
        let trigger = Trigger::default();
        hooks.node_overlays.push(requeue::on_change(&[&trigger]));
        hooks.nodepools.push(requeue::on_change(&[&trigger]));
        hooks.nodeclasses.push(requeue::on_change(&[&trigger]));
        // A changed overlay may re-price what pending pods wait for.
        let again = retrigger.clone();
        hooks
            .node_overlays
            .push(Box::new(move |_, _| again.request()));
        let deps = node_overlay::Deps {
            client: w.client.clone(),
            state: w.state.clone(),
            catalog: provisioning.catalog,
            offerings: provisioning.offerings.clone(),
            instance_types: provisioning.instance_types.clone(),
            controller: provisioning.controller,
        };
        let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
        tasks.push(supervisor::task("nodeoverlay", move || {
            node_overlay::run(
                deps.clone(),
                trigger.clone(),
                leader.clone(),
                shutdown.clone(),
            )
        }));
    }
    if gates.capacity_buffer {
        let trigger = Trigger::default();
        hooks.capacity_buffers.push(requeue::on_change(&[&trigger]));
        let (client, state, retrigger) = (w.client.clone(), w.state.clone(), retrigger.clone());
        let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
        tasks.push(supervisor::task("capacitybuffer", move || {
            capacity_buffer::run(
                client.clone(),
                state.clone(),
                trigger.clone(),
                retrigger.clone(),
                leader.clone(),
                shutdown.clone(),
            )
        }));
    }
    tasks
}

/// The trackers behind the metrics that need to see objects change: pod startup and binding
/// durations, and each kind's condition transitions and termination durations.
fn subscribe_observability(subscribers: &mut Subscribers, state: &Arc<ClusterState>) {
    let mut startup = StartupTracker::reading(state.clone());
    subscribers.pods.push(Box::new(move |pod, change| {
        startup.observe(pod, change);
    }));
    let mut nodes = ConditionTracker::default();
    subscribers
        .nodes
        .push(Box::new(move |node, change| nodes.observe(node, change)));
    let mut nodeclaims = ConditionTracker::default();
    subscribers.nodeclaims.push(Box::new(move |claim, change| {
        nodeclaims.observe(claim, change)
    }));
    let mut nodepools = ConditionTracker::default();
    subscribers.nodepools.push(Box::new(move |pool, change| {
        nodepools.observe(pool, change)
    }));
    let mut nodeclasses = ConditionTracker::default();
    subscribers.nodeclasses.push(Box::new(move |class, change| {
        nodeclasses.observe(class, change)
    }));
}

/// The watch hooks that start a batch: pods to place, and changes that may let pods the
/// last round left pending fit now ([`Retrigger`]); and the startup-time tracker.
fn subscribe_triggers(
    subscribers: &mut Subscribers,
    w: &Wiring,
    to_batcher: &Outbox<batcher::Trigger>,
    retrigger: &Retrigger,
) {
    subscribers.pods.push(Box::new(triggers::on_pod(
        w.state.clone(),
        to_batcher.clone(),
    )));
    subscribers
        .nodeclaims
        .push(Box::new(triggers::on_node_claim(retrigger.clone())));
    subscribers
        .nodepools
        .push(Box::new(triggers::on_node_pool(retrigger.clone())));
    subscribers
        .nodeclasses
        .push(Box::new(triggers::on_node_class(retrigger.clone())));
    subscribers
        .nodes
        .push(Box::new(triggers::on_node(retrigger.clone())));
}

/// The loops that start a batch without a watch event: a nomination lapsing (with a cloud)
/// and the retrigger of pods left pending.
fn start_trigger_loops(
    w: &Wiring,
    created: Option<CreatedClaims>,
    retrigger: Retrigger,
    to_batcher: Outbox<batcher::Trigger>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(created) = created {
        let (retrigger, shutdown) = (retrigger.clone(), w.shutdown.clone());
        tasks.push(supervisor::task("nomination_lapse", move || {
            triggers::on_nomination_lapse(created.clone(), retrigger.clone(), shutdown.clone())
        }));
    }
    let (state, leader, shutdown) = (w.state.clone(), w.leader.clone(), w.shutdown.clone());
    tasks.push(supervisor::task("retrigger", move || {
        triggers::retrigger(
            state.clone(),
            to_batcher.clone(),
            retrigger.clone(),
            leader.clone(),
            shutdown.clone(),
        )
    }));
    tasks
}

/// The in-tree storage warnings ([`storage_advice`]), published while leading.
fn start_storage_advice(w: &Wiring) -> JoinHandle<()> {
    let (state, events) = (w.state.clone(), w.events.clone());
    let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
    supervisor::task("storage_advice", move || {
        storage_advice::run(
            state.clone(),
            events.clone(),
            leader.clone(),
            shutdown.clone(),
        )
    })
}

/// Awaits `task`, aborting it (with a warning naming it) if it outlives [`TASK_STOP_TIMEOUT`];
/// a task that ended in a panic is logged with the panic's message.
async fn stop_or_abort(what: &'static str, task: JoinHandle<()>) {
    let abort = task.abort_handle();
    match tokio::time::timeout(TASK_STOP_TIMEOUT, task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) if error.is_panic() => {
            let panic = supervisor::panic_message(&*error.into_panic());
            tracing::error!(task = what, panic, "task had panicked when it was stopped");
        }
        Ok(Err(error)) => tracing::warn!(task = what, %error, "task was cancelled before stopping"),
        Err(_) => {
            abort.abort();
            tracing::warn!(
                task = what,
                timeout_s = TASK_STOP_TIMEOUT.as_secs(),
                "task did not stop after the shutdown signal; aborted"
            );
        }
    }
}

/// The loop holding static NodePools at their replicas (`StaticCapacity`), woken by
/// NodePool and NodeClaim changes.
fn start_static_capacity(
    w: &Wiring,
    provisioning: &Provisioning,
    hooks: &mut Subscribers,
) -> JoinHandle<()> {
    let trigger = Trigger::default();
    hooks.nodepools.push(requeue::on_change(&[&trigger]));
    hooks.nodeclaims.push(requeue::on_change(&[&trigger]));
    hooks.nodeclasses.push(requeue::on_change(&[&trigger]));
    let deps = StaticCapacityDeps {
        client: w.client.clone(),
        state: w.state.clone(),
        creator: provisioning.creator.clone(),
        created: provisioning.created.clone(),
        catalog: provisioning.catalog,
        offerings: provisioning.offerings.clone(),
        instance_types: provisioning.instance_types.clone(),
        controller: provisioning.controller,
        deleted: static_capacity::Deleted::default(),
    };
    let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
    supervisor::task("static_capacity", move || {
        static_capacity::run(
            deps.clone(),
            trigger.clone(),
            leader.clone(),
            shutdown.clone(),
        )
    })
}

/// The state-driven status reconcilers: NodeClaim disruption conditions and
/// `lastPodEventTime` (drift needs the cloud provider; without one only the NodePool's own
/// drift is seen), expiration, and NodePool hash and status. Each is woken by the watch
/// events it depends on.
fn start_status_loops(
    client: &Client,
    state: &Arc<ClusterState>,
    provider: Option<Arc<dyn CloudProvider>>,
    hooks: &mut Subscribers,
    leader: &watch::Receiver<bool>,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let conditions = Trigger::default();
    let departures = Departures::default();
    hooks.pods.push(Box::new(podevents::on_pod(
        departures.clone(),
        conditions.clone(),
    )));
    let expiry = Trigger::default();
    let status = Trigger::default();
    hooks
        .nodeclaims
        .push(requeue::on_change(&[&conditions, &expiry, &status]));
    hooks
        .nodepools
        .push(requeue::on_change(&[&conditions, &status]));
    hooks
        .nodeclasses
        .push(requeue::on_change(&[&conditions, &expiry, &status]));
    hooks
        .nodes
        .push(requeue::on_change(&[&conditions, &status]));
    let metered = provider.map(|p| {
        Arc::new(MeteredCloudProvider::new(
            p,
            nodeclaim_disruption::CONTROLLER,
        )) as Arc<dyn CloudProvider>
    });
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    // Rebuilt after a panic with an empty memory; the departures the pod hook feeds are kept.
    let conditions_task = supervisor::task("nodeclaim_disruption", move || {
        let controller =
            NodeClaimDisruption::new(c.clone(), st.clone(), metered.clone(), departures.clone());
        nodeclaim_disruption::run(controller, conditions.clone(), l.clone(), s.clone())
    });
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    let expiration_task = supervisor::task("expiration", move || {
        expiration::run(c.clone(), st.clone(), expiry.clone(), l.clone(), s.clone())
    });
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    let status_task = supervisor::task("nodepool_status", move || {
        nodepool_status::run(c.clone(), st.clone(), status.clone(), l.clone(), s.clone())
    });
    vec![conditions_task, expiration_task, status_task]
}

/// With a cloud provider: the LaunchTemplateCache and the Tagger (when the provider has
/// those capabilities) with their sweeps, and garbage collection. Returns the PodWatcher
/// subscriptions feeding the actors and the tasks to await on stop.
fn start_cloud_loops(
    client: &Client,
    state: &Arc<ClusterState>,
    provider: Option<Arc<dyn CloudProvider>>,
    leader: &watch::Receiver<bool>,
    shutdown: &watch::Receiver<bool>,
) -> (Subscribers, Vec<JoinHandle<()>>) {
    let mut hooks = Subscribers::default();
    let mut tasks = Vec::new();
    let Some(provider) = provider else {
        return (hooks, tasks);
    };
    if provider.node_class_reconciler().is_some() {
        let depth = MailboxDepth::new(
            "launch_template_cache",
            LAUNCH_TEMPLATE_CACHE_MAILBOX_CAPACITY,
        );
        let addr = {
            let (client, state, provider, leader, mailbox) = (
                client.clone(),
                state.clone(),
                Arc::clone(&provider),
                leader.clone(),
                depth.clone(),
            );
            supervisor::start("launch_template_cache", depth.clone(), move || {
                Some(LaunchTemplateCache::new(
                    client.clone(),
                    state.clone(),
                    Arc::clone(&provider),
                    leader.clone(),
                    mailbox.clone(),
                ))
            })
        };
        let out = Outbox::new(&addr, depth);
        let (st, o, l, s) = (state.clone(), out.clone(), leader.clone(), shutdown.clone());
        tasks.push(supervisor::task("launch_template_cache_sweep", move || {
            launch_template_cache::sweep(st.clone(), o.clone(), l.clone(), s.clone())
        }));
        hooks
            .nodeclasses
            .push(Box::new(launch_template_cache::on_change(
                state.clone(),
                out,
            )));
    }
    if provider.instance_tagger().is_some() {
        let depth = MailboxDepth::new("tagger", TAGGER_MAILBOX_CAPACITY);
        let addr = {
            let (client, state, provider, leader, mailbox) = (
                client.clone(),
                state.clone(),
                Arc::clone(&provider),
                leader.clone(),
                depth.clone(),
            );
            supervisor::start("tagger", depth.clone(), move || {
                Some(Tagger::new(
                    client.clone(),
                    state.clone(),
                    Arc::clone(&provider),
                    leader.clone(),
                    mailbox.clone(),
                ))
            })
        };
        let out = Outbox::new(&addr, depth);
        let (st, o, s) = (state.clone(), out.clone(), shutdown.clone());
        tasks.push(supervisor::task("tagging_sweep", move || {
            tagging::sweep(st.clone(), o.clone(), s.clone())
        }));
        hooks
            .nodeclaims
            .push(Box::new(tagging::on_change(state.clone(), out)));
    }
    let metered: Arc<dyn CloudProvider> = Arc::new(MeteredCloudProvider::new(
        Arc::clone(&provider),
        garbage_collection::CONTROLLER,
    ));
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    tasks.push(supervisor::task("garbage_collection", move || {
        garbage_collection::run(
            c.clone(),
            st.clone(),
            Arc::clone(&metered),
            l.clone(),
            s.clone(),
        )
    }));
    let metered: Arc<dyn CloudProvider> = Arc::new(MeteredCloudProvider::new(
        provider,
        capacity_type::CONTROLLER,
    ));
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    tasks.push(supervisor::task("capacity_type", move || {
        capacity_type::run(
            c.clone(),
            st.clone(),
            Arc::clone(&metered),
            l.clone(),
            s.clone(),
        )
    }));
    (hooks, tasks)
}

/// Node and NodeClaim changes to the NodeClaim lifecycle or the TerminationDrainer; a full
/// mailbox drops one (counted), and the actor's periodic resync repairs the drop.
fn subscribe_changes(subscribers: &mut Subscribers, lifecycle: &Outbox<Changed>) {
    let out = lifecycle.clone();
    subscribers.nodes.push(Box::new(move |node, _| {
        notify(
            &out,
            Changed::Node {
                name: node.metadata.name.clone().unwrap_or_default(),
                provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
            },
        );
    }));
    let out = lifecycle.clone();
    subscribers.nodeclaims.push(Box::new(move |claim, _| {
        notify(
            &out,
            Changed::NodeClaim(claim.metadata.name.clone().unwrap_or_default()),
        );
    }));
}

/// Every watched change the disruption decision reads bumps `generation`, ending the
/// disruption loop's no-op memo.
fn subscribe_generation(subscribers: &mut Subscribers, generation: &Generation) {
    let g = generation.clone();
    subscribers.pods.push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers.nodes.push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers.nodeclaims.push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers.nodepools.push(Box::new(move |_, _| g.bump()));
    // An overlay re-prices what consolidation compares (upstream marks cluster state
    // unconsolidated after each overlay evaluation); a buffer changes the room it must keep.
    let g = generation.clone();
    subscribers
        .node_overlays
        .push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers
        .capacity_buffers
        .push(Box::new(move |_, _| g.bump()));
}

/// A change an actor could not be told of: counted (`kerf_mailbox_dropped_total`) whether
/// its mailbox was full or it had stopped; a stopped actor is also warned about, since only
/// its restart (or the process's) repairs that.
fn notify(lifecycle: &Outbox<Changed>, change: Changed) {
    match lifecycle.try_deliver(change) {
        // Counted by the outbox; the actor's resync repairs the drop.
        Ok(()) | Err(DeliverError::Full(_)) => {}
        Err(err @ DeliverError::Closed(_)) => {
            metrics::counter!(crate::metrics::MAILBOX_DROPPED, "mailbox" => lifecycle.depth().name().to_owned())
                .increment(1);
            tracing::warn!(error = %err, "notifying of a change");
        }
    }
}

#[cfg(test)]
mod stop_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_task_stuck_after_the_shutdown_signal_is_aborted_not_awaited_forever() {
        let stuck = tokio::spawn(std::future::pending::<()>());
        let abort = stuck.abort_handle();
        tokio::time::timeout(TASK_STOP_TIMEOUT * 2, stop_or_abort("stuck", stuck))
            .await
            .expect("stop_or_abort returns once the timeout passes");
        tokio::task::yield_now().await;
        assert!(abort.is_finished(), "the stuck task was aborted");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ends_is_awaited_to_its_end() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _sent = tx.send(());
        });
        stop_or_abort("ending", task).await;
        assert!(rx.await.is_ok(), "the task ran to its end");
    }
}
