//! Migration hints for manifests written for Karpenter before v1: `karpenter.sh/v1beta1`
//! NodePools and NodeClaims, `karpenter.k8s.aws/v1beta1` EC2NodeClasses, and the v1alpha5
//! `Provisioner`/`Machine`/`AWSNodeTemplate` before them. The API server only answers "no
//! kind in version"; a person migrating needs to know what moved where, as upstream's v1
//! migration guide says it. A v1beta1 object is then checked as the v1 object it would
//! become by changing its `apiVersion`, so every remaining problem is reported at once.
//! The same hints explain a v1 object's problems at a field still in its pre-v1 place
//! ([`explain_v1_problems`]): the schema alone would only say "unknown field".

use super::path::{FieldPath, Problem};
use super::{KarpenterKind, validate_value};
use crate::labels;
use serde_json::Value;

/// The label that named a v1alpha5 Provisioner, replaced by [`labels::NODEPOOL`].
pub const PROVISIONER_NAME_LABEL: &str = "karpenter.sh/provisioner-name";

/// The problems of an object of a Karpenter kind or version kerf does not serve but
/// recognises from before v1; `None` for anything else.
pub fn pre_v1_problems(api_version: &str, kind: &str, value: &Value) -> Option<Vec<Problem>> {
    let (served, mut problems) = match (api_version, kind) {
        ("karpenter.sh/v1beta1", "NodePool") => (KarpenterKind::NodePool, nodepool_hints(value)),
        ("karpenter.sh/v1beta1", "NodeClaim") => (KarpenterKind::NodeClaim, Vec::new()),
        ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => {
            (KarpenterKind::EC2NodeClass, ec2nodeclass_hints(value))
        }
        ("karpenter.sh/v1alpha5", "Provisioner") => return Some(provisioner_hints(value)),
        ("karpenter.sh/v1alpha5", "Machine") => {
            return Some(vec![replaced_kind("Machine", KarpenterKind::NodeClaim)]);
        }
        ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => {
            return Some(vec![replaced_kind(
                "AWSNodeTemplate",
                KarpenterKind::EC2NodeClass,
            )]);
        }
        _ => return None,
    };
    problems.insert(0, version_moved(api_version, served));
    problems.extend(provisioner_label_hints(value));
    let mut as_v1 = value.clone();
    as_v1["apiVersion"] = Value::from(served.api_version());
    for problem in validate_value(served, &as_v1) {
        if !problems
            .iter()
            .any(|p| problem.path.starts_with(&p.path) && !p.path.is_empty())
        {
            problems.push(explained(problem));
        }
    }
    Some(problems)
}

/// `problems` of a v1 object, with each one a migration hint covers (a field at its
/// pre-v1 place or with its pre-v1 value, found by its path) said as the hint: a
/// `spec.disruption.expireAfter` in a `karpenter.sh/v1` NodePool is told where it moved,
/// not only that the schema does not know it. Hints for fields without a problem (a valid
/// v1 object) are not added.
pub fn explain_v1_problems(
    kind: KarpenterKind,
    value: &Value,
    problems: Vec<Problem>,
) -> Vec<Problem> {
    let mut hints = match kind {
        KarpenterKind::NodePool => nodepool_hints(value),
        KarpenterKind::NodeClaim | KarpenterKind::NodeOverlay | KarpenterKind::CapacityBuffer => {
            Vec::new()
        }
        KarpenterKind::EC2NodeClass => ec2nodeclass_hints(value),
    };
    hints.extend(provisioner_label_hints(value));
    // A required field a v1 object lacks is just missing, not one v1beta1 let it leave out.
    hints.retain(|hint| !hint.message.starts_with("Required value"));
    let covers = |hint: &Problem, problem: &Problem| {
        problem.path == hint.path || problem.path.starts_with(&format!("{}.", hint.path))
    };
    // Each hint takes the place of the first problem it covers; the others it covers go.
    let mut said = vec![false; hints.len()];
    let mut explained = Vec::with_capacity(problems.len());
    for problem in problems {
        match hints.iter().position(|hint| covers(hint, &problem)) {
            Some(index) if !said[index] => {
                said[index] = true;
                explained.push(hints[index].clone());
            }
            Some(_) => {}
            None => explained.push(problem),
        }
    }
    explained
}

/// Problems an object of any kind has for using the v1alpha5 label (a Deployment selecting
/// `karpenter.sh/provisioner-name` never lands on a node kerf or Karpenter v1 launches).
pub fn provisioner_label_hints(value: &Value) -> Vec<Problem> {
    let mut found = Vec::new();
    find_provisioner_label(value, &FieldPath::root(), &mut found);
    found
        .into_iter()
        .map(|path| Problem {
            path: path.as_str().to_owned(),
            message: format!(
                "{PROVISIONER_NAME_LABEL} was replaced by {}: nodes launched since v1beta1 carry only the new label",
                labels::NODEPOOL
            ),
        })
        .collect()
}

