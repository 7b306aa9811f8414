//! Launch as a reconciled, idempotent lifecycle step: a NodeClaim that is not `Launched` is
//! launched by the lifecycle whatever went wrong before — a CreateFleet failing with a
//! transient error, a CreateFleet whose answer was lost after it launched (also while
//! DescribeInstances lags behind the launch, and across a restart), a CreateTags failing, a
//! status write the API server refused, a controller restarted between launch and status
//! write — and ends `Launched` with exactly one instance; a NodeClaim deleted while its
//! launch is in flight leaves no instance behind. A launch writes its NodeClaim three
//! times up to `Launched`: create (with the termination finalizer), labels, status.

use std::collections::BTreeMap;
use std::time::Duration;

use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::cloudprovider::CloudProvider;
use kerf_actors::Daemon;
use kerf_loadtest::apiserver::FaultTarget;
use kerf_loadtest::ec2::{
    CapacityType, CreateFleetRequest, Ec2Config, FleetOverride, Instance, LaunchTemplateConfig,
    SimulatedCloudProvider, SimulatedCloudProviderConfig, ops, tags,
};
use kerf_loadtest::kubelet;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::support::*;

/// Instances that are pending or running.
fn live_instances(provider: &SimulatedCloudProvider) -> Vec<Instance> {
    provider
        .ec2()
        .instances()
        .into_iter()
        .filter(|i| i.state.is_live())
        .collect()
}

/// Starts a provisioning daemon and one pending pod; returns the daemon.
async fn provision_one(h: &Harness, cloud: kerf_actors::Cloud) -> Daemon {
    let cluster = h.cluster();
    create_nodepool(&cluster, nodepool("default"));
    let daemon = start_provisioner(h, cloud).await;
    create_unschedulable_pod(&cluster, "web-1");
    daemon
}

