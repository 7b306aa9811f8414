//! The inputs of the allocatable computation, as plain data: what an EC2NodeClass (AMI
//! family, kubelet settings, block device mappings, instance store policy, network
//! interfaces) and the controller settings (`RESERVED_ENIS`, `VM_MEMORY_OVERHEAD_PERCENT`)
//! contribute to an instance type's capacity and overhead. The API's own types are used
//! where they already say what sizing needs (AMI family, network interfaces); the string
//! fields the computation does arithmetic on (kubelet quantities and thresholds, volume
//! sizes) are held parsed. `AllocatableSettings::for_node_class` (module `node_class`)
//! builds these from a typed EC2NodeClass.

use crate::api::{AmiFamily, BlockDeviceMapping, NetworkInterface};
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
    /// From `spec.blockDeviceMappings` (empty: the family's defaults); decides
    /// ephemeral-storage capacity.
    pub block_device_mappings: Vec<BlockDeviceSize>,
    /// From `spec.instanceStorePolicy`: with `RAID0`, ephemeral storage is the local NVMe.
    pub instance_store_raid0: bool,
    /// From `spec.networkInterfaces`, when it lists any: EFA-only interfaces reduce
    /// ENI-limited pods and replace the type's EFA count.
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
            ami_family: AmiFamily::Al2023,
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

/// A `spec.blockDeviceMappings` entry reduced to what ephemeral-storage sizing reads, with
/// `ebs.volumeSize` parsed (the API type keeps it as the manifest's string).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockDeviceSize {
    pub device_name: Option<String>,
    pub volume_size: Option<Quantity>,
    pub root_volume: bool,
}

impl BlockDeviceSize {
    /// The sizing view of one EC2NodeClass block device mapping.
    pub fn from_mapping(mapping: &BlockDeviceMapping) -> Result<BlockDeviceSize, QuantityError> {
        let volume_size = mapping
            .ebs
            .as_ref()
            .and_then(|ebs| ebs.volume_size.as_ref())
            .map(|size| size.0.parse())
            .transpose()?;
        Ok(BlockDeviceSize {
            device_name: mapping.device_name.clone(),
            volume_size,
            root_volume: mapping.root_volume,
        })
    }
}

/// Upstream's `DefaultEBS.VolumeSize`: the size assumed for a volume that states none.
pub const DEFAULT_EBS_VOLUME_SIZE: Quantity = Quantity::gibibytes(20);
