//! Prometheus metrics under upstream Karpenter's names, so its Grafana dashboards chart kerf
//! unchanged, plus kerf's own mailbox metrics. One process-wide recorder is installed on
//! first use (several daemons in one test process share it); every histogram gets explicit
//! buckets, because the exporter renders a histogram without buckets as a summary, which
//! Grafana cannot aggregate across replicas.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Pods by state (upstream gauge; labels `name`, `namespace`, `phase`, …).
pub const PODS_STATE: &str = "karpenter_pods_state";
/// Time from a pod's creation until it is ready. A summary, as upstream's (its dashboards
/// read quantiles), so it deliberately gets no buckets.
pub const PODS_STARTUP_DURATION: &str = "karpenter_pods_startup_duration_seconds";
/// Time from a pod's creation until it was bound (a histogram, seconds).
pub const PODS_BOUND_DURATION: &str = "karpenter_pods_bound_duration_seconds";
/// Seconds since each unbound pod's creation (labels `name`, `namespace`).
pub const PODS_UNBOUND_TIME: &str = "karpenter_pods_unbound_time_seconds";
/// Seconds since each pending pod's creation (labels `name`, `namespace`).
pub const PODS_UNSTARTED_TIME: &str = "karpenter_pods_unstarted_time_seconds";
/// Time from a provisioning round first taking a pod up until a round first solved it.
pub const PODS_SCHEDULING_DECISION_DURATION: &str =
    "karpenter_pods_scheduling_decision_duration_seconds";
/// Seconds each pod taken up by a round has waited for a round to solve it (labels `name`,
/// `namespace`).
pub const PODS_PROVISIONING_UNDECIDED_TIME: &str =
    "karpenter_pods_provisioning_scheduling_undecided_time_seconds";
/// Seconds since a round placed each still unbound pod (labels `name`, `namespace`).
pub const PODS_PROVISIONING_UNBOUND_TIME: &str = "karpenter_pods_provisioning_unbound_time_seconds";
/// Seconds since a round placed each still pending pod (labels `name`, `namespace`).
pub const PODS_PROVISIONING_UNSTARTED_TIME: &str =
    "karpenter_pods_provisioning_unstarted_time_seconds";
/// Time from a round placing a pod until it was bound.
pub const PODS_PROVISIONING_BOUND_DURATION: &str =
    "karpenter_pods_provisioning_bound_duration_seconds";
/// Time from a round placing a pod until it was ready.
pub const PODS_PROVISIONING_STARTUP_DURATION: &str =
    "karpenter_pods_provisioning_startup_duration_seconds";
/// Resources provisioned for a NodePool (labels `nodepool`, `resource_type`).
pub const NODEPOOLS_USAGE: &str = "karpenter_nodepools_usage";
/// A NodePool's `spec.limits` (labels `nodepool`, `resource_type`).
pub const NODEPOOLS_LIMIT: &str = "karpenter_nodepools_limit";
/// A node's allocatable resources (labels `node_name`, `resource_type`, well-known labels).
pub const NODES_ALLOCATABLE: &str = "karpenter_nodes_allocatable";
/// Requests of the non-DaemonSet pods bound to a node.
pub const NODES_TOTAL_POD_REQUESTS: &str = "karpenter_nodes_total_pod_requests";
/// Requests of the DaemonSet pods bound to a node.
pub const NODES_TOTAL_DAEMON_REQUESTS: &str = "karpenter_nodes_total_daemon_requests";
/// Limits of every pod bound to a node, DaemonSet pods included.
pub const NODES_TOTAL_POD_LIMITS: &str = "karpenter_nodes_total_pod_limits";
/// Limits of the DaemonSet pods bound to a node.
pub const NODES_TOTAL_DAEMON_LIMITS: &str = "karpenter_nodes_total_daemon_limits";
/// A node's capacity less its allocatable: what the kubelet reserves for the system.
pub const NODES_SYSTEM_OVERHEAD: &str = "karpenter_nodes_system_overhead";
/// Seconds since each node's creation (node labels).
pub const NODES_CURRENT_LIFETIME: &str = "karpenter_nodes_current_lifetime_seconds";
/// Requests of every pod bound to a node over the nodes' allocatable, in percent (label
/// `resource_type`).
pub const CLUSTER_UTILIZATION: &str = "karpenter_cluster_utilization_percent";
/// Nodes held in cluster state.
pub const CLUSTER_STATE_NODE_COUNT: &str = "karpenter_cluster_state_node_count";
/// Seconds cluster state has waited for its initial lists (0 once synced).
pub const CLUSTER_STATE_UNSYNCED_TIME: &str = "karpenter_cluster_state_unsynced_time_seconds";
/// vCPUs of an instance type (label `instance_type`).
pub const INSTANCE_TYPE_CPU_CORES: &str = "karpenter_cloudprovider_instance_type_cpu_cores";
/// Memory of an instance type, in bytes (label `instance_type`).
pub const INSTANCE_TYPE_MEMORY_BYTES: &str = "karpenter_cloudprovider_instance_type_memory_bytes";
/// 1 when an offering can be launched, 0 when not (labels `instance_type`, `capacity_type`,
/// `zone`).
pub const OFFERING_AVAILABLE: &str = "karpenter_cloudprovider_instance_type_offering_available";
/// An offering's hourly price, as decisions price it (labels `instance_type`,
/// `capacity_type`, `zone`).
pub const OFFERING_PRICE_ESTIMATE: &str =
    "karpenter_cloudprovider_instance_type_offering_price_estimate";
