//! End-to-end tests of `kerf catalog` through the built binary.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn kerf(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kerf"));
    command
        .arg("catalog")
        .args(args)
        .env_remove("RESERVED_ENIS")
        .env_remove("VM_MEMORY_OVERHEAD_PERCENT");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("kerf runs")
}

fn json(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is a JSON array")
}

fn write_manifest(name: &str, yaml: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("catalog-{name}-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("write manifest");
    path
}

fn find<'a>(types: &'a [Value], name: &str) -> &'a Value {
    types
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} listed"))
}

#[test]
fn json_lists_every_type_with_labels_capacity_allocatable_and_offerings() {
    let types = json(&kerf(&["-o", "json"], &[]));
    assert!(types.len() >= 700, "{} types", types.len());
    for it in &types {
        let name = it["name"].as_str().expect("name");
        assert_eq!(it["labels"]["node.kubernetes.io/instance-type"], name);
        assert!(
            it["capacity"]["cpu"].is_string() && it["allocatable"]["memory"].is_string(),
            "{name}"
        );
        let offerings = it["offerings"].as_array().expect("offerings");
        assert!(!offerings.is_empty(), "{name}");
        for offering in offerings {
            assert!(
                offering["zone"]
                    .as_str()
                    .is_some_and(|z| z.starts_with("us-east-1"))
            );
            assert!(matches!(
                offering["capacityType"].as_str(),
                Some("on-demand" | "spot")
            ));
            assert!(offering["price"].is_number() && offering["available"].is_boolean());
        }
    }
    let m5 = find(&types, "m5.large");
    assert_eq!(m5["capacity"]["memory"], "7577Mi");
    assert_eq!(m5["allocatable"]["memory"], "6903Mi");
    assert_eq!(m5["allocatable"]["pods"], "29");
}

#[test]
fn nodeclass_and_settings_change_allocatable() {
    let manifest = write_manifest(
        "bottlerocket",
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: bottlerocket
spec:
  role: KarpenterNodeRole
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  amiSelectorTerms:
    - alias: bottlerocket@latest
  kubelet:
    maxPods: 110
    systemReserved:
      cpu: 100m
    evictionHard:
      memory.available: 200Mi
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs: {volumeSize: 4Gi}
    - deviceName: /dev/xvdb
      ebs: {volumeSize: 100Gi}
"#,
    );
    let nodeclass = manifest.to_str().expect("utf-8 path");
    let types = json(&kerf(
        &[
            "-o",
            "json",
            "--nodeclass",
            nodeclass,
            "--instance-type",
            "m5.large",
        ],
        &[],
    ));
    assert_eq!(types.len(), 1);
    let allocatable = &types[0]["allocatable"];
    // Bottlerocket: kube-reserved memory 11 × 110 + 255 = 1465Mi; 7577 − 1465 − 200 = 5912Mi
    assert_eq!(allocatable["memory"], "5912Mi");
    // cpu 2000m − 70m − 100m; storage /dev/xvdb 100Gi − 1Gi − 10Gi
    assert_eq!(allocatable["cpu"], "1830m");
    assert_eq!(allocatable["ephemeral-storage"], "89Gi");
    assert_eq!(allocatable["pods"], "110");

    // RESERVED_ENIS from the environment, the overhead from the flag.
    let types = json(&kerf(
        &[
            "-o",
            "json",
            "--instance-type",
            "m5.large",
            "--vm-memory-overhead-percent",
            "0",
        ],
        &[("RESERVED_ENIS", "1")],
    ));
    // pods (3 − 1) × 9 + 2 = 20; memory 8192 − 574 − 100 = 7518Mi
    assert_eq!(types[0]["allocatable"]["pods"], "20");
    assert_eq!(types[0]["allocatable"]["memory"], "7518Mi");
}

