//! The disruption loop and the Orchestrator end to end: the controller provisions into the
//! simulated EC2, simulated kubelets and kube-scheduler run the pods, a Deployment is scaled
//! down, and the loop gives capacity back — asserting which nodes went, what replaced them,
//! and that a candidate goes only after its replacement initialized; a command whose
//! Orchestrator or own task panicked hands its nodes back to a later command. The
//! validation period is shortened; everything else is the daemon as it runs.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::disruption::Method;
use kerf::labels;
use kerf_actors::disruption::DisruptionConfig;
use kerf_actors::orchestrator::OrchestratorConfig;
use kerf_actors::supervisor::Supervision;
use kerf_actors::{Cloud, Daemon, Environment, Timings};
use kerf_loadtest::apiserver::{Cluster, PatchKind};
use kerf_loadtest::ec2::{CapacityType, OfferingKey, SimulatedCloudProvider};
use kerf_loadtest::kubelet::{KubeletConfig, KubeletHandle};
use kerf_loadtest::scheduler::SchedulerHandle;
use serde_json::{Value, json};

use crate::support::*;

mod drift_rollout;
mod events;
mod failover;
mod offerings;
mod overlays;

const ZONE: &str = "us-east-1a";
const SMALL: &str = "m5.large";
const MEDIUM: &str = "m5.xlarge";
const LARGE: &str = "m5.2xlarge";

/// Waits of the whole flow (launch, register, initialize, drain) take seconds, not the
/// milliseconds [`PATIENCE`] is sized for.
const FLOW: Duration = Duration::from_secs(60);

/// The controller with kubelets and a kube-scheduler, disrupting quickly.
struct Stack {
    harness: Harness,
    daemon: Daemon,
    provider: Arc<SimulatedCloudProvider>,
    _kubelets: KubeletHandle,
    _scheduler: SchedulerHandle,
}

/// A clock tests move: seconds since the epoch.
#[derive(Clone)]
struct TestClock(Arc<AtomicI64>);

impl TestClock {
    fn config(&self, validation: Duration) -> DisruptionConfig {
        let seconds = Arc::clone(&self.0);
        DisruptionConfig {
            poll_period: Duration::from_millis(300),
            validation_period: validation,
            clock: Arc::new(move || {
                Timestamp::from_second(seconds.load(Ordering::SeqCst)).expect("a valid time")
            }),
            nomination_window: Duration::ZERO,
            ..DisruptionConfig::default()
        }
    }
}

/// Disrupting quickly: polls often, and a node is nominated only while pods wait for it, so
/// a test may scale down what it just scaled up.
fn quick(validation: Duration) -> DisruptionConfig {
    DisruptionConfig {
        poll_period: Duration::from_millis(300),
        validation_period: validation,
        nomination_window: Duration::ZERO,
        ..DisruptionConfig::default()
    }
}

/// The validation period of most tests: long enough to see a command wait, short enough
/// not to hold a test up.
const VALIDATION: Duration = Duration::from_millis(200);

impl Stack {
    async fn start(pool: Value, disruption: DisruptionConfig) -> Self {
        Self::start_with(pool, disruption, KubeletConfig::fast()).await
    }

    /// A stack for `pool` whose graceful commands wait [`VALIDATION`].
    async fn quick(pool: Value) -> Self {
        Self::start(pool, quick(VALIDATION)).await
    }

    /// A stack whose kubelets have `kubelets`' timings (a node that boots slowly).
    async fn start_with(
        pool: Value,
        disruption: DisruptionConfig,
        kubelets: KubeletConfig,
    ) -> Self {
        let harness = start_cluster().await;
        create_nodepool(&harness.cluster(), pool);
        let (provider, cloud) = simulated_cloud();
        let daemon = start_tuned(&harness, cloud, disruption).await;
        let (kubelets, scheduler) = node_simulators_with(&harness, provider.clone(), kubelets);
        Self {
            harness,
            daemon,
            provider,
            _kubelets: kubelets,
            _scheduler: scheduler,
        }
    }

