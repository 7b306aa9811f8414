//! What an EC2NodeClass contributes to instance-type capacity and allocatable: the typed
//! `karpenter.k8s.aws/v1` object mapped onto the catalog's [`AllocatableSettings`] (AMI
//! family, kubelet reservations and eviction thresholds, max pods, block devices, instance
//! store policy, EFA-only interfaces). NodePools whose class is not in the input get
//! [`default_settings`]: AL2023 with upstream's defaults.

use crate::api::ec2nodeclass::{InstanceStorePolicy, InterfaceType};
use crate::api::{AmiFamily as ApiAmiFamily, EC2NodeClass};
use crate::catalog::{
    AllocatableSettings, AmiFamily, BlockDeviceMapping, EvictionValue, KubeletSettings,
    NetworkInterface,
};
use crate::resources::{Quantity, Resources};
use std::collections::BTreeMap;

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

/// The allocatable settings of `class`; an unparsable value names its field.
pub fn allocatable_settings(
    class: &EC2NodeClass,
    controller: ControllerSettings,
) -> Result<AllocatableSettings, FieldError> {
    let spec = &class.spec;
    Ok(AllocatableSettings {
        ami_family: ami_family(class.ami_family()),
        kubelet: kubelet(class)?,
        block_device_mappings: block_device_mappings(class)?,
        instance_store_raid0: spec.instance_store_policy == Some(InstanceStorePolicy::Raid0),
        network_interfaces: (!spec.network_interfaces.is_empty()).then(|| {
            spec.network_interfaces
                .iter()
                .map(|interface| NetworkInterface {
                    network_card_index: u32::try_from(interface.network_card_index).unwrap_or(0),
                    device_index: u32::try_from(interface.device_index).unwrap_or(0),
                    efa_only: interface.interface_type == InterfaceType::EfaOnly,
                })
                .collect()
        }),
        reserved_enis: controller.reserved_enis,
        vm_memory_overhead_percent: controller.vm_memory_overhead_percent,
    })
}

fn ami_family(family: ApiAmiFamily) -> AmiFamily {
    match family {
        ApiAmiFamily::Al2 => AmiFamily::AL2,
        ApiAmiFamily::Al2023 => AmiFamily::AL2023,
        ApiAmiFamily::Bottlerocket => AmiFamily::Bottlerocket,
        ApiAmiFamily::Custom => AmiFamily::Custom,
        ApiAmiFamily::Windows2019 => AmiFamily::Windows2019,
        ApiAmiFamily::Windows2022 => AmiFamily::Windows2022,
        ApiAmiFamily::Windows2025 => AmiFamily::Windows2025,
    }
}

fn kubelet(class: &EC2NodeClass) -> Result<KubeletSettings, FieldError> {
    let Some(kubelet) = class.kubelet() else {
        return Ok(KubeletSettings::default());
    };
    let count = |value: Option<i32>, field: &str| {
        value
            .map(|n| {
                u32::try_from(n).map_err(|_| {
                    FieldError::new(
                        format!("spec.kubelet.{field}"),
                        format!("must not be negative, got {n}"),
                    )
                })
            })
            .transpose()
    };
    Ok(KubeletSettings {
        max_pods: count(kubelet.max_pods, "maxPods")?,
        pods_per_core: count(kubelet.pods_per_core, "podsPerCore")?,
        kube_reserved: resources(&kubelet.kube_reserved, "spec.kubelet.kubeReserved")?,
        system_reserved: resources(&kubelet.system_reserved, "spec.kubelet.systemReserved")?,
        eviction_hard: eviction(&kubelet.eviction_hard, "spec.kubelet.evictionHard")?,
        eviction_soft: eviction(&kubelet.eviction_soft, "spec.kubelet.evictionSoft")?,
    })
}

fn resources(entries: &BTreeMap<String, String>, path: &str) -> Result<Resources, FieldError> {
    let mut resources = Resources::new();
    for (name, text) in entries {
        let quantity = Quantity::parse(text)
            .map_err(|error| FieldError::new(format!("{path}.{name}"), error.to_string()))?;
        resources.insert(name, quantity);
    }
    Ok(resources)
}

fn eviction(
    entries: &BTreeMap<String, String>,
    path: &str,
) -> Result<BTreeMap<String, EvictionValue>, FieldError> {
    entries
        .iter()
        .map(|(signal, text)| {
            let value = text
                .parse::<EvictionValue>()
                .map_err(|error| FieldError::new(format!("{path}.{signal}"), error.to_string()))?;
            Ok((signal.clone(), value))
        })
        .collect()
}

