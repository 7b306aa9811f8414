//! The loops the controller runs beside provisioning, against the simulated provider: the
//! LaunchTemplateCache keeps EC2NodeClass status, hash annotations and termination finalizer;
//! garbage collection removes leaked machines (and their Nodes) and NodeClaims whose machine
//! is gone; the Tagger names registered machines after their node.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kerf::api::NodeClaim;
use kerf::catalog::Catalog;
use kerf::cloudprovider::CloudProvider;
use kerf::labels;
use kerf_actors::Cloud;
use kerf_loadtest::apiserver::{Cluster, DeleteOptions, PatchKind};
use kerf_loadtest::ec2::{
    Ec2Config, SimulatedCloudProvider, SimulatedCloudProviderConfig, subnet_id,
};
use serde_json::{Value, json};

use crate::support::*;

const REGION: &str = "us-east-1";
pub const EC2NODECLASSES: (&str, &str) = ("karpenter.k8s.aws/v1", "ec2nodeclasses");
pub const NODECLAIMS: (&str, &str) = ("karpenter.sh/v1", "nodeclaims");

pub fn simulated() -> (Arc<SimulatedCloudProvider>, Cloud) {
    let provider = Arc::new(
        SimulatedCloudProvider::for_region(
            REGION,
            Ec2Config::instant(REGION),
            SimulatedCloudProviderConfig::default(),
        )
        .expect("simulated region"),
    );
    let cloud = Cloud {
        provider: provider.clone(),
        catalog: Catalog::embedded(REGION).expect("embedded region"),
        offerings: None,
    };
    (provider, cloud)
}

pub async fn start(h: &Harness, cloud: Cloud) -> kerf_actors::Daemon {
    let daemon = start_daemon_with(
        h,
        settings(&["--disable-leader-election", "true"]),
        "a",
        Some(cloud),
    )
    .await;
    tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
        .await
        .expect("cluster state syncs");
    daemon
}

pub fn get(cluster: &Cluster, (api_version, plural): (&str, &str), name: &str) -> Option<Value> {
    cluster.get(api_version, plural, None, name).ok()
}

/// Creates the EC2NodeClass `name`, selecting the simulated region's subnets and security
/// groups by their discovery tag.
pub fn create_node_class(cluster: &Cluster, name: &str) {
    cluster
        .create(
            EC2NODECLASSES.0,
            EC2NODECLASSES.1,
            crate::drift_support::ec2nodeclass(name),
        )
        .expect("node class created");
}

