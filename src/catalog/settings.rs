//! The inputs of the allocatable computation, as plain data: what an EC2NodeClass (AMI
//! family, kubelet settings, block device mappings, instance store policy, network
//! interfaces) and the controller settings (`RESERVED_ENIS`, `VM_MEMORY_OVERHEAD_PERCENT`)
//! contribute to an instance type's capacity and overhead. Glue code maps the typed
//! EC2NodeClass onto [`AllocatableSettings`]; this module knows nothing of the CRD.

use crate::resources::{Quantity, QuantityError, Resources};
use std::collections::BTreeMap;
use std::str::FromStr;

/// The eviction signal whose threshold is subtracted from memory.
pub const MEMORY_AVAILABLE: &str = "memory.available";
/// The eviction signal whose threshold is subtracted from ephemeral storage.
pub const NODEFS_AVAILABLE: &str = "nodefs.available";

/// Everything besides the instance type's own facts that shapes its capacity and overhead.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatableSettings {
    /// From `spec.amiFamily`, else the family of the `spec.amiSelectorTerms[].alias`.
    pub ami_family: AmiFamily,
    /// From `spec.kubelet`.
    pub kubelet: KubeletSettings,
    /// From `spec.blockDeviceMappings`; decides ephemeral-storage capacity.
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// From `spec.instanceStorePolicy`: with `RAID0`, ephemeral storage is the local NVMe.
    pub instance_store_raid0: bool,
    /// From `spec.networkInterfaces`, when set: EFA-only interfaces reduce ENI-limited pods
    /// and replace the type's EFA count.
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    /// `RESERVED_ENIS`: ENIs withheld from the ENI-limited max-pods computation.
    pub reserved_enis: u32,
    /// `VM_MEMORY_OVERHEAD_PERCENT`: the share of EC2-reported memory the hypervisor keeps.
    pub vm_memory_overhead_percent: f64,
}

impl Default for AllocatableSettings {
    /// AL2023 with no kubelet overrides, upstream's default settings (`RESERVED_ENIS=0`,
    /// `VM_MEMORY_OVERHEAD_PERCENT=0.075`).
    fn default() -> AllocatableSettings {
        AllocatableSettings {
            ami_family: AmiFamily::AL2023,
            kubelet: KubeletSettings::default(),
            block_device_mappings: Vec::new(),
            instance_store_raid0: false,
            network_interfaces: None,
            reserved_enis: 0,
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
        }
    }
}

/// Upstream's default `VM_MEMORY_OVERHEAD_PERCENT`.
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;

/// The kubelet fields that change allocatable (`spec.kubelet` of the EC2NodeClass).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletSettings {
    pub max_pods: Option<u32>,
    pub pods_per_core: Option<u32>,
    /// Replaces the computed kube-reserved entry by entry.
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    /// `memory.available` and `nodefs.available` replace the default eviction thresholds.
    pub eviction_hard: BTreeMap<String, EvictionValue>,
    /// Carried for the launch path only: as upstream, soft thresholds do not reduce
    /// allocatable (they only warn before the hard threshold evicts).
    pub eviction_soft: BTreeMap<String, EvictionValue>,
}

/// An eviction threshold: an absolute quantity or a percentage of capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EvictionValue {
    Quantity(Quantity),
    /// A percentage in `[0, 100)`; `100%` is stored as 0, as kubelet treats it as disabled.
    Percentage(f64),
}

/// Why an eviction threshold was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvictionValueError {
    #[error("eviction threshold {0:?} is not a percentage")]
    Percentage(String),
    #[error(transparent)]
    Quantity(#[from] QuantityError),
}

impl FromStr for EvictionValue {
    type Err = EvictionValueError;

    /// `"10%"` or a quantity such as `"500Mi"`, read as kubelet and Karpenter read it.
    fn from_str(text: &str) -> Result<EvictionValue, EvictionValueError> {
        if !text.ends_with('%') {
            return Ok(EvictionValue::Quantity(text.parse()?));
        }
        let percent: f64 = text
            .trim_matches('%')
            .parse()
            .map_err(|_| EvictionValueError::Percentage(text.to_owned()))?;
        if !percent.is_finite() {
            return Err(EvictionValueError::Percentage(text.to_owned()));
        }
        Ok(EvictionValue::Percentage(if percent == 100.0 {
            0.0
        } else {
            percent
        }))
    }
}

/// One entry of `spec.blockDeviceMappings`, reduced to what sizing needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockDeviceMapping {
    pub device_name: Option<String>,
    pub volume_size: Option<Quantity>,
    pub root_volume: bool,
}

/// One entry of `spec.networkInterfaces`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetworkInterface {
    pub network_card_index: u32,
    pub device_index: u32,
    /// `interfaceType: efa-only` (no IP networking) rather than `interface`.
    pub efa_only: bool,
}