    /// A stack with every CRD installed and `FEATURE_GATES` `gates`.
    async fn start_gated(pool: Value, disruption: DisruptionConfig, gates: &str) -> Self {
        let harness = start_cluster_with(&ALL_CRDS).await;
        create_nodepool(&harness.cluster(), pool);
        let (provider, cloud) = simulated_cloud();
        let settings = quick_settings(&[
            "--disable-leader-election",
            "true",
            "--feature-gates",
            gates,
        ]);
        let daemon = start_replica(&harness, cloud, disruption, settings, "solo").await;
        let (kubelets, scheduler) =
            node_simulators_with(&harness, provider.clone(), KubeletConfig::fast());
        Self {
            harness,
            daemon,
            provider,
            _kubelets: kubelets,
            _scheduler: scheduler,
        }
    }

    fn cluster(&self) -> Cluster {
        self.harness.cluster()
    }

    fn nodeclaims(&self) -> Vec<NodeClaim> {
        self.cluster()
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .expect("nodeclaims list")
            .into_iter()
            .map(|c| serde_json::from_value(c).expect("a NodeClaim"))
            .collect()
    }

    /// NodeClaims not being deleted.
    fn live_claims(&self) -> Vec<NodeClaim> {
        self.nodeclaims()
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// The names of the NodeClaims not being deleted.
    fn live_claim_names(&self) -> Vec<String> {
        self.live_claims()
            .iter()
            .map(|c| c.name().to_owned())
            .collect()
    }

    fn node(&self, name: &str) -> Option<Value> {
        self.cluster().get("v1", "nodes", None, name).ok()
    }

    /// Waits until every pod of `app` runs on an initialized node; returns the node names.
    async fn running(&self, app: &str, replicas: usize) -> BTreeSet<String> {
        let cluster = self.cluster();
        let selector = format!("app={app}");
        let placed = || -> Option<BTreeSet<String>> {
            let pods = cluster
                .list("v1", "pods", Some("default"), &selector)
                .ok()?;
            let running: Vec<&Value> = pods
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            (running.len() == replicas).then(|| {
                running
                    .iter()
                    .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_owned))
                    .collect()
            })
        };
        within(FLOW, &format!("{replicas} pods of {app} running"), || {
            placed().is_some()
        })
        .await;
        placed().unwrap_or_default()
    }

    /// The node the one pod of `app` runs on, once it runs.
    async fn node_of(&self, app: &str) -> String {
        let nodes = self.running(app, 1).await;
        nodes.into_iter().next().unwrap_or_default()
    }

    /// Waits until the API server holds no pod of `app`.
    async fn pods_gone(&self, app: &str) {
        let cluster = self.cluster();
        let selector = format!("app={app}");
        within(FLOW, &format!("the pods of {app} gone"), || {
            cluster
                .list("v1", "pods", Some("default"), &selector)
                .is_ok_and(|p| p.is_empty())
        })
        .await;
    }

    /// Waits for an idle pass over the cluster as the API server shows it now. A no-op pass
    /// is remembered (and not counted) until the cluster changes, so once the controller's
    /// store holds as many pods as the API server, the NodePool is touched — a change — and
    /// the next pass counted after that must be idle. No fixed sleep: a pass that issued a
    /// command is counted too, and the caller's assertions see its command.
    async fn idle_pass_now(&self) {
        let cluster = self.cluster();
        within(FLOW, "the store caught up with the pods", || {
            cluster
                .list("v1", "pods", None, "")
                .is_ok_and(|p| p.len() == self.daemon.state.pods.len())
        })
        .await;
        let progress = self.progress();
        let passes = progress.borrow().passes;
        let touch = Timestamp::now().as_millisecond().to_string();
        self.patch_pool(json!({"metadata": {"labels": {"kerf-test-touched": touch}}}));
        within(FLOW, "an idle pass after the touch", || {
            let p = progress.borrow();
            p.idle && p.passes > passes
        })
        .await;
        let p = progress.borrow();
        assert!(
            p.longest_evaluation > Duration::ZERO && p.longest_evaluation <= p.evaluating,
            "every evaluated pass is timed: {p:?}"
        );
    }

    fn scale(&self, app: &str, replicas: u32) {
        self.cluster()
            .patch(
                "apps/v1",
                "deployments",
                Some("default"),
                app,
                PatchKind::Merge,
                &json!({"spec": {"replicas": replicas}}),
            )
            .expect("deployment scaled");
    }

    fn disruption(&self) -> &kerf_actors::DisruptionHandle {
        self.daemon
            .disruption
            .as_ref()
            .expect("disruption runs with a cloud")
    }

    fn commands(&self) -> Vec<(Method, Vec<String>)> {
        self.disruption().progress.borrow().commands.clone()
    }

    /// The loop's progress, as it publishes it.
    fn progress(&self) -> tokio::sync::watch::Receiver<kerf_actors::disruption::Progress> {
        self.disruption().progress.clone()
    }

    /// Merge-patches the `default` NodePool.
    fn patch_pool(&self, patch: Value) {
        self.cluster()
            .patch(
                "karpenter.sh/v1",
                "nodepools",
                None,
                "default",
                PatchKind::Merge,
                &patch,
            )
            .expect("nodepool patched");
    }

    fn in_flight(&self) -> usize {
        self.disruption().in_queue.commands()
    }

    async fn stop(self) {
        self.daemon.stop_within(Duration::ZERO).await;
        self.harness.stop().await;
    }
}