#[test]
fn table_output_has_a_header_and_a_row_per_type() {
    let output = kerf(
        &[
            "--instance-type",
            "m5.large",
            "--instance-type",
            "c6g.large",
        ],
        &[],
    );
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("NAME") && lines[0].contains("ALLOC MEMORY"));
    assert!(
        lines[1].starts_with("m5.large")
            && lines[1].contains("6903Mi")
            && lines[1].contains("0.09600")
    );
}

#[test]
fn bad_input_is_reported_with_file_and_field() {
    let manifest = write_manifest(
        "bad",
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: broken}\nspec:\n  amiFamily: AL2023\n  kubelet:\n    kubeReserved:\n      memory: lots\n",
    );
    let output = kerf(
        &["--nodeclass", manifest.to_str().expect("utf-8 path")],
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(manifest.to_str().expect("utf-8")),
        "{stderr}"
    );
    let file = manifest.to_str().expect("utf-8");
    assert!(
        stderr.contains(&format!(
            "{file}: EC2NodeClass/broken: spec.kubelet.kubeReserved[memory]: "
        )) && stderr.contains(&format!(
            "{file}: EC2NodeClass/broken: spec.subnetSelectorTerms: Required value"
        )),
        "{stderr}"
    );
    // The same lines `kerf validate` prints for the file.
    let validate = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["validate", "-f", file])
        .output()
        .expect("kerf runs");
    assert_eq!(stderr, String::from_utf8_lossy(&validate.stdout));

    let two = write_manifest(
        "two",
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: a}\n---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: b}\n",
    );
    let output = kerf(&["--nodeclass", two.to_str().expect("utf-8 path")], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("expected exactly one EC2NodeClass, found 2")
    );

    let output = kerf(&["--region", "mars-1"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("mars-1"));

    let output = kerf(
        &["--instance-type", "t4g.nano"],
        &[("VM_MEMORY_OVERHEAD_PERCENT", "1.5")],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("VM_MEMORY_OVERHEAD_PERCENT"));

    let missing = kerf(&["--nodeclass", "/nonexistent/nodeclass.yaml"], &[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/nodeclass.yaml"));
}

#[test]
fn a_nodeclass_s_reservations_are_reserved_offerings() {
    let manifest = write_manifest(
        "reserved",
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: reserved
spec:
  role: KarpenterNodeRole
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  amiSelectorTerms: [{alias: al2023@latest}]
  capacityReservationSelectorTerms: [{id: cr-0123456789abcdef0}]
status:
  capacityReservations:
    - id: cr-0123456789abcdef0
      instanceType: m5.large
      availabilityZone: us-east-1a
      instanceMatchCriteria: targeted
      ownerID: "123456789012"
"#,
    );
    let nodeclass = manifest.to_str().expect("utf-8 path");
    let args = ["--nodeclass", nodeclass, "--instance-type", "m5.large"];
    let types = json(&kerf(&[&["-o", "json"][..], &args[..]].concat(), &[]));
    let offerings = types[0]["offerings"].as_array().expect("offerings");
    let reserved: Vec<&Value> = offerings
        .iter()
        .filter(|o| o["capacityType"] == "reserved")
        .collect();
    assert_eq!(reserved.len(), 1, "{offerings:?}");
    assert_eq!(reserved[0]["zone"], "us-east-1a");
    assert_eq!(reserved[0]["capacityReservationId"], "cr-0123456789abcdef0");
    assert_eq!(reserved[0]["available"], true);
    let on_demand = offerings
        .iter()
        .find(|o| o["capacityType"] == "on-demand")
        .and_then(|o| o["price"].as_f64())
        .expect("on-demand price");
    let price = reserved[0]["price"].as_f64().expect("price");
    assert!(price > 0.0 && price < on_demand / 1_000_000.0, "{price}");

    let table = kerf(&args, &[]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().next().expect("header").contains("RESERVED"));
    assert!(text.contains("cr-0123456789abcdef0@us-east-1a"), "{text}");
}
