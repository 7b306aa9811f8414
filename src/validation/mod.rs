//! Validation of Karpenter objects as the API server enforces it from the CRD schemas, plus
//! the checks upstream Karpenter makes before using an object. [`validate_object`] takes a
//! manifest object and says whether it is a Karpenter object at all and, if so, every
//! problem with it, each at an API-server style field path. Only create-time rules apply:
//! rules comparing with a stored object (`oldSelf`) and `status` (ignored by the API server
//! on create, it being a subresource) are not checked.

pub mod cel;
pub mod kubelet;
pub mod metadata;
pub mod migration;
pub mod names;
pub mod path;
pub mod runtime;
pub mod schema;

pub use path::{FieldPath, Problem};

use crate::api::{EC2NodeClass, NodeClaim, NodePool};
use crate::labels;
use crate::manifest::Object;
use schema::SCHEMAS;
use serde_json::Value;

/// The Karpenter kinds kerf serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KarpenterKind {
    NodePool,
    NodeClaim,
    EC2NodeClass,
    /// Alpha, `karpenter.sh/v1alpha1`.
    NodeOverlay,
    /// Cluster-autoscaler's `autoscaling.x-k8s.io/v1beta1`, which Karpenter serves too.
    CapacityBuffer,
}

/// CapacityBuffer's API group.
pub const AUTOSCALING_GROUP: &str = "autoscaling.x-k8s.io";

impl KarpenterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodePool => "NodePool",
            Self::NodeClaim => "NodeClaim",
            Self::EC2NodeClass => "EC2NodeClass",
            Self::NodeOverlay => "NodeOverlay",
            Self::CapacityBuffer => "CapacityBuffer",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Self::NodePool | Self::NodeClaim => "karpenter.sh/v1",
            Self::EC2NodeClass => "karpenter.k8s.aws/v1",
            Self::NodeOverlay => "karpenter.sh/v1alpha1",
            Self::CapacityBuffer => "autoscaling.x-k8s.io/v1beta1",
        }
    }

    const ALL: [Self; 5] = [
        Self::NodePool,
        Self::NodeClaim,
        Self::EC2NodeClass,
        Self::NodeOverlay,
        Self::CapacityBuffer,
    ];

    fn from_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

/// What validation concluded about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not in a Karpenter API group: nothing to say.
    Ignored,
    Valid(KarpenterKind),
    Invalid(Vec<Problem>),
}

/// Suffix for problems the API server lets through but upstream's controller rejects.
const CONTROLLER_NOTE: &str = " (rejected by the controller: ValidationSucceeded=False)";

/// Validates one manifest object.
pub fn validate_object(object: &Object) -> Verdict {
    let group = object.group();
    if group != labels::GROUP && group != labels::AWS_GROUP && group != AUTOSCALING_GROUP {
        return Verdict::Ignored;
    }
    let kind = match KarpenterKind::from_kind(&object.kind) {
        Some(kind) if kind.api_version() == object.api_version => kind,
        _ => {
            let problems =
                migration::pre_v1_problems(&object.api_version, &object.kind, &object.value)
                    .unwrap_or_else(|| vec![unsupported_type(object)]);
            return Verdict::Invalid(problems);
        }
    };
    let problems =
        migration::explain_v1_problems(kind, &object.value, validate_value(kind, &object.value));
    if problems.is_empty() {
        Verdict::Valid(kind)
    } else {
        Verdict::Invalid(problems)
    }
}

