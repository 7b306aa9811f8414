//! Broken variants of valid NodePools, NodeClaims and EC2NodeClasses, one per rule family
//! the CRDs (and upstream's controller) enforce: each must be rejected with exactly the
//! expected field path and message.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use kerf::manifest::parse_all;
use kerf::validation::{Verdict, validate_object};
use serde_json::{Value, json};

const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata:
      labels: {team: a}
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      taints: [{key: example.com/gpu, effect: NoSchedule}]
  disruption:
    consolidateAfter: 30s
    budgets: [{nodes: "10%"}]
  limits: {cpu: 100}
"#;

const NODECLAIM: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: default-abcde}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  resources: {requests: {cpu: 100m}}
"#;

const EC2NODECLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: c}}]
  tags: {team: a}
"#;

fn base(yaml: &str) -> Value {
    parse_all(yaml, "base.yaml").unwrap().remove(0).value
}

/// Problem lines (`path: message`) for `object`; empty when valid.
fn problems(object: Value) -> Vec<String> {
    let text = serde_json::to_string(&object).unwrap();
    let parsed = parse_all(&text, "case.json").unwrap().remove(0);
    match validate_object(&parsed) {
        Verdict::Valid(_) => Vec::new(),
        Verdict::Invalid(problems) => problems.iter().map(ToString::to_string).collect(),
        Verdict::Ignored => panic!("Karpenter object ignored"),
    }
}

fn with(yaml: &str, pointer: &str, value: Value) -> Value {
    let mut object = base(yaml);
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    let target = object
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent}"));
    match target {
        Value::Object(map) if value.is_null() => {
            map.remove(field);
        }
        Value::Object(map) => {
            map.insert(field.to_owned(), value);
        }
        Value::Array(items) => items[field.parse::<usize>().unwrap()] = value,
        _ => panic!("{parent} is not a container"),
    }
    object
}

fn assert_only(object: Value, expected: &str) {
    assert_eq!(problems(object), [expected]);
}

#[test]
fn the_bases_are_valid() {
    assert_eq!(problems(base(NODEPOOL)), Vec::<String>::new());
    assert_eq!(problems(base(NODECLAIM)), Vec::<String>::new());
    assert_eq!(problems(base(EC2NODECLASS)), Vec::<String>::new());
}

#[test]
fn unknown_fields_are_errors() {
    assert_only(
        with(NODEPOOL, "/spec/template/spec/nodeClassRefs", json!({})),
        "spec.template.spec.nodeClassRefs: unknown field",
    );
    assert_only(
        with(EC2NODECLASS, "/spec/amiSelectorTerms/0/aliases", json!("x")),
        "spec.amiSelectorTerms[0].aliases: unknown field",
    );
}

#[test]
fn required_fields() {
    assert_only(
        with(NODEPOOL, "/spec/template/spec/nodeClassRef", Value::Null),
        "spec.template.spec.nodeClassRef: Required value",
    );
    assert_only(
        with(NODEPOOL, "/spec/disruption/consolidateAfter", Value::Null),
        "spec.disruption.consolidateAfter: Required value",
    );
}

#[test]
fn operator_enum() {
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/requirements/0/operator",
            json!("Equals"),
        ),
        r#"spec.template.spec.requirements[0].operator: Unsupported value: "Equals": supported values: "Gte", "Lte", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt""#,
    );
}

#[test]
fn in_needs_values() {
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/requirements/0",
            json!({"key": "karpenter.sh/capacity-type", "operator": "In"}),
        ),
        "spec.template.spec.requirements[0]: requirements with operator 'In' must have a value defined",
    );
}

#[test]
fn numeric_operators_need_a_single_non_negative_integer() {
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/requirements/1/values",
            json!(["2", "3"]),
        ),
        "spec.template.spec.requirements[1]: requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    );
    assert_only(
        with(
            NODECLAIM,
            "/spec/requirements/0",
            json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["x4"]}),
        ),
        "spec.requirements[0]: requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    );
    // A negative bound is also not a label value, which upstream's controller reports too.
    let lines = problems(with(
        NODECLAIM,
        "/spec/requirements/0",
        json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["-4"]}),
    ));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].starts_with(r#"spec.requirements[0].values[0]: invalid value "-4" for key karpenter.k8s.aws/instance-cpu"#));
}

#[test]
fn min_values_not_above_the_number_of_values() {
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/requirements/0/minValues",
            json!(2),
        ),
        "spec.template.spec.requirements[0]: requirements with 'minValues' must have at least that many values specified in the 'values' field",
    );
    assert_eq!(
        problems(with(
            NODEPOOL,
            "/spec/template/spec/requirements/0/minValues",
            json!(51)
        )),
        [
            "spec.template.spec.requirements[0].minValues: Invalid value: 51: should be less than or equal to 50",
            "spec.template.spec.requirements[0]: requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ]
    );
}

