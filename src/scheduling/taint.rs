//! Taint and toleration matching as the kube-scheduler applies it, over the k8s-openapi types.
//! Every taint on a node, PreferNoSchedule included, must be tolerated for Karpenter to place
//! a pod there; preference relaxation is what later adds a PreferNoSchedule toleration.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether `toleration` tolerates `taint` (Kubernetes `Toleration.ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            // An empty key with Equal is invalid for Kubernetes; it only matches through Exists.
            !key.is_empty() && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first taint none of `tolerations` tolerates.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Upstream's rendering of a taint in errors: `key=value:Effect`.
pub fn render(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={}:{}", taint.key, v, taint.effect),
        _ => format!("{}:{}", taint.key, taint.effect),
    }
}

/// Taints a node carries only while it starts up; ignored on uninitialized nodes.
pub fn is_ephemeral(taint: &Taint) -> bool {
    matches!(
        (taint.key.as_str(), taint.effect.as_str()),
        ("node.kubernetes.io/not-ready", _)
            | ("node.kubernetes.io/unreachable", "NoSchedule")
            | ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule")
            | (crate::labels::UNREGISTERED_TAINT, "NoExecute")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.map(Into::into), effect: effect.into(), time_added: None }
    }

    fn toleration(key: Option<&str>, op: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: Some(op.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn equal_needs_key_and_value() {
        let t = taint("gpu", Some("true"), "NoSchedule");
        assert!(tolerates(&toleration(Some("gpu"), "Equal", Some("true"), None), &t));
        assert!(!tolerates(&toleration(Some("gpu"), "Equal", Some("false"), None), &t));
        assert!(!tolerates(&toleration(Some("gpu"), "Equal", Some("true"), Some("NoExecute")), &t));
    }

    #[test]
    fn exists_without_key_tolerates_everything_of_its_effect() {
        let t = taint("a", None, "PreferNoSchedule");
        assert!(tolerates(&toleration(None, "Exists", None, Some("PreferNoSchedule")), &t));
        assert!(!tolerates(&toleration(None, "Exists", None, Some("NoSchedule")), &t));
        assert!(tolerates(&toleration(None, "Exists", None, None), &t));
    }

    #[test]
    fn first_untolerated_names_the_taint() {
        let taints = [taint("a", Some("1"), "NoSchedule"), taint("b", None, "NoSchedule")];
        let tols = [toleration(Some("a"), "Exists", None, None)];
        let t = first_untolerated(&taints, &tols).expect("b untolerated");
        assert_eq!(render(t), "b:NoSchedule");
        assert_eq!(render(&taints[0]), "a=1:NoSchedule");
    }
}
