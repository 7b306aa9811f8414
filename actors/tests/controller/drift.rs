//! Drift detection and the conditions the disruption loop reads, end to end: the controller
//! stamps the NodePool hash on the pool and its NodeClaims, marks a launched NodeClaim
//! `Drifted` when the pool's requirements or static fields change or its AMI is no longer the
//! selected one, clears the condition when the change is undone, and marks NodeClaims
//! `Consolidatable` once `consolidateAfter` has passed since their last pod event.

use kerf::labels;
use kerf::nodepool_hash::nodepool_hash;
use serde_json::{Value, json};

use crate::drift_support::*;
use crate::support::*;

#[test]
fn the_nodepool_hash_is_stamped_on_the_pool_and_copied_onto_its_nodeclaims() {
    run(|| async {
        let stack = Stack::start(no_disruption()).await;
        let claim = stack.running_pod("web").await;
        let pool = stack.nodepool("default");
        let typed: kerf::api::NodePool = serde_json::from_value(pool.clone()).expect("typed");
        let annotations = &pool["metadata"]["annotations"];
        assert_eq!(annotations[labels::NODEPOOL_HASH], nodepool_hash(&typed));
        assert_eq!(annotations[labels::NODEPOOL_HASH_VERSION], "v3");
        let claim = stack.nodeclaim(&claim).expect("nodeclaim");
        let stamped = &claim["metadata"]["annotations"];
        assert_eq!(
            stamped[labels::NODEPOOL_HASH],
            annotations[labels::NODEPOOL_HASH]
        );
        assert_eq!(stamped[labels::NODEPOOL_HASH_VERSION], "v3");
        assert!(condition(&claim, "Drifted").is_none(), "{claim:#}");
        stack.stop().await;
    });
}