fn find_provisioner_label(value: &Value, path: &FieldPath, found: &mut Vec<FieldPath>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                // Label-like keys are written as map keys, as the API server writes them.
                let child_path = if key.contains(['.', '/']) {
                    path.key(key)
                } else {
                    path.child(key)
                };
                let is_label = key == PROVISIONER_NAME_LABEL
                    || (key == "key" && child.as_str() == Some(PROVISIONER_NAME_LABEL));
                if is_label {
                    found.push(child_path);
                } else {
                    find_provisioner_label(child, &child_path, found);
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                find_provisioner_label(item, &path.index(index), found);
            }
        }
        _ => {}
    }
}

fn version_moved(api_version: &str, served: KarpenterKind) -> Problem {
    Problem {
        path: "apiVersion".to_owned(),
        message: format!(
            "{api_version} is not served by kerf (nor by Karpenter since v1.1): change it to {}; the hints below say what else moved",
            served.api_version()
        ),
    }
}

fn replaced_kind(old: &str, new: KarpenterKind) -> Problem {
    Problem {
        path: "kind".to_owned(),
        message: format!(
            "{old} was replaced by {} ({}) in Karpenter v1beta1; rewrite it as one (see Karpenter's v1 migration guide)",
            new.as_str(),
            new.api_version()
        ),
    }
}

