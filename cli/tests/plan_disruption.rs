//! `kerf plan --disruption` end to end: the binary reads a cluster dump (Nodes, pods,
//! NodeClaims, NodePools, PDBs) and prints the disruption commands, the nodes it keeps with
//! their reasons, the budgets and the fleet summary — as JSON (the contract) and as a table.
//! Fixtures are built from one builder per kind: defaults plus overrides.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// The time every test decides at.
const NOW: &str = "2026-01-01T00:00:00Z";
const YESTERDAY: &str = "2025-12-31T00:00:00Z";

fn kerf(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kerf"));
    command
        .args(args)
        .env_remove("FEATURE_GATES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("kerf starts");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())
        .expect("stdin written");
    child.wait_with_output().expect("kerf finishes")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `kerf plan --disruption --now NOW -o json -f - EXTRA...`, insisting on success; the
/// `disruption` object.
fn disruption(objects: &[Value], extra: &[&str], env: &[(&str, &str)]) -> Value {
    let mut args = vec![
        "plan",
        "--disruption",
        "--now",
        NOW,
        "-o",
        "json",
        "-f",
        "-",
    ];
    args.extend_from_slice(extra);
    let output = kerf(&args, &list(objects), env);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let value: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    value["disruption"].clone()
}

fn list(objects: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()
}

// Builders: defaults plus overrides.

fn node_pool(name: &str, disruption: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {
            "disruption": disruption,
            "template": {"spec": {
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }}
        }
    })
}

/// Allocatable of the instance types the tests use.
fn allocatable(instance_type: &str) -> Value {
    match instance_type {
        "m5.large" => json!({"cpu": "1930m", "memory": "7Gi", "pods": "29"}),
        "m5.4xlarge" => json!({"cpu": "15890m", "memory": "57Gi", "pods": "234"}),
        other => panic!("no fixture allocatable for {other}"),
    }
}

struct NodeSpec<'a> {
    name: &'a str,
    instance_type: &'a str,
    capacity_type: &'a str,
    created: &'a str,
}

fn node(spec: NodeSpec) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": spec.name,
            "creationTimestamp": spec.created,
            "labels": {
                "karpenter.sh/nodepool": "default",
                "karpenter.sh/initialized": "true",
                "node.kubernetes.io/instance-type": spec.instance_type,
                "karpenter.sh/capacity-type": spec.capacity_type,
                "topology.kubernetes.io/zone": "us-east-1a",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": spec.name
            }
        },
        "status": {"allocatable": allocatable(spec.instance_type), "capacity": allocatable(spec.instance_type)}
    })
}

fn big(name: &str) -> NodeSpec<'_> {
    NodeSpec {
        name,
        instance_type: "m5.4xlarge",
        capacity_type: "on-demand",
        created: YESTERDAY,
    }
}

fn small(name: &str) -> NodeSpec<'_> {
    NodeSpec {
        instance_type: "m5.large",
        ..big(name)
    }
}

/// A running pod of 250m CPU and 256Mi on `node`, labelled `app: <node>`.
fn pod(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": node},
                     "creationTimestamp": YESTERDAY},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app",
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]},
        "status": {"phase": "Running"}
    })
}

fn with_annotation(mut object: Value, key: &str, value: &str) -> Value {
    object["metadata"]["annotations"][key] = json!(value);
    object
}

fn pdb(name: &str, app: &str, allowed: i64) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    })
}

fn node_claim(name: &str, node: &str, last_pod_event: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "creationTimestamp": YESTERDAY, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.4xlarge"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        },
        "status": {"nodeName": node, "lastPodEventTime": last_pod_event,
                   "allocatable": allocatable("m5.4xlarge"), "capacity": allocatable("m5.4xlarge")}
    })
}

fn unlimited() -> Value {
    json!({"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]})
}

fn reason_of<'a>(report: &'a Value, node: &str) -> &'a str {
    report["blocked"]
        .as_array()
        .expect("blocked list")
        .iter()
        .find(|b| b["node"] == node)
        .and_then(|b| b["reason"].as_str())
        .unwrap_or_else(|| panic!("{node} not blocked: {report:#}"))
}

fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// A cluster exercising emptiness, consolidation and a blocking pod.
fn mixed_cluster() -> Vec<Value> {
    vec![
        node_pool("default", unlimited()),
        node(small("idle")),
        node(big("busy")),
        pod("busy-1", "busy"),
        pod("busy-2", "busy"),
        node(big("pinned")),
        with_annotation(
            pod("pinned-1", "pinned"),
            "karpenter.sh/do-not-disrupt",
            "true",
        ),
    ]
}

