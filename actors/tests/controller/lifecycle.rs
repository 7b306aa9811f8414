//! The NodeClaim lifecycle end to end: the controller launches into the simulated EC2, the
//! simulated kubelets register Nodes, the lifecycle registers and initializes them, and the
//! simulated kube-scheduler binds the pods, which start Running. Also liveness (a Node that
//! never registers).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf::api::condition::types;
use kerf::labels;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use kerf_actors::created_claims::{NOMINATION_LIMIT, NOMINATION_WINDOW};
use kerf_actors::lifecycle::FUTILITY_CHECK_PERIOD;
use kerf_loadtest::apiserver::{Cluster, PatchKind};

use crate::stack::*;
use crate::support::*;

#[test]
fn pending_pods_run_on_registered_and_initialized_nodes() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        let cluster = stack.cluster();
        let pods = ["web-1", "web-2", "web-3"];
        // Two pods bound to one zone, one that fits anywhere.
        let zonal = ["web-1", "web-2"];
        for name in zonal {
            create_pod_with(
                &cluster,
                name,
                json!({}),
                json!({"nodeSelector": {labels::ZONE: "us-east-1a"},
                    "containers": [{"name": "app", "image": "app",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}),
            );
        }
        create_pod(&cluster, "web-3", json!({}));
        stack.wait_running(&pods).await;
        eventually("every nodeclaim ready", || {
            let claims = stack.nodeclaims();
            !claims.is_empty() && claims.iter().all(is_ready)
        })
        .await;

        let nodes = stack.nodes();
        let claims = stack.nodeclaims();
        for claim in &claims {
            for type_ in [
                types::LAUNCHED,
                types::REGISTERED,
                types::INITIALIZED,
                types::READY,
            ] {
                assert_eq!(
                    condition_status(claim, type_).as_deref(),
                    Some("True"),
                    "{type_}: {claim:#}"
                );
            }
            let node_name = claim["status"]["nodeName"]
                .as_str()
                .expect("status.nodeName");
            let node = nodes
                .iter()
                .find(|n| name_of(n) == node_name)
                .expect("the claim's node exists");
            assert_eq!(
                node["spec"]["providerID"], claim["status"]["providerID"],
                "{node:#}"
            );
            assert!(
                !taint_keys(node).contains(&labels::UNREGISTERED_TAINT.to_owned()),
                "{node:#}"
            );
            let node_labels = &node["metadata"]["labels"];
            assert_eq!(node_labels[labels::REGISTERED], "true");
            assert_eq!(node_labels[labels::INITIALIZED], "true");
            assert_eq!(node_labels[labels::NODEPOOL], "default");
            assert_eq!(
                node["metadata"]["finalizers"],
                json!([labels::TERMINATION_FINALIZER])
            );
            let owners = node["metadata"]["ownerReferences"]
                .as_array()
                .expect("owner references");
            assert!(
                owners.iter().any(|o| o["kind"] == "NodeClaim"
                    && o["uid"] == claim["metadata"]["uid"]
                    && o["apiVersion"] == "karpenter.sh/v1"),
                "{owners:?}"
            );
        }
        // Registration nominated each zonal pod to the Node launched for it before the taint
        // that kept pods off went, and the kube-scheduler took the nominated node. (The pod
        // that fits anywhere is nominated only if its write is through within a second.)
        for name in zonal {
            let pod = stack.pod(name).expect("pod");
            assert_eq!(
                pod["status"]["nominatedNodeName"], pod["spec"]["nodeName"],
                "{pod:#}"
            );
            let nominated = nomination_condition(&pod);
            assert_eq!(nominated["reason"], kerf::pods::NOMINATION_REASON);
        }
        // Every pod runs on one of the claims' nodes.
        let claimed: Vec<&str> = claims
            .iter()
            .filter_map(|c| c["status"]["nodeName"].as_str())
            .collect();
        for name in pods {
            let pod = stack.pod(name).expect("pod");
            let node = pod["spec"]["nodeName"].as_str().expect("bound");
            assert!(
                claimed.contains(&node),
                "{name} on {node}, claims {claimed:?}"
            );
        }

        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        for metric in [
            "karpenter_nodeclaims_registered_total{nodepool=\"default\"}",
            "karpenter_nodeclaims_initialized_total{nodepool=\"default\"}",
            "karpenter_nodes_created_total{nodepool=\"default\",zone=\"us-east-1",
        ] {
            assert!(metrics.contains(metric), "{metric} missing:\n{metrics}");
        }
        stack.stop().await;
    });
}

