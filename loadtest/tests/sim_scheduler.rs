//! The simulated kube-scheduler against the API emulator over HTTP: pending pods are bound
//! to nodes that fit them (resources, node selector, taints, readiness, host ports), the
//! rest are marked `PodScheduled=False, reason=Unschedulable` with kube-scheduler's message,
//! zone spread and hostname anti-affinity hold, and pods are retried when capacity appears.

mod sim_support;

use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_loadtest::scheduler::{self, SchedulerConfig};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::wait::Condition;
use serde_json::{Value, json};
use sim_support::{Harness, create, start, wait_for, wait_list};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

fn config() -> SchedulerConfig {
    SchedulerConfig {
        interval: Duration::from_millis(20),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        ..SchedulerConfig::default()
    }
}

async fn node(h: &Harness, name: &str, zone: &str, cpu: &str, ready: bool, taints: Value) {
    let resources = json!({"cpu": cpu, "memory": "32Gi", "pods": "110"});
    create::<Node>(
        &Api::all(h.client.clone()),
        json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
            "spec": {"taints": taints},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]
            }
        }),
    )
    .await;
}

async fn pod(h: &Harness, name: &str, cpu: &str, labels: Value, extra_spec: Value) {
    let mut spec = json!({"containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": cpu}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    create::<Pod>(
        &pods(h),
        json!({"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": spec}),
    )
    .await;
}

fn pods(h: &Harness) -> Api<Pod> {
    Api::namespaced(h.client.clone(), "default")
}

fn bound() -> impl Condition<Pod> {
    |pod: Option<&Pod>| {
        pod.and_then(|p| p.spec.as_ref()?.node_name.as_ref())
            .is_some()
    }
}

fn unschedulable() -> impl Condition<Pod> {
    |pod: Option<&Pod>| {
        scheduled_condition(pod)
            .is_some_and(|(status, reason, _)| status == "False" && reason == "Unschedulable")
    }
}

fn scheduled_condition(pod: Option<&Pod>) -> Option<(String, String, String)> {
    let condition = pod?
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    Some((
        condition.status.clone(),
        condition.reason.clone().unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    ))
}

/// The node of each bound pod, as the API server has it now.
async fn nodes_bound_to(h: &Harness) -> Vec<String> {
    let listed = pods(h).list(&Default::default()).await.expect("pods list");
    listed
        .items
        .iter()
        .map(|p| node_of(p).to_owned())
        .filter(|node| !node.is_empty())
        .collect()
}

fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

#[tokio::test]
async fn binds_fitting_pods_and_marks_the_rest_unschedulable() {
    let h = start().await;
    node(&h, "small", "us-east-1a", "2", true, json!([])).await;
    node(&h, "big", "us-east-1b", "8", true, json!([])).await;
    node(
        &h,
        "tainted",
        "us-east-1c",
        "16",
        true,
        json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
    )
    .await;
    node(&h, "not-ready", "us-east-1c", "16", false, json!([])).await;
    let _scheduler = scheduler::start(h.client.clone(), config());

    pod(&h, "needs-4", "4", json!({}), json!({})).await;
    pod(
        &h,
        "zone-a",
        "1",
        json!({}),
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"}}),
    )
    .await;
    pod(
        &h,
        "tolerant",
        "12",
        json!({}),
        json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
    )
    .await;
    pod(&h, "too-big", "12", json!({}), json!({})).await;

    let api = pods(&h);
    assert_eq!(node_of(&wait_for(&api, "needs-4", bound()).await), "big");
    assert_eq!(node_of(&wait_for(&api, "zone-a", bound()).await), "small");
    assert_eq!(
        node_of(&wait_for(&api, "tolerant", bound()).await),
        "tainted"
    );
    let too_big = wait_for(&api, "too-big", unschedulable()).await;
    let (_, _, message) = scheduled_condition(Some(&too_big)).expect("condition");
    assert_eq!(
        message,
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: x}, \
         1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 2 Insufficient cpu."
    );
    assert!(too_big.spec.and_then(|s| s.node_name).is_none());
    h.stop().await;
}