fn unsupported_type(object: &Object) -> Problem {
    let served = KarpenterKind::ALL
        .iter()
        .map(|k| format!("{} {}", k.api_version(), k.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    Problem {
        path: String::new(),
        message: format!(
            "no kind {:?} in version {:?}: kerf serves {served}",
            object.kind, object.api_version
        ),
    }
}

/// Every problem with an object of a known Karpenter kind (empty when valid).
pub fn validate_value(kind: KarpenterKind, value: &Value) -> Vec<Problem> {
    let mut problems = metadata::validate_metadata(value.get("metadata"));
    let schema = SCHEMAS
        .schema(kind.as_str())
        .expect("every KarpenterKind has a vendored CRD");
    let mut object = value.clone();
    problems.extend(SCHEMAS.validate(schema, &mut object, &["metadata", "status"]));
    let controller = match kind {
        KarpenterKind::NodePool => runtime::validate_nodepool(&object),
        KarpenterKind::NodeClaim => runtime::validate_nodeclaim(&object),
        KarpenterKind::EC2NodeClass => ec2nodeclass_controller_checks(&object),
        KarpenterKind::NodeOverlay => nodeoverlay_controller_checks(&object),
        KarpenterKind::CapacityBuffer => Vec::new(),
    };
    for problem in controller {
        // A field the schema already rejected needs no second opinion.
        if !problems.iter().any(|p| p.path == problem.path) {
            problems.push(Problem {
                message: format!("{}{CONTROLLER_NOTE}", problem.message),
                ..problem
            });
        }
    }
    if problems.is_empty() {
        problems.extend(typed_conversion_problem(kind, object));
    }
    problems
}

/// Upstream's `RuntimeValidate` of a NodeOverlay (`ValidationSucceeded=False`,
/// `RuntimeValidation`), on the whole spec.
fn nodeoverlay_controller_checks(object: &Value) -> Vec<Problem> {
    let Ok(overlay) = serde_json::from_value::<crate::api::NodeOverlay>(object.clone()) else {
        return Vec::new();
    };
    match runtime::validate_nodeoverlay(&overlay) {
        Ok(()) => Vec::new(),
        Err(message) => vec![Problem {
            path: FieldPath::root().child("spec").to_string(),
            message,
        }],
    }
}

fn ec2nodeclass_controller_checks(object: &Value) -> Vec<Problem> {
    let path = FieldPath::root().child("spec").child("kubelet");
    match object["spec"].get("kubelet").and_then(Value::as_object) {
        Some(kubelet) => kubelet::validate_kubelet(kubelet, &path),
        None => Vec::new(),
    }
}

/// A valid object must also read as kerf's typed API object; if it does not, kerf's types
/// and the schema disagree, which is worth saying rather than failing later.
fn typed_conversion_problem(kind: KarpenterKind, object: Value) -> Option<Problem> {
    let result = match kind {
        KarpenterKind::NodePool => serde_json::from_value::<NodePool>(object).map(drop),
        KarpenterKind::NodeClaim => serde_json::from_value::<NodeClaim>(object).map(drop),
        KarpenterKind::EC2NodeClass => serde_json::from_value::<EC2NodeClass>(object).map(drop),
        KarpenterKind::NodeOverlay => {
            serde_json::from_value::<crate::api::NodeOverlay>(object).map(drop)
        }
        KarpenterKind::CapacityBuffer => {
            serde_json::from_value::<crate::api::CapacityBuffer>(object).map(drop)
        }
    };
    result.err().map(|e| Problem {
        path: String::new(),
        message: format!("cannot be read as a {}: {e}", kind.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse_all;

    fn verdict(yaml: &str) -> Verdict {
        let objects = parse_all(yaml, "t.yaml").unwrap();
        validate_object(&objects[0])
    }

    #[test]
    fn ignores_other_groups_and_rejects_unserved_versions() {
        assert_eq!(
            verdict("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"),
            Verdict::Ignored
        );
        let Verdict::Invalid(problems) =
            verdict("apiVersion: karpenter.sh/v2\nkind: NodePool\nmetadata: {name: p}\n")
        else {
            panic!("v2 is not served")
        };
        assert!(
            problems[0]
                .message
                .starts_with("no kind \"NodePool\" in version \"karpenter.sh/v2\"")
        );
        let Verdict::Invalid(problems) =
            verdict("apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: p}\n")
        else {
            panic!("v1beta1 is not served")
        };
        assert_eq!(problems[0].path, "apiVersion", "{problems:?}");
    }

    #[test]
    fn knows_nodeoverlays_and_capacitybuffers_with_upstreams_rules() {
        let overlay = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: o}\nspec:\n  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}]\n  price: \"0.1\"\n";
        assert_eq!(verdict(overlay), Verdict::Valid(KarpenterKind::NodeOverlay));
        let both = format!("{overlay}  priceAdjustment: \"-10%\"\n");
        let Verdict::Invalid(problems) = verdict(&both) else {
            panic!("price and priceAdjustment together")
        };
        assert!(
            problems.iter().any(|p| p
                .message
                .contains("cannot set both 'price' and 'priceAdjustment'")),
            "{problems:?}"
        );
        let cpu = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: o}\nspec:\n  requirements: []\n  capacity: {cpu: \"4\"}\n";
        let Verdict::Invalid(problems) = verdict(cpu) else {
            panic!("cpu is restricted")
        };
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("invalid resource restricted"))
        );
        let buffer = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: b, namespace: default}\nspec:\n  podTemplateRef: {name: t}\n  replicas: 2\n";
        assert_eq!(
            verdict(buffer),
            Verdict::Valid(KarpenterKind::CapacityBuffer)
        );
        let two_refs = format!("{buffer}  scalableRef: {{kind: Deployment, name: web}}\n");
        let Verdict::Invalid(problems) = verdict(&two_refs) else {
            panic!("two references")
        };
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("either PodTemplateRef or ScalableRef")),
            "{problems:?}"
        );
        let without_size = "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\nmetadata: {name: b}\nspec:\n  podTemplateRef: {name: t}\n";
        assert!(matches!(verdict(without_size), Verdict::Invalid(_)));
    }

    #[test]
    fn accepts_a_minimal_nodepool() {
        let yaml = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";
        assert_eq!(verdict(yaml), Verdict::Valid(KarpenterKind::NodePool));
    }
}
