//! Kubernetes Events as upstream Karpenter writes them, read back from the API emulator:
//! `FailedScheduling` on a pod the solve cannot place, `Nominated` on a pod placed on a new
//! NodeClaim, `InsufficientCapacityError` on a NodeClaim no offering could launch, and the
//! recorder's de-duplication and counting.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kerf::catalog::{AllocatableSettings, Catalog};
use kerf::scheduling::PodRef;
use kerf_actors::Cloud;
use kerf_actors::events::{self, Event, EventType, upstream};
use kerf_loadtest::apiserver::Cluster;
use kerf_loadtest::ec2::{
    Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig, catalog_offerings,
};
use serde_json::{Value, json};

use crate::support::*;

const REGION: &str = "us-east-1";

fn simulated(config: Ec2Config) -> Arc<SimulatedCloudProvider> {
    Arc::new(
        SimulatedCloudProvider::for_region(REGION, config, SimulatedCloudProviderConfig::default())
            .expect("simulated region"),
    )
}

fn settings_fast() -> kerf_actors::ValidSettings {
    settings(&[
        "--disable-leader-election",
        "true",
        "--batch-idle-duration",
        "300ms",
    ])
}

/// Events in `default` about the object `name` with `reason`.
fn events_for(cluster: &Cluster, name: &str, reason: &str) -> Vec<Value> {
    cluster
        .list("v1", "events", Some("default"), "")
        .expect("events list")
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .collect()
}

/// A pod asking for more CPU than any instance type has, marked unschedulable.
fn create_unplaceable_pod(cluster: &Cluster, name: &str) -> Value {
    cluster
        .create(
            "v1",
            "pods",
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [{"name": "app", "image": "app",
                    "resources": {"requests": {"cpu": "100000", "memory": "1Gi"}}}]}
            }),
        )
        .expect("pod created");
    mark_unschedulable(cluster, name)
}

#[test]
fn unplaceable_pods_get_failed_scheduling_and_placed_pods_are_nominated() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        cluster
            .create("karpenter.sh/v1", "nodepools", nodepool("default"))
            .expect("nodepool created");
        let cloud = Cloud {
            provider: simulated(Ec2Config::instant(REGION)),
            catalog: Catalog::embedded(REGION).expect("embedded region"),
            offerings: None,
        };
        let daemon = start_daemon_with(&h, settings_fast(), "a", Some(cloud)).await;
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");
        let placed = create_unschedulable_pod(&cluster, "web-1");
        let huge = create_unplaceable_pod(&cluster, "huge");

        let mut rounds = daemon.rounds.clone();
        let round = tokio::time::timeout(
            PATIENCE,
            rounds.wait_for(|r| r.as_ref().is_some_and(|r| r.pending.len() == 2)),
        )
        .await
        .expect("a round in time")
        .expect("provisioner alive")
        .clone()
        .expect("a round");
        assert_eq!(round.nodeclaims.len(), 1, "{round:?}");

        eventually("a FailedScheduling event on the unplaceable pod", || {
            !events_for(&cluster, "huge", "FailedScheduling").is_empty()
        })
        .await;
        let failed = events_for(&cluster, "huge", "FailedScheduling");
        assert_eq!(failed.len(), 1, "{failed:?}");
        let failed = &failed[0];
        assert_eq!(failed["type"], "Warning");
        assert_eq!(failed["source"]["component"], "karpenter");
        assert_eq!(failed["count"], 1);
        assert_eq!(failed["involvedObject"]["kind"], "Pod");
        assert_eq!(failed["involvedObject"]["namespace"], "default");
        assert_eq!(failed["involvedObject"]["uid"], huge["metadata"]["uid"]);
        let message = failed["message"].as_str().expect("a message");
        let reason = message
            .strip_prefix("Failed to schedule pod, ")
            .expect("upstream's message");
        // The reason is the solver's, as the round reports it.
        assert!(
            round
                .problems
                .iter()
                .any(|p| p == &format!("default/huge: {reason}")),
            "{reason:?} not among {:?}",
            round.problems
        );

        eventually("a Nominated event on the placed pod", || {
            !events_for(&cluster, "web-1", "Nominated").is_empty()
        })
        .await;
        let nominated = &events_for(&cluster, "web-1", "Nominated")[0];
        assert_eq!(nominated["type"], "Normal");
        assert_eq!(
            nominated["message"],
            format!("Pod should schedule on: nodeclaim/{}", round.nodeclaims[0])
        );
        assert_eq!(
            nominated["involvedObject"]["uid"],
            placed["metadata"]["uid"]
        );
        assert!(events_for(&cluster, "huge", "Nominated").is_empty());
        assert!(events_for(&cluster, "web-1", "FailedScheduling").is_empty());

        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn a_launch_without_capacity_raises_insufficient_capacity_on_the_nodeclaim() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        cluster
            .create("karpenter.sh/v1", "nodepools", nodepool("default"))
            .expect("nodepool created");
        let catalog = Catalog::embedded(REGION).expect("embedded region");
        let provider = simulated(Ec2Config::instant(REGION));
        for offering in catalog_offerings(&catalog.instance_types(&AllocatableSettings::default()))
        {
            provider.ec2().set_insufficient_capacity(offering.key, true);
        }
        let cloud = Cloud {
            provider: provider.clone(),
            catalog,
            offerings: None,
        };
        let daemon = start_daemon_with(&h, settings_fast(), "a", Some(cloud)).await;
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");
        create_unschedulable_pod(&cluster, "web-1");
        let mut rounds = daemon.rounds.clone();
        let round = tokio::time::timeout(PATIENCE, rounds.wait_for(|r| r.is_some()))
            .await
            .expect("a round in time")
            .expect("provisioner alive")
            .clone()
            .expect("a round");
        let claim = round.nodeclaims.first().expect("a nodeclaim").clone();

        eventually(
            "an InsufficientCapacityError event on the nodeclaim",
            || !events_for(&cluster, &claim, "InsufficientCapacityError").is_empty(),
        )
        .await;
        let event = &events_for(&cluster, &claim, "InsufficientCapacityError")[0];
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["involvedObject"]["kind"], "NodeClaim");
        assert_eq!(event["involvedObject"]["apiVersion"], "karpenter.sh/v1");
        let message = event["message"].as_str().expect("a message");
        assert!(
            message.starts_with(&format!("NodeClaim {claim} event: insufficient capacity")),
            "{message}"
        );

        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn the_recorder_counts_identical_events_and_drops_deduplicated_ones() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let (recorder, _task) = events::spawn(h.client.clone(), "test".into(), shutdown);
        let pod = PodRef::new("default", "web-1", "uid-1");

        // Without de-duplication, identical events raise the count of one Event object.
        recorder.publish(marker("same"));
        recorder.publish(marker("same"));
        eventually("the repeat is counted", || {
            events_for(&cluster, "marker", "Marker")
                .first()
                .is_some_and(|e| e["count"] == 2)
        })
        .await;
        assert_eq!(events_for(&cluster, "marker", "Marker").len(), 1);

        // Upstream's de-duplication drops a repeat within its timeout altogether; the
        // recorder works in order, so once a later event is written the repeat was seen.
        recorder.publish(upstream::pod_failed_to_schedule(&pod, "no capacity"));
        recorder.publish(upstream::pod_failed_to_schedule(&pod, "still no capacity"));
        recorder.publish(marker("after"));
        eventually("the later event is written", || {
            events_for(&cluster, "marker", "Marker").len() == 2
        })
        .await;
        let failed = events_for(&cluster, "web-1", "FailedScheduling");
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0]["count"], 1);
        assert_eq!(failed[0]["message"], "Failed to schedule pod, no capacity");
        assert_eq!(failed[0]["reportingInstance"], "test");
        h.stop().await;
    });
}

