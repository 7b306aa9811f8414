//! An instance type's capacity as upstream's `computeCapacity` reports it: vCPUs; memory
//! less Graviton's 64 MiB CMA reservation and `VM_MEMORY_OVERHEAD_PERCENT`; ephemeral storage
//! from the EC2NodeClass volumes (or the local NVMe with `instanceStorePolicy: RAID0`); the
//! pod limit (ENI-limited, `maxPods`, `podsPerCore`, 110 on Windows); branch ENIs for security
//! groups for pods; GPUs, Neuron devices and cores, Gaudi accelerators, EFA interfaces; and on
//! Windows the private IPv4 addresses the VPC resource controller hands out. Extended
//! resources with a count of zero are left out, as NodeClaim capacity leaves them out.

use super::info::InstanceTypeInfo;
use super::settings::{AllocatableSettings, BlockDeviceSize, DEFAULT_EBS_VOLUME_SIZE};
use crate::api::{AmiFamily, InterfaceType, NetworkInterface};
use crate::labels::*;
use crate::resources::{Format, Quantity, Resources};

/// Windows nodes and families without ENI-limited density default to 110 pods.
const DEFAULT_MAX_PODS: i64 = 110;

/// The full capacity of `info` under `settings`.
pub fn capacity(info: &InstanceTypeInfo, settings: &AllocatableSettings) -> Resources {
    let mut capacity = Resources::new()
        .with(RESOURCE_CPU, cpu(info))
        .with(
            RESOURCE_MEMORY,
            memory(info, settings.vm_memory_overhead_percent),
        )
        .with(
            RESOURCE_EPHEMERAL_STORAGE,
            ephemeral_storage(info, settings),
        )
        .with(
            RESOURCE_PODS,
            Quantity::new(pods(info, settings), Format::DecimalSI),
        );
    let count = |name: &str| {
        info.gpus
            .iter()
            .filter(|g| g.manufacturer == name)
            .map(|g| g.count as i64)
            .sum::<i64>()
    };
    let neuron_devices = info
        .neuron_devices
        .iter()
        .map(|d| d.count as i64)
        .sum::<i64>();
    let neuron_cores = info
        .neuron_devices
        .first()
        .map_or(0, |d| d.count as i64 * d.core_count as i64);
    let extended = [
        (RESOURCE_AWS_POD_ENI, pod_enis(info)),
        (RESOURCE_NVIDIA_GPU, count("NVIDIA")),
        (RESOURCE_AMD_GPU, count("AMD")),
        (RESOURCE_HABANA_GAUDI, count("Habana")),
        (RESOURCE_AWS_NEURON, neuron_devices),
        (RESOURCE_AWS_NEURON_CORE, neuron_cores),
        (RESOURCE_EFA, efas(info, settings)),
    ];
    for (name, value) in extended {
        if value != 0 {
            capacity.insert(name, Quantity::new(value, Format::DecimalSI));
        }
    }
    if settings.ami_family.is_windows() {
        let addresses = info
            .vpc
            .as_ref()
            .map_or(0, |vpc| vpc.ipv4_per_interface as i64 - 1);
        capacity.insert(
            RESOURCE_PRIVATE_IPV4_ADDRESS,
            Quantity::new(addresses, Format::DecimalSI),
        );
    }
    capacity
}

pub fn cpu(info: &InstanceTypeInfo) -> Quantity {
    Quantity::new(info.vcpus as i64, Format::DecimalSI)
}

/// EC2 memory less the 64 MiB Graviton CMA reservation, less
/// `ceil(bytes × overhead_percent / 1024 / 1024)` MiB computed in `f64` as upstream does.
pub fn memory(info: &InstanceTypeInfo, overhead_percent: f64) -> Quantity {
    let mut mib = info.memory_mib as i64;
    if info.architectures.first().map(String::as_str) == Some("arm64") {
        mib -= 64;
    }
    let bytes = mib * (1 << 20);
    let overhead_mib = (bytes as f64 * overhead_percent / 1024.0 / 1024.0).ceil() as i64;
    Quantity::mebibytes(mib - overhead_mib)
}

/// Pods' ephemeral storage: the local NVMe under RAID0, else the root volume of the
/// EC2NodeClass (`rootVolume: true`, else for Custom the last mapping, else the family's
/// ephemeral device), else the family's default volume for its ephemeral device.
pub fn ephemeral_storage(info: &InstanceTypeInfo, settings: &AllocatableSettings) -> Quantity {
    if settings.instance_store_raid0
        && let Some(total_gb) = info.instance_storage.as_ref().and_then(|s| s.total_size_gb)
    {
        return Quantity::new(total_gb as i64 * 1_000_000_000, Format::DecimalSI);
    }
    volume_from_mappings(&settings.block_device_mappings, settings.ami_family)
        .unwrap_or_else(|| default_ephemeral_volume_size(settings.ami_family))
}