#[tokio::test]
async fn unschedulable_pods_bind_once_capacity_appears() {
    let h = start().await;
    node(&h, "small", "us-east-1a", "2", true, json!([])).await;
    let _scheduler = scheduler::start(h.client.clone(), config());
    pod(&h, "waits", "6", json!({}), json!({})).await;
    let api = pods(&h);
    let waiting = wait_for(&api, "waits", unschedulable()).await;
    assert_eq!(
        scheduled_condition(Some(&waiting)).expect("condition").2,
        "0/1 nodes are available: 1 Insufficient cpu."
    );

    node(&h, "arrives", "us-east-1b", "8", true, json!([])).await;
    assert_eq!(node_of(&wait_for(&api, "waits", bound()).await), "arrives");
    h.stop().await;
}

#[tokio::test]
async fn zone_spread_and_hostname_anti_affinity_hold() {
    let h = start().await;
    for (name, zone) in [
        ("a1", "us-east-1a"),
        ("b1", "us-east-1b"),
        ("c1", "us-east-1c"),
    ] {
        node(&h, name, zone, "16", true, json!([])).await;
    }
    let _scheduler = scheduler::start(h.client.clone(), config());
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}
    }]});
    for i in 0..6 {
        pod(
            &h,
            &format!("web-{i}"),
            "100m",
            json!({"app": "web"}),
            spread.clone(),
        )
        .await;
    }
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "solo"}}
    }]}}});
    for i in 0..4 {
        pod(
            &h,
            &format!("solo-{i}"),
            "100m",
            json!({"app": "solo"}),
            anti.clone(),
        )
        .await;
    }

    let api = pods(&h);
    let settled = wait_list(
        &api,
        "web pods bound and one solo pod refused",
        |pods: &[Arc<Pod>]| {
            let web_bound = pods
                .iter()
                .filter(|p| is_app(p, "web") && !node_of(p).is_empty())
                .count();
            let solo_bound = pods
                .iter()
                .filter(|p| is_app(p, "solo") && !node_of(p).is_empty())
                .count();
            let solo_refused = pods
                .iter()
                .filter(|p| is_app(p, "solo") && unschedulable().matches_object(Some(p)))
                .count();
            web_bound == 6 && solo_bound == 3 && solo_refused == 1
        },
    )
    .await;

    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for p in settled.iter().filter(|p| is_app(p, "web")) {
        *per_zone.entry(node_of(p)).or_default() += 1;
    }
    assert_eq!(per_zone, BTreeMap::from([("a1", 2), ("b1", 2), ("c1", 2)]));
    let solo_nodes: std::collections::BTreeSet<&str> = settled
        .iter()
        .filter(|p| is_app(p, "solo"))
        .map(|p| node_of(p))
        .filter(|n| !n.is_empty())
        .collect();
    assert_eq!(solo_nodes.len(), 3, "one solo pod per host");
    let refused = settled
        .iter()
        .find(|p| is_app(p, "solo") && node_of(p).is_empty())
        .expect("one refused");
    let message = scheduled_condition(Some(refused)).expect("condition").2;
    assert_eq!(
        message,
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    );
    h.stop().await;
}

fn is_app(pod: &Pod, app: &str) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app"))
        .is_some_and(|a| a == app)
}

#[tokio::test]
async fn host_ports_are_exclusive_per_node() {
    let h = start().await;
    node(&h, "only", "us-east-1a", "8", true, json!([])).await;
    let _scheduler = scheduler::start(h.client.clone(), config());
    let port = json!({"containers": [{"name": "app", "image": "app:1", "ports": [{"containerPort": 80, "hostPort": 8080}]}]});
    pod(&h, "first", "0", json!({}), port.clone()).await;
    let api = pods(&h);
    wait_for(&api, "first", bound()).await;
    pod(&h, "second", "0", json!({}), port).await;
    let second = wait_for(&api, "second", unschedulable()).await;
    assert_eq!(
        scheduled_condition(Some(&second)).expect("condition").2,
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    );
    h.stop().await;
}

#[tokio::test]
async fn a_batch_of_pods_fills_nodes_exactly_to_capacity() {
    let h = start().await;
    for i in 0..10 {
        node(&h, &format!("n{i}"), "us-east-1a", "5", true, json!([])).await;
    }
    let scheduler = scheduler::start(h.client.clone(), config());
    for i in 0..60 {
        pod(
            &h,
            &format!("p{i}"),
            "1",
            json!({"batch": "yes"}),
            json!({}),
        )
        .await;
    }
    let api = pods(&h);
    let settled = wait_list(&api, "50 bound, 10 refused", |pods: &[Arc<Pod>]| {
        let bound = pods.iter().filter(|p| !node_of(p).is_empty()).count();
        let refused = pods
            .iter()
            .filter(|p| unschedulable().matches_object(Some(p)))
            .count();
        bound == 50 && refused == 10
    })
    .await;
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for p in settled.iter().filter(|p| !node_of(p).is_empty()) {
        *per_node.entry(node_of(p)).or_default() += 1;
    }
    assert!(
        per_node.values().all(|&n| n == 5),
        "no node is overcommitted: {per_node:?}"
    );
    assert_eq!(
        scheduler
            .stats()
            .bound
            .load(std::sync::atomic::Ordering::Relaxed),
        50
    );
    h.stop().await;
}