/// Whether the object's `Ready` condition is true.
pub fn is_ready(object: &Value) -> bool {
    object["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// A NodeClaim as the NodeClaimCreator would have written it, not yet in the API.
fn claim(name: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {labels::NODEPOOL: "default"}},
        "spec": {
            "requirements": [{"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
    }))
    .expect("test nodeclaim parses")
}

/// Launches a machine for `name` in the simulated EC2; its providerID and instance id.
pub async fn launch(provider: &SimulatedCloudProvider, name: &str) -> (String, String) {
    let launched = provider.create(&claim(name)).await.expect("launch");
    let provider_id = launched.provider_id().expect("providerID").to_owned();
    let instance_id = provider_id.rsplit('/').next().expect("id").to_owned();
    (provider_id, instance_id)
}

/// Creates NodeClaim `name` in the API with `status`.
pub fn create_claim(cluster: &Cluster, name: &str, status: Value) {
    let object = serde_json::to_value(claim(name)).expect("serialises");
    cluster
        .create(NODECLAIMS.0, NODECLAIMS.1, object)
        .expect("nodeclaim created");
    cluster
        .patch_status(
            NODECLAIMS.0,
            NODECLAIMS.1,
            None,
            name,
            PatchKind::Merge,
            &json!({ "status": status }),
        )
        .expect("nodeclaim status written");
}

/// Registers the NodeClaim `claim` as its node `node` would: `status.nodeName`.
pub fn register(cluster: &Cluster, claim: &str, node: &str) {
    cluster
        .patch_status(
            NODECLAIMS.0,
            NODECLAIMS.1,
            None,
            claim,
            PatchKind::Merge,
            &json!({"status": {"nodeName": node}}),
        )
        .expect("registered");
}

fn instance_live(provider: &SimulatedCloudProvider, id: &str) -> bool {
    provider
        .ec2()
        .instance(id)
        .is_some_and(|i| i.state.is_live())
}

#[test]
fn ec2nodeclass_status_hash_and_finalizer_follow_the_spec_until_deletion() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, cloud) = simulated();
        let daemon = start(&h, cloud).await;
        create_node_class(&cluster, "default");
        eventually("the node class is Ready", || {
            get(&cluster, EC2NODECLASSES, "default").is_some_and(|nc| is_ready(&nc))
        })
        .await;
        let nc = get(&cluster, EC2NODECLASSES, "default").expect("exists");
        let status = &nc["status"];
        assert!(
            status["subnets"].as_array().is_some_and(|s| s.len() >= 3),
            "{status}"
        );
        assert_eq!(status["amis"][0]["id"], provider.image_id().as_str());
        assert!(status["instanceProfile"].is_string(), "{status}");
        for type_ in [
            "SubnetsReady",
            "SecurityGroupsReady",
            "AMIsReady",
            "InstanceProfileReady",
            "ValidationSucceeded",
        ] {
            assert!(
                status["conditions"].as_array().is_some_and(|cs| cs
                    .iter()
                    .any(|c| c["type"] == type_ && c["status"] == "True")),
                "{type_}: {status}"
            );
        }
        let annotations = &nc["metadata"]["annotations"];
        assert_eq!(annotations[labels::EC2NODECLASS_HASH_VERSION], "v6");
        let first_hash = annotations[labels::EC2NODECLASS_HASH].clone();
        assert!(first_hash.is_string(), "{annotations}");
        assert_eq!(
            nc["metadata"]["finalizers"],
            json!([labels::EC2NODECLASS_TERMINATION_FINALIZER])
        );

        // A spec change is resolved again: one subnet by id, and static fields rehash.
        cluster
            .patch(
                EC2NODECLASSES.0,
                EC2NODECLASSES.1,
                None,
                "default",
                PatchKind::Merge,
                &json!({"spec": {"subnetSelectorTerms": [{"id": subnet_id("us-east-1b")}],
                    "detailedMonitoring": true}}),
            )
            .expect("spec patched");
        eventually("the node class follows its new spec", || {
            get(&cluster, EC2NODECLASSES, "default").is_some_and(|nc| {
                nc["status"]["subnets"]
                    .as_array()
                    .is_some_and(|s| s.len() == 1)
                    && nc["metadata"]["annotations"][labels::EC2NODECLASS_HASH] != first_hash
            })
        })
        .await;
        let nc = get(&cluster, EC2NODECLASSES, "default").expect("exists");
        assert_eq!(nc["status"]["subnets"][0]["zone"], "us-east-1b");

        cluster
            .delete(
                EC2NODECLASSES.0,
                EC2NODECLASSES.1,
                None,
                "default",
                &DeleteOptions::default(),
            )
            .expect("delete accepted");
        eventually("the finalizer is released and the node class goes", || {
            get(&cluster, EC2NODECLASSES, "default").is_none()
        })
        .await;
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn garbage_collection_removes_leaked_machines_and_claims_whose_machine_is_gone() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, cloud) = simulated();
        // A machine whose NodeClaim was lost five minutes ago, with the Node it registered.
        let (leaked_pid, leaked) = launch(&provider, "lost-claim").await;
        provider
            .ec2()
            .set_launch_time(&leaked, SystemTime::now() - Duration::from_secs(300))
            .expect("backdated");
        cluster
            .create(
                "v1",
                "nodes",
                json!({"metadata": {"name": "leaked-node"}, "spec": {"providerID": leaked_pid}}),
            )
            .expect("node created");
        // A machine just launched whose NodeClaim is not written yet: too young to collect.
        let (_, young) = launch(&provider, "in-flight").await;
        // A registered NodeClaim whose machine was terminated behind kerf's back.
        let (gone_pid, gone) = launch(&provider, "default-gone").await;
        provider
            .ec2()
            .terminate_instances(std::slice::from_ref(&gone))
            .await
            .expect("terminated");
        create_claim(
            &cluster,
            "default-gone",
            json!({"providerID": gone_pid, "nodeName": "gone-node", "conditions": [
                {"type": "Registered", "status": "True", "reason": "Registered", "message": "",
                 "lastTransitionTime": "2024-01-01T00:00:00Z"}]}),
        );

        let daemon = start(&h, cloud).await;
        eventually("the leaked machine is terminated", || {
            !instance_live(&provider, &leaked)
        })
        .await;
        eventually("its node is deleted", || {
            cluster.get("v1", "nodes", None, "leaked-node").is_err()
        })
        .await;
        // The young machine was listed by the same pass and kept.
        assert!(instance_live(&provider, &young));
        eventually("the claim whose machine is gone is deleted", || {
            get(&cluster, NODECLAIMS, "default-gone").is_none()
        })
        .await;
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn registered_machines_are_tagged_with_their_node_name_once() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, cloud) = simulated();
        let daemon = start(&h, cloud).await;
        let (pid, id) = launch(&provider, "default-a").await;
        create_claim(&cluster, "default-a", json!({"providerID": pid}));
        // The user named this one already (e.g. through spec.tags): the name stays.
        let (named_pid, named) = launch(&provider, "default-b").await;
        provider
            .ec2()
            .create_tags(
                std::slice::from_ref(&named),
                &[("Name".to_owned(), "custom".to_owned())].into(),
            )
            .await
            .expect("tagged");
        create_claim(&cluster, "default-b", json!({"providerID": named_pid}));

        // Registration sets the node name; only then is the machine tagged.
        for (claim, node) in [("default-a", "ip-10-0-0-1"), ("default-b", "ip-10-0-0-2")] {
            register(&cluster, claim, node);
        }
        let tagged = |name: &str| {
            get(&cluster, NODECLAIMS, name).is_some_and(|c| {
                c["metadata"]["annotations"][labels::INSTANCE_TAGGED] == "true"
                    && c["metadata"]["annotations"][labels::CLUSTER_NAME_TAGGED] == "true"
            })
        };
        eventually("both claims are marked tagged", || {
            tagged("default-a") && tagged("default-b")
        })
        .await;
        let tags = |id: &str| provider.ec2().instance(id).expect("instance").tags;
        assert_eq!(tags(&id)["Name"], "ip-10-0-0-1");
        assert_eq!(tags(&id)["karpenter.sh/nodeclaim"], "default-a");
        assert_eq!(tags(&id)["eks:eks-cluster-name"], provider.cluster_name());
        assert_eq!(tags(&named)["Name"], "custom");
        daemon.stop().await;
        h.stop().await;
    });
}