async fn start_tuned(harness: &Harness, cloud: Cloud, disruption: DisruptionConfig) -> Daemon {
    start_replica(
        harness,
        cloud,
        disruption,
        quick_settings(&["--disable-leader-election", "true"]),
        "solo",
    )
    .await
}

/// A controller replica named `identity` with `settings`, disrupting with `disruption`.
async fn start_replica(
    harness: &Harness,
    cloud: Cloud,
    disruption: DisruptionConfig,
    settings: kerf_actors::ValidSettings,
    identity: &str,
) -> Daemon {
    let daemon = Daemon::start_with_timings(
        settings,
        Environment {
            client: harness.controller.clone(),
            leader_client: harness.controller.clone(),
            namespace: "karpenter".into(),
            identity: identity.into(),
            leader_timing: FAST_LEASE,
            bind: std::net::Ipv4Addr::LOCALHOST,
            cloud: Some(cloud),
        },
        Timings {
            disruption,
            orchestrator: OrchestratorConfig {
                poll: Duration::from_millis(50),
                ..OrchestratorConfig::default()
            },
            ..fast_timings()
        },
    )
    .await
    .expect("daemon starts");
    tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
        .await
        .expect("cluster state syncs");
    daemon
}

/// Polls `condition` until it holds, failing after `patience`.
async fn within(patience: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + patience;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// On-demand `types` in one zone, consolidating at once, with `disruption` merged in.
fn pool(types: &[&str], disruption: Value) -> Value {
    nodepool_with(
        "default",
        json!({"spec": {
            "disruption": merged(json!({
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": "100%"}]
            }), disruption),
            "template": {"spec": {"requirements": [
                {"key": labels::INSTANCE_TYPE, "operator": "In", "values": types},
                {"key": labels::ZONE, "operator": "In", "values": [ZONE]},
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
            ]}}
        }}),
    )
}

/// A pod spec of `cpu` whose replicas each want a node of their own.
fn spread(cpu: &str, app: &str) -> Value {
    pod_spec(
        cpu,
        "256Mi",
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": app}},
            "topologyKey": labels::HOSTNAME
        }]}}}),
    )
}

fn instance_type(claim: &NodeClaim) -> String {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INSTANCE_TYPE))
        .cloned()
        .unwrap_or_default()
}

/// When `claim` became `Initialized`; it must have.
fn initialized_at(claim: &NodeClaim) -> Timestamp {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == types::INITIALIZED && c.is_true())
        .map(|c| c.last_transition_time.0)
        .expect("replacement initialized")
}

fn node_name(claim: &NodeClaim) -> String {
    claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// Events with `reason` about the object named `name`.
fn events_about(stack: &Stack, reason: &str, name: &str) -> Vec<Value> {
    stack
        .cluster()
        .list("v1", "events", None, "")
        .expect("events list")
        .into_iter()
        .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == name)
        .collect()
}

