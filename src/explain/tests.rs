//! The answers on small clusters built from JSON objects (what the command lists): each
//! NodePool's verdict and its troubleshooting entry, the controller's cache and nominations
//! changing the answers, a drain held by a PodDisruptionBudget, budget windows.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::controller::{ControllerState, Nomination, UnavailableOffering};
use super::*;
use crate::cluster::inventory;
use crate::manifest;
use crate::troubleshooting::documented;

const NOW: &str = "2026-01-01T00:00:00Z";
const YESTERDAY: &str = "2025-12-31T00:00:00Z";

fn now() -> Timestamp {
    NOW.parse().expect("a time")
}

fn live(objects: &[Value], state: Option<ControllerState>) -> Live {
    let text = json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string();
    let parsed = manifest::parse_all(&text, "test").expect("parses");
    Live {
        inventory: inventory::inventory(&parsed).expect("valid objects"),
        region: "us-east-1".into(),
        settings: ControllerSettings::default(),
        disruption: crate::disruption::Options {
            now: now(),
            feature_gates: crate::feature_gates::FeatureGates::default(),
        },
        controller: Reach {
            address: "http://controller/explain".into(),
            error: state.is_none().then(|| "connection refused".into()),
            state,
        },
        disruption_limit: None,
    }
}

fn pool(name: &str, class: &str, spec_extra: Value, template_extra: Value) -> Value {
    let mut template = json!({
        "requirements": [
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}
        ],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class}
    });
    merge(&mut template, template_extra);
    let mut spec = json!({"template": {"spec": template}});
    merge(&mut spec, spec_extra);
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec})
}

fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(into), Value::Object(extra)) = (into, extra) {
        into.extend(extra);
    }
}

fn pod(name: &str, cpu: &str, spec_extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "app", "image": "pause",
        "resources": {"requests": {"cpu": cpu}}}]});
    merge(&mut spec, spec_extra);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name},
            "creationTimestamp": YESTERDAY},
        "spec": spec})
}

fn class_not_ready(name: &str) -> Value {
    json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
        "spec": {"role": "KarpenterNodeRole-c", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "nowhere"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}]},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NotReady",
            "message": "SubnetsReady=False", "lastTransitionTime": YESTERDAY}]}})
}

fn verdict<'a>(explanation: &'a PodExplanation, pool: &str) -> &'a Verdict {
    &explanation
        .node_pools
        .iter()
        .find(|v| v.node_pool == pool)
        .expect("a verdict per pool")
        .verdict
}

