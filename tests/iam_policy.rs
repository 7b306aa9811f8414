//! deploy/iam: the CloudFormation stack carries exactly the controller policy of
//! controller-policy.json (one text, two ways to install it), and the policy is
//! well-formed: every statement allows named actions, none allows `*`.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::PathBuf;

fn iam_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/iam")
}

#[test]
fn the_stack_embeds_the_policy_file_unchanged() {
    let policy = std::fs::read_to_string(iam_dir().join("controller-policy.json")).unwrap();
    let stack = std::fs::read_to_string(iam_dir().join("cloudformation.yaml")).unwrap();
    let (_, after) = stack.split_once("PolicyDocument: !Sub |\n").unwrap();
    let embedded: Vec<&str> = after
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("        "))
        .map(|l| l.strip_prefix("        ").unwrap_or(l))
        .collect();
    assert_eq!(embedded.join("\n").trim_end(), policy.trim_end());
}

#[test]
fn every_statement_allows_named_actions() {
    let text = std::fs::read_to_string(iam_dir().join("controller-policy.json")).unwrap();
    let policy: Value = serde_json::from_str(&text).unwrap();
    let statements = policy["Statement"].as_array().unwrap();
    assert!(statements.len() >= 10);
    for statement in statements {
        assert_eq!(statement["Effect"], "Allow", "{statement}");
        let actions: Vec<&str> = match &statement["Action"] {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().map(|a| a.as_str().unwrap()).collect(),
            other => panic!("Action {other}"),
        };
        assert!(
            actions.iter().all(|a| a.contains(':') && !a.contains('*')),
            "{statement}"
        );
    }
}