/// Waits until events with `reason` are about the Node `node` and its NodeClaim `claim`
/// (events are written after the pass that published them); returns the Node's.
async fn told_both(stack: &Stack, reason: &str, node: &str, claim: &str) -> Vec<Value> {
    let what = format!("{reason} on the Node and its NodeClaim");
    within(FLOW, &what, || {
        !events_about(stack, reason, node).is_empty()
            && !events_about(stack, reason, claim).is_empty()
    })
    .await;
    events_about(stack, reason, node)
}

fn has_disrupted_taint(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["key"] == labels::DISRUPTED_TAINT))
}

#[test]
fn emptiness_deletes_empty_nodes_one_command_per_budgeted_node() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL], json!({"budgets": [{"nodes": "1"}]}))).await;
        let cluster = stack.cluster();
        create_deployment(&cluster, "web", 3, spread("500m", "web"));
        let nodes = stack.running("web", 3).await;
        assert_eq!(nodes.len(), 3, "one node per replica");
        assert!(stack.commands().is_empty(), "nothing to disrupt while busy");

        stack.scale("web", 0);
        within(FLOW, "every empty node deleted", || {
            stack.nodeclaims().is_empty()
        })
        .await;
        let commands = stack.commands();
        assert_eq!(commands.len(), 3, "{commands:?}");
        let mut deleted = BTreeSet::new();
        for (method, nodes) in &commands {
            assert_eq!(*method, Method::Emptiness);
            assert_eq!(
                nodes.len(),
                1,
                "budget nodes: 1 allows one node per command"
            );
            deleted.extend(nodes.iter().cloned());
        }
        assert_eq!(deleted, nodes, "exactly the emptied nodes went");
        stack.stop().await;
    });
}

#[test]
fn single_node_consolidation_replaces_with_a_cheaper_node_before_deleting() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL, LARGE], json!({}))).await;
        let original = stack.one_large_node(json!({})).await;
        let original_name = original.name().to_owned();

        stack.scale("big", 0);
        // The candidate's deletion timestamp, as first seen while it drains.
        let mut deleted_at: Option<Timestamp> = None;
        within(FLOW, "the large node replaced", || {
            let claims = stack.nodeclaims();
            if let Some(candidate) = claims.iter().find(|c| c.name() == original_name) {
                deleted_at =
                    deleted_at.or(candidate.metadata.deletion_timestamp.as_ref().map(|t| t.0));
            }
            claims.iter().all(|c| c.name() != original_name) && stack.running_now("small")
        })
        .await;
        let commands = stack.commands();
        assert_eq!(
            commands[0].0,
            Method::SingleNodeConsolidation,
            "{commands:?}"
        );
        assert_eq!(commands[0].1, [node_name(&original)]);
        let after = stack.live_claims();
        assert_eq!(after.len(), 1, "{after:?}");
        assert_eq!(
            instance_type(&after[0]),
            SMALL,
            "replaced by the cheaper type"
        );
        let now_on = stack.running("small", 1).await;
        assert_eq!(now_on, BTreeSet::from([node_name(&after[0])]));
        // The replacement initialized before the candidate was deleted.
        let initialized = initialized_at(&after[0]);
        let deleted_at = deleted_at.expect("the candidate was seen deleting");
        assert!(initialized <= deleted_at, "{initialized} > {deleted_at}");
        stack.stop().await;
    });
}

impl Stack {
    /// A large node running Deployment `big` (6 CPUs) and `small` (500m, its pods annotated
    /// with `annotations`): scaling `big` to zero leaves it under-used. Returns the node's
    /// NodeClaim. `small` is created once `big` runs, so the kube-scheduler puts it beside
    /// `big` whatever the batching window does.
    async fn one_large_node(&self, annotations: Value) -> NodeClaim {
        let cluster = self.cluster();
        create_deployment(&cluster, "big", 1, pod_spec("6", "1Gi", json!({})));
        self.running("big", 1).await;
        cluster
            .create(
                "apps/v1",
                "deployments",
                json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "small", "namespace": "default"},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "small"}},
                        "template": {
                            "metadata": {"labels": {"app": "small"}, "annotations": annotations},
                            "spec": pod_spec("500m", "256Mi", json!({}))}}}),
            )
            .expect("deployment created");
        self.running("small", 1).await;
        let mut claims = self.live_claims();
        assert_eq!(claims.len(), 1, "both pods on one node");
        assert_eq!(instance_type(&claims[0]), LARGE);
        claims.remove(0)
    }

    fn running_now(&self, app: &str) -> bool {
        self.cluster()
            .list("v1", "pods", Some("default"), &format!("app={app}"))
            .is_ok_and(|pods| {
                !pods.is_empty()
                    && pods.iter().all(|p| {
                        p["status"]["phase"] == "Running"
                            && p["metadata"]["deletionTimestamp"].is_null()
                    })
            })
    }
}