#[test]
fn each_nodepool_says_what_it_would_launch_or_its_own_first_refusal() {
    let taint =
        json!({"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]});
    let objects = [
        pool("default", "default", json!({}), json!({})),
        pool("gpu", "default", json!({}), taint),
        pool("broken", "broken", json!({}), json!({})),
        class_not_ready("broken"),
        pod("web", "1", json!({})),
    ];
    let explanation = explain_pod(&live(&objects, None), "default/web", None).expect("explained");
    assert!(matches!(explanation.state, PodState::Pending { .. }));
    let Verdict::Launch {
        capacity_type,
        candidates,
        instance_types,
        ..
    } = verdict(&explanation, "default")
    else {
        panic!("{explanation:?}");
    };
    assert_eq!(capacity_type, "spot");
    assert!(*candidates >= instance_types.len() && !instance_types.is_empty());
    let Verdict::Cannot { cause, reason, .. } = verdict(&explanation, "gpu") else {
        panic!("{explanation:?}");
    };
    assert_eq!(*cause, pod::Cause::Taint);
    assert!(
        reason.contains("taint=nvidia.com/gpu=true:NoSchedule"),
        "{reason}"
    );
    assert!(
        !reason.contains("daemonset overhead"),
        "the prefix is cut: {reason}"
    );
    let Verdict::Cannot { cause, reason, .. } = verdict(&explanation, "broken") else {
        panic!("{explanation:?}");
    };
    assert_eq!(*cause, pod::Cause::NodeClassNotReady);
    assert!(
        reason.contains(documented("nodeclass-not-ready")),
        "{reason}"
    );
    assert!(reason.contains("SubnetsReady=False"), "{reason}");
    // Not reached: said so, with the address.
    let table = explanation.to_table();
    assert!(
        table.contains("controller at http://controller/explain: NOT reached (connection refused)"),
        "{table}"
    );
}

#[test]
fn the_entry_follows_the_pool_the_pod_meant_not_the_first_refusal() {
    // "aaa" sorts first and its class is not Ready; the pod is meant for "zones", which
    // refuses it for its spread. The entry is the spread's.
    let zones = json!({"requirements": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}
    ]});
    let spread = json!({
        "nodeSelector": {"karpenter.sh/nodepool": "zones"},
        "topologySpreadConstraints": [{"maxSkew": 1, "minDomains": 3,
            "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}}}]
    });
    let mut first = pod("spread-0", "1", spread.clone());
    let mut second = pod("spread-1", "1", spread);
    for p in [&mut first, &mut second] {
        p["metadata"]["labels"]["app"] = json!("spread");
    }
    let objects = [
        pool("aaa", "broken", json!({}), json!({})),
        class_not_ready("broken"),
        pool("zones", "default", json!({}), zones),
        first,
        second,
    ];
    let live = live(&objects, None);
    let refused = ["default/spread-0", "default/spread-1"]
        .into_iter()
        .map(|key| explain_pod(&live, key, None).expect("explained"))
        .find(|e| matches!(verdict(e, "zones"), Verdict::Cannot { .. }))
        .expect("one spread pod waits for a second zone");
    assert!(matches!(
        verdict(&refused, "aaa"),
        Verdict::Cannot {
            cause: pod::Cause::NodeClassNotReady,
            ..
        }
    ));
    assert_eq!(
        refused.troubleshooting.as_ref().map(|e| e.id.as_str()),
        Some("spread-zones"),
        "{refused:?}"
    );
}

#[test]
fn the_controllers_cache_moves_the_launch_and_is_named_with_its_expiry() {
    let objects = [
        pool("default", "default", json!({}), json!({})),
        pod("web", "1", json!({})),
    ];
    let before = explain_pod(&live(&objects, None), "default/web", None).expect("explained");
    let Verdict::Launch {
        instance_type,
        zone,
        capacity_type,
        ..
    } = verdict(&before, "default").clone()
    else {
        panic!("{before:?}");
    };
    let expires: Timestamp = "2026-01-01T00:03:00Z".parse().expect("a time");
    let state = ControllerState {
        leader: true,
        synced: true,
        unavailable_offerings: vec![UnavailableOffering {
            instance_type: instance_type.clone(),
            zone: zone.clone(),
            capacity_type: capacity_type.clone(),
            expires,
        }],
        ..ControllerState::default()
    };
    let after = explain_pod(&live(&objects, Some(state)), "default/web", None).expect("explained");
    let Verdict::Launch {
        instance_type: now_type,
        zone: now_zone,
        avoided,
        ..
    } = verdict(&after, "default")
    else {
        panic!("{after:?}");
    };
    assert_ne!((now_type, now_zone), (&instance_type, &zone));
    assert_eq!(avoided.len(), 1);
    assert_eq!(avoided[0].expires, expires);
    assert_eq!(
        after.troubleshooting.as_ref().map(|e| e.id.as_str()),
        Some("spot-ice")
    );
    assert!(
        after
            .to_table()
            .contains("unavailable until 2026-01-01T00:03:00Z")
    );
}

fn managed_node(name: &str, pool: &str, extra_meta: Value) -> Value {
    let mut metadata = json!({
        "name": name, "creationTimestamp": YESTERDAY,
        "labels": {
            "karpenter.sh/nodepool": pool, "karpenter.sh/initialized": "true",
            "node.kubernetes.io/instance-type": "m5.large", "karpenter.sh/capacity-type": "on-demand",
            "topology.kubernetes.io/zone": "us-east-1a", "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux", "kubernetes.io/hostname": name
        }
    });
    merge(&mut metadata, extra_meta);
    let allocatable = json!({"cpu": "1930m", "memory": "7Gi", "pods": "29"});
    json!({"apiVersion": "v1", "kind": "Node", "metadata": metadata,
        "status": {"allocatable": allocatable, "capacity": allocatable}})
}

fn claim(name: &str, node: &str, pool: &str, extra_meta: Value, extra_spec: Value) -> Value {
    let mut metadata = json!({"name": name, "creationTimestamp": YESTERDAY,
        "labels": {"karpenter.sh/nodepool": pool}});
    merge(&mut metadata, extra_meta);
    let mut spec = json!({
        "requirements": [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    });
    merge(&mut spec, extra_spec);
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": metadata, "spec": spec,
        "status": {"nodeName": node, "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized",
                "message": "", "lastTransitionTime": YESTERDAY}]}})
}

fn bound(name: &str, node: &str) -> Value {
    let mut pod = pod(name, "100m", json!({"nodeName": node}));
    pod["status"] = json!({"phase": "Running"});
    pod
}