#[test]
fn a_requirement_change_drifts_the_nodeclaim_and_undoing_it_clears_drift() {
    run(|| async {
        let stack = Stack::start(no_disruption()).await;
        let claim = stack.running_pod("web").await;
        let capacity_type = stack.nodeclaim(&claim).expect("nodeclaim")["metadata"]["labels"]
            [labels::CAPACITY_TYPE]
            .as_str()
            .expect("capacity type label")
            .to_owned();
        let other = if capacity_type == "spot" {
            "on-demand"
        } else {
            "spot"
        };
        let requirements = |values: Value| {
            json!({"spec": {"template": {"spec": {"requirements": [
                {"key": labels::ARCH, "operator": "In", "values": ["amd64", "arm64"]},
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": values}]}}}})
        };
        stack.patch_nodepool("default", &requirements(json!([other])));
        until_condition(
            &stack,
            &claim,
            "Drifted",
            "Drifted=RequirementsDrifted",
            drifted("RequirementsDrifted"),
        )
        .await;
        stack.patch_nodepool("default", &requirements(json!(["spot", "on-demand"])));
        until_condition(&stack, &claim, "Drifted", "Drifted cleared", |c| {
            c.is_none()
        })
        .await;
        let (_, metrics) = http_get(stack.daemon.metrics_addr, "/metrics").await;
        let line = format!(
            "karpenter_nodeclaims_drifted_total{{reason=\"RequirementsDrifted\",nodepool=\"default\",capacity_type=\"{capacity_type}\"}} 1"
        );
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
        stack.stop().await;
    });
}

#[test]
fn a_template_label_change_drifts_the_nodeclaim_through_the_hash() {
    run(|| async {
        let stack = Stack::start(no_disruption()).await;
        let claim = stack.running_pod("web").await;
        let before =
            stack.nodepool("default")["metadata"]["annotations"][labels::NODEPOOL_HASH].clone();
        stack.patch_nodepool(
            "default",
            &json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}}),
        );
        until_condition(
            &stack,
            &claim,
            "Drifted",
            "Drifted=NodePoolDrifted",
            drifted("NodePoolDrifted"),
        )
        .await;
        let after =
            stack.nodepool("default")["metadata"]["annotations"][labels::NODEPOOL_HASH].clone();
        assert_ne!(before, after, "the pool's hash follows its template");
        stack.stop().await;
    });
}

/// Writes the node class (an annotation), as its status refresh would.
fn touch_node_class(stack: &Stack, value: &str) {
    stack
        .cluster()
        .patch(
            EC2NODECLASSES.0,
            EC2NODECLASSES.1,
            None,
            "default",
            kerf_loadtest::apiserver::PatchKind::Merge,
            &json!({"metadata": {"annotations": {"test/touch": value}}}),
        )
        .expect("node class touched");
}

#[test]
fn a_new_ami_behind_the_alias_drifts_launched_nodeclaims() {
    run(|| async {
        let stack = Stack::start(no_disruption()).await;
        let claim = stack.running_pod("web").await;
        let old = stack.provider.image_id();
        stack.provider.set_image_id("ami-0000000000000000b");
        // The node class changing (any write) makes the controller ask the cloud again at
        // once instead of after its 5-minute recheck.
        touch_node_class(&stack, "1");
        until_condition(
            &stack,
            &claim,
            "Drifted",
            "Drifted=AMIDrift",
            drifted("AMIDrift"),
        )
        .await;
        // A NodeClaim launched now runs the new image and is not drifted.
        stack.provider.set_image_id(&old);
        touch_node_class(&stack, "2");
        until_condition(&stack, &claim, "Drifted", "Drifted cleared", |c| {
            c.is_none()
        })
        .await;
        stack.stop().await;
    });
}

#[test]
fn a_nodeclaim_is_consolidatable_consolidate_after_its_last_pod_event() {
    run(|| async {
        let stack = Stack::start(json!({"spec": {"disruption": {
            "consolidateAfter": "3s", "budgets": [{"nodes": "0"}]}}}))
        .await;
        let claim = stack.running_pod("web").await;
        let claim_json = until_condition(
            &stack,
            &claim,
            "Consolidatable",
            "Consolidatable=True",
            |c| c.is_some_and(|c| c["status"] == "True"),
        )
        .await;
        let last_event: k8s_openapi::jiff::Timestamp = claim_json["status"]["lastPodEventTime"]
            .as_str()
            .expect("lastPodEventTime recorded")
            .parse()
            .expect("a time");
        let became: k8s_openapi::jiff::Timestamp = condition(&claim_json, "Consolidatable")
            .expect("present")["lastTransitionTime"]
            .as_str()
            .expect("transition time")
            .parse()
            .expect("a time");
        let waited = became.duration_since(last_event);
        assert!(
            waited >= k8s_openapi::jiff::SignedDuration::from_secs(3),
            "Consolidatable {waited} after the last pod event, before consolidateAfter: {claim_json:#}"
        );
        stack.stop().await;
    });
}

/// Through a launch the NodeClaim's status is written once per step: launched, registered
/// and initialized (together or apart), then its last pod event, and pods binding one after
/// another within 10 s of it move that time in one later write. Not an empty status before
/// the launch, not again from a copy of the NodeClaim the lifecycle had just written over
/// (a 409, its version gone), not a pod event before the NodeClaim is initialized, nor one
/// per pod: a pod event per bound pod would cost a large scale-up as many writes as pods.
#[test]
fn a_nodeclaims_status_is_written_once_per_step() {
    run(|| async {
        let stack = Stack::start_named(no_disruption(), "controller").await;
        let cluster = stack.cluster();
        let claim = stack.running_pod("web").await;
        let node = stack.nodeclaim(&claim).expect("the nodeclaim")["status"]["nodeName"]
            .as_str()
            .expect("a node")
            .to_owned();
        let mut recorded = String::new();
        eventually("the last pod event is recorded", || {
            stack.nodeclaim(&claim).is_some_and(|c| {
                recorded = c["status"]["lastPodEventTime"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                !recorded.is_empty()
            })
        })
        .await;
        // Writes are counted up to a second before the held one may come: 10 s after the
        // recorded time (the emulator logs them by the monotonic clock, so it is converted).
        let recorded: k8s_openapi::jiff::Timestamp = recorded.parse().expect("a time");
        let left = recorded + k8s_openapi::jiff::SignedDuration::from_secs(9)
            - k8s_openapi::jiff::Timestamp::now();
        let cutoff =
            tokio::time::Instant::now() + std::time::Duration::try_from(left).unwrap_or_default();
        // Three more pod events on the node, a second apart (the field's precision).
        for i in 0..3 {
            let name = format!("small-{i}");
            create_pod_with(
                &cluster,
                &name,
                json!({}),
                json!({"nodeSelector": {labels::HOSTNAME: node},
                    "containers": [{"name": "app", "image": "app",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}),
            );
            eventually("the small pod is bound", || {
                cluster
                    .get("v1", "pods", Some("default"), &name)
                    .is_ok_and(|p| p["spec"]["nodeName"] == node.as_str())
            })
            .await;
            tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        }
        let path = format!("/apis/karpenter.sh/v1/nodeclaims/{claim}/status");
        let writes = stack
            .harness
            .server
            .faults()
            .mutations_from("controller")
            .into_iter()
            .filter(|m| m.method == http::Method::PATCH && m.path == path && m.at < cutoff)
            .count();
        assert!(
            (3..=4).contains(&writes),
            "{writes} status writes: launched, registered and initialized (one or two), the \
             first pod event; {:#}",
            stack.nodeclaim(&claim).unwrap_or_default()
        );
        stack.stop().await;
    });
}

#[test]
fn nodeclaims_of_an_older_hash_version_are_restamped_not_drifted() {
    run(|| async {
        let stack = Stack::start(no_disruption()).await;
        let cluster = stack.cluster();
        eventually("the pool is stamped", || {
            stack.nodepool("default")["metadata"]["annotations"][labels::NODEPOOL_HASH].is_string()
        })
        .await;
        let pool = stack.nodepool("default");
        let current = pool["metadata"]["annotations"][labels::NODEPOOL_HASH].clone();
        let uid = pool["metadata"]["uid"].clone();
        cluster
            .create(
                NODECLAIMS.0,
                NODECLAIMS.1,
                json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                    "metadata": {"name": "default-old",
                        "labels": {labels::NODEPOOL: "default"},
                        "annotations": {labels::NODEPOOL_HASH: "12345", labels::NODEPOOL_HASH_VERSION: "v2"},
                        "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                            "name": "default", "uid": uid}]},
                    "spec": {
                        "requirements": [{"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    },
                }),
            )
            .expect("nodeclaim created");
        until_condition(
            &stack,
            "default-old",
            "Launched",
            "the old nodeclaim launches",
            |c| c.is_some_and(|c| c["status"] == "True"),
        )
        .await;
        // The pool as an older controller left it: the previous version's hash, which its
        // NodeClaims carry too.
        stack.patch_nodepool(
            "default",
            &json!({"metadata": {"annotations": {
                labels::NODEPOOL_HASH: "12345", labels::NODEPOOL_HASH_VERSION: "v2"}}}),
        );
        eventually("the nodeclaim carries the current hash and version", || {
            stack.nodeclaim("default-old").is_some_and(|c| {
                let a = &c["metadata"]["annotations"];
                a[labels::NODEPOOL_HASH_VERSION] == "v3" && a[labels::NODEPOOL_HASH] == current
            }) && stack.nodepool("default")["metadata"]["annotations"]
                [labels::NODEPOOL_HASH_VERSION]
                == "v3"
        })
        .await;
        let claim = stack.nodeclaim("default-old").expect("nodeclaim");
        assert!(condition(&claim, "Drifted").is_none(), "{claim:#}");
        stack.stop().await;
    });
}