fn hint(path: &str, message: &str) -> Problem {
    Problem {
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

fn nodepool_hints(value: &Value) -> Vec<Problem> {
    let spec = &value["spec"];
    let disruption = &spec["disruption"];
    let template = &spec["template"]["spec"];
    let mut hints = Vec::new();
    if disruption["consolidationPolicy"] == "WhenUnderutilized" {
        hints.push(hint(
            "spec.disruption.consolidationPolicy",
            "WhenUnderutilized is now WhenEmptyOrUnderutilized",
        ));
    }
    if disruption.is_object() && disruption.get("consolidateAfter").is_none() {
        hints.push(hint(
            "spec.disruption.consolidateAfter",
            "Required value: v1 requires it (v1beta1 forbade it with WhenUnderutilized); 0s consolidates as v1beta1 did",
        ));
    }
    if disruption.get("expireAfter").is_some() {
        hints.push(hint(
            "spec.disruption.expireAfter",
            "moved to spec.template.spec.expireAfter (default 720h)",
        ));
    }
    if template.get("kubelet").is_some() {
        hints.push(hint(
            "spec.template.spec.kubelet",
            "moved to the EC2NodeClass's spec.kubelet",
        ));
    }
    let node_class_ref = &template["nodeClassRef"];
    if node_class_ref.is_object()
        && (node_class_ref.get("apiVersion").is_some() || node_class_ref.get("group").is_none())
    {
        hints.push(hint(
            "spec.template.spec.nodeClassRef",
            "v1 names the class by group, kind and name: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: ...} (apiVersion is gone)",
        ));
    }
    hints
}

fn ec2nodeclass_hints(value: &Value) -> Vec<Problem> {
    let spec = &value["spec"];
    let mut hints = Vec::new();
    if spec.get("amiSelectorTerms").is_none() {
        let family = spec["amiFamily"].as_str().unwrap_or("AL2023");
        hints.push(Problem {
            path: "spec.amiSelectorTerms".to_owned(),
            message: format!(
                "Required value: v1 requires amiSelectorTerms; for the latest {family} AMI use amiSelectorTerms: [{{alias: {}@latest}}]",
                family.to_ascii_lowercase()
            ),
        });
    }
    if spec["amiFamily"] == "Ubuntu" {
        hints.push(hint(
            "spec.amiFamily",
            "Ubuntu is no longer an AMI family: use AL2023, Bottlerocket or Custom with amiSelectorTerms by id or tags",
        ));
    }
    hints
}

fn provisioner_hints(value: &Value) -> Vec<Problem> {
    let spec = &value["spec"];
    let mut hints = vec![replaced_kind("Provisioner", KarpenterKind::NodePool)];
    let moves = [
        (
            "ttlSecondsAfterEmpty",
            "became spec.disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: <duration>}",
        ),
        (
            "ttlSecondsUntilExpired",
            "became spec.template.spec.expireAfter",
        ),
        (
            "consolidation",
            "became spec.disruption.consolidationPolicy: WhenEmptyOrUnderutilized",
        ),
        (
            "providerRef",
            "became spec.template.spec.nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: ...}",
        ),
        ("provider", "moved into an EC2NodeClass"),
        (
            "kubeletConfiguration",
            "moved to the EC2NodeClass's spec.kubelet",
        ),
        ("requirements", "moved to spec.template.spec.requirements"),
        ("taints", "moved to spec.template.spec.taints"),
        ("labels", "moved to spec.template.metadata.labels"),
    ];
    for (field, message) in moves {
        if spec.get(field).is_some() {
            hints.push(hint(&format!("spec.{field}"), message));
        }
    }
    hints.extend(provisioner_label_hints(value));
    hints
}

/// A v1 schema problem on a migrated object, said as the v1 object's.
fn explained(problem: Problem) -> Problem {
    Problem {
        message: format!("{} (as karpenter v1)", problem.message),
        ..problem
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(problems: &[Problem]) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_v1beta1_nodepool_gets_every_move_named() {
        let nodepool = json!({
            "apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "disruption": {"consolidationPolicy": "WhenUnderutilized", "expireAfter": "720h"},
                "template": {"spec": {
                    "kubelet": {"maxPods": 110},
                    "nodeClassRef": {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "karpenter.sh/provisioner-name", "operator": "Exists"}]
                }}
            }
        });
        let problems =
            pre_v1_problems("karpenter.sh/v1beta1", "NodePool", &nodepool).expect("a pre-v1 kind");
        let text = messages(&problems);
        let has = |path: &str, words: &str| {
            assert!(
                text.iter()
                    .any(|t| t.starts_with(&format!("{path}: ")) && t.contains(words)),
                "{path} / {words}: {text:#?}"
            );
        };
        has("apiVersion", "change it to karpenter.sh/v1");
        has(
            "spec.disruption.consolidationPolicy",
            "WhenEmptyOrUnderutilized",
        );
        has("spec.disruption.consolidateAfter", "0s");
        has(
            "spec.disruption.expireAfter",
            "spec.template.spec.expireAfter",
        );
        has("spec.template.spec.kubelet", "EC2NodeClass's spec.kubelet");
        has("spec.template.spec.nodeClassRef", "group");
        has(
            "spec.template.spec.requirements[0].key",
            "karpenter.sh/nodepool",
        );
        // The schema's own complaints about fields a hint already covers are not repeated.
        let kubelet = text.iter().filter(|t| t.contains("kubelet")).count();
        assert_eq!(kubelet, 1, "{text:#?}");
    }

    #[test]
    fn a_v1_nodepool_with_fields_in_their_v1beta1_places_is_told_where_they_moved() {
        let nodepool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                               "consolidateAfter": "1m", "expireAfter": "720h"},
                "template": {"spec": {
                    "kubelet": {"maxPods": 110},
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
                }}
            }
        });
        let problems = validate_value(KarpenterKind::NodePool, &nodepool);
        let text = messages(&explain_v1_problems(
            KarpenterKind::NodePool,
            &nodepool,
            problems,
        ));
        assert_eq!(
            text,
            [
                "spec.disruption.expireAfter: moved to spec.template.spec.expireAfter (default 720h)",
                "spec.template.spec.kubelet: moved to the EC2NodeClass's spec.kubelet",
            ],
            "{text:#?}"
        );
        // A valid v1 NodePool gets no hint.
        let mut valid = nodepool.clone();
        valid["spec"]["disruption"]
            .as_object_mut()
            .expect("object")
            .remove("expireAfter");
        valid["spec"]["template"]["spec"]
            .as_object_mut()
            .expect("object")
            .remove("kubelet");
        let problems = validate_value(KarpenterKind::NodePool, &valid);
        assert!(explain_v1_problems(KarpenterKind::NodePool, &valid, problems).is_empty());
    }

    #[test]
    fn a_v1beta1_ec2nodeclass_is_told_about_ami_selector_terms() {
        let class = json!({
            "apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"amiFamily": "AL2", "role": "KarpenterNodeRole",
                     "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                     "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]}
        });
        let text = messages(
            &pre_v1_problems("karpenter.k8s.aws/v1beta1", "EC2NodeClass", &class)
                .expect("a pre-v1 kind"),
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.amiSelectorTerms: ") && t.contains("al2@latest")),
            "{text:#?}"
        );
    }

    #[test]
    fn a_provisioner_is_mapped_field_by_field() {
        let provisioner = json!({
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
            "metadata": {"name": "default"},
            "spec": {"ttlSecondsAfterEmpty": 30, "providerRef": {"name": "default"}}
        });
        let text = messages(
            &pre_v1_problems("karpenter.sh/v1alpha5", "Provisioner", &provisioner)
                .expect("a pre-v1 kind"),
        );
        assert!(text[0].starts_with("kind: Provisioner was replaced by NodePool"));
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.ttlSecondsAfterEmpty: ") && t.contains("WhenEmpty"))
        );
        assert!(text.iter().any(|t| t.starts_with("spec.providerRef: ")));
    }

    #[test]
    fn other_kinds_and_versions_are_not_pre_v1() {
        assert!(pre_v1_problems("karpenter.sh/v1", "NodePool", &json!({})).is_none());
        assert!(pre_v1_problems("apps/v1", "Deployment", &json!({})).is_none());
    }

    #[test]
    fn the_old_label_is_found_in_any_object() {
        let deployment = json!({"spec": {"template": {"spec": {
            "nodeSelector": {"karpenter.sh/provisioner-name": "default"}
        }}}});
        let problems = provisioner_label_hints(&deployment);
        assert_eq!(
            messages(&problems),
            vec![format!(
                "spec.template.spec.nodeSelector[karpenter.sh/provisioner-name]: {PROVISIONER_NAME_LABEL} was replaced by karpenter.sh/nodepool: nodes launched since v1beta1 carry only the new label"
            )]
        );
    }
}