#[test]
fn an_empty_node_goes_unless_the_controller_nominated_it() {
    let consolidate_now = json!({"disruption": {"consolidateAfter": "0s"}});
    let objects = [
        pool("default", "default", consolidate_now, json!({})),
        managed_node("n1", "default", json!({})),
        claim("default-a", "n1", "default", json!({}), json!({})),
    ];
    let free = explain_node(&live(&objects, None), "n1").expect("explained");
    assert!(
        matches!(free.verdict, NodeVerdict::Disrupt { order: 1, .. }),
        "{free:?}"
    );
    assert_eq!(free.node_claim.as_deref(), Some("default-a"));
    let state = ControllerState {
        leader: true,
        nominations: vec![Nomination {
            name: "default-a".into(),
            existing_node: false,
            pods: vec!["default/web".into()],
        }],
        ..ControllerState::default()
    };
    // Asked by its NodeClaim's name.
    let held = explain_node(&live(&objects, Some(state)), "default-a").expect("explained");
    let NodeVerdict::Blocked { reason } = &held.verdict else {
        panic!("{held:?}");
    };
    assert!(reason.contains(documented("nominated-node")), "{reason}");
    assert_eq!(
        held.troubleshooting.as_ref().map(|e| e.id.as_str()),
        Some("nominated-node")
    );
}

#[test]
fn a_deleting_node_tells_its_drain_and_a_drifted_one_the_fields() {
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "held", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "held"}}}});
    let deleting = json!({"deletionTimestamp": "2025-12-31T23:50:00Z", "finalizers": ["karpenter.sh/termination"]});
    let drifted = json!({"conditions": [{"type": "Drifted", "status": "True", "reason": "NodePoolDrifted",
        "message": "", "lastTransitionTime": YESTERDAY}]});
    let mut drifted_claim = claim(
        "default-b",
        "n2",
        "default",
        json!({}),
        json!({"taints": [{"key": "old", "effect": "NoSchedule"}]}),
    );
    drifted_claim["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .extend(
            drifted["conditions"]
                .as_array()
                .expect("one")
                .iter()
                .cloned(),
        );
    let objects = [
        pool("default", "default", json!({}), json!({})),
        managed_node("n1", "default", json!({})),
        claim(
            "default-a",
            "n1",
            "default",
            deleting,
            json!({"terminationGracePeriod": "1h"}),
        ),
        bound("held", "n1"),
        pdb,
        managed_node("n2", "default", json!({})),
        drifted_claim,
    ];
    let live = live(&objects, None);
    let gone = explain_node(&live, "n1").expect("explained");
    assert_eq!(gone.verdict, NodeVerdict::Deleting);
    let drain = gone.drain.as_ref().expect("a drain");
    assert_eq!(drain.pods_left, ["default/held"]);
    assert!(drain.blocked_by[0].contains("PodDisruptionBudget default/held"));
    assert_eq!(
        drain.forced_at,
        Some("2026-01-01T00:50:00Z".parse().expect("a time"))
    );
    assert_eq!(
        gone.troubleshooting.as_ref().map(|e| e.id.as_str()),
        Some("pdb-eviction")
    );
    let drifted = explain_node(&live, "n2").expect("explained");
    let drift = drifted.drift.as_ref().expect("drifted");
    assert_eq!(drift.reason, "NodePoolDrifted");
    assert_eq!(drift.fields, ["spec.taints"]);
}