fn block_device_mappings(class: &EC2NodeClass) -> Result<Vec<BlockDeviceMapping>, FieldError> {
    class
        .spec
        .block_device_mappings
        .iter()
        .enumerate()
        .map(|(index, mapping)| {
            let volume_size = mapping
                .ebs
                .as_ref()
                .and_then(|ebs| ebs.volume_size.as_ref())
                .map(|size| {
                    Quantity::parse(&size.0).map_err(|error| {
                        FieldError::new(
                            format!("spec.blockDeviceMappings[{index}].ebs.volumeSize"),
                            error.to_string(),
                        )
                    })
                })
                .transpose()?;
            Ok(BlockDeviceMapping {
                device_name: mapping.device_name.clone(),
                volume_size,
                root_volume: mapping.root_volume,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels;

    fn class(yaml_spec: &str) -> EC2NodeClass {
        let yaml = format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: c}}\nspec:\n  role: r\n  subnetSelectorTerms: [{{id: subnet-1}}]\n  securityGroupSelectorTerms: [{{id: sg-1}}]\n{yaml_spec}"
        );
        let value: serde_json::Value = serde_saphyr::from_str(&yaml).expect("yaml");
        serde_json::from_value(value).expect("EC2NodeClass")
    }

    #[test]
    fn maps_family_kubelet_volumes_and_interfaces() {
        let class = class(
            "  amiSelectorTerms: [{alias: bottlerocket@latest}]
  kubelet:
    maxPods: 42
    podsPerCore: 4
    kubeReserved: {cpu: 200m}
    systemReserved: {memory: 300Mi}
    evictionHard: {memory.available: 5%}
  instanceStorePolicy: RAID0
  blockDeviceMappings:
    - deviceName: /dev/xvdb
      rootVolume: true
      ebs: {volumeSize: 80Gi}
  networkInterfaces:
    - {networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}
    - {networkCardIndex: 1, deviceIndex: 1, interfaceType: efa-only}
",
        );
        let settings = allocatable_settings(&class, ControllerSettings::default()).expect("maps");
        assert_eq!(settings.ami_family, AmiFamily::Bottlerocket);
        assert_eq!(settings.kubelet.max_pods, Some(42));
        assert_eq!(settings.kubelet.pods_per_core, Some(4));
        assert_eq!(
            settings.kubelet.kube_reserved.get(labels::RESOURCE_CPU),
            Quantity::parse("200m").ok()
        );
        assert_eq!(
            settings
                .kubelet
                .system_reserved
                .get(labels::RESOURCE_MEMORY),
            Quantity::parse("300Mi").ok()
        );
        assert_eq!(
            settings.kubelet.eviction_hard.get("memory.available"),
            Some(&EvictionValue::Percentage(5.0))
        );
        assert!(settings.instance_store_raid0);
        assert_eq!(settings.block_device_mappings.len(), 1);
        assert!(settings.block_device_mappings[0].root_volume);
        assert_eq!(
            settings.block_device_mappings[0].volume_size,
            Quantity::parse("80Gi").ok()
        );
        let interfaces = settings.network_interfaces.expect("interfaces");
        assert_eq!(interfaces.iter().filter(|i| i.efa_only).count(), 1);
    }

    #[test]
    fn a_plain_class_keeps_the_defaults() {
        let class = class("  amiSelectorTerms: [{alias: al2023@latest}]\n");
        let controller = ControllerSettings {
            reserved_enis: 1,
            vm_memory_overhead_percent: 0.1,
        };
        let settings = allocatable_settings(&class, controller).expect("maps");
        assert_eq!(settings.ami_family, AmiFamily::AL2023);
        assert_eq!(settings.kubelet, KubeletSettings::default());
        assert!(settings.block_device_mappings.is_empty());
        assert!(settings.network_interfaces.is_none());
        assert_eq!(settings.reserved_enis, 1);
        assert_eq!(
            settings,
            AllocatableSettings {
                reserved_enis: 1,
                vm_memory_overhead_percent: 0.1,
                ..default_settings(controller)
            }
        );
    }

    #[test]
    fn windows_families_map_across() {
        let class = class("  amiSelectorTerms: [{alias: windows2022@latest}]\n");
        let settings = allocatable_settings(&class, ControllerSettings::default()).expect("maps");
        assert!(settings.ami_family.is_windows());
    }
}