/// In-tree EBS storage, which `kerf plan` warns about, is told by the running controller too:
/// a Warning on the StorageClass and on the pending pod mounting such a volume.
#[test]
fn in_tree_storage_is_warned_about_on_the_objects() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        cluster
            .create(
                "storage.k8s.io/v1",
                "storageclasses",
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                    "metadata": {"name": "gp2"}, "provisioner": "kubernetes.io/aws-ebs"}),
            )
            .expect("storage class");
        cluster
            .create(
                "v1",
                "pods",
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "legacy", "namespace": "default"},
                    "spec": {"containers": [{"name": "app", "image": "app"}],
                        "volumes": [{"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1"}}]}}),
            )
            .expect("pod");
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud).await;
        let reason = kerf_actors::storage_advice::IN_TREE_STORAGE;
        let about = |name: &str| events_about(&cluster, name, reason);
        eventually("warnings on the class and the pod", || {
            !about("gp2").is_empty() && !about("legacy").is_empty()
        })
        .await;
        let on_pod = &about("legacy")[0];
        assert_eq!(on_pod["type"], "Warning");
        assert!(
            on_pod["message"]
                .as_str()
                .is_some_and(|m| m.contains(kerf::troubleshooting::documented("in-tree-ebs"))),
            "{on_pod}"
        );
        assert_eq!(about("gp2")[0]["involvedObject"]["kind"], "StorageClass");
        daemon.stop().await;
        h.stop().await;
    });
}

/// A kubelet `maxPods` above the ENI limit of the pool's instance types, which `kerf plan`
/// warns about, is told by the running controller as a Warning on the NodePool.
#[test]
fn max_pods_above_the_eni_limit_is_warned_about_on_the_nodepool() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let mut class = crate::drift_support::ec2nodeclass("default");
        class["spec"]["kubelet"] = json!({"maxPods": 110});
        cluster
            .create("karpenter.k8s.aws/v1", "ec2nodeclasses", class)
            .expect("node class created");
        // t3.medium's ENIs address 17 pods.
        create_nodepool(
            &cluster,
            nodepool_with(
                "small",
                json!({"spec": {"template": {"spec": {"requirements": [{
                    "key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["t3.medium"]}]}}}}),
            ),
        );
        let (_provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud).await;
        create_unschedulable_pod(&cluster, "web-1");
        let reason = "MaxPodsAboveENILimit";
        eventually("a warning on the NodePool", || {
            !events_about(&cluster, "small", reason).is_empty()
        })
        .await;
        let warnings = events_about(&cluster, "small", reason);
        let event = &warnings[0];
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["involvedObject"]["kind"], "NodePool");
        let message = event["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(kerf::troubleshooting::documented("max-pods-eni"))
                && message.contains("maxPods=110")
                && message.contains("t3.medium: 17"),
            "{message}"
        );
        daemon.stop().await;
        h.stop().await;
    });
}

/// A Normal event about the pod `default/marker`, reason `Marker`, without de-duplication or
/// throttling: one whose Event object a test can find by its message.
pub fn marker(message: &str) -> Event {
    Event {
        regarding: ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("default".into()),
            name: Some("marker".into()),
            ..ObjectReference::default()
        },
        type_: EventType::Normal,
        reason: "Marker",
        message: message.into(),
        dedupe: None,
        throttle: None,
    }
}
