//! Existing nodes, in-flight capacity and volume topology.
use super::*;
use crate::labels::{HOSTNAME, ZONE};
use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement as K8sReq, NodeSelectorTerm, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeSpec,
    TopologySelectorLabelRequirement, TopologySelectorTerm, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn node(name: &str, cpu: &str, initialized: bool) -> ExistingNode {
    ExistingNode {
        name: name.into(),
        labels: [
            (ZONE.to_string(), "test-zone-1".to_string()),
            (HOSTNAME.to_string(), name.to_string()),
        ]
        .into(),
        allocatable: resources(&[("cpu", cpu), ("memory", "16Gi"), ("pods", "110")]),
        initialized,
        ..Default::default()
    }
}

fn input_with(
    pods: Vec<k8s_openapi::api::core::v1::Pod>,
    nodes: Vec<ExistingNode>,
) -> SchedulingInput {
    SchedulingInput {
        pods: shared(pods),
        existing_nodes: nodes,
        node_pools: vec![node_pool("default", fake_instance_types(8))],
        ..Default::default()
    }
}

#[test]
fn existing_nodes_are_used_before_new_capacity_initialized_first() {
    let pods = pod("p").cpu("1").replicas("p", 3);
    let r = run(&input_with(
        pods,
        vec![node("a-uninit", "2", false), node("b-ready", "2", true)],
    ));
    assert!(r.new_node_claims.is_empty());
    let names: Vec<&str> = r.existing_nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["b-ready", "a-uninit"]);
    assert_eq!(r.existing_nodes[0].pods.len(), 2);
    assert_eq!(r.existing_nodes[1].pods.len(), 1);
}

#[test]
fn a_zone_a_pods_spread_rules_out_is_skipped_for_that_pod_only() {
    let web = || {
        pod("web").cpu("100m").labels(&[("app", "web")]).spread(
            ZONE,
            1,
            "DoNotSchedule",
            &[("app", "web")],
        )
    };
    let in_zone = |name: &str, zone: &str, placed: usize| {
        let mut n = node(name, "4", true);
        n.labels.insert(ZONE.into(), zone.into());
        n.pods = shared(web().replicas(&format!("{name}-web"), placed));
        n
    };
    let nodes = vec![
        in_zone("a1", "test-zone-1", 2),
        in_zone("a2", "test-zone-1", 2),
        in_zone("b", "test-zone-2", 0),
        in_zone("c", "test-zone-3", 0),
        in_zone("d", "test-zone-1", 2),
    ];
    let r = run(&input_with(web().replicas("new", 4), nodes));
    assert!(r.new_node_claims.is_empty(), "{:?}", r.new_node_claims);
    let placed: Vec<(&str, usize)> = r
        .existing_nodes
        .iter()
        .map(|n| (n.name.as_str(), n.pods.len()))
        .collect();
    // Each pod in turn goes to the emptiest zone: the crowded zone is ruled out for all of
    // them, test-zone-2 only for the pods that find it ahead of test-zone-3.
    assert_eq!(placed, vec![("b", 2), ("c", 2)]);
}