/// The summed hourly price of a NodePool's NodeClaims' offerings (label `nodepool`).
pub const NODEPOOLS_COST: &str = "karpenter_nodepools_cost_total";
/// Launched NodeClaims whose offering had no known price when the NodePool cost was computed
/// (label `nodepool`).
pub const NODEPOOLS_COST_TRACKER_ERRORS: &str = "karpenter_nodepools_cost_tracker_errors_total";
/// Duration of cloud provider calls (labels `controller`, `method`, `provider`).
pub const CLOUDPROVIDER_DURATION: &str = "karpenter_cloudprovider_duration_seconds";
/// Failed cloud provider calls (labels `controller`, `method`, `provider`, `error`).
pub const CLOUDPROVIDER_ERRORS: &str = "karpenter_cloudprovider_errors_total";
/// Pods waiting in the current batching window (upstream: scheduler queue depth).
pub const SCHEDULER_QUEUE_DEPTH: &str = "karpenter_scheduler_queue_depth";
/// Duration of one provisioning solve (label `controller`, as upstream's scheduler).
pub const SCHEDULING_DURATION: &str = "karpenter_scheduler_scheduling_duration_seconds";
/// Pods the last provisioning round could not place (label `controller`).
pub const SCHEDULER_UNSCHEDULABLE_PODS: &str = "karpenter_scheduler_unschedulable_pods_count";
/// Seconds the provisioning solve in progress has run (labels `controller`, `scheduling_id`:
/// the round's number); 0 once it finished.
pub const SCHEDULER_UNFINISHED_WORK: &str = "karpenter_scheduler_unfinished_work_seconds";
/// Pods the last provisioning round left out: left to the kube-scheduler because a node
/// opened since its last verdict (see `provisioner::settling`).
pub const SCHEDULER_IGNORED_PODS: &str = "karpenter_scheduler_ignored_pods_count";
/// Pods the last provisioning round could not place, by the zone their own constraints
/// allow (labels `controller`, `zone`: the zone, `flexible` for several or any, `none`).
pub const SCHEDULER_PENDING_BY_ZONE: &str =
    "karpenter_scheduler_pending_pods_by_effective_zone_count";
/// NodeClaims created (labels `reason`, `nodepool`, `min_values_relaxed`).
pub const NODECLAIMS_CREATED: &str = "karpenter_nodeclaims_created_total";
/// NodeClaims whose machine the cloud provider launched (label `nodepool`).
pub const NODECLAIMS_LAUNCHED: &str = "karpenter_nodeclaims_launched_total";
/// NodeClaims whose Node registered (label `nodepool`).
pub const NODECLAIMS_REGISTERED: &str = "karpenter_nodeclaims_registered_total";
/// NodeClaims whose Node finished initializing (label `nodepool`).
pub const NODECLAIMS_INITIALIZED: &str = "karpenter_nodeclaims_initialized_total";
/// NodeClaims whose termination finalizer was released (labels `nodepool`, `capacity_type`, `zone`).
pub const NODECLAIMS_TERMINATED: &str = "karpenter_nodeclaims_terminated_total";
/// NodeClaims deleted by a controller decision (labels `reason`, `nodepool`,
/// `capacity_type`); counted only through [`nodeclaim_disrupted`].
pub const NODECLAIMS_DISRUPTED: &str = "karpenter_nodeclaims_disrupted_total";
/// Interruption messages received, by kind (label `message_type`: upstream's kinds,
/// `spot_interrupted`, `rebalance_recommendation`, ..., `no_op`).
pub const INTERRUPTION_RECEIVED: &str = "karpenter_interruption_received_messages_total";
/// Interruption messages deleted from the queue once handled (or found unparseable).
pub const INTERRUPTION_DELETED: &str = "karpenter_interruption_deleted_messages_total";
/// Time from an interruption event (its `time`) until it was handled.
pub const INTERRUPTION_QUEUE_DURATION: &str =
    "karpenter_interruption_message_queue_duration_seconds";