#[test]
fn multi_node_consolidation_merges_two_underused_nodes() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL, MEDIUM], json!({}))).await;
        let cluster = stack.cluster();
        let mut first_nodes = BTreeSet::new();
        for i in 1..=2 {
            create_deployment(
                &cluster,
                &format!("fill{i}"),
                1,
                pod_spec("3", "1Gi", json!({})),
            );
            first_nodes.extend(stack.running(&format!("fill{i}"), 1).await);
            // Created once its filler runs, so the kube-scheduler puts it beside that filler
            // whatever the batching window does; too large to share a node with the other.
            create_deployment(
                &cluster,
                &format!("keep{i}"),
                1,
                pod_spec("600m", "256Mi", json!({})),
            );
            stack.running(&format!("keep{i}"), 1).await;
        }
        assert_eq!(first_nodes.len(), 2, "one medium node per filler");
        stack.scale("fill1", 0);
        stack.scale("fill2", 0);
        within(FLOW, "both medium nodes consolidated", || {
            let live = stack.live_claims();
            live.len() == 1
                && live.iter().all(|c| !first_nodes.contains(&node_name(c)))
                && stack.running_now("keep1")
                && stack.running_now("keep2")
        })
        .await;
        let commands = stack.commands();
        assert_eq!(
            commands[0].0,
            Method::MultiNodeConsolidation,
            "{commands:?}"
        );
        assert_eq!(
            commands[0].1.iter().cloned().collect::<BTreeSet<_>>(),
            first_nodes
        );
        let live = stack.live_claims();
        assert_eq!(instance_type(&live[0]), SMALL);
        stack.stop().await;
    });
}

#[test]
fn a_replacement_refused_for_capacity_rolls_the_command_back() {
    run(|| async {
        // A validation period long enough to see the rolled-back node between attempts.
        let stack = Stack::start(
            pool(&[SMALL, LARGE], json!({})),
            quick(Duration::from_secs(3)),
        )
        .await;
        let original = stack.one_large_node(json!({})).await;
        let (claim, node) = (original.name().to_owned(), node_name(&original));
        stack
            .provider
            .ec2()
            .set_insufficient_capacity(OfferingKey::new(SMALL, ZONE, CapacityType::OnDemand), true);

        stack.scale("big", 0);
        // The refusal comes within milliseconds, so the taint may come and go between two
        // looks: the rollback's effects and its count are what is asserted.
        within(FLOW, "a command started", || !stack.commands().is_empty()).await;
        within(FLOW, "the command rolled back", || {
            stack.in_flight() == 0 && stack.node(&node).is_some_and(|n| !has_disrupted_taint(&n))
        })
        .await;
        let kept = stack
            .nodeclaims()
            .into_iter()
            .find(|c| c.name() == claim)
            .expect("the candidate stays");
        assert!(kept.metadata.deletion_timestamp.is_none());
        assert!(
            kept.conditions()
                .iter()
                .all(|c| c.type_ != types::DISRUPTION_REASON),
            "DisruptionReason cleared"
        );
        assert_eq!(
            stack.live_claims().len(),
            1,
            "the refused replacement is gone"
        );
        let (_, text) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        assert!(
            text.lines().any(|l| l.starts_with(
                "karpenter_voluntary_disruption_queue_failures_total{decision=\"replace\",reason=\"underutilized\",consolidation_type=\"single\"}"
            )),
            "{text}"
        );
        stack.stop().await;
    });
}

