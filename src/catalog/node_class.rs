//! The typed mapping from an EC2NodeClass to the [`AllocatableSettings`] the catalog sizes
//! instance types with: the AMI family (`spec.amiFamily`, else the alias's family), the
//! kubelet fields that change allocatable, the block devices, the instance store policy and
//! the network interfaces, plus the controller's `RESERVED_ENIS` and
//! `VM_MEMORY_OVERHEAD_PERCENT`. `kerf catalog --nodeclass`, `kerf plan` and the controller
//! all go through [`AllocatableSettings::for_node_class`], so they agree on what a node class
//! means. Validation normally rejects bad values first; the mapping still refuses them, with
//! the field path, rather than guessing.

use super::settings::{
    AllocatableSettings, BlockDeviceSize, EvictionValue, EvictionValueError, KubeletSettings,
};
use crate::api::{
    AmiFamily, AmiFamilyError, EC2NodeClass, InstanceStorePolicy, KubeletConfiguration,
};
use crate::resources::{QuantityError, Resources};
use crate::validation::FieldPath;
use std::collections::BTreeMap;

/// Why an EC2NodeClass could not be turned into allocatable settings. Every variant names
/// the field, in `kerf validate`'s path notation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NodeClassSettingsError {
    #[error("spec.amiFamily: required when no spec.amiSelectorTerms[].alias is given")]
    MissingAmiFamily,
    #[error("{path}: {source}")]
    ParseAmiAlias {
        path: FieldPath,
        #[source]
        source: AmiFamilyError,
    },
    #[error("{path}: must not be negative, got {value}")]
    NegativeCount { path: FieldPath, value: i32 },
    #[error("{path}: {source}")]
    ParseQuantity {
        path: FieldPath,
        #[source]
        source: QuantityError,
    },
    #[error("{path}: {source}")]
    ParseEvictionThreshold {
        path: FieldPath,
        #[source]
        source: EvictionValueError,
    },
}

impl NodeClassSettingsError {
    /// The offending field, e.g. `spec.kubelet.evictionHard[memory.available]`.
    pub fn path(&self) -> &str {
        match self {
            Self::MissingAmiFamily => "spec.amiFamily",
            Self::ParseAmiAlias { path, .. }
            | Self::NegativeCount { path, .. }
            | Self::ParseQuantity { path, .. }
            | Self::ParseEvictionThreshold { path, .. } => path.as_str(),
        }
    }
}