/// The one NodeClaim, once it is `Launched`.
async fn launched_claim(h: &Harness) -> NodeClaim {
    let api: Api<NodeClaim> = Api::all(h.client.clone());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let claims = nodeclaims(&h.client).await;
        if let [claim] = claims.as_slice()
            && claim.is_condition_true(types::LAUNCHED)
        {
            return api.get(claim.name()).await.expect("nodeclaim readable");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "one launched nodeclaim: {claims:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Exactly one live instance, tagged with `claim`, whose providerID `claim` records.
fn assert_one_instance_for(provider: &SimulatedCloudProvider, claim: &NodeClaim) {
    let live = live_instances(provider);
    assert_eq!(live.len(), 1, "one instance per nodeclaim: {live:?}");
    assert_eq!(
        live[0].tags.get(tags::NODECLAIM).map(String::as_str),
        Some(claim.name())
    );
    assert_eq!(claim.provider_id(), Some(live[0].provider_id().as_str()));
}

#[test]
fn a_launch_failing_with_a_transient_error_is_retried_until_launched() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud();
        provider.ec2().fail_next_fleets(3);
        let daemon = provision_one(&h, cloud).await;

        let claim = launched_claim(&h).await;
        assert_one_instance_for(&provider, &claim);
        let calls = provider.ec2().api_calls().calls(ops::CREATE_FLEET);
        assert_eq!(calls, 4, "three refused attempts, then the launch");
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_failed_launch_is_recorded_on_the_launched_condition() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud();
        provider.ec2().fail_next_fleets(u32::MAX);
        let daemon = provision_one(&h, cloud).await;

        let deadline = tokio::time::Instant::now() + PATIENCE;
        let condition = loop {
            let claims = nodeclaims(&h.client).await;
            let found = claims.first().and_then(|c| {
                c.conditions()
                    .iter()
                    .find(|c| c.type_ == types::LAUNCHED && !c.is_true())
                    .filter(|c| c.status == kerf::api::ConditionStatus::False)
                    .cloned()
            });
            if let Some(condition) = found {
                break condition;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Launched=False: {claims:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(condition.reason, "LaunchFailed");
        assert!(condition.message.contains("InternalError"), "{condition:?}");
        assert!(live_instances(&provider).is_empty());
        // Retried with backoff, not in a tight loop and not given up.
        let first = provider.ec2().api_calls().calls(ops::CREATE_FLEET);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let later = provider.ec2().api_calls().calls(ops::CREATE_FLEET);
        assert!(later > first, "retried: {first} then {later}");
        assert!(later <= first + 4, "backed off: {first} then {later}");
        assert_eq!(nodeclaims(&h.client).await.len(), 1);
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_launch_whose_answer_was_lost_adopts_the_instance_it_started() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud();
        provider.ec2().lose_next_fleet_answers(1);
        let daemon = provision_one(&h, cloud).await;

        let claim = launched_claim(&h).await;
        assert_one_instance_for(&provider, &claim);
        assert_eq!(provider.ec2().api_calls().calls(ops::CREATE_FLEET), 1);
        daemon.stop().await;
        h.stop().await;
    });
}

/// EC2's eventual consistency: the search by tag before the retry misses the instance the
/// lost answer launched, and the retry's client token gets that instance back from EC2.
#[test]
fn a_lost_answer_while_describe_lags_gets_the_first_instance_back() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud();
        provider.ec2().set_describe_lag(Duration::from_secs(3600));
        provider.ec2().lose_next_fleet_answers(1);
        let daemon = provision_one(&h, cloud).await;

        let claim = launched_claim(&h).await;
        assert_one_instance_for(&provider, &claim);
        assert_eq!(
            provider.ec2().api_calls().calls(ops::CREATE_FLEET),
            2,
            "the lost launch, then its repeat under the same token"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

/// A controller whose launch answer was lost stops (a restart, a failover) while
/// DescribeInstances does not show the instance yet: the next controller's launch derives
/// the same client token from the NodeClaim's uid and gets that instance.
#[test]
fn a_restart_while_describe_lags_gets_the_instance_by_its_token() {
    run(|| async {
        let h = start_cluster().await;
        create_nodepool(&h.cluster(), nodepool("default"));
        let (provider, cloud) = simulated_cloud();
        provider.ec2().set_describe_lag(Duration::from_secs(3600));
        let claim = unlaunched_claim(&h).await;
        // The first controller: its launch went through, its answer was lost, it stopped.
        let catalog = kerf::catalog::Catalog::embedded(REGION).expect("embedded region");
        let first_controller = SimulatedCloudProvider::new(
            provider.ec2().clone(),
            catalog.instance_types(&kerf::catalog::AllocatableSettings::default()),
            SimulatedCloudProviderConfig::default(),
        );
        provider.ec2().lose_next_fleet_answers(1);
        first_controller
            .create(&claim)
            .await
            .expect_err("the answer was lost");
        let started = live_instances(&provider);
        assert_eq!(started.len(), 1);

        let daemon = start_provisioner(&h, cloud).await;
        let launched = launched_claim(&h).await;
        assert_eq!(launched.name(), claim.name());
        assert_one_instance_for(&provider, &launched);
        assert_eq!(
            live_instances(&provider)[0].instance_id,
            started[0].instance_id
        );
        daemon.stop().await;
        h.stop().await;
    });
}

/// CreateTags plays no part in a launch: the NodeClaim tag is set by CreateFleet. With every
/// CreateTags failing (the tagging after registration), the NodeClaim keeps its one instance.
#[test]
fn failing_create_tags_never_launch_twice() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud();
        provider.ec2().fail_next_create_tags(u32::MAX);
        let kubelets = kubelet::start(
            h.client.clone(),
            provider.clone(),
            kubelet::KubeletConfig::fast(),
        );
        let daemon = provision_one(&h, cloud).await;

        let claim = launched_claim(&h).await;
        let ec2 = provider.ec2().clone();
        eventually(
            "the registered node's instance is tagged, and that fails",
            || ec2.api_calls().calls(ops::CREATE_TAGS) >= 1,
        )
        .await;
        // Long enough for a launch step run again to have launched a second instance.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_one_instance_for(&provider, &claim);
        assert!(!live_instances(&provider)[0].tags.contains_key(tags::NAME));
        assert_eq!(provider.ec2().api_calls().calls(ops::CREATE_FLEET), 1);
        kubelets.stop();
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_lost_status_write_does_not_launch_twice() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud();
        h.server.faults().fail_next(
            FaultTarget {
                method: "PATCH".to_owned(),
                plural: "nodeclaims".to_owned(),
                subresource: Some("status".to_owned()),
            },
            2,
        );
        let daemon = provision_one(&h, cloud).await;

        let claim = launched_claim(&h).await;
        assert_one_instance_for(&provider, &claim);
        assert_eq!(provider.ec2().api_calls().calls(ops::CREATE_FLEET), 1);
        assert!(h.server.faults().injected_failures() >= 2);
        daemon.stop().await;
        h.stop().await;
    });
}

