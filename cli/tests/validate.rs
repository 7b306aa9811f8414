//! `kerf validate` end to end through the built binary: exit codes and output lines.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn kerf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
}

/// Upstream's examples, vendored (tests/fixtures/upstream/README.md).
fn upstream_examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/upstream/examples")
}

/// A file under a per-test temporary directory.
fn temp_file(test: &str, name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kerf-validate-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn stdout(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: [spot]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
";

#[test]
fn upstream_examples_are_valid() {
    let dir = upstream_examples();
    let output = kerf().args(["validate", "-f"]).arg(&dir).output().unwrap();
    let lines = stdout(&output);
    assert!(output.status.success(), "{lines:#?}\n{}", stderr(&output));
    assert!(lines.len() >= 15, "{lines:#?}");
    assert!(lines.iter().all(|l| l.ends_with(": OK")), "{lines:#?}");
    let general = dir.join("general-purpose.yaml").display().to_string();
    assert!(
        lines.contains(&format!("{general}: NodePool/general-purpose: OK")),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&format!("{general}: EC2NodeClass/default: OK")),
        "{lines:#?}"
    );
    assert!(
        stderr(&output).contains("Deployment/arm64: ignored"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn reports_every_problem_with_file_object_and_field() {
    let broken = NODEPOOL
        .replace("operator: In", "operator: Within")
        .replace("name: default}", "name: \"\"}");
    let file = temp_file("broken", "np.yaml", &broken);
    let output = kerf().args(["validate", "-f"]).arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let f = file.display();
    assert_eq!(
        stdout(&output),
        [
            format!(
                "{f}: NodePool/default: spec.template.spec.requirements[0].operator: Unsupported value: \"Within\": supported values: \"Gte\", \"Lte\", \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\""
            ),
            format!(
                "{f}: NodePool/default: spec.template.spec.nodeClassRef.name: name may not be empty"
            ),
        ]
    );
}

#[test]
fn a_static_pool_may_limit_only_its_nodes_and_has_no_weight() {
    let valid = NODEPOOL.replace(
        "spec:\n  template:",
        "spec:\n  replicas: 3\n  limits: {nodes: \"5\"}\n  template:",
    );
    let file = temp_file("static", "np.yaml", &valid);
    let output = kerf().args(["validate", "-f"]).arg(&file).output().unwrap();
    assert!(output.status.success(), "{:?}", stdout(&output));
    let invalid = NODEPOOL.replace(
        "spec:\n  template:",
        "spec:\n  replicas: 3\n  weight: 10\n  limits: {nodes: \"5\", cpu: \"8\"}\n  template:",
    );
    let file = temp_file("static-invalid", "np.yaml", &invalid);
    let output = kerf().args(["validate", "-f"]).arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let f = file.display();
    assert_eq!(
        stdout(&output),
        [
            format!(
                "{f}: NodePool/default: spec: only 'limits.nodes' is supported on static NodePools"
            ),
            format!("{f}: NodePool/default: spec: 'weight' is not supported on static NodePools"),
        ]
    );
}

#[test]
fn syntax_errors_name_file_and_line_and_other_files_still_run() {
    let bad = temp_file(
        "syntax",
        "bad.yaml",
        "apiVersion: karpenter.sh/v1\nkind: [NodePool\n",
    );
    let good = temp_file("syntax", "good.yaml", NODEPOOL);
    let output = kerf()
        .args(["validate", "-f"])
        .arg(&bad)
        .arg("-f")
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let lines = stdout(&output);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with(&format!("{}:", bad.display())),
        "{lines:#?}"
    );
    assert!(
        lines[0].contains(":3:") || lines[0].contains(":2:"),
        "line number: {lines:#?}"
    );
    assert_eq!(
        lines[1],
        format!("{}: NodePool/default: OK", good.display())
    );
}

#[test]
fn unreadable_paths_fail() {
    let output = kerf()
        .args(["validate", "-f", "/nonexistent/kerf.yaml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let lines = stdout(&output);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("/nonexistent/kerf.yaml: cannot read:"),
        "{lines:#?}"
    );
}

#[test]
fn reads_stdin() {
    let mut child = kerf()
        .args(["validate", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(NODEPOOL.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), ["-: NodePool/default: OK"]);
}

#[test]
fn requires_a_path() {
    let output = kerf().arg("validate").output().unwrap();
    assert_eq!(output.status.code(), Some(2), "clap usage error");
}

#[test]
fn a_v1beta1_manifest_gets_migration_hints_for_every_moved_field() {
    let file = temp_file(
        "migration",
        "v1beta1.yaml",
        "apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: old}
spec:
  disruption: {consolidationPolicy: WhenUnderutilized, expireAfter: 720h}
  template:
    spec:
      kubelet: {maxPods: 110}
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: default}
      requirements: [{key: karpenter.sh/provisioner-name, operator: Exists}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      nodeSelector: {karpenter.sh/provisioner-name: default}
",
    );
    let output = kerf()
        .arg("validate")
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let lines = stdout(&output);
    let prefix = format!("{}: NodePool/old: ", file.display());
    for (field, words) in [
        ("apiVersion", "change it to karpenter.sh/v1"),
        (
            "spec.disruption.consolidationPolicy",
            kerf::troubleshooting::documented("v1beta1-consolidation"),
        ),
        ("spec.disruption.consolidateAfter", "0s"),
        (
            "spec.disruption.expireAfter",
            "spec.template.spec.expireAfter",
        ),
        ("spec.template.spec.kubelet", "EC2NodeClass's spec.kubelet"),
        ("spec.template.spec.nodeClassRef", "group"),
        (
            "spec.template.spec.requirements[0].key",
            "karpenter.sh/nodepool",
        ),
    ] {
        let start = format!("{prefix}{field}: ");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&start) && l.contains(words)),
            "{start}…{words}: {lines:#?}"
        );
    }
    let warning = format!(
        "{}: Deployment/web: warning: spec.template.spec.nodeSelector[karpenter.sh/provisioner-name]: ",
        file.display()
    );
    assert!(lines.iter().any(|l| l.starts_with(&warning)), "{lines:#?}");
}

#[test]
fn a_duplicate_key_names_both_lines() {
    let file = temp_file(
        "duplicate",
        "dup.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: a\n  labels: {x: y}\n  name: b\n",
    );
    let output = kerf()
        .arg("validate")
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output),
        vec![format!(
            "{}:6: mapping key \"name\" already defined at line 4",
            file.display()
        )]
    );
}
