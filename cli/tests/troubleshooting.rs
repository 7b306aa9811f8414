//! `docs/troubleshooting.md` holds: every message it quotes is produced by a test through the
//! path it documents. The messages `kerf plan` and `kerf validate` give are produced here; the
//! controller's (events, conditions, start-up errors) by the controller tests that name them
//! with `documented("ID")`, which this file checks exist for every message.

mod kerf_cli;

use std::path::{Path, PathBuf};

use kerf::troubleshooting::{documented, messages};
use kerf_cli::{kerf, text};

const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  LIMITS
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
";

fn nodepool(limits: &str) -> String {
    NODEPOOL.replace("LIMITS", limits)
}

fn pod(name: &str, requests: &str, extra_spec: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: app, image: pause, resources: {{requests: {requests}}}}}]
{extra_spec}"
    )
}

/// `kerf plan` on `input`: its table and its warnings.
fn plan(input: &str, args: &[&str]) -> (String, String) {
    let mut full = vec!["plan", "-f", "-"];
    full.extend_from_slice(args);
    let output = kerf(&full, Some(input.as_bytes()));
    assert!(output.status.success(), "{}", text(&output.stderr));
    (text(&output.stdout), text(&output.stderr))
}

fn assert_produced(fragment: &str, output: &str) {
    assert!(output.contains(fragment), "{fragment:?} not in:\n{output}");
}

#[test]
fn a_pod_too_large_for_any_allowed_type_is_told_the_largest_and_a_typo_is_suspected() {
    let input = nodepool("") + &pod("huge", "{cpu: '500'}", "") + &pod("typo", "{cpu: 2M}", "");
    let (table, _) = plan(&input, &[]);
    assert_produced(documented("largest-allowed"), &table);
    assert_produced(documented("cpu-typo"), &table);
}

#[test]
fn limits_that_leave_too_little_and_nothing_are_told_apart() {
    let input = nodepool("limits: {cpu: '2'}") + &pod("big", "{cpu: '3'}", "");
    let (table, _) = plan(&input, &[]);
    assert_produced(documented("limits-shortfall"), &table);

    let spread = "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: spread}}}\n";
    let mut input = nodepool("limits: {cpu: '64'}");
    for name in ["spread-1", "spread-2"] {
        let labelled = pod(name, "{cpu: '1'}", spread).replace(
            "namespace: default}",
            "namespace: default, labels: {app: spread}}",
        );
        input.push_str(&labelled);
    }
    let (table, _) = plan(&input, &[]);
    assert_produced(documented("limits-exhausted"), &table);
    let (rounds, _) = plan(&input, &["--rounds", "3"]);
    assert!(rounds.contains("0 unschedulable"), "{rounds}");
}

#[test]
fn a_resource_no_instance_type_offers_is_named() {
    let input = nodepool("") + &pod("trunk", "{cpu: '1', nvidia.com/gpu: '1'}", "");
    let (table, _) = plan(&input, &[]);
    assert_produced(documented("missing-resource"), &table);
}

#[test]
fn in_tree_ebs_volumes_are_warned_about() {
    let volume =
        "  volumes: [{name: data, awsElasticBlockStore: {volumeID: vol-0123456789abcdef0}}]\n";
    let input = nodepool("") + &pod("legacy", "{cpu: '1'}", volume);
    let (_, warnings) = plan(&input, &[]);
    assert_produced(documented("in-tree-ebs"), &warnings);
}

#[test]
fn a_long_role_and_a_max_pods_above_the_eni_limit_are_warned_about() {
    let input = nodepool("")
        + "---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-a-cluster-name-long-enough-to-take-the-role-past-the-limit
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  kubelet: {maxPods: 250}
" + &pod("web", "{cpu: '1'}", "");
    let (_, warnings) = plan(&input, &[]);
    assert_produced(documented("role-too-long"), &warnings);
    assert_produced(documented("max-pods-eni"), &warnings);
}

#[test]
fn a_spread_over_more_zones_than_the_pool_allows_is_named() {
    let zones = "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b]}\n";
    let input = nodepool("").replace(
        "      requirements:\n",
        &format!("      requirements:\n{zones}"),
    );
    let spread = "  topologySpreadConstraints:
    - {maxSkew: 1, minDomains: 3, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
";
    let pods: String = (0..3)
        .map(|i| {
            pod(&format!("web-{i}"), "{cpu: '1'}", spread).replace(
                "namespace: default}",
                "namespace: default, labels: {app: web}}",
            )
        })
        .collect();
    let (table, _) = plan(&(input + &pods), &[]);
    assert_produced(documented("spread-zones"), &table);
}

#[test]
fn the_controllers_own_pods_are_never_planned_on_its_nodes() {
    // The chart's node affinity for the controller's pods.
    let affinity = "  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - {key: karpenter.sh/nodepool, operator: DoesNotExist}
";
    let input = nodepool("") + &pod("kerf-controller", "{cpu: '1'}", affinity);
    let (table, _) = plan(&input, &[]);
    assert_produced(documented("controller-self"), &table);
}

/// `kerf validate` on `input`: it fails, and what it says.
fn validate_refused(input: &str) -> String {
    let output = kerf(&["validate", "-f", "-"], Some(input.as_bytes()));
    assert!(!output.status.success(), "{}", text(&output.stdout));
    text(&output.stdout) + &text(&output.stderr)
}

#[test]
fn pre_v1beta1_kinds_and_unknown_fields_are_named() {
    let provisioner = "apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: default}
spec: {ttlSecondsAfterEmpty: 30}
";
    assert_produced(
        documented("v1alpha5-provisioner"),
        &validate_refused(provisioner),
    );
    let typo = nodepool("").replace(
        "      nodeClassRef:",
        "      expireAftr: 720h\n      nodeClassRef:",
    );
    assert_produced(documented("unknown-field"), &validate_refused(&typo));
}

/// Every message is produced by some test: here, or one that names it with `documented`.
#[test]
fn every_documented_message_is_produced_by_a_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = String::new();
    for dir in [
        "cli/tests",
        "actors/tests",
        "actors/src",
        "aws/tests",
        "aws/src",
        "src",
    ] {
        for file in rust_files(&root.join(dir)) {
            sources.push_str(&std::fs::read_to_string(&file).expect("readable source"));
        }
    }
    let missing: Vec<&str> = messages()
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| !sources.contains(&format!("documented(\"{id}\")")))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but produced by no test: {missing:?}"
    );
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("source directory").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}