/// The AMI families of the EC2NodeClass API and the behaviour each implies upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Windows2025,
    Custom,
}

/// Why an AMI family name or alias was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmiFamilyError {
    #[error(
        "unknown AMI family {0:?} (expected AL2, AL2023, Bottlerocket, Windows2019, Windows2022, Windows2025 or Custom)"
    )]
    Family(String),
    #[error(
        "AMI alias {0:?} is not <family>@<version> with family al2, al2023, bottlerocket, windows2019, windows2022 or windows2025"
    )]
    Alias(String),
}

impl AmiFamily {
    pub const ALL: [AmiFamily; 7] = [
        AmiFamily::AL2,
        AmiFamily::AL2023,
        AmiFamily::Bottlerocket,
        AmiFamily::Windows2019,
        AmiFamily::Windows2022,
        AmiFamily::Windows2025,
        AmiFamily::Custom,
    ];

    /// The name used by `spec.amiFamily`.
    pub fn name(self) -> &'static str {
        match self {
            AmiFamily::AL2 => "AL2",
            AmiFamily::AL2023 => "AL2023",
            AmiFamily::Bottlerocket => "Bottlerocket",
            AmiFamily::Windows2019 => "Windows2019",
            AmiFamily::Windows2022 => "Windows2022",
            AmiFamily::Windows2025 => "Windows2025",
            AmiFamily::Custom => "Custom",
        }
    }

    /// The family of an `amiSelectorTerms[].alias` such as `al2023@latest` (Custom has no
    /// alias).
    pub fn from_alias(alias: &str) -> Result<AmiFamily, AmiFamilyError> {
        let (family, version) = alias
            .split_once('@')
            .ok_or_else(|| AmiFamilyError::Alias(alias.to_owned()))?;
        if version.is_empty() || version.contains('@') {
            return Err(AmiFamilyError::Alias(alias.to_owned()));
        }
        AmiFamily::ALL
            .into_iter()
            .find(|f| *f != AmiFamily::Custom && f.name().to_ascii_lowercase() == family)
            .ok_or_else(|| AmiFamilyError::Alias(alias.to_owned()))
    }

    pub fn is_windows(self) -> bool {
        self.windows_build().is_some()
    }

    /// The `node.kubernetes.io/windows-build` value of Windows families.
    pub fn windows_build(self) -> Option<&'static str> {
        match self {
            AmiFamily::Windows2019 => Some("10.0.17763"),
            AmiFamily::Windows2022 => Some("10.0.20348"),
            AmiFamily::Windows2025 => Some("10.0.26100"),
            _ => None,
        }
    }

    /// Whether kube-reserved memory is sized from ENI-limited pods (ignoring `maxPods`).
    pub fn uses_eni_limited_memory_overhead(self) -> bool {
        !matches!(self, AmiFamily::Bottlerocket) && !self.is_windows()
    }

    /// Whether the family's bootstrap honours `podsPerCore` (Bottlerocket does not).
    pub fn pods_per_core_enabled(self) -> bool {
        self != AmiFamily::Bottlerocket
    }

    /// Whether the default max pods is ENI-limited (else 110, as on Windows).
    pub fn supports_eni_limited_pod_density(self) -> bool {
        !self.is_windows()
    }

    /// The device whose volume holds pods' ephemeral storage (unknown for Custom).
    pub fn ephemeral_block_device(self) -> Option<&'static str> {
        match self {
            AmiFamily::AL2 | AmiFamily::AL2023 => Some("/dev/xvda"),
            AmiFamily::Bottlerocket => Some("/dev/xvdb"),
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
                Some("/dev/sda1")
            }
            AmiFamily::Custom => None,
        }
    }

    /// The size of the family's default ephemeral volume (`DefaultBlockDeviceMappings`):
    /// 50Gi on Windows, otherwise the default EBS volume of 20Gi.
    pub fn default_ephemeral_volume_size(self) -> Quantity {
        if self.is_windows() {
            Quantity::gibibytes(50)
        } else {
            DEFAULT_EBS_VOLUME_SIZE
        }
    }
}

/// Upstream's `DefaultEBS.VolumeSize`.
pub const DEFAULT_EBS_VOLUME_SIZE: Quantity = Quantity::gibibytes(20);

impl FromStr for AmiFamily {
    type Err = AmiFamilyError;

    /// A `spec.amiFamily` value, exactly as the CRD spells it.
    fn from_str(name: &str) -> Result<AmiFamily, AmiFamilyError> {
        AmiFamily::ALL
            .into_iter()
            .find(|family| family.name() == name)
            .ok_or_else(|| AmiFamilyError::Family(name.to_owned()))
    }
}

impl std::fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