#[test]
fn restricted_label_domains() {
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/requirements/0/key",
            json!("karpenter.sh/unknown"),
        ),
        r#"spec.template.spec.requirements[0].key: label domain "karpenter.sh" is restricted"#,
    );
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/requirements/0/key",
            json!("karpenter.k8s.aws/instance-foo"),
        ),
        r#"spec.template.spec.requirements[0].key: label domain "karpenter.k8s.aws" is restricted"#,
    );
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/metadata/labels",
            json!({"karpenter.sh/nodepool": "x"}),
        ),
        r#"spec.template.metadata.labels[karpenter.sh/nodepool]: label "karpenter.sh/nodepool" is restricted"#,
    );
    assert_only(
        with(
            NODECLAIM,
            "/spec/requirements/0/key",
            json!("kubernetes.io/hostname"),
        ),
        r#"spec.requirements[0].key: label "kubernetes.io/hostname" is restricted"#,
    );
}

#[test]
fn kubernetes_domains_are_restricted_by_the_controller() {
    let lines = problems(with(
        NODEPOOL,
        "/spec/template/spec/requirements/0/key",
        json!("kubernetes.io/custom"),
    ));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with(
        r#"spec.template.spec.requirements[0].key: label "kubernetes.io/custom" is restricted"#
    ));
    assert!(lines[0].ends_with("(rejected by the controller: ValidationSucceeded=False)"));
}

#[test]
fn taint_effects_and_keys() {
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/taints/0/effect",
            json!("NoScheduleAtAll"),
        ),
        r#"spec.template.spec.taints[0].effect: Unsupported value: "NoScheduleAtAll": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#,
    );
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/taints/0/key",
            json!("bad key"),
        ),
        r#"spec.template.spec.taints[0].key: Invalid value: "bad key": should match '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$'"#,
    );
}

#[test]
fn budget_formats() {
    assert_only(
        with(NODEPOOL, "/spec/disruption/budgets/0/nodes", json!("110%")),
        r#"spec.disruption.budgets[0].nodes: Invalid value: "110%": should match '^((100|[0-9]{1,2})%|[0-9]+)$'"#,
    );
    assert_only(
        with(
            NODEPOOL,
            "/spec/disruption/budgets/0/schedule",
            json!("@daily"),
        ),
        "spec.disruption.budgets[0]: 'schedule' must be set with 'duration'",
    );
    assert_only(
        with(
            NODEPOOL,
            "/spec/disruption/budgets/0/reasons",
            json!(["Empty", "Expired"]),
        ),
        r#"spec.disruption.budgets[0].reasons[1]: Unsupported value: "Expired": supported values: "Underutilized", "Empty", "Drifted""#,
    );
    assert_only(
        with(
            NODEPOOL,
            "/spec/disruption/budgets/0/reasons",
            json!(["Empty", "Empty"]),
        ),
        r#"spec.disruption.budgets[0].reasons[1]: Duplicate value: "Empty""#,
    );
}

#[test]
fn durations() {
    assert_only(
        with(NODEPOOL, "/spec/disruption/consolidateAfter", json!("1d")),
        r#"spec.disruption.consolidateAfter: Invalid value: "1d": should match '^(([0-9]+(s|m|h))+|Never)$'"#,
    );
    assert_only(
        with(
            NODEPOOL,
            "/spec/template/spec/terminationGracePeriod",
            json!("Never"),
        ),
        r#"spec.template.spec.terminationGracePeriod: Invalid value: "Never": should match '^([0-9]+(s|m|h))+$'"#,
    );
}

#[test]
fn weight_bounds_and_static_pools() {
    assert_only(
        with(NODEPOOL, "/spec/weight", json!(0)),
        "spec.weight: Invalid value: 0: should be greater than or equal to 1",
    );
    assert_only(
        with(NODEPOOL, "/spec/replicas", json!(3)),
        "spec: only 'limits.nodes' is supported on static NodePools",
    );
    assert_only(
        with(NODEPOOL, "/spec/weight", json!("high")),
        r#"spec.weight: Invalid value: "high": must be of type integer, not string"#,
    );
}

#[test]
fn limits_are_quantities() {
    assert_only(
        with(NODEPOOL, "/spec/limits/cpu", json!("lots")),
        r#"spec.limits[cpu]: Invalid value: "lots": should match '^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$'"#,
    );
}

#[test]
fn node_class_ref_fields_may_not_be_empty() {
    assert_only(
        with(NODECLAIM, "/spec/nodeClassRef/name", json!("")),
        "spec.nodeClassRef.name: name may not be empty",
    );
}