/// A reconcile that reads the NodeClaim before its `Launched=True` write shows (the labels
/// write's watch event triggers one at once) must not launch and write again, and the
/// termination finalizer comes with the create: a launch writes its NodeClaim three times
/// (create, labels, status), where upstream writes it four (a separate finalizer patch).
#[test]
fn a_launch_writes_its_nodeclaim_three_times() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud();
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool("default"));
        let client = named_client(&h, "controller").await;
        let settings = quick_settings(&["--disable-leader-election", "true"]);
        let daemon = start_daemon_on(client, settings, "solo", Some(cloud)).await;
        create_unschedulable_pod(&cluster, "web-1");

        let claim = launched_claim(&h).await;
        // Long enough for any reconcile of a stale copy to have written.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let collection = "/apis/karpenter.sh/v1/nodeclaims";
        let path = format!("{collection}/{}", claim.name());
        let writes: Vec<(http::Method, String)> = h
            .server
            .faults()
            .mutations_from("controller")
            .into_iter()
            .filter(|m| m.path == collection || m.path.starts_with(&path))
            .map(|m| (m.method, m.path))
            .collect();
        assert_eq!(
            writes,
            vec![
                (http::Method::POST, collection.to_owned()),
                (http::Method::PATCH, path.clone()),
                (http::Method::PATCH, format!("{path}/status")),
            ]
        );
        assert!(
            kerf::finalizers::has_termination_finalizer(claim.metadata.finalizers.as_ref()),
            "{claim:?}"
        );
        assert_eq!(provider.ec2().api_calls().calls(ops::CREATE_FLEET), 1);
        daemon.stop().await;
        h.stop().await;
    });
}

/// NodeClaim `default-orphan` as a controller that stopped before launching it left it:
/// pinned to one on-demand type, holding its finalizer, without status.
async fn unlaunched_claim(h: &Harness) -> NodeClaim {
    let api: Api<NodeClaim> = Api::all(h.client.clone());
    api.create(&PostParams::default(), &pinned_claim(true))
        .await
        .expect("created")
}

/// NodeClaim `default-orphan`, pinned to one on-demand type, with or without its finalizer.
fn pinned_claim(with_finalizer: bool) -> NodeClaim {
    let mut claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": "default-orphan",
            "labels": {"karpenter.sh/nodepool": "default"},
            "finalizers": ["karpenter.sh/termination"]
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ]
        }
    }))
    .expect("a valid nodeclaim");
    if !with_finalizer {
        claim.metadata.finalizers = None;
    }
    claim
}