/// Interruption messages that could not be parsed (logged and deleted). kerf's own.
pub const INTERRUPTION_UNPARSEABLE: &str = "kerf_interruption_unparseable_messages_total";
/// Unhealthy EC2 status checks seen by the instance-health poller, each instance and
/// category counted once while it stays unhealthy (label `category`: `InstanceStatus`,
/// `SystemStatus`, `EventStatus`), as upstream.
pub const INTERRUPTION_INSTANCE_STATUS_UNHEALTHY: &str =
    "karpenter_interruption_instance_status_unhealthy_total";
/// NodeClaims node repair deleted (labels `condition`, `nodepool`, `capacity_type`,
/// `image_id`: the NodeClaim's `status.imageID`).
pub const NODECLAIMS_UNHEALTHY_DISRUPTED: &str = "karpenter_nodeclaims_unhealthy_disrupted_total";
/// Nodes registered for a NodeClaim (labels `nodepool`, `zone`).
pub const NODES_CREATED: &str = "karpenter_nodes_created_total";
/// Nodes whose termination finalizer was released (labels `nodepool`, `zone`).
pub const NODES_TERMINATED: &str = "karpenter_nodes_terminated_total";
/// Time from a Node's deletion until its finalizer is released (label `nodepool`). A
/// summary, as upstream's, so it deliberately gets no buckets.
pub const NODES_TERMINATION_DURATION: &str = "karpenter_nodes_termination_duration_seconds";
/// Pods waiting for a successful eviction (no labels, a gauge as upstream's).
pub const NODES_EVICTION_QUEUE_DEPTH: &str = "karpenter_nodes_eviction_queue_depth";
/// A Node's age when its termination finalizer is released (label `nodepool`).
pub const NODES_LIFETIME_DURATION: &str = "karpenter_nodes_lifetime_duration_seconds";
/// Nodes whose drain completed (label `nodepool`).
pub const NODES_DRAINED: &str = "karpenter_nodes_drained_total";
/// Pods evicted by a drain (label `reason`: the NodeClaim's disruption reason).
pub const PODS_DRAINED: &str = "karpenter_pods_drained_total";
/// Time from a NodeClaim's deletion until its finalizer is released (label `nodepool`).
pub const NODECLAIMS_TERMINATION_DURATION: &str =
    "karpenter_nodeclaims_termination_duration_seconds";
/// Time from the first instance termination call until the instance is gone (label
/// `nodepool`).
pub const NODECLAIMS_INSTANCE_TERMINATION_DURATION: &str =
    "karpenter_nodeclaims_instance_termination_duration_seconds";
/// Eviction requests by the API server's answer (label `code`).
pub const PODS_EVICTION_REQUESTS: &str = "karpenter_pods_eviction_requests_total";
/// Batches handed to the provisioner, with the window's length as a histogram.
pub const BATCH_WINDOW_DURATION: &str = "karpenter_provisioner_batch_window_duration_seconds";
/// Pods per closed batch.
pub const BATCH_SIZE: &str = "karpenter_provisioner_batch_size";
/// Messages waiting in an actor's mailbox (label `mailbox`).
pub const MAILBOX_DEPTH: &str = "kerf_mailbox_depth";
/// Messages dropped because a mailbox was full (label `mailbox`).
pub const MAILBOX_DROPPED: &str = "kerf_mailbox_dropped_total";
/// Watched objects that could not be read as their kind (label `kind`).
pub const MALFORMED_OBJECTS: &str = "kerf_cluster_state_malformed_objects_total";
/// Objects held in cluster state (label `kind`).
pub const CLUSTER_STATE_OBJECTS: &str = "kerf_cluster_state_objects";
/// 1 when every watched kind has completed its initial list.
pub const CLUSTER_STATE_SYNCED: &str = "karpenter_cluster_state_synced";
/// 1 while this replica holds the leader Lease (label `name`: the Lease), under
/// controller-runtime's name.
pub const LEADER: &str = "leader_election_master_status";
/// Writes a fence refused or abandoned because this replica did not lead (label `client`:
/// `kubernetes` or `cloud`).
pub const FENCED_REQUESTS: &str = "kerf_leader_election_fenced_requests_total";
/// Reconciles dropped mid-way because this replica stepped down (label `controller`).
pub const RECONCILES_CANCELLED: &str = "kerf_leader_election_cancelled_reconciles_total";
/// Panics of an actor or supervised loop (label `actor`: the name it is supervised as, e.g.
/// `lifecycle`, `nodeclaim_creator`, `pod_watcher`, `disruption`, `leader_election`), each restarted
/// after a backoff; also one-shot work whose panic is reported instead of restarted
/// (`nomination`, `orchestrator_command`, `aws_batcher`, `interruption_handler`; a NodeClaim
/// create, an HTTP connection or a blocking pass under its actor's name). An actor restarted
/// more than `supervisor::RESTART_BUDGET` times within `supervisor::RESTART_WINDOW`, counting
/// these, fails `/healthz`.
pub const ACTOR_RESTARTS: &str = "kerf_actor_restarts_total";