#[test]
fn json_lists_commands_in_loop_order_with_blocked_nodes_budgets_and_summary() {
    let report = disruption(&mixed_cluster(), &[], &[]);
    assert_eq!(keys(&report), ["commands", "blocked", "budgets", "summary"]);
    let commands = report["commands"].as_array().expect("commands");
    assert_eq!(
        keys(&commands[0]),
        [
            "method",
            "reason",
            "decision",
            "nodes",
            "replacements",
            "hourlySavings"
        ]
    );
    assert_eq!(commands[0]["method"], "emptiness");
    assert_eq!(commands[0]["reason"], "Empty");
    assert_eq!(commands[0]["decision"], "delete");
    assert_eq!(commands[0]["nodes"], json!(["idle"]));
    // busy's two pods fit on pinned, which stays: busy is deleted, not replaced.
    assert_eq!(commands[1]["method"], "single-node-consolidation");
    assert_eq!(commands[1]["reason"], "Underutilized");
    assert_eq!(commands[1]["decision"], "delete");
    assert_eq!(commands[1]["nodes"], json!(["busy"]));
    assert!(commands[1]["hourlySavings"].as_f64().expect("number") > 0.5);
    assert_eq!(commands.len(), 2, "{report:#}");
    assert!(
        reason_of(&report, "pinned")
            .contains("pod default/pinned-1 has the karpenter.sh/do-not-disrupt annotation")
    );
    let budgets: Vec<(&str, &str, u64)> = report["budgets"]
        .as_array()
        .expect("budgets")
        .iter()
        .map(|b| {
            (
                b["nodePool"].as_str().expect("pool"),
                b["reason"].as_str().expect("reason"),
                b["allowed"].as_u64().expect("count"),
            )
        })
        .collect();
    assert_eq!(
        budgets,
        [
            ("default", "Empty", 3),
            ("default", "Drifted", 3),
            ("default", "Underutilized", 3)
        ]
    );
    let summary = &report["summary"];
    assert_eq!(
        keys(summary),
        ["nodes", "nodesAfter", "hourlyCost", "hourlyCostAfter"]
    );
    assert_eq!(
        (summary["nodes"].as_u64(), summary["nodesAfter"].as_u64()),
        (Some(3), Some(1))
    );
    let (before, after) = (
        summary["hourlyCost"].as_f64().expect("cost"),
        summary["hourlyCostAfter"].as_f64().expect("cost"),
    );
    assert!((before - (0.096 + 2.0 * 0.768)).abs() < 1e-6, "{before}");
    assert!((after - 0.768).abs() < 1e-6, "{after}");
}

#[test]
fn a_lone_oversized_node_is_replaced_by_a_cheaper_spot_node() {
    let objects = vec![
        node_pool("default", unlimited()),
        node(big("busy")),
        pod("busy-1", "busy"),
    ];
    let report = disruption(&objects, &[], &[]);
    let command = &report["commands"][0];
    assert_eq!(command["decision"], "replace", "{report:#}");
    let replacement = &command["replacements"][0];
    assert_eq!(
        keys(replacement),
        ["nodePool", "instanceTypes", "requirements", "launch"]
    );
    assert_eq!(replacement["nodePool"], "default");
    assert_eq!(replacement["launch"]["capacityType"], "spot");
    let price = replacement["launch"]["price"].as_f64().expect("price");
    assert!(price < 0.768, "{price}");
    let types = replacement["instanceTypes"].as_array().expect("types");
    // Upstream's WorstLaunchPrice prices each option as the capacity type that would launch
    // (spot), so even m5.4xlarge's spot offering undercuts the on-demand m5.4xlarge.
    assert!(types.contains(&json!("m5.4xlarge")), "{types:?}");
    let capacity = replacement["requirements"]
        .as_array()
        .expect("requirements")
        .iter()
        .find(|r| r["key"] == "karpenter.sh/capacity-type")
        .expect("capacity type");
    assert_eq!(capacity["values"], json!(["spot"]));
}

#[test]
fn an_on_demand_node_moves_into_a_reservation_its_class_lists() {
    let mut pool = node_pool("default", unlimited());
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}
    ]);
    let reservation = "cr-0123456789abcdef0";
    let class = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "capacityReservationSelectorTerms": [{"id": reservation}]
        },
        "status": {"capacityReservations": [{
            "id": reservation, "instanceType": "m5.large", "availabilityZone": "us-east-1a",
            "instanceMatchCriteria": "targeted", "ownerID": "123456789012"
        }]}
    });
    let objects = vec![pool, class, node(big("busy")), pod("busy-1", "busy")];
    let report = disruption(&objects, &[], &[]);
    let command = &report["commands"][0];
    assert_eq!(command["decision"], "replace", "{report:#}");
    let replacement = &command["replacements"][0];
    let launch = &replacement["launch"];
    assert_eq!(
        (
            &launch["capacityType"],
            &launch["instanceType"],
            &launch["zone"]
        ),
        (&json!("reserved"), &json!("m5.large"), &json!("us-east-1a")),
        "{report:#}"
    );
    // Priced as upstream prices a reserved offering: on-demand's ÷ 10,000,000.
    assert!(launch["price"].as_f64().expect("price") < 1e-6, "{launch}");
    let requirement = |key: &str| {
        replacement["requirements"]
            .as_array()
            .expect("requirements")
            .iter()
            .find(|r| r["key"] == key)
            .map(|r| r["values"].clone())
    };
    assert_eq!(
        requirement("karpenter.sh/capacity-type"),
        Some(json!(["reserved"])),
        "it launches into the reservation or not at all"
    );
}

