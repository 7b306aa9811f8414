//! Settings names from before Karpenter v1 that a team's manifests may still carry. Upstream
//! v1 reads none of them, and neither does kerf; a start-up warning names each one set and
//! the name that replaced it, so a setting the team believes on (say `AWS_ISOLATED_VPC`,
//! which the older troubleshooting guide tells users to set) is not ignored silently.

/// A pre-v1 environment variable and what took its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    pub name: &'static str,
    /// The v1 setting, or `None` when the setting went without a replacement.
    pub replaced_by: Option<&'static str>,
}

/// The controller's environment variables of Karpenter v0.1x (before the v0.19 move to the
/// `karpenter-global-settings` ConfigMap), which old Helm values and guides still set.
pub const RETIRED: [Retired; 6] = [
    Retired {
        name: "AWS_ISOLATED_VPC",
        replaced_by: Some("ISOLATED_VPC"),
    },
    Retired {
        name: "VM_MEMORY_OVERHEAD",
        replaced_by: Some("VM_MEMORY_OVERHEAD_PERCENT"),
    },
    Retired {
        name: "AWS_DEFAULT_INSTANCE_PROFILE",
        replaced_by: Some("an EC2NodeClass's spec.role or spec.instanceProfile"),
    },
    Retired {
        name: "AWS_ENI_LIMITED_POD_DENSITY",
        replaced_by: Some("an EC2NodeClass's spec.kubelet.maxPods"),
    },
    Retired {
        name: "AWS_ENABLE_POD_ENI",
        replaced_by: None,
    },
    Retired {
        name: "AWS_NODE_NAME_CONVENTION",
        replaced_by: None,
    },
];

/// One warning per retired name set (non-empty) in the environment `var` reads.
pub fn retired_settings(var: impl Fn(&str) -> Option<String>) -> Vec<String> {
    RETIRED
        .iter()
        .filter(|r| var(r.name).is_some_and(|v| !v.is_empty()))
        .map(|r| match r.replaced_by {
            Some(new) => format!(
                "{} is a setting from before Karpenter v1 and is not read: use {new}",
                r.name
            ),
            None => format!(
                "{} is a setting from before Karpenter v1 and is not read: it has no replacement",
                r.name
            ),
        })
        .collect()
}

/// Logs [`retired_settings`] of the process environment as warnings.
pub fn warn_retired_settings() {
    for warning in retired_settings(|name| std::env::var(name).ok()) {
        tracing::warn!(setting = %warning, "retired setting ignored");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_retired_name_set_is_named_with_its_replacement() {
        let env = |name: &str| match name {
            "AWS_ISOLATED_VPC" => Some("true".to_owned()),
            "AWS_ENABLE_POD_ENI" => Some("false".to_owned()),
            "VM_MEMORY_OVERHEAD" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            retired_settings(env),
            [
                "AWS_ISOLATED_VPC is a setting from before Karpenter v1 and is not read: use ISOLATED_VPC",
                "AWS_ENABLE_POD_ENI is a setting from before Karpenter v1 and is not read: it has no replacement",
            ]
        );
        assert!(retired_settings(|_| None).is_empty());
    }
}