/// Disruption decisions the loop made (labels `decision`: `delete`/`replace`, `reason`,
/// `consolidation_type`: `empty`/`single`/`multi` or empty for drift).
pub const DISRUPTION_DECISIONS: &str = "karpenter_voluntary_disruption_decisions_total";
/// Nodes each reason's methods may disrupt now (label `reason`).
pub const DISRUPTION_ELIGIBLE_NODES: &str = "karpenter_voluntary_disruption_eligible_nodes";
/// How long one method evaluated (labels `reason`: the method's, `consolidation_type`).
pub const DISRUPTION_EVALUATION_DURATION: &str =
    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";
/// Graceful commands that no longer held after the validation period (label
/// `consolidation_type`).
pub const DISRUPTION_FAILED_VALIDATIONS: &str =
    "karpenter_voluntary_disruption_failed_validations_total";
/// Consolidation searches stopped by upstream's time limits (label `consolidation_type`).
pub const DISRUPTION_CONSOLIDATION_TIMEOUTS: &str =
    "karpenter_voluntary_disruption_consolidation_timeouts_total";
/// Commands the orchestration queue rolled back (labels `decision`, `reason`,
/// `consolidation_type`).
pub const DISRUPTION_QUEUE_FAILURES: &str = "karpenter_voluntary_disruption_queue_failures_total";
/// Disruption decisions by NodePool (labels `nodepool`, `decision`, `reason`,
/// `consolidation_type`).
pub const DISRUPTION_DECISIONS_BY_NODEPOOL: &str =
    "karpenter_voluntary_disruption_decisions_by_nodepool_total";
/// Nodes of a NodePool disrupting now, counted against its budgets (labels `nodepool`,
/// `reason`).
pub const NODEPOOLS_NODES_CONSUMING_BUDGETS: &str = "karpenter_nodepools_nodes_consuming_budgets";
/// Disruptions a NodePool's budgets allow now (labels `nodepool`, `reason`).
pub const NODEPOOLS_ALLOWED_DISRUPTIONS: &str = "karpenter_nodepools_allowed_disruptions";

/// controller-runtime's reconcile counter, labelled `controller` and `result` (`success` or
/// `error`), as upstream's controllers export it.
pub const RECONCILE_TOTAL: &str = "controller_runtime_reconcile_total";
/// controller-runtime's failed reconciles, labelled `controller`.
pub const RECONCILE_ERRORS: &str = "controller_runtime_reconcile_errors_total";
/// controller-runtime's reconcile duration histogram (seconds), labelled `controller`.
pub const RECONCILE_TIME: &str = "controller_runtime_reconcile_time_seconds";
/// controller-runtime's count of reconciles that panicked, labelled `controller` (the panic
/// still reaches the actor's supervisor, which restarts it).
pub const RECONCILE_PANICS: &str = "controller_runtime_reconcile_panics_total";
/// controller-runtime's gauge of reconciles running now, labelled `controller`.
pub const ACTIVE_WORKERS: &str = "controller_runtime_active_workers";
/// controller-runtime's gauge of how many reconciles a controller runs at once at most,
/// labelled `controller`.
pub const MAX_CONCURRENT_RECONCILES: &str = "controller_runtime_max_concurrent_reconciles";
/// client-go's work queue depth gauge, labelled `name` and `controller` (both the
/// controller's name, as controller-runtime labels them) and `priority` (`0`: kerf's queues
/// have one priority, controller-runtime's default).
pub const WORKQUEUE_DEPTH: &str = "workqueue_depth";
/// client-go's histogram of how long an item waits in a work queue before a worker takes
/// it (seconds), labelled `name` and `controller`: the reconcile latency one actor's load
/// adds to another's.
pub const WORKQUEUE_QUEUE_DURATION: &str = "workqueue_queue_duration_seconds";
/// client-go's count of items a worker took from a controller's queue (labels `name`,
/// `controller`); like client-go's, an add of an item already waiting is not counted.
pub const WORKQUEUE_ADDS: &str = "workqueue_adds_total";
/// client-go's count of items queued again with backoff after a failed reconcile (labels
/// `name`, `controller`).
pub const WORKQUEUE_RETRIES: &str = "workqueue_retries_total";
/// client-go's histogram of how long processing one item took (seconds; labels `name`,
/// `controller`).
pub const WORKQUEUE_WORK_DURATION: &str = "workqueue_work_duration_seconds";
/// client-go's gauge of the seconds of work in progress not yet observed by
/// `workqueue_work_duration_seconds` (labels `name`, `controller`), computed at scrape time.
pub const WORKQUEUE_UNFINISHED_WORK: &str = "workqueue_unfinished_work_seconds";
/// client-go's gauge of how long the longest running item has run (seconds; labels `name`,
/// `controller`), computed at scrape time.
pub const WORKQUEUE_LONGEST_RUNNING: &str = "workqueue_longest_running_processor_seconds";
/// Constant 1, labelled `version` (kerf's), `commit` (the git commit the build was made
/// from, when the build had one), `goarch` (the target architecture, Go's names) and
/// `goversion` (`none`: kerf is not a Go program).
pub const BUILD_INFO: &str = "karpenter_build_info";