#[test]
fn budget_windows_say_until_when_they_are_open_and_when_they_open() {
    // 2026-01-01 is a Thursday: at 00:00 the business-hours window is closed until 09:00.
    let budgets = json!({"disruption": {"consolidateAfter": "1m", "budgets": [
        {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"},
        {"nodes": "0", "schedule": "@daily", "duration": "1h"},
        {"nodes": "10%"}
    ]}, "limits": {"cpu": "10"}});
    let objects = [
        pool("default", "default", budgets, json!({})),
        managed_node("n1", "default", json!({})),
        claim("default-a", "n1", "default", json!({}), json!({})),
    ];
    let explanation = explain_nodepool(&live(&objects, None), "default").expect("explained");
    let windows = &explanation.windows;
    assert_eq!(windows.len(), 2);
    assert!(!windows[0].open);
    assert_eq!(
        windows[0].until,
        Some("2026-01-01T09:00:00Z".parse().expect("a time"))
    );
    assert!(windows[1].open);
    assert_eq!(
        windows[1].until,
        Some("2026-01-01T01:00:00Z".parse().expect("a time"))
    );
    assert!(
        explanation.allowed.iter().all(|a| a.nodes == 0),
        "{explanation:?}"
    );
    assert_eq!(explanation.nodes, 1);
    assert_eq!(explanation.remaining["cpu"], "8");
    assert_eq!(go_duration(8 * 3600), "8h0m0s");
}

#[test]
fn a_node_not_initialized_says_what_it_waits_for_and_a_pinned_pod_keeps_its_node() {
    let consolidate_now = json!({"disruption": {"consolidateAfter": "0s"}});
    let mut waiting = claim("default-w", "n3", "default", json!({}), json!({}));
    waiting["status"]["conditions"] = json!([
        {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": YESTERDAY},
        {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": YESTERDAY},
        {"type": "Initialized", "status": "Unknown", "reason": "ResourceNotRegistered",
            "message": "Resource \"nvidia.com/gpu\" was requested but not registered", "lastTransitionTime": YESTERDAY}
    ]);
    let mut n3 = managed_node("n3", "default", json!({}));
    n3["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove("karpenter.sh/initialized");
    let pinned = {
        let mut pod = pod(
            "pinned",
            "100m",
            json!({"nodeName": "n1",
            "nodeSelector": {"kubernetes.io/hostname": "n1"}}),
        );
        pod["status"] = json!({"phase": "Running"});
        pod
    };
    let objects = [
        pool("default", "default", consolidate_now, json!({})),
        managed_node("n1", "default", json!({})),
        claim("default-a", "n1", "default", json!({}), json!({})),
        pinned,
        n3,
        waiting,
    ];
    let live = live(&objects, None);
    let booting = explain_node(&live, "n3").expect("explained");
    assert_eq!(booting.waiting.len(), 1, "{booting:?}");
    assert_eq!(booting.waiting[0].condition, "Initialized");
    assert_eq!(
        booting.troubleshooting.as_ref().map(|e| e.id.as_str()),
        Some("not-initialized")
    );
    let kept = explain_node(&live, "n1").expect("explained");
    let NodeVerdict::Blocked { reason } = &kept.verdict else {
        panic!("{kept:?}");
    };
    assert!(
        reason.contains(documented("consolidation-constraints")),
        "{reason}"
    );
    assert_eq!(
        kept.troubleshooting.as_ref().map(|e| e.id.as_str()),
        Some("consolidation-constraints")
    );
}

#[test]
fn a_nodepool_carries_the_warnings_about_it_and_its_class_only() {
    let mut dense = class_not_ready("dense");
    dense["spec"]["kubelet"] = json!({"maxPods": 500});
    let mut plain = class_not_ready("plain");
    plain["spec"]["kubelet"] = json!({"maxPods": 300});
    let objects = [
        dense,
        plain,
        pool("dense", "dense", json!({}), json!({})),
        pool("dense-b", "plain", json!({}), json!({})),
    ];
    let live = live(&objects, None);
    let warned = explain_nodepool(&live, "dense").expect("explained");
    assert_eq!(warned.warnings.len(), 1, "{:?}", warned.warnings);
    assert!(
        warned.warnings[0]
            .starts_with("NodePool/dense: EC2NodeClass/dense sets kubelet maxPods=500"),
        "{:?}",
        warned.warnings
    );
    assert!(
        warned.to_table().contains("WARNING "),
        "{}",
        warned.to_table()
    );
    // Named alike, warned about on its own: neither pool gets the other's warning.
    let other = explain_nodepool(&live, "dense-b").expect("explained");
    assert_eq!(other.warnings.len(), 1, "{:?}", other.warnings);
    assert!(
        other.warnings[0]
            .starts_with("NodePool/dense-b: EC2NodeClass/plain sets kubelet maxPods=300"),
        "{:?}",
        other.warnings
    );
}

#[test]
fn a_bounded_decision_names_the_nodes_it_did_not_reach() {
    let consolidate_now = json!({"disruption": {"consolidateAfter": "0s"}});
    let objects = [
        pool("default", "default", consolidate_now, json!({})),
        managed_node("n1", "default", json!({})),
        claim("default-a", "n1", "default", json!({}), json!({})),
    ];
    let whole = live(&objects, None);
    let verdict = |live: &Live| {
        let explanation = explain_nodepool(live, "default").expect("explained");
        explanation.disruption[0].verdict.clone()
    };
    assert_eq!(verdict(&whole), "command #1 of the pass: emptiness");
    let no_time = Live {
        disruption_limit: Some(std::time::Duration::ZERO),
        ..whole
    };
    assert_eq!(
        verdict(&no_time),
        "not reached: the decision stopped at its 0 s limit"
    );
}
