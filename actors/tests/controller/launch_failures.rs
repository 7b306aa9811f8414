//! The launch failures users hit, end to end against the simulated EC2: EC2 rejecting the
//! request itself (not capacity) is recorded with EC2's code and message and retried, not
//! mistaken for capacity; spot refused for want of its service-linked role falls back to
//! on-demand at once, telling the user the command that fixes it; a machine that dies before
//! its Node registers is noticed and its NodeClaim deleted with the reason on it.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::cloudprovider::SPOT_SLR_ERROR_CODE;
use kerf::labels;
use kerf::troubleshooting::documented;
use kerf_actors::garbage_collection;
use kerf_actors::state::ObjectKey;
use kerf_loadtest::ec2::CapacityType;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::Value;

use crate::support::*;

/// The one NodeClaim, once `check` holds for it.
async fn claim_where(h: &Harness, what: &str, check: impl Fn(&NodeClaim) -> bool) -> NodeClaim {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let claims = nodeclaims(&h.client).await;
        if let [claim] = claims.as_slice()
            && check(claim)
        {
            return claim.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}: {claims:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[test]
fn a_fleet_error_that_is_not_capacity_is_recorded_with_ec2s_words_and_retried() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, cloud) = simulated_cloud();
        provider.ec2().refuse_launches(
            None,
            "InvalidBlockDeviceMapping",
            "The device name /dev/xvdz is not supported",
        );
        create_nodepool(&cluster, nodepool("default"));
        let daemon = start_provisioner(&h, cloud).await;
        create_unschedulable_pod(&cluster, "web-1");

        let claim = claim_where(&h, "Launched=False", |c| {
            c.conditions()
                .iter()
                .any(|c| c.type_ == types::LAUNCHED && c.reason == "InvalidBlockDeviceMapping")
        })
        .await;
        let launched = claim
            .conditions()
            .iter()
            .find(|c| c.type_ == types::LAUNCHED)
            .cloned()
            .expect("a Launched condition");
        assert!(
            launched
                .message
                .contains("InvalidBlockDeviceMapping: The device name /dev/xvdz is not supported"),
            "{launched:?}"
        );
        eventually("the failure is published once", || {
            events_about(&cluster, claim.name(), documented("fleet-error")).len() == 1
        })
        .await;
        assert!(
            provider.ec2().instances().is_empty(),
            "nothing was launched"
        );

        // Not capacity: the NodeClaim is kept and launches once EC2 accepts the request.
        provider.ec2().accept_launches();
        let name = claim.name().to_owned();
        let launched = claim_where(&h, "the same NodeClaim launches", |c| {
            c.is_condition_true(types::LAUNCHED)
        })
        .await;
        assert_eq!(launched.name(), name);
        assert_eq!(
            events_about(&cluster, &name, "LaunchFailed").len(),
            1,
            "the repeated failure was not published again"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn spot_without_its_service_linked_role_launches_on_demand_and_says_how_to_fix_it() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, cloud) = simulated_cloud();
        provider.ec2().refuse_launches(
            Some(CapacityType::Spot),
            SPOT_SLR_ERROR_CODE,
            "The provided credentials do not have permission to create the service-linked role for EC2 Spot Instances.",
        );
        create_nodepool(&cluster, nodepool("default"));
        let daemon = start_provisioner(&h, cloud).await;
        create_unschedulable_pod(&cluster, "web-1");

        let claim = claim_where(&h, "launched", |c| c.is_condition_true(types::LAUNCHED)).await;
        let capacity_type = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::CAPACITY_TYPE))
            .cloned();
        assert_eq!(capacity_type.as_deref(), Some("on-demand"));
        let instances = provider.ec2().instances();
        assert_eq!(instances.len(), 1, "{instances:?}");
        assert_eq!(instances[0].capacity_type, CapacityType::OnDemand);
        eventually("the user is told the fix", || {
            events_about(&cluster, claim.name(), "LaunchFailed")
                .iter()
                .any(|e| {
                    e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(documented("spot-slr")))
                })
        })
        .await;
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_machine_that_dies_before_its_node_registers_is_noticed_and_its_claim_deleted() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, cloud) = simulated_cloud();
        create_nodepool(&cluster, nodepool("default"));
        let daemon = start_provisioner(&h, cloud).await;
        create_unschedulable_pod(&cluster, "web-1");
        let claim = claim_where(&h, "launched", |c| c.is_condition_true(types::LAUNCHED)).await;
        // The pass below reads the controller's store, which may lag the API on a busy
        // machine: a NodeClaim it holds without its providerID has no machine to lose.
        let key = ObjectKey::new(None, claim.name());
        eventually("the controller's store has the launched NodeClaim", || {
            daemon
                .state
                .nodeclaims
                .get(&key)
                .is_some_and(|c| c.provider_id().is_some())
        })
        .await;

        // No kubelet joins in these tests: the machine boots and dies (as with an unusable
        // KMS key on its volumes) while the NodeClaim waits for its Node.
        let api: Api<NodeClaim> = Api::all(h.client.clone());
        let version = api
            .list(&Default::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("a list version");
        let mut changes = api
            .watch(&WatchParams::default(), &version)
            .await
            .expect("watch")
            .boxed();
        let instance = provider.ec2().instances()[0].instance_id.clone();
        provider
            .ec2()
            .terminate_instances(&[instance])
            .await
            .expect("terminated");
        let cloud: Arc<dyn kerf::cloudprovider::CloudProvider> = provider.clone();
        let collected = garbage_collection::collect(&h.client, &daemon.state, &*cloud)
            .await
            .expect("a pass");
        assert_eq!(collected.node_claims, [claim.name().to_owned()]);

        // Before it went, the NodeClaim said why.
        let registered = tokio::time::timeout(PATIENCE, async {
            while let Some(event) = changes.try_next().await.expect("watch event") {
                let WatchEvent::Modified(changed) = event else {
                    continue;
                };
                let found = changed
                    .conditions()
                    .iter()
                    .find(|c| c.type_ == types::REGISTERED && c.reason == "InstanceTerminated")
                    .cloned();
                if found.is_some() {
                    return found;
                }
            }
            None
        })
        .await
        .expect("the condition in time")
        .expect("Registered=False InstanceTerminated");
        assert_eq!(registered.status, kerf::api::ConditionStatus::False);
        assert!(registered.message.contains("KMS"), "{registered:?}");
        assert!(
            registered
                .message
                .contains(documented("instance-terminated")),
            "{registered:?}"
        );
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !nodeclaims(&h.client).await.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the claim is deleted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_nodepool_whose_node_class_is_not_ready_is_skipped_and_the_pods_event_says_why() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (_provider, cloud) = simulated_cloud();
        cluster
            .create(
                "karpenter.k8s.aws/v1",
                "ec2nodeclasses",
                serde_json::json!({
                    "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                    "metadata": {"name": "default"},
                    "spec": {"role": "KarpenterNodeRole",
                        "amiSelectorTerms": [{"alias": "al2023@latest"}],
                        // An id the region does not have: the class cannot become Ready.
                        "subnetSelectorTerms": [{"id": "subnet-0123456789abcdef0"}],
                        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "kerf-sim"}}]},
                }),
            )
            .expect("node class created");
        create_nodepool(&cluster, nodepool("default"));
        let daemon = start_provisioner(&h, cloud).await;
        let not_ready = |class: &Value| {
            class["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "False")
            })
        };
        eventually("the node class is not Ready", || {
            cluster
                .get("karpenter.k8s.aws/v1", "ec2nodeclasses", None, "default")
                .is_ok_and(|class| not_ready(&class))
        })
        .await;
        create_unschedulable_pod(&cluster, "web-1");

        eventually("a FailedScheduling event naming the class", || {
            events_about(&cluster, "web-1", "FailedScheduling")
                .iter()
                .any(|e| {
                    e["message"].as_str().is_some_and(|m| {
                        m.contains(r#"nodepool "default" "#)
                            && m.contains(documented("nodeclass-not-ready"))
                    })
                })
        })
        .await;
        assert!(
            nodeclaims(&h.client).await.is_empty(),
            "nothing is launched from a class that is not Ready"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_node_that_never_registers_is_named_with_the_checks_and_its_claim_deleted() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        // No kubelets run: the instance launches and no Node ever registers.
        let (_provider, cloud) = simulated_cloud();
        create_nodepool(&cluster, nodepool("default"));
        let mut timings = fast_timings();
        timings.lifecycle.registration_ttl = std::time::Duration::from_secs(2);
        let daemon = start_daemon_with_timings(
            &h,
            quick_settings(&["--disable-leader-election", "true"]),
            "solo",
            cloud,
            timings,
        )
        .await;
        create_unschedulable_pod(&cluster, "web-1");
        let claim = claim_where(&h, "launched", |c| c.is_condition_true(types::LAUNCHED)).await;

        eventually("a RegistrationTimeout event with the checks", || {
            events_about(&cluster, claim.name(), "RegistrationTimeout")
                .iter()
                .any(|e| {
                    e["message"].as_str().is_some_and(|m| {
                        m.contains(documented("registration-timeout"))
                            && m.contains("access entry")
                            && m.contains("443")
                    })
                })
        })
        .await;
        let api: Api<NodeClaim> = Api::all(h.client.clone());
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while api
            .get_opt(claim.name())
            .await
            .expect("get")
            .is_some_and(|c| c.metadata.uid == claim.metadata.uid)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the NodeClaim that never registered is deleted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        daemon.stop().await;
        h.stop().await;
    });
}