/// A pending pod that can never bind (no node in its zone) nominated to `node`, holding
/// `cpu` of it against the pods of its priority.
async fn nominated_holder(h: &Harness, name: &str, cpu: &str, node: &str) {
    pod(
        h,
        name,
        cpu,
        json!({}),
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "us-east-1z"}}),
    )
    .await;
    nominate(h, name, json!(node)).await;
}

async fn nominate(h: &Harness, name: &str, node: Value) {
    let patch = json!({"status": {"nominatedNodeName": node}});
    pods(h)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("nomination written");
}

/// A pod kept off a node by another's nomination, then left alone by every node and
/// running pod: only the nomination's release can tell the scheduler to try again.
async fn waiting_for_room_held_by(h: &Harness, holder: &str) -> Api<Pod> {
    node(h, "n", "us-east-1a", "4", true, json!([])).await;
    nominated_holder(h, holder, "3", "n").await;
    pod(h, "waiter", "2", json!({}), json!({})).await;
    let api = pods(h);
    let waiting = wait_for(&api, "waiter", unschedulable()).await;
    assert_eq!(
        scheduled_condition(Some(&waiting)).expect("condition").2,
        "0/1 nodes are available: 1 Insufficient cpu.",
        "the nomination holds three of the node's four cpu"
    );
    api
}

/// The unschedulable flush alone would retry the waiter only after 5 minutes, far beyond
/// the test's patience: a bind proves the release requeued it.
#[tokio::test]
async fn a_withdrawn_nomination_requeues_the_pods_waiting_for_its_room() {
    let h = start().await;
    let _scheduler = scheduler::start(h.client.clone(), config());
    let api = waiting_for_room_held_by(&h, "holder").await;
    nominate(&h, "holder", Value::Null).await;
    assert_eq!(node_of(&wait_for(&api, "waiter", bound()).await), "n");
    h.stop().await;
}

#[tokio::test]
async fn deleting_a_nominated_pod_requeues_the_pods_waiting_for_its_room() {
    let h = start().await;
    let _scheduler = scheduler::start(h.client.clone(), config());
    let api = waiting_for_room_held_by(&h, "holder").await;
    api.delete("holder", &DeleteParams::default())
        .await
        .expect("holder deleted");
    assert_eq!(node_of(&wait_for(&api, "waiter", bound()).await), "n");
    h.stop().await;
}

/// One write at a time, each slowed down: a cycle that reports a hundred pods unschedulable
/// would hold the binding placed last in its order for a hundred writes if it sent them in
/// order.
#[tokio::test]
async fn a_cycle_binds_before_it_reports_the_pods_it_could_not_place() {
    let h = start().await;
    node(&h, "small", "us-east-1a", "1", true, json!([])).await;
    for i in 0..100 {
        pod(&h, &format!("big-{i:03}"), "2", json!({}), json!({})).await;
    }
    // Created last, so the cycle meets it last.
    pod(&h, "fits", "500m", json!({}), json!({})).await;
    h.server.faults().set_latency(Duration::from_millis(20));
    let slow = SchedulerConfig {
        concurrency: 1,
        ..config()
    };
    let scheduler = scheduler::start(h.client.clone(), slow);
    assert_eq!(
        node_of(&wait_for(&pods(&h), "fits", bound()).await),
        "small"
    );
    let reported = scheduler
        .stats()
        .marked_unschedulable
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        reported < 50,
        "the binding waited for {reported} unschedulable reports"
    );
    h.server.faults().set_latency(Duration::ZERO);
    h.stop().await;
}