#[test]
fn do_not_disrupt_pods_block_consolidation() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL, LARGE], json!({}))).await;
        let original = stack
            .one_large_node(json!({labels::DO_NOT_DISRUPT: "true"}))
            .await;
        stack.scale("big", 0);
        stack.pods_gone("big").await;
        stack.idle_pass_now().await;
        assert!(stack.commands().is_empty(), "{:?}", stack.commands());
        assert_eq!(stack.live_claim_names(), [original.name()]);
        stack.stop().await;
    });
}

#[test]
fn provisioning_rounds_and_disruption_passes_resolve_instance_types_through_one_cache() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL, LARGE], json!({}))).await;
        stack
            .one_large_node(json!({labels::DO_NOT_DISRUPT: "true"}))
            .await;
        stack.idle_pass_now().await;
        let progress = stack.progress();
        within(FLOW, "a pass past the screen", || {
            let p = progress.borrow();
            p.passes > p.screened
        })
        .await;
        // Read in this order: each counter only grows, and a round or pass starts its cache
        // round before it is counted, so the cache, read last, has started at least both.
        let rounds = stack
            .daemon
            .rounds
            .borrow()
            .as_ref()
            .map_or(0, |r| r.number);
        // A pass the screen ended read no instance types.
        let passes = {
            let progress = stack.progress().borrow().clone();
            progress.passes - progress.screened
        };
        let cache = stack.daemon.instance_types.as_ref().expect("a cloud");
        let started = cache.rounds_started();
        assert!(
            rounds >= 1 && passes >= 1,
            "rounds {rounds}, passes {passes}"
        );
        assert!(
            started >= rounds + passes,
            "the daemon's cache started {started} rounds for {rounds} provisioning rounds \
             and {passes} disruption passes past the screen: the two do not share it"
        );
        stack.stop().await;
    });
}

#[test]
fn a_scheduled_budget_holds_emptiness_inside_its_window() {
    run(|| async {
        // The clock starts now, inside a daily three-hour window from an hour ago that
        // allows no disruption; later it moves four hours on, outside the window.
        let now = Timestamp::now().as_second();
        let clock = TestClock(Arc::new(AtomicI64::new(now)));
        let hour = (now / 3600 + 23) % 24;
        let stack = Stack::start(
            pool(
                &[SMALL],
                json!({"budgets": [
                    {"nodes": "100%"},
                    {"nodes": "0", "schedule": format!("0 {hour} * * *"), "duration": "3h"}
                ]}),
            ),
            clock.config(Duration::from_millis(200)),
        )
        .await;
        let cluster = stack.cluster();
        create_deployment(&cluster, "web", 2, spread("500m", "web"));
        stack.running("web", 2).await;
        stack.scale("web", 0);
        stack.pods_gone("web").await;
        stack.idle_pass_now().await;
        assert_eq!(stack.live_claims().len(), 2, "the window holds both nodes");

        clock.0.store(now + 4 * 3600, Ordering::SeqCst);
        // The memo lasts until the cluster changes; a NodePool edit is one.
        stack.patch_pool(json!({"metadata": {"labels": {"touched": "yes"}}}));
        within(FLOW, "both nodes deleted after the window", || {
            stack.nodeclaims().is_empty()
        })
        .await;
        let commands = stack.commands();
        assert_eq!(
            commands.len(),
            1,
            "one emptiness command for both: {commands:?}"
        );
        assert_eq!(commands[0].0, Method::Emptiness);
        stack.stop().await;
    });
}

