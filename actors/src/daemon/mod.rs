//! Wiring: starts every actor and task of the controller against one Kubernetes client —
//! metrics and probe endpoints, leader election, the event recorder, the PodWatcher's watch
//! streams, the Batcher, the Provisioner with its NodePoolSchedulers and (with a cloud
//! provider) the OfferingCache, the NodeClaimCreator, the NodeClaim lifecycle and the
//! TerminationDrainer — and stops them in
//! reverse order, letting provisioning finish first ([`crate::shutdown`]). Must be called inside
//! an actix `System` running on a multi-threaded tokio runtime (`System::with_tokio_rt`):
//! each actor lives on its own arbiter thread under a supervisor ([`crate::supervisor`]),
//! watch streams and HTTP on the runtime's workers. This file starts and stops; the parts sit
//! beside it: `wiring` (what every part is started with), `actors`, `loops` and
//! `subscriptions` (the PodWatcher hooks).

mod actors;
mod environment;
mod loops;
mod subscriptions;
mod wiring;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kerf::cloudprovider::CloudProvider;
use kerf::cluster::ControllerSettings;
use kerf::interruption::InterruptionQueue;
use kerf::interruption::instance_status::InstanceStatusSource;
use kerf::scheduling::SolvePolicies;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batcher::triggers::Retrigger;
use crate::batcher::{self, BatchLimits, Batcher};
use crate::disruption::Generation;
use crate::leader::Election;
use crate::lifecycle::NodeClaimLifecycle;
use crate::mailbox::Outbox;
use crate::nodeclaim_creator::NodeClaimCreator;
use crate::offering_cache::OfferingCacheHandle;
use crate::pod_watcher::Subscribers;
use crate::provisioner::{InstanceTypeCache, Provisioner, Provisioning, Round};
use crate::settings::{FeatureGates, ValidSettings};
use crate::shutdown::{GracefulShutdown, SHUTDOWN_TIMEOUT};
use crate::state::{ClusterState, Writers};
use crate::static_capacity;
use crate::supervisor::{self, Exhausted, Supervised, Supervision};
use crate::termination::{TerminationDrainer, TerminationStats};
use crate::{divergences, events, instance_health, interruption, pod_watcher, server};

use actors::{LaunchingActors, ProvisioningActors};
pub use environment::{Cloud, Environment, StartError, Timings};
pub use loops::DisruptionHandle;
use loops::{
    start_alpha_loops, start_cloud_loops, start_disruption, start_static_capacity,
    start_status_loops, start_storage_advice, start_trigger_loops,
};
use subscriptions::{subscribe_generation, subscribe_observability, subscribe_triggers};
use wiring::{Endpoints, Leadership, Solving, Wiring};

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

/// What a replica serves, bound before any actor starts: `/metrics` and the probes, and the
/// sources `/explain` reads, filled in as the parts they read start.
struct Front {
    endpoints: Endpoints,
    explain: Arc<server::ExplainSources>,
    instance_types: Arc<OnceLock<InstanceTypeCache>>,
}

impl Front {
    async fn serve(
        bind: Ipv4Addr,
        ports: (u16, u16),
        state: &Arc<ClusterState>,
        observability: bool,
        supervision: &Supervision,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Self, StartError> {
        let explain = Arc::new(server::ExplainSources::default());
        let instance_types = Arc::new(OnceLock::new());
        let served = server::Served {
            state: state.clone(),
            explain: explain.clone(),
            observability,
            instance_types: instance_types.clone(),
        };
        let endpoints = Endpoints::serve(bind, ports, served, supervision, shutdown).await?;
        Ok(Self {
            endpoints,
            explain,
            instance_types,
        })
    }

    /// Serves what the provisioning actors hold: the instance types rounds plan with, the
    /// nominations and the unavailable offerings.
    fn show(&self, provisioning: &Provisioning) {
        let _ = self.instance_types.set(provisioning.instance_types.clone());
        let _ = self.explain.nominations.set(provisioning.created.clone());
        if let Some(offerings) = &provisioning.offerings {
            let _ = self.explain.offerings.set(offerings.view());
        }
    }
}

/// The started parts the PodWatcher's watch streams feed.
struct Subscribing<'a> {
    wiring: &'a Wiring,
    provisioning: Option<&'a Provisioning>,
    launching: Option<&'a LaunchingActors>,
    to_batcher: &'a Outbox<batcher::Trigger>,
    generation: &'a Generation,
}