/// A pending pod pinned to one zone: placement-constrained, so its nomination is awaited.
fn create_pending_zonal_pod(cluster: &Cluster, name: &str) {
    let zonal = json!({"nodeSelector": {labels::ZONE: "us-east-1a"}});
    create_pod_with(cluster, name, json!({}), pod_spec("1", "1Gi", zonal));
    mark_unschedulable(cluster, name);
}

/// Waits for a NodeClaim whose `condition` is True; returns its `status.<field>`.
async fn first_claim_status(stack: &Stack, condition: &str, field: &str) -> String {
    let mut found = None;
    eventually(&format!("a nodeclaim {condition} with {field}"), || {
        found = stack
            .nodeclaims()
            .iter()
            .filter(|c| condition_status(c, condition).as_deref() == Some("True"))
            .find_map(|c| c["status"][field].as_str().map(str::to_owned));
        found.is_some()
    })
    .await;
    found.expect("found")
}

#[test]
fn pods_are_nominated_to_their_node_as_soon_as_its_instance_is_launched() {
    run(|| async {
        // No kubelets: the instance launches, its Node never registers.
        let stack = Stack::start(fast_timings(), false).await;
        create_pending_zonal_pod(&stack.cluster(), "web-1");
        let provider_id = first_claim_status(&stack, types::LAUNCHED, "providerID").await;
        let instance_id = provider_id.rsplit('/').next().expect("an instance id");
        let instance = stack
            .provider
            .ec2()
            .instance(instance_id)
            .expect("instance");
        // The name the kubelet would register the Node under.
        let expected = instance.private_dns_name;
        eventually("the pod nominated to the node to come", || {
            stack
                .pod("web-1")
                .is_some_and(|pod| pod["status"]["nominatedNodeName"] == expected.as_str())
        })
        .await;
        assert!(
            stack.nodes().is_empty(),
            "nominated before any Node registered"
        );
        let pod = stack.pod("web-1").expect("pod");
        let condition = nomination_condition(&pod);
        assert_eq!(condition["status"], "True", "{pod:#}");
        stack.stop().await;
    });
}

#[test]
fn a_nomination_whose_room_a_bound_pod_took_is_withdrawn_without_waiting_the_window() {
    run(|| async {
        let (stack, node, initialized) = nominated_to_an_initialized_node().await;
        // The scheduler binds another pod into the whole Node, then refuses web-1.
        let allocatable = stack
            .cluster()
            .get("v1", "nodes", None, &node)
            .expect("node")["status"]["allocatable"]["cpu"]
            .as_str()
            .expect("allocatable cpu")
            .to_owned();
        let bound = json!({"nodeName": node.as_str()});
        create_pod_with(
            &stack.cluster(),
            "squatter",
            json!({}),
            pod_spec(&allocatable, "1Mi", bound),
        );
        refuse_and_await_withdrawal(&stack, "web-1").await;
        assert!(
            initialized.elapsed() < NOMINATION_WINDOW,
            "withdrawn before the window ended, {:?} after initialization",
            initialized.elapsed()
        );
        stack.stop().await;
    });
}

#[test]
fn a_refusal_alone_leaves_a_nomination_its_node_still_has_room_for() {
    run(|| async {
        let (stack, node, initialized) = nominated_to_an_initialized_node().await;
        // A verdict the scheduler reached before it saw the Node, written after it was
        // initialized: the room planned for web-1 is still there.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        report_unschedulable(&stack, "web-1").await;
        tokio::time::sleep_until(initialized + NOMINATION_WINDOW + 2 * FUTILITY_CHECK_PERIOD).await;
        let pod = stack.pod("web-1").expect("pod");
        assert_eq!(
            pod["status"]["nominatedNodeName"],
            node.as_str(),
            "still nominated past the window: {pod:#}"
        );
        assert_eq!(stack.nodeclaims().len(), 1, "and planned nowhere else");
        stack.stop().await;
    });
}