#[test]
fn stale_disruption_marks_are_removed() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL], json!({"consolidateAfter": "Never"}))).await;
        let cluster = stack.cluster();
        create_deployment(&cluster, "web", 1, pod_spec("500m", "256Mi", json!({})));
        let node = stack.node_of("web").await;
        let claim = stack.live_claims().remove(0);
        let mut taints = stack.node(&node).expect("node")["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        taints.push(json!({"key": labels::DISRUPTED_TAINT, "effect": "NoSchedule"}));
        cluster
            .patch(
                "v1",
                "nodes",
                None,
                &node,
                PatchKind::Merge,
                &json!({"spec": {"taints": taints}}),
            )
            .expect("node tainted");
        let mut conditions = serde_json::to_value(claim.conditions()).expect("conditions");
        if let Value::Array(list) = &mut conditions {
            list.push(json!({"type": types::DISRUPTION_REASON, "status": "True",
                "reason": "Underutilized", "message": "Underutilized",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}));
        }
        cluster
            .patch_status(
                "karpenter.sh/v1",
                "nodeclaims",
                None,
                claim.name(),
                PatchKind::Merge,
                &json!({"status": {"conditions": conditions}}),
            )
            .expect("condition set");
        within(FLOW, "taint and condition removed", || {
            let tainted = stack.node(&node).is_some_and(|n| has_disrupted_taint(&n));
            let reason = stack.nodeclaims().iter().any(|c| {
                c.conditions()
                    .iter()
                    .any(|c| c.type_ == types::DISRUPTION_REASON)
            });
            !tainted && !reason
        })
        .await;
        assert_eq!(stack.live_claims().len(), 1, "the node itself stays");
        stack.stop().await;
    });
}

#[test]
fn a_node_without_a_nodeclaim_is_no_candidate() {
    run(|| async {
        let stack = Stack::quick(pool(&[SMALL], json!({}))).await;
        // Labelled as Karpenter's, empty, Ready, initialized — but no NodeClaim names it:
        // its NodeClaim is gone (termination under way), so disruption leaves it alone.
        stack
            .cluster()
            .create(
                "v1",
                "nodes",
                json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "orphan", "labels": {
                        labels::NODEPOOL: "default", labels::INITIALIZED: "true",
                        labels::INSTANCE_TYPE: SMALL, labels::ZONE: ZONE,
                        labels::CAPACITY_TYPE: "on-demand"}},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}],
                        "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"}}}),
            )
            .expect("node created");
        within(FLOW, "the store holds the node", || {
            stack.daemon.state.nodes.len() == 1
        })
        .await;
        stack.idle_pass_now().await;
        assert!(stack.commands().is_empty(), "{:?}", stack.commands());
        assert!(stack.node("orphan").is_some());
        stack.stop().await;
    });
}

/// Two empty nodes whose first command meets an armed `fault` (the Orchestrator's loop as it
/// takes the command, or the command's own task): the panic is counted, the command's nodes
/// are handed back, and a later command deletes them both.
async fn empty_nodes_go_after_a_panic_of(fault: &'static str) {
    let scope = Supervision::with_backoff(Duration::from_millis(20));
    let stack = scope.scope(Stack::quick(pool(&[SMALL], json!({})))).await;
    let cluster = stack.cluster();
    create_deployment(&cluster, "web", 2, spread("500m", "web"));
    let nodes = stack.running("web", 2).await;
    assert_eq!(nodes.len(), 2, "one node per replica");
    let before = actor_restarts(fault);
    scope.faults().arm(fault, 1).expect("a known actor");

    stack.scale("web", 0);
    within(FLOW, "every empty node deleted", || {
        stack.nodeclaims().is_empty()
    })
    .await;
    assert_eq!(scope.faults().remaining(fault), 0, "the fault fired");
    assert_eq!(
        scope.recent_restarts(fault),
        1,
        "one panic, within the budget"
    );
    assert_eq!(actor_restarts(fault) - before, 1, "counted");
    assert!(scope.exhausted().borrow().is_none());
    let deleted: BTreeSet<String> = stack
        .commands()
        .into_iter()
        .flat_map(|(_, nodes)| nodes)
        .collect();
    assert_eq!(deleted, nodes, "exactly the emptied nodes went");
    // A command lets go of its nodes once it sees their NodeClaims gone, which may be a
    // moment after this test saw it.
    within(FLOW, "no command holds a node", || stack.in_flight() == 0).await;
    stack.stop().await;
}

#[test]
fn a_panicking_orchestrator_hands_the_nodes_back_and_takes_the_next_command() {
    run(|| empty_nodes_go_after_a_panic_of("orchestrator"));
}

#[test]
fn a_panicking_command_hands_its_nodes_back_and_they_are_disrupted_later() {
    run(|| empty_nodes_go_after_a_panic_of("orchestrator_command"));
}