impl AllocatableSettings {
    /// The settings for nodes of `node_class` under the controller settings `reserved_enis`
    /// (`RESERVED_ENIS`) and `vm_memory_overhead_percent` (`VM_MEMORY_OVERHEAD_PERCENT`).
    pub fn for_node_class(
        node_class: &EC2NodeClass,
        reserved_enis: u32,
        vm_memory_overhead_percent: f64,
    ) -> Result<AllocatableSettings, NodeClassSettingsError> {
        let spec = &node_class.spec;
        let path = FieldPath::root().child("spec");
        let kubelet = match &spec.kubelet {
            Some(kubelet) => kubelet_settings(kubelet, &path.child("kubelet"))?,
            None => KubeletSettings::default(),
        };
        let block_device_mappings = spec
            .block_device_mappings
            .iter()
            .enumerate()
            .map(|(i, mapping)| {
                BlockDeviceSize::from_mapping(mapping).map_err(|source| {
                    NodeClassSettingsError::ParseQuantity {
                        path: path
                            .child("blockDeviceMappings")
                            .index(i)
                            .child("ebs")
                            .child("volumeSize"),
                        source,
                    }
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(AllocatableSettings {
            ami_family: ami_family(node_class)?,
            kubelet,
            block_device_mappings,
            instance_store_raid0: spec.instance_store_policy == Some(InstanceStorePolicy::Raid0),
            // The CRD does not tell an empty list from an absent one; both leave the type's
            // own interfaces (and EFA count) in place.
            network_interfaces: (!spec.network_interfaces.is_empty())
                .then(|| spec.network_interfaces.clone()),
            reserved_enis,
            vm_memory_overhead_percent,
        })
    }
}

/// `spec.amiFamily` when set, else the family of the first alias term. Unlike
/// [`EC2NodeClass::ami_family`], which falls back to Custom, a missing or malformed family
/// is an error here: sizing a node for the wrong family would be silently wrong.
fn ami_family(node_class: &EC2NodeClass) -> Result<AmiFamily, NodeClassSettingsError> {
    if let Some(family) = node_class.spec.ami_family {
        return Ok(family);
    }
    let (index, alias) = node_class
        .spec
        .ami_selector_terms
        .iter()
        .enumerate()
        .find_map(|(i, term)| term.alias.as_deref().map(|alias| (i, alias)))
        .ok_or(NodeClassSettingsError::MissingAmiFamily)?;
    AmiFamily::from_alias(alias).map_err(|source| NodeClassSettingsError::ParseAmiAlias {
        path: FieldPath::root()
            .child("spec")
            .child("amiSelectorTerms")
            .index(index)
            .child("alias"),
        source,
    })
}

fn kubelet_settings(
    kubelet: &KubeletConfiguration,
    path: &FieldPath,
) -> Result<KubeletSettings, NodeClassSettingsError> {
    Ok(KubeletSettings {
        max_pods: count(kubelet.max_pods, &path.child("maxPods"))?,
        pods_per_core: count(kubelet.pods_per_core, &path.child("podsPerCore"))?,
        kube_reserved: resources(&kubelet.kube_reserved, &path.child("kubeReserved"))?,
        system_reserved: resources(&kubelet.system_reserved, &path.child("systemReserved"))?,
        eviction_hard: thresholds(&kubelet.eviction_hard, &path.child("evictionHard"))?,
        eviction_soft: thresholds(&kubelet.eviction_soft, &path.child("evictionSoft"))?,
    })
}

fn count(value: Option<i32>, path: &FieldPath) -> Result<Option<u32>, NodeClassSettingsError> {
    value
        .map(|n| {
            u32::try_from(n).map_err(|_| NodeClassSettingsError::NegativeCount {
                path: path.clone(),
                value: n,
            })
        })
        .transpose()
}

fn resources(
    entries: &BTreeMap<String, String>,
    path: &FieldPath,
) -> Result<Resources, NodeClassSettingsError> {
    let mut resources = Resources::new();
    for (name, text) in entries {
        let quantity = text
            .parse()
            .map_err(|source| NodeClassSettingsError::ParseQuantity {
                path: path.key(name),
                source,
            })?;
        resources.insert(name, quantity);
    }
    Ok(resources)
}

fn thresholds(
    entries: &BTreeMap<String, String>,
    path: &FieldPath,
) -> Result<BTreeMap<String, EvictionValue>, NodeClassSettingsError> {
    entries
        .iter()
        .map(|(signal, text)| {
            let threshold =
                text.parse()
                    .map_err(|source| NodeClassSettingsError::ParseEvictionThreshold {
                        path: path.key(signal),
                        source,
                    })?;
            Ok((signal.clone(), threshold))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{InterfaceType, NetworkInterface};
    use crate::catalog::{Catalog, InstanceType, MEMORY_AVAILABLE};
    use crate::labels::{RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_MEMORY, RESOURCE_PODS};
    use crate::resources::Quantity;
    use serde_json::{Value, json};

    /// A valid EC2NodeClass whose spec is the minimal required fields plus `extra`.
    fn node_class(extra: Value) -> EC2NodeClass {
        let mut spec = json!({
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
        });
        let fields = spec.as_object_mut().expect("spec is an object");
        fields.extend(extra.as_object().expect("extra is an object").clone());
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "test"}, "spec": spec,
        }))
        .expect("a valid EC2NodeClass")
    }

    fn settings(extra: Value) -> AllocatableSettings {
        AllocatableSettings::for_node_class(&node_class(extra), 0, 0.075).expect("maps")
    }

    fn error(extra: Value) -> String {
        AllocatableSettings::for_node_class(&node_class(extra), 0, 0.075)
            .expect_err("rejected")
            .to_string()
    }

    fn q(text: &str) -> Quantity {
        text.parse().expect("a quantity")
    }

    fn resolve(name: &str, settings: &AllocatableSettings) -> InstanceType {
        Catalog::embedded("us-east-1")
            .expect("us-east-1 is embedded")
            .instance_type(name, settings)
            .expect("type resolves")
    }

    fn allocatable(it: &InstanceType) -> [String; 4] {
        let allocatable = it.allocatable();
        [
            RESOURCE_CPU,
            RESOURCE_MEMORY,
            RESOURCE_EPHEMERAL_STORAGE,
            RESOURCE_PODS,
        ]
        .map(|name| allocatable.get_or_zero(name).to_string())
    }

    #[test]
    fn default_node_class_is_the_default_settings_plus_controller_settings() {
        let nc = node_class(json!({}));
        let mapped = AllocatableSettings::for_node_class(&nc, 2, 0.05).expect("maps");
        let expected = AllocatableSettings {
            reserved_enis: 2,
            vm_memory_overhead_percent: 0.05,
            ..AllocatableSettings::default()
        };
        assert_eq!(mapped, expected);
        assert_eq!(
            allocatable(&resolve("m5.large", &settings(json!({})))),
            ["1930m", "6903Mi", "17Gi", "29"]
        );
    }

    #[test]
    fn every_ami_family_from_the_field_or_the_alias() {
        for family in AmiFamily::ALL {
            let by_field = settings(json!({
                "amiFamily": family.as_str(), "amiSelectorTerms": [{"id": "ami-1"}]
            }));
            assert_eq!(by_field.ami_family, family);
            if family == AmiFamily::Custom {
                continue;
            }
            let alias = format!("{}@latest", family.as_str().to_ascii_lowercase());
            let by_alias = settings(json!({"amiSelectorTerms": [{"alias": alias}]}));
            assert_eq!(by_alias.ami_family, family, "{alias}");
        }
        // The default volumes follow the family: 50Gi on Windows, 20Gi elsewhere.
        let windows = settings(json!({"amiSelectorTerms": [{"alias": "windows2022@latest"}]}));
        let it = resolve("m5.large", &windows);
        assert_eq!(it.capacity.ephemeral_storage(), q("50Gi"));
        assert_eq!(it.capacity.pods(), q("110"));
    }

    #[test]
    fn kubelet_fields_that_change_allocatable() {
        let mapped = settings(json!({
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "50Gi"}}],
            "kubelet": {
                "maxPods": 20, "podsPerCore": 5,
                "kubeReserved": {"cpu": "200m"}, "systemReserved": {"memory": "1Gi"},
                "evictionHard": {"memory.available": "500Mi", "nodefs.available": "15%"},
                "evictionSoft": {"memory.available": "1Gi"},
                "evictionSoftGracePeriod": {"memory.available": "1m"},
                "clusterDNS": ["10.0.0.10"],
            },
        }));
        let kubelet = &mapped.kubelet;
        assert_eq!(
            (kubelet.max_pods, kubelet.pods_per_core),
            (Some(20), Some(5))
        );
        assert_eq!(kubelet.kube_reserved.get(RESOURCE_CPU), Some(q("200m")));
        assert_eq!(kubelet.system_reserved.get(RESOURCE_MEMORY), Some(q("1Gi")));
        assert_eq!(
            kubelet.eviction_hard[MEMORY_AVAILABLE],
            EvictionValue::Quantity(q("500Mi"))
        );
        assert_eq!(
            kubelet.eviction_hard["nodefs.available"],
            EvictionValue::Percentage(15.0)
        );
        assert_eq!(
            kubelet.eviction_soft[MEMORY_AVAILABLE],
            EvictionValue::Quantity(q("1Gi"))
        );
        // r6gd.large: pods = min(20, 5 × 2 vCPUs) = 10; kube-reserved cpu 200m replaces 70m,
        // memory from ENI pods 29 → 574Mi; 15096 − 574 − 1024 − 500 = 12998Mi; storage 50Gi
        // − 1Gi − 7.5Gi (15 %) = 41.5Gi = 42496Mi.
        assert_eq!(
            allocatable(&resolve("r6gd.large", &mapped)),
            ["1800m", "12998Mi", "42496Mi", "10"]
        );
    }

    #[test]
    fn bottlerocket_sizes_pods_storage_on_its_second_device() {
        let defaults = settings(json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}));
        assert!(defaults.block_device_mappings.is_empty());
        let it = resolve("c5.large", &defaults);
        assert_eq!(
            it.capacity.ephemeral_storage(),
            q("20Gi"),
            "default /dev/xvdb"
        );

        let mut own = settings(json!({
            "amiSelectorTerms": [{"alias": "bottlerocket@1.20.0"}],
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi"}},
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "60Gi"}},
            ],
        }));
        own.vm_memory_overhead_percent = 0.0;
        // As the catalog test with hand-built settings: 60Gi − 1Gi − 6Gi, 4096 − 574 − 100.
        assert_eq!(
            allocatable(&resolve("c5.large", &own)),
            ["1930m", "3422Mi", "53Gi", "29"]
        );
    }

    #[test]
    fn custom_block_devices_root_volume_and_instance_store() {
        let root = settings(json!({"blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi"}},
            {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "100Gi"}},
        ]}));
        assert_eq!(
            root.block_device_mappings[1],
            BlockDeviceSize {
                device_name: Some("/dev/xvdb".into()),
                volume_size: Some(q("100Gi")),
                root_volume: true,
            }
        );
        let it = resolve("m5.large", &root);
        assert_eq!(it.capacity.ephemeral_storage(), q("100Gi"));

        let custom = settings(json!({
            "amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-1"}],
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi"}},
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "200Gi"}},
            ],
        }));
        assert_eq!(
            allocatable(&resolve("g5.xlarge", &custom)),
            ["3920m", "14162Mi", "179Gi", "58"]
        );

        let raid0 = settings(json!({"instanceStorePolicy": "RAID0"}));
        assert!(raid0.instance_store_raid0);
        let it = resolve("p4d.24xlarge", &raid0);
        assert_eq!(it.capacity.ephemeral_storage(), q("8e12"));
    }

    #[test]
    fn network_interfaces_pass_through() {
        let mut mapped = settings(json!({"networkInterfaces": [
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
        ]}));
        let interfaces = mapped.network_interfaces.as_deref().expect("listed");
        assert_eq!(interfaces[1].interface_type, InterfaceType::EfaOnly);
        mapped.ami_family = AmiFamily::Al2;
        mapped.reserved_enis = 1;
        // As the catalog's g4dn.8xlarge test: (4 − 1 − 1) × 14 + 2 = 30 pods.
        assert_eq!(
            allocatable(&resolve("g4dn.8xlarge", &mapped)),
            ["31850m", "120402Mi", "17Gi", "30"]
        );
        assert_eq!(
            settings(json!({})).network_interfaces,
            None::<Vec<NetworkInterface>>
        );
    }

    #[test]
    fn bad_values_are_reported_at_their_field() {
        assert_eq!(
            error(json!({"kubelet": {"evictionHard": {"memory.available": "lots%"}}})),
            "spec.kubelet.evictionHard[memory.available]: eviction threshold \"lots%\" is not a percentage"
        );
        let reserved = error(json!({"kubelet": {"kubeReserved": {"memory": "lots"}}}));
        assert!(
            reserved.starts_with("spec.kubelet.kubeReserved[memory]: quantity \"lots\""),
            "{reserved}"
        );
        assert_eq!(
            error(json!({"kubelet": {"maxPods": -1}})),
            "spec.kubelet.maxPods: must not be negative, got -1"
        );
        let volume = error(json!({"blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "big"}}
        ]}));
        assert!(
            volume.starts_with("spec.blockDeviceMappings[0].ebs.volumeSize: quantity \"big\""),
            "{volume}"
        );
        let alias =
            error(json!({"amiSelectorTerms": [{"id": "ami-1"}, {"alias": "ubuntu@latest"}]}));
        assert!(
            alias.starts_with("spec.amiSelectorTerms[1].alias: AMI alias \"ubuntu@latest\""),
            "{alias}"
        );
        let missing = AllocatableSettings::for_node_class(
            &node_class(json!({"amiSelectorTerms": [{"id": "ami-1"}]})),
            0,
            0.075,
        )
        .expect_err("no family");
        assert_eq!(missing, NodeClassSettingsError::MissingAmiFamily);
        assert_eq!(missing.path(), "spec.amiFamily");
    }
}
