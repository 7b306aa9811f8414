//! The solver settings and pod-level resources through the controller's rounds:
//! `PREFERENCE_POLICY=Ignore` plans without a preference the default would follow,
//! `MIN_VALUES_POLICY=BestEffort` launches a NodeClaim whose `minValues` cannot be met,
//! lowered and annotated as upstream (and counted under `min_values_relaxed`), and a pod's
//! pod-level `spec.resources` size its node.

use kerf::labels;
use serde_json::json;

use crate::support::*;

#[test]
fn preference_policy_ignore_plans_without_a_preferred_zone() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(
            &cluster,
            nodepool_with(
                "default",
                json!({"spec": {"template": {"spec": {"requirements": [
                    {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
                    {"key": labels::ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
                ]}}}}),
            ),
        );
        let (_provider, cloud) = simulated_cloud();
        let prefers_b = json!({"affinity": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": labels::ZONE, "operator": "In", "values": ["us-east-1b"]}]
            }}]
        }}});
        create_pending_pod(
            &cluster,
            "likes-b",
            json!({}),
            pod_spec("1", "1Gi", prefers_b),
        );
        // The default policy (Respect) narrows the NodeClaim to the preferred zone.
        let respected = one_solve(&cluster, &cloud);
        let zone_of = |reqs: &[kerf::api::NodeSelectorRequirementWithMinValues]| {
            reqs.iter()
                .filter(|r| r.key == labels::ZONE)
                .flat_map(|r| r.values.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            zone_of(&respected.new_node_claims[0].requirements),
            ["us-east-1b"]
        );

        let daemon = start_flagged_provisioner(&h, cloud, &["--preference-policy", "Ignore"]).await;
        let mut rounds = daemon.rounds.clone();
        let round = round_where(&mut rounds, "the pod", |r| !r.nodeclaims.is_empty()).await;
        let claims = nodeclaims(&h.client).await;
        assert_eq!(claims.len(), 1, "{round:?}");
        assert_eq!(
            requirement_values(&claims[0], labels::ZONE),
            ["us-east-1a", "us-east-1b"],
            "the preference is ignored: {:?}",
            claims[0].requirements()
        );
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn min_values_best_effort_launches_relaxed_and_says_so() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        // Three instance types wanted, two exist: Strict would leave the pod pending.
        create_nodepool(
            &cluster,
            nodepool_with(
                "relaxed",
                json!({"spec": {"template": {"spec": {"requirements": [
                    {"key": labels::INSTANCE_TYPE, "operator": "In",
                        "values": ["m5.large", "m5.xlarge", "no-such.type"], "minValues": 3},
                ]}}}}),
            ),
        );
        let (provider, cloud) = simulated_cloud();
        create_pending_pod(&cluster, "web", json!({}), pod_spec("1", "1Gi", json!({})));
        let strict = one_solve(&cluster, &cloud);
        assert!(strict.new_node_claims.is_empty(), "{strict:?}");
        assert_eq!(strict.errors.len(), 1, "{strict:?}");

        let daemon =
            start_flagged_provisioner(&h, cloud, &["--min-values-policy", "BestEffort"]).await;
        let mut rounds = daemon.rounds.clone();
        round_where(&mut rounds, "the pod", |r| !r.nodeclaims.is_empty()).await;
        let claims = nodeclaims(&h.client).await;
        assert_eq!(claims.len(), 1);
        let claim = &claims[0];
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get(labels::NODECLAIM_MIN_VALUES_RELAXED)
                .map(String::as_str),
            Some("true")
        );
        let instance_types = claim
            .requirements()
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .cloned()
            .expect("an instance-type requirement");
        assert_eq!(instance_types.values, ["m5.large", "m5.xlarge"]);
        assert_eq!(instance_types.min_values, Some(2), "lowered to what exists");
        let state = daemon.state.clone();
        let key = kerf_actors::state::ObjectKey::new(None, claim.name());
        eventually("the relaxed NodeClaim launches", || {
            state
                .nodeclaims
                .get(&key)
                .is_some_and(|c| c.provider_id().is_some())
        })
        .await;
        assert_eq!(provider.ec2().instances().len(), 1);
        let (_, metrics) = http_get(daemon.metrics_addr, "/metrics").await;
        let created = metrics
            .lines()
            .find(|l| {
                l.starts_with("karpenter_nodeclaims_created_total{")
                    && l.contains("nodepool=\"relaxed\"")
            })
            .unwrap_or_else(|| panic!("counted:\n{metrics}"));
        assert!(created.contains("min_values_relaxed=\"true\""), "{created}");
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn pod_level_resources_size_the_node() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(
            &cluster,
            nodepool_with(
                "default",
                json!({"spec": {"template": {"spec": {"requirements": [
                    {"key": labels::INSTANCE_FAMILY, "operator": "In", "values": ["m5"]},
                ]}}}}),
            ),
        );
        let (provider, cloud) = simulated_cloud();
        let daemon = start_provisioner(&h, cloud).await;
        let _simulators = node_simulators(&h, provider.clone());
        // The containers ask for 200m; the pod as a whole for 6 CPUs (Kubernetes 1.32+).
        let spec = pod_spec(
            "100m",
            "128Mi",
            json!({
                "containers": [
                    {"name": "app", "image": "app", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
                    {"name": "side", "image": "side", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
                ],
                "resources": {"requests": {"cpu": "6", "memory": "4Gi"}}
            }),
        );
        create_pod_with(&cluster, "big", json!({}), spec);
        mark_unschedulable(&cluster, "big");
        let mut rounds = daemon.rounds.clone();
        round_where(&mut rounds, "the pod", |r| !r.nodeclaims.is_empty()).await;
        let claims = nodeclaims(&h.client).await;
        assert_eq!(claims.len(), 1);
        let requests = claims[0].resource_requests().cloned().unwrap_or_default();
        let cpu = kerf::resources::Quantity::parse(&requests["cpu"].0).expect("cpu");
        assert!(cpu.milli_value() >= 6000, "sized by the pod: {requests:?}");
        // The smallest m5 with 6 allocatable CPUs is an m5.2xlarge (8 vCPUs); the simulated
        // kube-scheduler counts the pod the same way and binds it there.
        eventually("the pod is bound", || {
            cluster
                .get("v1", "pods", Some("default"), "big")
                .is_ok_and(|p| p["spec"]["nodeName"].is_string())
        })
        .await;
        let pod = cluster
            .get("v1", "pods", Some("default"), "big")
            .expect("pod");
        let node = cluster
            .get(
                "v1",
                "nodes",
                None,
                pod["spec"]["nodeName"].as_str().expect("bound"),
            )
            .expect("node");
        let instance_type = node["metadata"]["labels"][labels::INSTANCE_TYPE]
            .as_str()
            .expect("labelled");
        assert_eq!(instance_type, "m5.2xlarge", "{node:#}");
        daemon.stop().await;
        h.stop().await;
    });
}