/// Controller names, as the `controller` / `name` labels carry them (upstream's names for
/// the same controllers).
pub mod controller {
    pub const NODECLAIM_LIFECYCLE: &str = "nodeclaim.lifecycle";
    pub const NODECLAIM_GARBAGE_COLLECTION: &str = "nodeclaim.garbagecollection";
    pub const NODECLAIM_TAGGING: &str = "nodeclaim.tagging";
    pub const NODE_TERMINATION: &str = "node.termination";
    pub const NODECLASS: &str = "nodeclass";
}

/// Runs one reconcile of `controller`, counting it and timing it under controller-runtime's
/// and client-go's names, so upstream's "Controllers" dashboard charts kerf's reconcilers:
/// the reconcile (total, errors, panics, duration, workers active), and the work queue item
/// it processes (taken, retried after an error, work duration, work in progress).
pub async fn reconcile<T, E>(
    controller: &'static str,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    use futures::FutureExt as _;
    let concurrency = *CONCURRENCY.entry(controller).or_insert(1);
    #[allow(clippy::cast_precision_loss, reason = "concurrency limits are small")]
    metrics::gauge!(MAX_CONCURRENT_RECONCILES, "controller" => controller).set(concurrency as f64);
    metrics::counter!(WORKQUEUE_ADDS, "name" => controller, "controller" => controller)
        .increment(1);
    // Touched at zero, as controller-runtime initialises it for every controller.
    metrics::counter!(RECONCILE_PANICS, "controller" => controller).increment(0);
    // Touched, not set: a controller without a queue of its own (a singleton pass) still
    // has its series, at 0, as controller-runtime's; a queue's own depth is left as set.
    metrics::gauge!(
        WORKQUEUE_DEPTH,
        "name" => controller,
        "controller" => controller,
        "priority" => "0"
    )
    .increment(0.0);
    let running = Running::start(controller);
    let outcome = std::panic::AssertUnwindSafe(work).catch_unwind().await;
    let elapsed = running.finish();
    let result = match outcome {
        Ok(result) => result,
        Err(panic) => {
            metrics::counter!(RECONCILE_PANICS, "controller" => controller).increment(1);
            std::panic::resume_unwind(panic)
        }
    };
    let outcome = if result.is_ok() { "success" } else { "error" };
    metrics::histogram!(RECONCILE_TIME, "controller" => controller).record(elapsed);
    metrics::histogram!(WORKQUEUE_WORK_DURATION, "name" => controller, "controller" => controller)
        .record(elapsed);
    metrics::counter!(RECONCILE_TOTAL, "controller" => controller, "result" => outcome)
        .increment(1);
    // Touched on success too: the Controllers dashboard lists controllers from this series.
    metrics::counter!(RECONCILE_ERRORS, "controller" => controller)
        .increment(u64::from(result.is_err()));
    // controller-runtime requeues a failed item rate-limited: client-go counts a retry.
    metrics::counter!(WORKQUEUE_RETRIES, "name" => controller, "controller" => controller)
        .increment(u64::from(result.is_err()));
    result
}

/// Declares how many reconciles `controller` runs at once at most (1 unless declared).
pub fn declare_max_concurrent_reconciles(controller: &'static str, limit: usize) {
    CONCURRENCY.insert(controller, limit);
}

/// Each controller's declared concurrency limit.
static CONCURRENCY: std::sync::LazyLock<dashmap::DashMap<&'static str, usize>> =
    std::sync::LazyLock::new(dashmap::DashMap::new);

/// When each running reconcile started, by controller and a process-unique id: what the
/// scrape-time work-in-progress gauges are computed from.
static RUNNING: std::sync::LazyLock<
    dashmap::DashMap<&'static str, std::collections::HashMap<u64, std::time::Instant>>,
> = std::sync::LazyLock::new(dashmap::DashMap::new);

/// One reconcile in progress: counted among its controller's active workers and running
/// items until finished or dropped (a reconcile cancelled mid-way, or one that panicked).
struct Running {
    controller: &'static str,
    id: u64,
    started: std::time::Instant,
}

impl Running {
    fn start(controller: &'static str) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = std::time::Instant::now();
        RUNNING.entry(controller).or_default().insert(id, started);
        metrics::gauge!(ACTIVE_WORKERS, "controller" => controller).increment(1.0);
        Self {
            controller,
            id,
            started,
        }
    }