#[test]
fn feature_gates_flag_and_environment_enable_spot_to_spot() {
    let objects = vec![
        node_pool("default", unlimited()),
        node(NodeSpec {
            capacity_type: "spot",
            ..big("spot")
        }),
        pod("spot-1", "spot"),
    ];
    let off = disruption(&objects, &[], &[]);
    assert!(off["commands"].as_array().expect("commands").is_empty());
    assert!(reason_of(&off, "spot").contains("SpotToSpotConsolidation"));
    let flag = disruption(
        &objects,
        &["--feature-gates", "SpotToSpotConsolidation=true"],
        &[],
    );
    let env = disruption(
        &objects,
        &[],
        &[("FEATURE_GATES", "SpotToSpotConsolidation=true")],
    );
    for report in [flag, env] {
        let replacement = &report["commands"][0]["replacements"][0];
        assert_eq!(replacement["launch"]["capacityType"], "spot", "{report:#}");
        assert_eq!(
            replacement["instanceTypes"]
                .as_array()
                .expect("types")
                .len(),
            15
        );
    }
}

#[test]
fn nodes_without_nodeclaims_expire_and_nodeclaims_give_the_last_pod_event() {
    let objects = vec![
        node_pool(
            "default",
            json!({"consolidateAfter": "1h", "budgets": [{"nodes": "100%"}]}),
        ),
        node(NodeSpec {
            created: "2025-11-01T00:00:00Z",
            ..small("old")
        }),
        node(big("watched")),
        pod("watched-1", "watched"),
        node_claim("watched-claim", "watched", "2025-12-31T23:30:00Z"),
        pdb("guard", "watched", 1),
    ];
    let report = disruption(&objects, &[], &[]);
    let command = &report["commands"][0];
    assert_eq!(
        (command["method"].as_str(), command["reason"].as_str()),
        (Some("expiration"), Some("Expired"))
    );
    assert_eq!(command["nodes"], json!(["old"]));
    assert!(reason_of(&report, "watched").contains("consolidateAfter 1h has not elapsed"));
}

#[test]
fn a_pdb_allowing_nothing_is_named() {
    let mut objects = mixed_cluster();
    objects.push(pdb("busy-guard", "busy", 0));
    let report = disruption(&objects, &[], &[]);
    assert!(
        reason_of(&report, "busy")
            .contains("PodDisruptionBudget default/busy-guard allows no disruption")
    );
}

#[test]
fn table_output_shows_commands_kept_nodes_budgets_and_the_summary() {
    let args = ["plan", "--disruption", "--now", NOW, "-f", "-"];
    let output = kerf(&args, &list(&mixed_cluster()), &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    let lines: Vec<&str> = table.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("#  METHOD"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(lines[header + 1].starts_with("1  emptiness"), "{table}");
    assert!(lines[header + 1].ends_with("idle"), "{table}");
    assert!(
        lines[header + 2].contains("single-node-consolidation"),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("do-not-disrupt") && l.ends_with("  pinned")),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.split_whitespace().eq(["default", "Underutilized", "3"])),
        "{table}"
    );
    assert!(
        table.contains("disruption: 2 commands; managed nodes 3 -> 1"),
        "{table}"
    );
    assert!(
        table.contains(kerf::disruption::report::CONTROLLER_STATE_NOTE),
        "the plan says what only the controller holds: {table}"
    );
}

#[test]
fn a_malformed_now_exits_1_naming_it() {
    let args = [
        "plan",
        "--disruption",
        "--now",
        "yesterday",
        "-o",
        "json",
        "-f",
        "-",
    ];
    let output = kerf(&args, &list(&mixed_cluster()), &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("--now") && stderr.contains("\"yesterday\""),
        "{stderr}"
    );
}

#[test]
fn malformed_feature_gates_exit_1_naming_them() {
    let args = [
        "plan",
        "--disruption",
        "--feature-gates",
        "SpotToSpotConsolidation=maybe",
        "-f",
        "-",
    ];
    let output = kerf(&args, &list(&mixed_cluster()), &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("FEATURE_GATES"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn without_the_flag_the_plan_has_no_disruption_key() {
    let output = kerf(
        &["plan", "-o", "json", "-f", "-"],
        &list(&mixed_cluster()),
        &[],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let value: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert!(value.get("disruption").is_none());
}