/// Reports are written beside the cycles: a node that comes up while a hundred slow
/// reports of an earlier cycle are being written gets its pod bound without waiting for
/// them, as kube-scheduler's API dispatcher lets its scheduling loop go on.
#[tokio::test]
async fn a_later_cycle_binds_without_waiting_for_an_earlier_cycles_reports() {
    let h = start().await;
    for i in 0..100 {
        pod(&h, &format!("big-{i:03}"), "2", json!({}), json!({})).await;
    }
    h.server.faults().set_latency(Duration::from_millis(20));
    let slow = SchedulerConfig {
        concurrency: 1,
        ..config()
    };
    let scheduler = scheduler::start(h.client.clone(), slow);
    let reported = || {
        scheduler
            .stats()
            .marked_unschedulable
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while reported() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pod reported unschedulable"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    node(&h, "small", "us-east-1a", "1", true, json!([])).await;
    pod(&h, "fits", "500m", json!({}), json!({})).await;
    assert_eq!(
        node_of(&wait_for(&pods(&h), "fits", bound()).await),
        "small"
    );
    let reported = reported();
    assert!(
        reported < 50,
        "the binding waited for {reported} unschedulable reports"
    );
    h.server.faults().set_latency(Duration::ZERO);
    h.stop().await;
}

/// As kube-scheduler since 1.33 (`SchedulerPopFromBackoffQ`): a pod backing off is tried as
/// soon as nothing else waits and the cluster changed, not once its backoff ends.
#[tokio::test]
async fn a_pod_backing_off_is_tried_once_capacity_appears() {
    let h = start().await;
    pod(&h, "waits", "1", json!({}), json!({})).await;
    let long_backoff = SchedulerConfig {
        initial_backoff: Duration::from_secs(120),
        max_backoff: Duration::from_secs(120),
        ..config()
    };
    let _scheduler = scheduler::start(h.client.clone(), long_backoff);
    wait_for(&pods(&h), "waits", unschedulable()).await;
    node(&h, "a", "zone-a", "4", true, json!([])).await;
    let started = tokio::time::Instant::now();
    assert_eq!(node_of(&wait_for(&pods(&h), "waits", bound()).await), "a");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the pod waited out its backoff"
    );
    h.stop().await;
}

/// A cycle over more waiting pods than its slice allows binds the ones it placed and leaves
/// the rest, first in line, to the next, as kube-scheduler binds each pod once placed.
#[tokio::test]
async fn a_cycle_sends_what_it_decided_within_its_slice_and_leaves_the_rest() {
    let h = start().await;
    node(&h, "a", "zone-a", "64", true, json!([])).await;
    for i in 0..3 {
        pod(&h, &format!("p{i}"), "100m", json!({}), json!({})).await;
    }
    // A slice of nothing: each cycle places one pod, and the next comes two seconds later.
    let sliced = SchedulerConfig {
        interval: Duration::from_secs(2),
        slice: Duration::ZERO,
        ..config()
    };
    let scheduler = scheduler::start(h.client.clone(), sliced);
    wait_for(&pods(&h), "p0", bound()).await;
    let bound_now = nodes_bound_to(&h).await.len();
    assert_eq!(bound_now, 1, "the first cycle placed only the oldest pod");
    wait_for(&pods(&h), "p2", bound()).await;
    let tried = scheduler
        .stats()
        .tried
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(tried, 3, "each pod tried once, by its own cycle");
    h.stop().await;
}

/// Bindings are sent beside the cycles, as kube-scheduler's binding cycles run apart from
/// its scheduling cycle: a later cycle runs (here: reports a pod that fits nowhere) while
/// an earlier cycle's slow bindings are still on their way.
#[tokio::test]
async fn a_later_cycle_runs_while_an_earlier_cycles_bindings_are_sent() {
    let h = start().await;
    node(&h, "a", "zone-a", "64", true, json!([])).await;
    for i in 0..100 {
        pod(&h, &format!("on-a-{i:03}"), "100m", json!({}), json!({})).await;
    }
    h.server.faults().set_latency(Duration::from_millis(50));
    let slow = SchedulerConfig {
        concurrency: 1,
        ..config()
    };
    let _scheduler = scheduler::start(h.client.clone(), slow);
    // The first cycle placed the hundred pods; their bindings take five seconds.
    wait_for(&pods(&h), "on-a-000", bound()).await;
    pod(&h, "too-big", "100", json!({}), json!({})).await;
    wait_for(&pods(&h), "too-big", unschedulable()).await;
    let on_a = nodes_bound_to(&h)
        .await
        .iter()
        .filter(|n| *n == "a")
        .count();
    assert!(
        on_a < 100,
        "the cycle waited for all {on_a} earlier bindings"
    );
    h.server.faults().set_latency(Duration::ZERO);
    h.stop().await;
}