    /// Seconds since the reconcile started; it stops counting as running.
    fn finish(self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut running) = RUNNING.get_mut(self.controller) {
            running.remove(&self.id);
        }
        metrics::gauge!(ACTIVE_WORKERS, "controller" => self.controller).decrement(1.0);
    }
}

/// Sets the work-in-progress gauges of every controller that has reconciled: the summed and
/// the longest running time of its reconciles in flight (0 when none is).
fn update_running_gauges() {
    let now = std::time::Instant::now();
    for entry in RUNNING.iter() {
        let controller = *entry.key();
        let ages = entry
            .values()
            .map(|started| now.saturating_duration_since(*started).as_secs_f64());
        let (sum, longest) = ages.fold((0.0, 0.0_f64), |(s, l), a| (s + a, l.max(a)));
        metrics::gauge!(WORKQUEUE_UNFINISHED_WORK, "name" => controller, "controller" => controller)
            .set(sum);
        metrics::gauge!(WORKQUEUE_LONGEST_RUNNING, "name" => controller, "controller" => controller)
            .set(longest);
    }
}

/// Counts one NodeClaim deleted by a controller's decision, under upstream's labels. The
/// one place this counter is written, so every decider (disruption, expiration,
/// interruption, repair, liveness) emits the same label set. `reason` is upstream's:
/// `Underutilized`, `Empty`, `Drifted`, `Expired`, `Interrupted`, `Unhealthy`, `liveness`.
pub fn nodeclaim_disrupted(reason: &str, nodepool: &str, capacity_type: &str) {
    metrics::counter!(
        NODECLAIMS_DISRUPTED,
        "reason" => reason.to_owned(),
        "nodepool" => nodepool.to_owned(),
        "capacity_type" => capacity_type.to_owned()
    )
    .increment(1);
}

/// How many items `controller`'s queue holds (waiting, not running).
pub fn workqueue_depth(controller: &'static str, depth: usize) {
    #[allow(
        clippy::cast_precision_loss,
        reason = "queue lengths are far below 2^52"
    )]
    metrics::gauge!(
        WORKQUEUE_DEPTH,
        "name" => controller,
        "controller" => controller,
        "priority" => "0"
    )
    .set(depth as f64);
}

/// How long an item of `controller`'s queue waited before it started running.
pub fn workqueue_queue_duration(controller: &'static str, waited: std::time::Duration) {
    metrics::histogram!(WORKQUEUE_QUEUE_DURATION, "name" => controller, "controller" => controller)
        .record(waited.as_secs_f64());
}

/// How long a NodeClaim condition held its previous status when it changed (labels `type`,
/// `status`: the previous one, the NodeClass and NodePool labels).
pub const NODECLAIM_TRANSITION_SECONDS: &str =
    "operator_nodeclaim_status_condition_transition_seconds";

/// Time from a NodeClaim's deletion until it was gone (labels: the NodeClass and NodePool).
pub const NODECLAIM_TERMINATION_SECONDS: &str = "operator_nodeclaim_termination_duration_seconds";

/// How long a NodePool condition held its previous status when it changed.
pub const NODEPOOL_TRANSITION_SECONDS: &str =
    "operator_nodepool_status_condition_transition_seconds";

/// Time from a NodePool's deletion until it was gone.
pub const NODEPOOL_TERMINATION_SECONDS: &str = "operator_nodepool_termination_duration_seconds";

/// How long a Node condition held its previous status when it changed.
pub const NODE_TRANSITION_SECONDS: &str = "operator_node_status_condition_transition_seconds";

/// Time from a Node's deletion until it was gone.
pub const NODE_TERMINATION_SECONDS: &str = "operator_node_termination_duration_seconds";

/// How long an EC2NodeClass condition held its previous status when it changed.
pub const EC2NODECLASS_TRANSITION_SECONDS: &str =
    "operator_ec2nodeclass_status_condition_transition_seconds";

/// Time from an EC2NodeClass's deletion until it was gone.
pub const EC2NODECLASS_TERMINATION_SECONDS: &str =
    "operator_ec2nodeclass_termination_duration_seconds";

/// The deprecated transition histogram (labels `type`, `status`, `group`, `kind`).
pub const TRANSITION_SECONDS: &str = "operator_status_condition_transition_seconds";

/// The deprecated termination histogram (labels `group`, `kind`).
pub const TERMINATION_SECONDS: &str = "operator_termination_duration_seconds";

/// Karpenter's buckets for the status histograms: 0.5 s doubling to 8,192 s.
const KARPENTER_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
];