#[test]
fn ami_alias_rules() {
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/amiSelectorTerms",
            json!([{"alias": "al2023@latest", "tags": {"a": "b"}}]),
        ),
        "spec.amiSelectorTerms[0]: 'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/amiSelectorTerms",
            json!([{"alias": "al2023@latest"}, {"id": "ami-123"}]),
        ),
        "spec.amiSelectorTerms: 'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    );
    let lines = problems(with(
        EC2NODECLASS,
        "/spec/amiSelectorTerms/0/alias",
        json!("ubuntu@latest"),
    ));
    assert_eq!(
        lines,
        [
            "spec.amiSelectorTerms[0].alias: family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
        ]
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/amiSelectorTerms/0/alias",
            json!("windows2022@v1"),
        ),
        "spec.amiSelectorTerms[0].alias: windows families may only specify version 'latest'",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/amiSelectorTerms/0/alias",
            json!("al2023"),
        ),
        "spec.amiSelectorTerms[0].alias: 'alias' is improperly formatted, must match the format 'family@version'",
    );
    assert_only(
        with(EC2NODECLASS, "/spec/amiFamily", json!("Bottlerocket")),
        "spec: if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/amiSelectorTerms",
            json!([{"id": "ami-0123"}]),
        ),
        "spec: must specify amiFamily if amiSelectorTerms does not contain an alias",
    );
    assert_eq!(
        problems(with(EC2NODECLASS, "/spec/amiSelectorTerms", json!([]))),
        [
            "spec.amiSelectorTerms: Invalid value: 0: should have at least 1 items",
            "spec: must specify amiFamily if amiSelectorTerms does not contain an alias",
        ]
    );
}

#[test]
fn subnet_and_security_group_terms() {
    assert_only(
        with(EC2NODECLASS, "/spec/subnetSelectorTerms", json!([])),
        "spec.subnetSelectorTerms: subnetSelectorTerms cannot be empty",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/subnetSelectorTerms",
            json!([{"id": "subnet-1", "tags": {"a": "b"}}]),
        ),
        "spec.subnetSelectorTerms: 'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/securityGroupSelectorTerms",
            json!([{}]),
        ),
        "spec.securityGroupSelectorTerms[0]: expected at least one, got none, ['tags', 'id', 'name']",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/securityGroupSelectorTerms/0/tags",
            json!({"a": ""}),
        ),
        "spec.securityGroupSelectorTerms[0].tags[a]: empty tag keys or values aren't supported",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/subnetSelectorTerms/0",
            json!({"id": "sub-1"}),
        ),
        r#"spec.subnetSelectorTerms[0].id: Invalid value: "sub-1": should match 'subnet-[0-9a-z]+'"#,
    );
}

#[test]
fn role_xor_instance_profile() {
    assert_only(
        with(EC2NODECLASS, "/spec/instanceProfile", json!("profile")),
        "spec: must specify exactly one of ['role', 'instanceProfile']",
    );
    assert_only(
        with(EC2NODECLASS, "/spec/role", Value::Null),
        "spec: must specify exactly one of ['role', 'instanceProfile']",
    );
    assert_only(
        with(EC2NODECLASS, "/spec/role", json!("")),
        "spec.role: role cannot be empty",
    );
}

#[test]
fn restricted_tags() {
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/tags",
            json!({"kubernetes.io/cluster/prod": "owned"}),
        ),
        "spec.tags[kubernetes.io/cluster/prod]: tag contains a restricted tag matching kubernetes.io/cluster/",
    );
}

#[test]
fn block_devices_and_metadata_options() {
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/blockDeviceMappings",
            json!([{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]),
        ),
        "spec.blockDeviceMappings[0].ebs: snapshotID or volumeSize must be defined",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/blockDeviceMappings",
            json!([
                {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
                {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}
            ]),
        ),
        "spec.blockDeviceMappings: must have only one blockDeviceMappings with rootVolume",
    );
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/metadataOptions",
            json!({"httpPutResponseHopLimit": 65}),
        ),
        "spec.metadataOptions.httpPutResponseHopLimit: Invalid value: 65: should be less than or equal to 64",
    );
}

#[test]
fn kubelet_soft_eviction_pairing() {
    assert_only(
        with(
            EC2NODECLASS,
            "/spec/kubelet",
            json!({"evictionSoft": {"memory.available": "10%"}}),
        ),
        "spec.kubelet.evictionSoft[memory.available]: evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod (rejected by the controller: ValidationSucceeded=False)",
    );
}

#[test]
fn metadata_name() {
    assert_only(
        with(NODEPOOL, "/metadata/name", json!("Default_Pool")),
        r#"metadata.name: Invalid value: "Default_Pool": must be a lowercase RFC 1123 subdomain: lowercase alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character"#,
    );
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let mut object = base(NODEPOOL);
    object["spec"]["weight"] = json!(101);
    object["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Maybe");
    object["spec"]["disruption"]["consolidationPolicy"] = json!("Always");
    assert_eq!(problems(object).len(), 3);
}