#[test]
fn bound_pods_and_pending_daemonsets_use_existing_room() {
    let mut n = node("n", "3", true);
    n.pods = vec![pod("running").cpu("1").lean()];
    let ds = pod("agent").cpu("1").build();
    let pods = pod("p").cpu("1").replicas("p", 2);
    let r = run(&SchedulingInput {
        daemonsets: vec![ds],
        ..input_with(pods, vec![n])
    });
    // 3 CPUs minus the running pod minus the agent leaves room for one.
    assert_eq!(r.existing_nodes[0].pods.len(), 1);
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn existing_node_checks_taints_ports_and_labels() {
    let mut tainted = node("tainted", "8", true);
    tainted.taints = vec![taint("dedicated", Some("db"), "NoSchedule")];
    let mut busy_port = node("busy-port", "8", true);
    busy_port.pods = vec![pod("web").host_port(8080).lean()];
    let pods = vec![
        pod("p")
            .cpu("1")
            .host_port(8080)
            .node_selector(&[(ZONE, "test-zone-1")])
            .build(),
    ];
    let r = run(&input_with(pods, vec![tainted, busy_port]));
    assert!(r.existing_nodes.is_empty());
    assert_eq!(r.new_node_claims.len(), 1);
    let pods = vec![pod("q").cpu("1").node_selector(&[("team", "a")]).build()];
    let mut labelled = node("labelled", "8", true);
    labelled.labels.insert("team".into(), "a".into());
    let r = run(&input_with(pods, vec![node("plain", "8", true), labelled]));
    assert_eq!(r.existing_nodes[0].name, "labelled");
}

#[test]
fn host_ports_conflict_within_a_nodeclaim() {
    let pods = pod("p").cpu("100m").host_port(80).replicas("p", 2);
    let r = run(&single_pool(pods, fake_instance_types(4)));
    assert_eq!(pods_per_claim(&r), vec![1, 1]);
}

fn pvc(name: &str, volume: Option<&str>, class: Option<&str>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: volume.map(Into::into),
            storage_class_name: class.map(Into::into),
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn bound_volumes_pin_pods_to_their_zone() {
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-1".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![K8sReq {
                            key: ZONE.into(),
                            operator: "In".into(),
                            values: Some(vec!["test-zone-3".into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    let volumes = VolumeTopology {
        pvcs: vec![pvc("data", Some("pv-1"), None)],
        pvs: vec![pv],
        storage_classes: vec![],
    };
    let r = run(&SchedulingInput {
        volumes,
        ..single_pool(
            vec![pod("db").cpu("1").pvc("data").build()],
            fake_instance_types(4),
        )
    });
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(zone_counts(&r), [("test-zone-3".to_string(), 1)].into());
}

#[test]
fn storage_class_topologies_constrain_unbound_claims() {
    let sc = StorageClass {
        metadata: ObjectMeta {
            name: Some("zonal".into()),
            ..Default::default()
        },
        provisioner: "ebs.csi.aws.com".into(),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        allowed_topologies: Some(vec![TopologySelectorTerm {
            match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                key: ZONE.into(),
                values: vec!["test-zone-2".into()],
            }]),
        }]),
        ..Default::default()
    };
    let volumes = VolumeTopology {
        pvcs: vec![pvc("data", None, Some("zonal"))],
        pvs: vec![],
        storage_classes: vec![sc],
    };
    let r = run(&SchedulingInput {
        volumes,
        ..single_pool(
            vec![pod("db").cpu("1").pvc("data").build()],
            fake_instance_types(4),
        )
    });
    assert_eq!(zone_counts(&r), [("test-zone-2".to_string(), 1)].into());
}

#[test]
fn missing_claims_fail_the_pod_with_a_reason() {
    let r = run(&single_pool(
        vec![pod("db").pvc("nope").build()],
        fake_instance_types(4),
    ));
    assert_eq!(
        r.errors.values().next().map(String::as_str),
        Some(r#"persistentvolumeclaim "default/nope" not found"#)
    );
}

#[test]
fn invalid_nodepool_requirements_are_input_errors() {
    let mut np = node_pool("bad", fake_instance_types(1));
    np.requirements.push(requirement(
        crate::labels::INSTANCE_CPU,
        Operator::Gt,
        &["four"],
    ));
    let err = solve(&SchedulingInput {
        node_pools: vec![np],
        ..Default::default()
    })
    .expect_err("invalid");
    assert!(
        err.to_string().starts_with(
            r#"nodepool "bad": spec.template.spec.requirements[karpenter.k8s.aws/instance-cpu]"#
        ),
        "{err}"
    );
}

#[test]
fn invalid_daemonsets_are_input_errors() {
    let ds = pod("agent")
        .required_term(&[(ZONE, "Gt", &["abc"])])
        .build();
    let err = solve(&SchedulingInput {
        daemonsets: vec![ds],
        ..Default::default()
    })
    .expect_err("invalid");
    assert!(
        err.to_string()
            .starts_with(r#"daemonset "default/agent": node selector requirement"#),
        "{err}"
    );
}

/// Claims `data-0` (bound to an EBS CSI volume) and `data-1`, `data-2` (unbound, EBS CSI
/// storage class), and `scratch` (a storage class of another driver).
fn attachable_volumes() -> VolumeTopology {
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some("pv-0".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            csi: Some(k8s_openapi::api::core::v1::CSIPersistentVolumeSource {
                driver: "ebs.csi.aws.com".into(),
                volume_handle: "vol-0".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    let class = |name: &str, provisioner: &str| StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        provisioner: provisioner.into(),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..Default::default()
    };
    VolumeTopology {
        pvcs: vec![
            pvc("data-0", Some("pv-0"), None),
            pvc("data-1", None, Some("gp3")),
            pvc("data-2", None, Some("gp3")),
            pvc("scratch", None, Some("local")),
        ],
        pvs: vec![pv],
        storage_classes: vec![
            class("gp3", "ebs.csi.aws.com"),
            class("local", "local.csi.example.com"),
        ],
    }
}

/// A roomy node whose CSINode lets the EBS driver attach `limit` volumes, already holding a
/// pod with `data-0`.
fn node_attaching(limit: i64) -> ExistingNode {
    let mut n = node("n", "8", true);
    n.pods = vec![pod("db-0").cpu("1").pvc("data-0").lean()];
    n.volume_limits = [("ebs.csi.aws.com".to_string(), limit)].into();
    n
}

#[test]
fn a_node_at_its_volume_attach_limit_takes_no_pod_with_another_volume() {
    let pending = || {
        vec![
            pod("db-1").cpu("1").pvc("data-1").build(),
            pod("db-2").cpu("1").pvc("data-2").build(),
        ]
    };
    let placed_on_node = |limit: i64| {
        let r = run(&SchedulingInput {
            volumes: attachable_volumes(),
            ..input_with(pending(), vec![node_attaching(limit)])
        });
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let on_node: Vec<String> = r
            .existing_nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(|p| p.name.clone()))
            .collect();
        let launched: usize = r.new_node_claims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(on_node.len() + launched, 2, "every pod placed");
        on_node
    };
    // The node's one attachment is taken by data-0: both pods need new capacity.
    assert!(placed_on_node(1).is_empty());
    // Room for one more volume: the first pod takes it, the second launches.
    assert_eq!(placed_on_node(2).len(), 1);
    assert_eq!(placed_on_node(3).len(), 2);
}

#[test]
fn a_shared_volume_or_another_drivers_volume_does_not_count_against_the_limit() {
    let pods = vec![
        // data-0 is attached already: a second pod mounting it adds no attachment.
        pod("reader").cpu("1").pvc("data-0").build(),
        // Another driver, with no limit stated on the node.
        pod("cache").cpu("1").pvc("scratch").build(),
    ];
    let r = run(&SchedulingInput {
        volumes: attachable_volumes(),
        ..input_with(pods, vec![node_attaching(1)])
    });
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.new_node_claims.is_empty(), "{:?}", r.new_node_claims);
    assert_eq!(r.existing_nodes[0].pods.len(), 2);
}