/// Prometheus's default buckets, which operatorpkg uses where karpenter sets none (the AWS
/// provider's EC2NodeClass controller, and the deprecated names).
const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// operatorpkg's status-condition and termination histograms with their buckets
/// ([`crate::cluster_metrics::conditions`] records them).
const OPERATOR_HISTOGRAM_BUCKETS: &[(&str, &[f64])] = &[
    (NODECLAIM_TRANSITION_SECONDS, KARPENTER_BUCKETS),
    (NODECLAIM_TERMINATION_SECONDS, KARPENTER_BUCKETS),
    (NODEPOOL_TRANSITION_SECONDS, KARPENTER_BUCKETS),
    (NODEPOOL_TERMINATION_SECONDS, KARPENTER_BUCKETS),
    (NODE_TRANSITION_SECONDS, KARPENTER_BUCKETS),
    (NODE_TERMINATION_SECONDS, KARPENTER_BUCKETS),
    (EC2NODECLASS_TRANSITION_SECONDS, DEFAULT_BUCKETS),
    (EC2NODECLASS_TERMINATION_SECONDS, DEFAULT_BUCKETS),
    (TRANSITION_SECONDS, DEFAULT_BUCKETS),
    (TERMINATION_SECONDS, DEFAULT_BUCKETS),
];

/// Upstream's duration buckets (karpenter's `DurationBuckets`): controller-runtime's, plus
/// longer ones for singleton controllers (seconds).
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];
/// controller-runtime's reconcile time buckets: upstream's duration buckets up to 60 s.
const RECONCILE_BUCKETS: &[f64] = DURATION_BUCKETS.split_at(40).0;
/// client-go's work queue buckets: 10 ns up to 1,000 s, by tens.
const WORKQUEUE_BUCKETS: &[f64] = &[
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];
/// The AWS provider's batch size buckets (requests per batch).
const BATCH_SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0,
    125.0, 150.0, 175.0, 200.0, 225.0, 250.0, 275.0, 300.0, 350.0, 400.0, 450.0, 500.0, 550.0,
    600.0, 700.0, 800.0, 900.0, 1000.0,
];
/// An interruption is handled within seconds of its event, unless the queue backed up or
/// the controller was down; upstream's buckets reach a few minutes.
const QUEUE_DURATION_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];
/// Batch windows last between the idle duration and the max duration (1 s–10 s by default).
const WINDOW_BUCKETS: &[f64] = &[0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0];
/// Upstream's NodeClaim termination buckets: 1 s doubling to 2048 s.
const TERMINATION_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
];
/// Upstream's node lifetime buckets: 15 minutes to 30 days.
const LIFETIME_BUCKETS: &[f64] = &[
    900.0, 1800.0, 2700.0, 3600.0, 7200.0, 14400.0, 21600.0, 28800.0, 36000.0, 43200.0, 57600.0,
    72000.0, 86400.0, 172800.0, 259200.0, 432000.0, 864000.0, 1296000.0, 1728000.0, 2160000.0,
    2592000.0,
];
/// Batch sizes span one pod to thousands.
const SIZE_BUCKETS: &[f64] = &[1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process-wide Prometheus handle, installing the recorder on first call.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(install)
}

/// How long a summary's quantiles remember an observation: client_golang's default window
/// (`MaxAge` ten minutes in five age buckets), which upstream's summaries use, so a
/// dashboard's quantile panel still shows a termination minutes after it happened.
const SUMMARY_BUCKET: std::time::Duration = std::time::Duration::from_secs(120);
const SUMMARY_BUCKETS: std::num::NonZeroU32 = std::num::NonZeroU32::MIN.saturating_add(4);

fn install() -> PrometheusHandle {
    let recorder = PrometheusBuilder::new()
        .set_bucket_count(SUMMARY_BUCKETS)
        .set_bucket_duration(SUMMARY_BUCKET)
        .and_then(|b| b.set_quantiles(&[0.0, 0.5, 0.9, 0.99, 1.0]))
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(SCHEDULING_DURATION.into()), DURATION_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(BATCH_WINDOW_DURATION.into()), WINDOW_BUCKETS)
        })
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), SIZE_BUCKETS))
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(NODECLAIMS_TERMINATION_DURATION.into()),
                TERMINATION_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(NODECLAIMS_INSTANCE_TERMINATION_DURATION.into()),
                &TERMINATION_BUCKETS[..11],
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(NODES_LIFETIME_DURATION.into()),
                LIFETIME_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(INTERRUPTION_QUEUE_DURATION.into()),
                QUEUE_DURATION_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(RECONCILE_TIME.into()), RECONCILE_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(WORKQUEUE_QUEUE_DURATION.into()),
                WORKQUEUE_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(WORKQUEUE_WORK_DURATION.into()),
                WORKQUEUE_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("karpenter_cloudprovider_batcher_batch_size".into()),
                BATCH_SIZE_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("karpenter_cloudprovider_batcher_batch_time_seconds".into()),
                DURATION_BUCKETS,
            )
        })
        .and_then(|b| {
            // operatorpkg's status-condition and termination histograms.
            OPERATOR_HISTOGRAM_BUCKETS
                .iter()
                .try_fold(b, |b, (name, buckets)| {
                    b.set_buckets_for_metric(Matcher::Full((*name).into()), buckets)
                })
        })
        .and_then(|b| {
            [
                CLOUDPROVIDER_DURATION,
                DISRUPTION_EVALUATION_DURATION,
                PODS_BOUND_DURATION,
                PODS_SCHEDULING_DECISION_DURATION,
                PODS_PROVISIONING_BOUND_DURATION,
                PODS_PROVISIONING_STARTUP_DURATION,
            ]
            .iter()
            .try_fold(b, |b, name| {
                b.set_buckets_for_metric(Matcher::Full((*name).into()), DURATION_BUCKETS)
            })
        })
        .expect("bucket lists are non-empty constants")
        .build_recorder();
    let handle = recorder.handle();
    // Another recorder can only exist if an embedding program installed its own; then our
    // handle renders nothing, which is visible but not fatal.
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
    }
    metrics::gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "commit" => option_env!("KERF_GIT_COMMIT").unwrap_or_default(),
        "goarch" => go_arch(),
        "goversion" => "none"
    )
    .set(1.0);
    handle
}