fn volume_from_mappings(mappings: &[BlockDeviceSize], family: AmiFamily) -> Option<Quantity> {
    let last = mappings.last()?;
    if let Some(size) = mappings
        .iter()
        .find(|m| m.root_volume)
        .and_then(|m| m.volume_size)
    {
        return Some(size);
    }
    match family.ephemeral_device_name() {
        None => Some(last.volume_size.unwrap_or(DEFAULT_EBS_VOLUME_SIZE)),
        Some(device) => mappings
            .iter()
            .find(|m| m.device_name.as_deref() == Some(device))
            .and_then(|m| m.volume_size),
    }
}

/// The size of the family's ephemeral device among the block devices upstream attaches by
/// default (20Gi, 50Gi on Windows), else `DefaultEBS.VolumeSize`.
fn default_ephemeral_volume_size(family: AmiFamily) -> Quantity {
    let Some(device) = family.ephemeral_device_name() else {
        return DEFAULT_EBS_VOLUME_SIZE;
    };
    family
        .default_block_device_mappings()
        .iter()
        .find(|m| m.device_name.as_deref() == Some(device))
        .and_then(|m| BlockDeviceSize::from_mapping(m).ok())
        .and_then(|m| m.volume_size)
        .unwrap_or(DEFAULT_EBS_VOLUME_SIZE)
}

/// The pod limit: `maxPods` if set, else ENI-limited (families that support it) or 110,
/// then capped at `podsPerCore × vCPUs` where the family honours `podsPerCore`.
pub fn pods(info: &InstanceTypeInfo, settings: &AllocatableSettings) -> i64 {
    let family = settings.ami_family;
    let mut count = match settings.kubelet.max_pods {
        Some(max_pods) => max_pods as i64,
        None if family.supports_eni_limited_pod_density() => eni_limited_pods(
            info,
            settings.reserved_enis,
            settings.network_interfaces.as_deref(),
        ),
        None => DEFAULT_MAX_PODS,
    };
    if let Some(per_core) = settings.kubelet.pods_per_core.filter(|n| *n > 0)
        && family.pods_per_core_enabled()
    {
        count = count.min(per_core as i64 * info.vcpus as i64);
    }
    count
}

/// The VPC CNI limit: `usable ENIs × (IPv4 per ENI − 1) + 2`, where usable ENIs are the
/// default network card's ENIs less `reserved_enis` and less the EFA-only interfaces on
/// card 0; 0 when no ENI is usable.
pub fn eni_limited_pods(
    info: &InstanceTypeInfo,
    reserved_enis: u32,
    interfaces: Option<&[NetworkInterface]>,
) -> i64 {
    let efa_only = interfaces
        .unwrap_or_default()
        .iter()
        .filter(|nic| nic.network_card_index == 0 && is_efa_only(nic))
        .count() as i64;
    let usable =
        (info.default_network_card_max_interfaces as i64 - reserved_enis as i64 - efa_only).max(0);
    if usable == 0 {
        return 0;
    }
    usable * (info.ipv4_addresses_per_interface as i64 - 1) + 2
}

/// Branch ENIs when the type supports ENI trunking (security groups for pods).
fn pod_enis(info: &InstanceTypeInfo) -> i64 {
    match &info.vpc {
        Some(vpc) if vpc.trunking_compatible => vpc.branch_interfaces as i64,
        _ => 0,
    }
}

/// EFA interfaces: the EFA-only interfaces the EC2NodeClass attaches when it lists network
/// interfaces, else the type's maximum.
fn efas(info: &InstanceTypeInfo, settings: &AllocatableSettings) -> i64 {
    match &settings.network_interfaces {
        Some(interfaces) => interfaces.iter().filter(|nic| is_efa_only(nic)).count() as i64,
        None => info.maximum_efa_interfaces.unwrap_or(0) as i64,
    }
}

/// Whether the type can take the interfaces the EC2NodeClass lists, as far as the catalog's
/// facts tell (upstream's network-interface compatibility check): no more EFA-only
/// interfaces than the type's EFA maximum, and no device index on the default card past its
/// ENIs. Types the check rejects are not offered for the class, so a launch never fails on
/// them.
pub fn interfaces_fit(info: &InstanceTypeInfo, settings: &AllocatableSettings) -> bool {
    let Some(interfaces) = &settings.network_interfaces else {
        return true;
    };
    let efa_only = interfaces.iter().filter(|nic| is_efa_only(nic)).count();
    if efa_only > info.maximum_efa_interfaces.unwrap_or(0) as usize {
        return false;
    }
    interfaces.iter().all(|nic| {
        nic.network_card_index != 0
            || u32::try_from(nic.device_index)
                .is_ok_and(|device| device < info.default_network_card_max_interfaces)
    })
}

/// An EFA-only interface carries no IP traffic, so it hosts no pod addresses.
fn is_efa_only(nic: &NetworkInterface) -> bool {
    nic.interface_type == InterfaceType::EfaOnly
}