#[test]
fn a_spread_pod_the_scheduler_has_not_tried_keeps_its_nomination_past_the_window_until_refused() {
    run(|| async {
        // The test tries nothing for a while: the backlog a thousand Nodes initializing at
        // once leave the kube-scheduler. Where a spread pod fits depends on its peers
        // elsewhere, which the Node's room does not show: a refusal past the window ends it.
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1,
            "topologyKey": labels::ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}}}]});
        let (stack, node, initialized) = nominated_pod_on_an_initialized_node(spread).await;
        let nominated_here = |pod: &Value| pod["status"]["nominatedNodeName"] == node.as_str();
        tokio::time::sleep_until(initialized + NOMINATION_WINDOW + 2 * FUTILITY_CHECK_PERIOD).await;
        let pod = stack.pod("web-1").expect("pod");
        assert!(
            nominated_here(&pod),
            "still nominated past the window: {pod:#}"
        );
        assert_eq!(stack.nodeclaims().len(), 1, "and planned nowhere else");

        refuse_and_await_withdrawal(&stack, "web-1").await;
        assert!(
            initialized.elapsed() < NOMINATION_LIMIT,
            "withdrawn for the refusal, not at the limit"
        );
        stack.stop().await;
    });
}

/// A stack whose kube-scheduler is the test, once pod `web-1`, pending, is nominated to the
/// Node launched for it and that Node is initialized: the stack, the Node's name and about
/// when it was initialized.
async fn nominated_to_an_initialized_node() -> (Stack, String, tokio::time::Instant) {
    nominated_pod_on_an_initialized_node(json!({})).await
}

/// [`nominated_to_an_initialized_node`] with `spec` merged into the zonal pod's spec.
async fn nominated_pod_on_an_initialized_node(
    spec: Value,
) -> (Stack, String, tokio::time::Instant) {
    let stack = Stack::start_without_scheduler(fast_timings()).await;
    let cluster = stack.cluster();
    let zonal = merged(json!({"nodeSelector": {labels::ZONE: "us-east-1a"}}), spec);
    create_pod_with(
        &cluster,
        "web-1",
        json!({"app": "web"}),
        pod_spec("1", "1Gi", zonal),
    );
    mark_unschedulable(&cluster, "web-1");
    let node = first_claim_status(&stack, types::INITIALIZED, "nodeName").await;
    let initialized = tokio::time::Instant::now();
    eventually("the pod nominated to the node", || {
        stack
            .pod("web-1")
            .is_some_and(|pod| pod["status"]["nominatedNodeName"] == node.as_str())
    })
    .await;
    (stack, node, initialized)
}

/// Reports `pod` unschedulable as kube-scheduler rewrites its report: the condition's
/// transition time kept (it stays unschedulable), only its status write's time new.
async fn report_unschedulable(stack: &Stack, pod: &str) {
    let report = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu.",
        "lastTransitionTime": "2020-01-01T00:00:00Z",
    }]}});
    let as_scheduler = PatchParams {
        field_manager: Some(kerf::pods::SCHEDULER_FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    Api::<Pod>::namespaced(stack.harness.client.clone(), "default")
        .patch_status(pod, &as_scheduler, &Patch::Strategic(&report))
        .await
        .expect("reported unschedulable");
}

/// Reports `pod` unschedulable as the kube-scheduler would ([`report_unschedulable`]) and
/// waits until kerf withdraws its nomination as one the pod could not use.
async fn refuse_and_await_withdrawal(stack: &Stack, pod: &str) {
    report_unschedulable(stack, pod).await;
    eventually("the refused nomination withdrawn", || {
        stack
            .pod(pod)
            .is_some_and(|pod| withdrawal_reason(&pod) == Some("NominationUnusable"))
    })
    .await;
}

/// Why kerf withdrew `pod`'s nomination, once it has (the field cleared, its condition
/// `False`).
fn withdrawal_reason(pod: &Value) -> Option<&str> {
    if !pod["status"]["nominatedNodeName"].is_null() {
        return None;
    }
    let condition = pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kerf::pods::NOMINATION_CONDITION && c["status"] == "False")?;
    condition["reason"].as_str()
}

