//! What an EC2NodeClass contributes to instance-type capacity and allocatable, through the
//! catalog's [`AllocatableSettings::for_node_class`] (shared with `kerf catalog` and the
//! controller), under the controller settings a plan runs with. NodePools whose class is not
//! in the input get [`default_settings`]: AL2023 with upstream's defaults.

use crate::api::EC2NodeClass;
use crate::catalog::AllocatableSettings;

use super::FieldError;

/// Controller settings that shape allocatable besides the EC2NodeClass
/// (`RESERVED_ENIS`, `VM_MEMORY_OVERHEAD_PERCENT`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControllerSettings {
    pub reserved_enis: u32,
    pub vm_memory_overhead_percent: f64,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        let defaults = AllocatableSettings::default();
        Self {
            reserved_enis: defaults.reserved_enis,
            vm_memory_overhead_percent: defaults.vm_memory_overhead_percent,
        }
    }
}

/// Settings for a NodePool whose EC2NodeClass is not in the input: AL2023, no overrides.
pub fn default_settings(controller: ControllerSettings) -> AllocatableSettings {
    AllocatableSettings {
        reserved_enis: controller.reserved_enis,
        vm_memory_overhead_percent: controller.vm_memory_overhead_percent,
        ..AllocatableSettings::default()
    }
}

/// The allocatable settings of `class`; a value the mapping refuses names its field.
pub fn allocatable_settings(
    class: &EC2NodeClass,
    controller: ControllerSettings,
) -> Result<AllocatableSettings, FieldError> {
    AllocatableSettings::for_node_class(
        class,
        controller.reserved_enis,
        controller.vm_memory_overhead_percent,
    )
    .map_err(|error| {
        let path = error.path().to_string();
        let text = error.to_string();
        let message = text
            .strip_prefix(&format!("{path}: "))
            .unwrap_or(&text)
            .to_string();
        FieldError::new(path, message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AmiFamily;

    fn class(yaml_spec: &str) -> EC2NodeClass {
        let yaml = format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: c}}\nspec:\n  role: r\n  subnetSelectorTerms: [{{id: subnet-1}}]\n  securityGroupSelectorTerms: [{{id: sg-1}}]\n{yaml_spec}"
        );
        let value: serde_json::Value = serde_saphyr::from_str(&yaml).expect("yaml");
        serde_json::from_value(value).expect("EC2NodeClass")
    }

    #[test]
    fn the_class_and_the_controller_settings_both_apply() {
        let class =
            class("  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  kubelet: {maxPods: 42}\n");
        let controller = ControllerSettings {
            reserved_enis: 1,
            vm_memory_overhead_percent: 0.1,
        };
        let settings = allocatable_settings(&class, controller).expect("maps");
        assert_eq!(settings.ami_family, AmiFamily::Bottlerocket);
        assert_eq!(settings.kubelet.max_pods, Some(42));
        assert_eq!(settings.reserved_enis, 1);
        assert_eq!(settings.vm_memory_overhead_percent, 0.1);
    }

    #[test]
    fn a_refused_value_names_its_field_once() {
        let class = class(
            "  amiSelectorTerms: [{alias: al2023@latest}]\n  kubelet: {kubeReserved: {cpu: 1x}}\n",
        );
        let error = allocatable_settings(&class, ControllerSettings::default()).expect_err("1x");
        assert!(
            error.path.starts_with("spec.kubelet.kubeReserved"),
            "{}",
            error.path
        );
        assert!(!error.message.starts_with("spec."), "{}", error.message);
    }

    #[test]
    fn defaults_are_al2023_with_the_controller_settings() {
        let controller = ControllerSettings {
            reserved_enis: 2,
            vm_memory_overhead_percent: 0.05,
        };
        let settings = default_settings(controller);
        assert_eq!(settings.ami_family, AmiFamily::Al2023);
        assert_eq!(settings.reserved_enis, 2);
    }
}
