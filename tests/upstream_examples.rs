//! Every Karpenter object in upstream's examples is accepted by `kerf validate`'s rules and
//! survives a trip through kerf's typed API objects: deserialised and serialised again it is
//! the same JSON, except for the defaults the API server would have added (taken from the
//! CRD schemas themselves) and integer quantities, which come back as strings as they do
//! from upstream's Go types.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use kerf::api::{EC2NodeClass, NodeClaim, NodePool};
use kerf::manifest::{Object, parse_all, read_path};
use kerf::validation::schema::{SCHEMAS, apply_defaults};
use kerf::validation::{Verdict, validate_object};
use serde_json::Value;

fn karpenter_examples() -> Vec<Object> {
    let dir = common::upstream_dir().join("examples");
    let files = read_path(&dir).unwrap_or_else(|e| panic!("upstream examples: {e}"));
    assert!(
        files.len() >= 10,
        "expected the upstream examples in {}",
        dir.display()
    );
    files
        .iter()
        .flat_map(|(name, text)| parse_all(text, name).unwrap_or_else(|e| panic!("{e}")))
        .filter(|o| o.api_version.starts_with("karpenter."))
        .collect()
}

#[test]
fn every_upstream_example_validates() {
    let objects = karpenter_examples();
    let kinds: Vec<&str> = objects.iter().map(|o| o.kind.as_str()).collect();
    assert!(
        kinds.contains(&"NodePool") && kinds.contains(&"EC2NodeClass"),
        "{kinds:?}"
    );
    for object in &objects {
        match validate_object(object) {
            Verdict::Valid(_) => {}
            other => panic!("{}: {}: {other:?}", object.source, object.display_name()),
        }
    }
}

fn round_trip(object: &Object) -> Value {
    let back = match object.kind.as_str() {
        "NodePool" => serde_json::to_value(object.to_typed::<NodePool>().expect("NodePool reads")),
        "NodeClaim" => {
            serde_json::to_value(object.to_typed::<NodeClaim>().expect("NodeClaim reads"))
        }
        "EC2NodeClass" => serde_json::to_value(
            object
                .to_typed::<EC2NodeClass>()
                .expect("EC2NodeClass reads"),
        ),
        other => panic!("unexpected kind {other}"),
    };
    back.expect("serialises")
}

/// The input as the API server would store it: schema defaults applied, quantities as text.
fn expected_after_defaults(object: &Object) -> Value {
    let mut expected = object.value.clone();
    let schema = SCHEMAS.schema(&object.kind).expect("Karpenter kind");
    apply_defaults(schema, &mut expected);
    if let Some(limits) = expected
        .pointer_mut("/spec/limits")
        .and_then(Value::as_object_mut)
    {
        for quantity in limits.values_mut() {
            if quantity.is_number() {
                *quantity = Value::String(quantity.to_string());
            }
        }
    }
    expected
}

#[test]
fn every_upstream_example_round_trips_through_the_typed_api() {
    for object in karpenter_examples() {
        let back = round_trip(&object);
        let expected = expected_after_defaults(&object);
        assert_eq!(
            back,
            expected,
            "{}: {}",
            object.source,
            object.display_name()
        );
        assert_ne!(
            back,
            object.value,
            "{}: defaults were added",
            object.display_name()
        );
    }
}

#[test]
fn typed_defaults_are_the_crd_defaults() {
    let minimal = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: a}
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: a}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: a}
spec:
  requirements: []
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: a}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: a}
spec:
  role: r
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{id: subnet-1}]
  securityGroupSelectorTerms: [{id: sg-1}]
  metadataOptions: {httpTokens: optional}
"#;
    for object in parse_all(minimal, "minimal.yaml").unwrap() {
        assert_eq!(
            round_trip(&object),
            expected_after_defaults(&object),
            "{}",
            object.kind
        );
    }
}