#[test]
fn a_nomination_its_pod_could_not_use_is_withdrawn_once_the_window_has_passed() {
    run(|| async {
        let stack = Stack::start(fast_timings(), true).await;
        let cluster = stack.cluster();
        let zonal = json!({"nodeSelector": {labels::ZONE: "us-east-1a"}});
        create_pod_with(&cluster, "web-1", json!({}), pod_spec("1", "1Gi", zonal));
        stack.wait_running(&["web-1"]).await;
        let web = stack.pod("web-1").expect("pod");
        let node = web["spec"]["nodeName"].as_str().expect("bound").to_owned();
        // A pod no node can hold, nominated to that node (as by a leader before this one).
        let nowhere = json!({"nodeSelector": {"kerf.test/nowhere": "x"}});
        create_pod_with(
            &cluster,
            "misfit",
            json!({}),
            pod_spec("100m", "64Mi", nowhere),
        );
        let nomination = json!({"status": {
            "nominatedNodeName": node,
            "conditions": [{
                "type": kerf::pods::NOMINATION_CONDITION, "status": "True",
                "reason": kerf::pods::NOMINATION_REASON,
                "message": kerf::pods::nomination_message(&node, "earlier"),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }});
        cluster
            .patch_status(
                "v1",
                "pods",
                Some("default"),
                "misfit",
                PatchKind::Strategic,
                &nomination,
            )
            .expect("nominated");

        // The node's NodeClaim comes back when the window after its initialization ends.
        let deadline = tokio::time::Instant::now() + NOMINATION_WINDOW + PATIENCE;
        loop {
            let pod = stack.pod("misfit").expect("pod");
            if withdrawal_reason(&pod).is_some() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "still nominated: {pod:#}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let web = stack.pod("web-1").expect("pod");
        assert_eq!(
            web["status"]["nominatedNodeName"],
            node.as_str(),
            "a pod on its node keeps it"
        );
        stack.stop().await;
    });
}

#[test]
fn a_nodeclaim_whose_node_never_registers_is_deleted_and_its_instance_terminated() {
    run(|| async {
        let mut timings = fast_timings();
        // Long enough that the launched instance is observed before the TTL ends, even on a
        // loaded machine.
        timings.lifecycle.registration_ttl = Duration::from_secs(3);
        // No kubelets: the instance launches but no Node ever registers.
        let stack = Stack::start(timings, false).await;
        create_unschedulable_pod(&stack.cluster(), "web-1");
        let mut launched = None;
        eventually("a launched nodeclaim", || {
            launched = stack
                .nodeclaims()
                .into_iter()
                .find(|c| condition_status(c, types::LAUNCHED).as_deref() == Some("True"));
            launched.is_some()
        })
        .await;
        let claim = launched.expect("launched");
        let name = name_of(&claim);
        let provider_id = claim["status"]["providerID"]
            .as_str()
            .expect("providerID")
            .to_owned();
        assert!(matches!(
            stack.instance_state(&provider_id).as_deref(),
            Some("pending" | "running")
        ));
        eventually("the nodeclaim awaits its node", || {
            stack
                .nodeclaims()
                .iter()
                .find(|c| name_of(c) == name)
                .is_some_and(|c| {
                    condition_status(c, types::REGISTERED).as_deref() == Some("Unknown")
                })
        })
        .await;

        let cluster = stack.cluster();
        eventually("the nodeclaim is deleted and released", || {
            cluster
                .get("karpenter.sh/v1", "nodeclaims", None, &name)
                .is_err()
        })
        .await;
        assert_eq!(
            stack.instance_state(&provider_id).as_deref(),
            Some("terminated"),
            "the finalizer is released only once the instance is gone"
        );
        // The termination counter moves once the finalizer's release is answered, which
        // can be just after the object is seen gone.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let counted = [
            "karpenter_nodeclaims_disrupted_total{reason=\"registration_timeout\",nodepool=\"default\"",
            "karpenter_nodeclaims_terminated_total{nodepool=\"default\"",
        ];
        loop {
            let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
            if counted.iter().all(|metric| metrics.contains(metric)) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{counted:?} in {metrics}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stack.stop().await;
    });
}

/// kerf's nomination condition on `pod`; fails the test when there is none.
fn nomination_condition(pod: &Value) -> &Value {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kerf::pods::NOMINATION_CONDITION)
        .unwrap_or_else(|| panic!("kerf's nomination condition: {pod:#}"))
}
