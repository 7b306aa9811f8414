//! Raw EC2 facts about one instance type, named after the EC2 API fields they come from
//! (DescribeInstanceTypes, plus the VPC limits and bandwidth tables upstream generates).
//! Everything Karpenter derives (labels, capacity, overhead) is computed from these by the
//! sibling modules, so live DescribeInstanceTypes answers can feed the same code.

use serde::{Deserialize, Serialize};

/// One instance type's EC2 facts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeInfo {
    /// `InstanceType`, e.g. `m5.large`.
    pub name: String,
    /// `ProcessorInfo.SupportedArchitectures` (`x86_64`, `arm64`, …).
    pub architectures: Vec<String>,
    /// `VCpuInfo.DefaultVCpus`.
    pub vcpus: u32,
    /// `MemoryInfo.SizeInMiB`.
    pub memory_mib: u64,
    /// `Hypervisor` (`nitro`, `xen`, or empty for bare metal).
    #[serde(default)]
    pub hypervisor: String,
    /// `ProcessorInfo.Manufacturer` (`Intel`, `AMD`, `AWS`).
    #[serde(default)]
    pub cpu_manufacturer: Option<String>,
    /// `ProcessorInfo.SustainedClockSpeedInGhz`.
    #[serde(default)]
    pub sustained_clock_speed_ghz: Option<f64>,
    /// `EbsInfo.EbsOptimizedSupport` (`default`, `supported`, `unsupported`).
    #[serde(default)]
    pub ebs_optimized_support: Option<String>,
    /// `EbsInfo.EbsOptimizedInfo.MaximumBandwidthInMbps`.
    #[serde(default)]
    pub ebs_maximum_bandwidth_mbps: Option<u64>,
    /// `NetworkInfo.EncryptionInTransitSupported`.
    #[serde(default)]
    pub encryption_in_transit_supported: bool,
    /// `NetworkInfo.NetworkCards[DefaultNetworkCardIndex].MaximumNetworkInterfaces`: the
    /// ENIs the VPC CNI can use.
    pub default_network_card_max_interfaces: u32,
    /// `NetworkInfo.Ipv4AddressesPerInterface`.
    pub ipv4_addresses_per_interface: u32,
    /// `NetworkInfo.EfaInfo.MaximumEfaInterfaces`.
    #[serde(default)]
    pub maximum_efa_interfaces: Option<u32>,
    /// `SupportedUsageClasses` (`on-demand`, `spot`, `capacity-block`).
    #[serde(default)]
    pub usage_classes: Vec<String>,
    /// Network bandwidth in Mbps (upstream's generated bandwidth table).
    #[serde(default)]
    pub network_bandwidth_mbps: Option<u64>,
    /// `InstanceStorageInfo`.
    #[serde(default)]
    pub instance_storage: Option<InstanceStorage>,
    /// `GpuInfo.Gpus`.
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// `InferenceAcceleratorInfo.Accelerators`.
    #[serde(default)]
    pub inference_accelerators: Vec<Accelerator>,
    /// `NeuronInfo.NeuronDevices`.
    #[serde(default)]
    pub neuron_devices: Vec<NeuronDevice>,
    /// VPC resource-controller limits (upstream's generated `Limits` table).
    #[serde(default)]
    pub vpc: Option<VpcLimits>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStorage {
    pub total_size_gb: Option<u64>,
    /// `required`, `supported` or `unsupported`.
    #[serde(default)]
    pub nvme_support: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    pub name: String,
    pub manufacturer: String,
    pub count: u32,
    pub memory_mib: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Accelerator {
    pub name: String,
    pub manufacturer: String,
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NeuronDevice {
    pub name: String,
    pub count: u32,
    /// `CoreInfo.Count`: NeuronCores per device.
    pub core_count: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VpcLimits {
    /// Branch ENIs for security groups for pods.
    pub branch_interfaces: u32,
    pub trunking_compatible: bool,
    pub ipv4_per_interface: u32,
}

impl InstanceTypeInfo {
    /// The Kubernetes architecture (`amd64`/`arm64`) of the first supported EC2 architecture
    /// that has one, as upstream's `getArchitecture`.
    pub fn kubernetes_arch(&self) -> Option<&'static str> {
        self.architectures
            .iter()
            .find_map(|arch| match arch.as_str() {
                "x86_64" => Some("amd64"),
                "arm64" => Some("arm64"),
                _ => None,
            })
    }

    /// Whether EC2 sells the type as `capacity_class` (`on-demand`, `spot`).
    pub fn supports_usage_class(&self, capacity_class: &str) -> bool {
        self.usage_classes
            .iter()
            .any(|class| class == capacity_class)
    }
}