impl Subscribing<'_> {
    /// Subscribes every part to the PodWatcher, starts the loops that go with them, then the
    /// watch streams; returns the tasks to stop.
    fn watch(
        self,
        gates: FeatureGates,
        observability: bool,
        mut subscribers: Subscribers,
        provider: Option<Arc<dyn CloudProvider>>,
        writers: Writers,
    ) -> Vec<JoinHandle<()>> {
        let Self {
            wiring,
            provisioning,
            launching,
            to_batcher,
            generation,
        } = self;
        let static_task = provisioning
            .filter(|_| gates.static_capacity)
            .map(|provisioning| start_static_capacity(wiring, provisioning, &mut subscribers));
        if !gates.static_capacity {
            subscribers.nodepools.push(static_capacity::warn_gate_off());
        }
        subscribe_generation(&mut subscribers, generation);
        if observability {
            subscribe_observability(&mut subscribers, &wiring.state);
        }
        let retrigger = Retrigger::default();
        subscribe_triggers(&mut subscribers, wiring, to_batcher, &retrigger);
        if let Some(launching) = launching {
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
        let alpha_tasks =
            start_alpha_loops(wiring, provisioning, gates, &retrigger, &mut subscribers);
        let alpha = pod_watcher::AlphaKinds {
            node_overlays: gates.node_overlay,
            capacity_buffers: gates.capacity_buffer,
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
        let created = provisioning.map(|p| p.created.clone());
        tasks.extend(start_trigger_loops(
            wiring,
            created,
            retrigger,
            to_batcher.clone(),
        ));
        tasks.push(start_storage_advice(wiring));
        tasks
    }
}

/// What [`Daemon::start_with`] started, for [`Daemon::assemble`].
struct Parts {
    wiring: Wiring,
    provisioning: Option<Provisioning>,
    launching: Option<LaunchingActors>,
    provisioners: ProvisioningActors,
    disruption: Option<DisruptionHandle>,
    metrics_addr: SocketAddr,
    probes_addr: SocketAddr,
    leadership: Leadership,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    supervision: Supervision,
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
        let observability = cluster_state_observability;
        let front = Front::serve(
            bind,
            ports,
            &state,
            observability,
            &supervision,
            &shutdown_rx,
        )
        .await?;
        let election = leader_election.map(|lease| Election {
            namespace: lease.namespace.unwrap_or(namespace),
            name: lease.name,
            identity: identity.clone(),
            timing: leader_timing,
        });
        let leadership = Leadership::start(leader_client, election, &shutdown_rx);
        let _ = front.explain.leader.set(leadership.leader.clone());
        let (wiring, events_task) = Wiring::new(
            client,
            state,
            leadership.leader.clone(),
            identity,
            shutdown_rx,
        );
        let cloud = cloud.map(|cloud| wiring.fence(cloud));
        let provider = cloud.as_ref().map(|c| Arc::clone(&c.provider));
        let (subscribers, cloud_tasks) = start_cloud_loops(
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
            front.show(provisioning);
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
                let _ = front.explain.disruption.set(handle.progress.clone());
                (Some(handle), tasks)
            }
            None => (None, Vec::new()),
        };
        let subscribing = Subscribing {
            wiring: &wiring,
            provisioning: provisioning.as_ref(),
            launching: launching.as_ref(),
            to_batcher: &provisioners.to_batcher,
            generation: &generation,
        };
        let mut tasks =
            subscribing.watch(feature_gates, observability, subscribers, provider, writers);
        tasks.extend(cloud_tasks);
        tasks.extend(disruption_tasks);
        tasks.extend(front.endpoints.tasks);
        tasks.push(events_task);
        Ok(Self::assemble(Parts {
            wiring,
            provisioning,
            launching,
            provisioners,
            disruption,
            metrics_addr: front.endpoints.metrics_addr,
            probes_addr: front.endpoints.probes_addr,
            leadership,
            shutdown,
            tasks,
            supervision,
        }))
    }

    /// The daemon holding `parts`, the handles its accessors read and its stop releases.
    fn assemble(parts: Parts) -> Self {
        let Parts {
            wiring,
            provisioning,
            launching,
            provisioners,
            disruption,
            metrics_addr,
            probes_addr,
            leadership,
            shutdown,
            mut tasks,
            supervision,
        } = parts;
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
        Self {
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
            metrics_addr,
            probes_addr,
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
        }
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
    /// its Lease before this returns, so a standby can take over at once. Once stopping, no round
    /// starts: a batch the Batcher still hands over finds the replica not leading.
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