/// A NodeClaim created by someone else (kubectl) without the termination finalizer gets it,
/// in one write of its own, before anything is launched for it.
#[test]
fn a_nodeclaim_created_without_the_finalizer_gets_it_once_before_its_launch() {
    run(|| async {
        let h = start_cluster().await;
        create_nodepool(&h.cluster(), nodepool("default"));
        let (provider, cloud) = simulated_cloud();
        let client = named_client(&h, "controller").await;
        let settings = quick_settings(&["--disable-leader-election", "true"]);
        let daemon = start_daemon_on(client, settings, "solo", Some(cloud)).await;
        let api: Api<NodeClaim> = Api::all(h.client.clone());
        // Stamped with the current NodePool hash version, so that the hash controller has
        // nothing to write on it: every write counted below is the lifecycle's.
        let mut claim = pinned_claim(false);
        claim.metadata.annotations = Some(BTreeMap::from([(
            kerf::labels::NODEPOOL_HASH_VERSION.to_owned(),
            kerf::nodepool_hash::NODEPOOL_HASH_VERSION.to_owned(),
        )]));
        api.create(&PostParams::default(), &claim)
            .await
            .expect("created as kubectl would");

        let claim = launched_claim(&h).await;
        assert!(
            kerf::finalizers::has_termination_finalizer(claim.metadata.finalizers.as_ref()),
            "{claim:?}"
        );
        assert_one_instance_for(&provider, &claim);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let path = format!("/apis/karpenter.sh/v1/nodeclaims/{}", claim.name());
        let writes: Vec<String> = h
            .server
            .faults()
            .mutations_from("controller")
            .into_iter()
            .filter(|m| m.path.starts_with(&path))
            .map(|m| m.path)
            .collect();
        // The finalizer, the labels, the status: a reconcile that runs again before the watch
        // delivers the finalizer it wrote leaves the version it wrote over.
        let status = format!("{path}/status");
        assert_eq!(writes.last(), Some(&status), "{writes:?}");
        let before_status = writes.iter().filter(|w| **w == path).count();
        assert_eq!(before_status, 2, "{writes:?}");
        assert_eq!(
            writes.iter().filter(|w| **w == status).count(),
            1,
            "{writes:?}"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

/// A NodeClaim without status (made by a controller that stopped between CreateFleet and the
/// status write), and the instance that controller launched for it.
async fn orphaned_launch(h: &Harness, provider: &SimulatedCloudProvider) -> (NodeClaim, Instance) {
    let claim = unlaunched_claim(h).await;
    let request = CreateFleetRequest {
        launch_template_configs: vec![LaunchTemplateConfig {
            launch_template_name: "karpenter.k8s.aws/kerf-sim".to_owned(),
            overrides: vec![FleetOverride {
                capacity_reservation_id: None,
                instance_type: "m5.large".to_owned(),
                zone: "us-east-1a".to_owned(),
                subnet_id: None,
                image_id: Some(provider.image_id()),
                priority: None,
            }],
        }],
        capacity_type: Some(CapacityType::OnDemand),
        total_target_capacity: 1,
        tags: BTreeMap::from([
            (tags::NODECLAIM.to_owned(), claim.name().to_owned()),
            (
                tags::EKS_CLUSTER_NAME.to_owned(),
                provider.cluster_name().to_owned(),
            ),
            (tags::NODEPOOL.to_owned(), "default".to_owned()),
            (tags::EC2NODECLASS.to_owned(), "default".to_owned()),
        ]),
        context: None,
        client_token: None,
    };
    let output = provider
        .ec2()
        .create_fleet(&request)
        .await
        .expect("launched");
    let id = output.instances[0].instance_ids[0].clone();
    let instance = provider.ec2().instance(&id).expect("instance exists");
    (claim, instance)
}

#[test]
fn a_nodeclaim_left_unlaunched_by_a_restart_adopts_its_instance() {
    run(|| async {
        let h = start_cluster().await;
        create_nodepool(&h.cluster(), nodepool("default"));
        let (provider, cloud) = simulated_cloud();
        let (orphan, instance) = orphaned_launch(&h, &provider).await;
        let daemon = start_provisioner(&h, cloud).await;

        let claim = launched_claim(&h).await;
        assert_eq!(claim.name(), orphan.name());
        assert_eq!(claim.provider_id(), Some(instance.provider_id().as_str()));
        assert_one_instance_for(&provider, &claim);
        assert_eq!(
            provider.ec2().api_calls().calls(ops::CREATE_FLEET),
            1,
            "the first controller's launch only"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_nodeclaim_deleted_mid_launch_terminates_what_was_launched() {
    run(|| async {
        let h = start_cluster().await;
        let (provider, cloud) = simulated_cloud_with(Ec2Config {
            launch_latency: Duration::from_secs(2),
            ..Ec2Config::instant(REGION)
        });
        let daemon = provision_one(&h, cloud).await;
        let ec2 = provider.ec2().clone();
        eventually("a launch is in flight", || {
            ec2.api_calls().calls(ops::CREATE_FLEET) == 1
        })
        .await;
        let claims = nodeclaims(&h.client).await;
        let [claim] = claims.as_slice() else {
            panic!("one nodeclaim: {claims:?}");
        };
        let api: Api<NodeClaim> = Api::all(h.client.clone());
        api.delete(claim.name(), &DeleteParams::default())
            .await
            .expect("deleted");

        // The launch completes, then the deletion terminates its instance before the
        // finalizer goes: no instance is left running for garbage collection to find.
        let name = claim.name().to_owned();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while api.get_opt(&name).await.expect("readable").is_some() {
            assert!(tokio::time::Instant::now() < deadline, "{name} is released");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let launched: Vec<Instance> = ec2
            .instances()
            .into_iter()
            .filter(|i| i.tags.get(tags::NODECLAIM) == Some(&name))
            .collect();
        assert_eq!(launched.len(), 1, "the launch went through: {launched:?}");
        assert!(
            !launched[0].state.is_live(),
            "and its instance was terminated: {launched:?}"
        );
        daemon.stop().await;
        h.stop().await;
    });
}
