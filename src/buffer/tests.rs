use super::*;
use crate::api::CapacityBufferSpec;
use crate::scheduling::testing::{pod, resources};
use serde_json::json;

fn spec(value: serde_json::Value) -> CapacityBufferSpec {
    serde_json::from_value(value).expect("a valid spec")
}

#[test]
fn percentage_rounds_up_to_at_least_one() {
    assert_eq!(percentage_replicas(10, 20), 2);
    assert_eq!(percentage_replicas(10, 25), 3);
    assert_eq!(percentage_replicas(3, 1), 1);
    assert_eq!(percentage_replicas(0, 50), 0);
    assert_eq!(percentage_replicas(5, 0), 0);
}

#[test]
fn replicas_take_the_larger_of_count_and_percentage_capped_by_limits() {
    let one_cpu = resources(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "1")]);
    assert_eq!(replicas(&spec(json!({"replicas": 3})), &one_cpu, None), 3);
    assert_eq!(
        replicas(
            &spec(json!({"replicas": 3, "percentage": 50})),
            &one_cpu,
            Some(10)
        ),
        5
    );
    assert_eq!(
        replicas(
            &spec(json!({"replicas": 3, "limits": {"cpu": "2500m"}})),
            &one_cpu,
            None
        ),
        2
    );
    assert_eq!(
        replicas(
            &spec(json!({"limits": {"cpu": "8", "memory": "3Gi"}})),
            &one_cpu,
            None
        ),
        3,
        "limits alone: as many as fit, the tightest resource deciding"
    );
    assert_eq!(
        replicas(
            &spec(json!({"replicas": 4, "limits": {"example.com/x": "1"}})),
            &one_cpu,
            None
        ),
        4,
        "limits on a resource the pod does not request do not constrain"
    );
    assert_eq!(replicas(&spec(json!({})), &one_cpu, None), 0);
}

#[test]
fn virtual_pods_are_marked_named_after_their_buffer_and_lowest_priority() {
    let template_pod = pod("t")
        .cpu("1")
        .labels(&[("app", "web")])
        .pvc("data")
        .build();
    let template = PodTemplateSpec {
        metadata: Some(template_pod.metadata.clone()),
        spec: template_pod.spec.clone(),
    };
    let buffer = BufferRef {
        namespace: "shop",
        name: "headroom",
        uid: "u-1",
    };
    let pods = virtual_pods(&buffer, &template, 3);
    assert_eq!(pods.len(), 3);
    let names: Vec<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    assert_eq!(
        names,
        [
            "capacity-buffer-headroom-1",
            "capacity-buffer-headroom-2",
            "capacity-buffer-headroom-3"
        ]
    );
    for p in &pods {
        assert!(is_virtual(p));
        assert_eq!(buffer_of(p).as_deref(), Some("shop/headroom"));
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.priority, Some(VIRTUAL_POD_PRIORITY));
        assert!(
            spec.volumes
                .iter()
                .flatten()
                .all(|v| v.persistent_volume_claim.is_none())
        );
        assert_eq!(
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str),
            Some("web")
        );
        assert!(crate::pods::wants_capacity(p));
    }
    assert_eq!(
        pods[1].metadata.uid.as_deref(),
        Some("capacity-buffer/u-1-2")
    );
    assert!(is_virtual_uid(
        pods[1].metadata.uid.as_deref().unwrap_or_default()
    ));
    assert!(!is_virtual(&template_pod));
}

#[test]
fn placements_count_each_buffers_virtual_pods_by_where_they_went() {
    use crate::scheduling::{ExistingNodePlacement, PodRef, SchedulingResult};
    let virtual_ref =
        |name: &str| PodRef::new("shop", name, format!("{VIRTUAL_UID_PREFIX}u-{name}"));
    let mut result = SchedulingResult::default();
    result.existing_nodes.push(ExistingNodePlacement {
        name: "n1".to_owned(),
        pods: vec![
            virtual_ref("capacity-buffer-headroom-1"),
            PodRef::new("shop", "capacity-buffer-lookalike-1", "0b6e-real"),
        ],
    });
    result.errors.insert(
        virtual_ref("capacity-buffer-headroom-2"),
        "no room".to_owned(),
    );
    result.errors.insert(
        virtual_ref("capacity-buffer-my-buffer-3"),
        "no room".to_owned(),
    );
    let placed = placements(&result);
    assert_eq!(
        placed["shop/headroom"],
        Placed {
            existing: 1,
            new_capacity: 0,
            failed: 1
        }
    );
    assert_eq!(placed["shop/my-buffer"].failed, 1, "names with dashes");
    assert_eq!(placed.len(), 2, "a real pod is no buffer's: {placed:?}");
}