/// The running architecture under Go's name for it (`GOARCH`), as upstream's build info.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Renders the exposition text, running the exporter's periodic upkeep first.
pub fn render() -> String {
    let handle = handle();
    update_running_gauges();
    handle.run_upkeep();
    handle.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reconciles_are_counted_timed_and_failures_counted_per_controller() {
        handle();
        let ok: Result<(), ()> = reconcile("test.metrics", async { Ok(()) }).await;
        let failed: Result<(), ()> = reconcile("test.metrics", async { Err(()) }).await;
        assert!(ok.is_ok() && failed.is_err());
        workqueue_depth("test.metrics", 3);
        workqueue_queue_duration("test.metrics", std::time::Duration::from_millis(5));
        let text = render();
        for line in [
            "controller_runtime_reconcile_total{controller=\"test.metrics\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"test.metrics\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"test.metrics\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"test.metrics\"} 2",
            "workqueue_depth{name=\"test.metrics\",controller=\"test.metrics\",priority=\"0\"} 3",
            "workqueue_queue_duration_seconds_bucket{name=\"test.metrics\",controller=\"test.metrics\",le=\"0.01\"} 1",
            "workqueue_queue_duration_seconds_bucket{name=\"test.metrics\",controller=\"test.metrics\",le=\"0.001\"} 0",
            "workqueue_adds_total{name=\"test.metrics\",controller=\"test.metrics\"} 2",
            "workqueue_retries_total{name=\"test.metrics\",controller=\"test.metrics\"} 1",
            "workqueue_work_duration_seconds_count{name=\"test.metrics\",controller=\"test.metrics\"} 2",
            "workqueue_unfinished_work_seconds{name=\"test.metrics\",controller=\"test.metrics\"} 0",
            "workqueue_longest_running_processor_seconds{name=\"test.metrics\",controller=\"test.metrics\"} 0",
            "controller_runtime_active_workers{controller=\"test.metrics\"} 0",
            "controller_runtime_max_concurrent_reconciles{controller=\"test.metrics\"} 1",
            "controller_runtime_reconcile_panics_total{controller=\"test.metrics\"} 0",
            "karpenter_build_info{version=\"",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[tokio::test]
    async fn a_panicking_reconcile_is_counted_and_still_panics() {
        handle();
        let panicked = tokio::spawn(reconcile("test.panics", async {
            if true {
                panic!("reconcile fault");
            }
            Ok::<(), ()>(())
        }))
        .await;
        assert!(panicked.is_err(), "the panic reaches the caller");
        let text = render();
        for line in [
            "controller_runtime_reconcile_panics_total{controller=\"test.panics\"} 1",
            "controller_runtime_active_workers{controller=\"test.panics\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn disrupted_nodeclaims_are_counted_under_upstreams_labels() {
        handle();
        nodeclaim_disrupted("Empty", "test-disrupted", "spot");
        nodeclaim_disrupted("Empty", "test-disrupted", "spot");
        let text = render();
        let line = "karpenter_nodeclaims_disrupted_total{reason=\"Empty\",nodepool=\"test-disrupted\",capacity_type=\"spot\"} 2";
        assert!(text.contains(line), "{line} missing from\n{text}");
    }

    #[test]
    fn histograms_render_as_buckets_not_summaries() {
        handle();
        metrics::histogram!(SCHEDULING_DURATION, "controller" => "provisioner").record(0.2);
        let text = render();
        assert!(
            text.contains(&format!(
                "{SCHEDULING_DURATION}_bucket{{controller=\"provisioner\",le=\"0.25\"}}"
            )),
            "{text}"
        );
        assert!(!text.contains(&format!("{SCHEDULING_DURATION}{{quantile")));
    }
}
