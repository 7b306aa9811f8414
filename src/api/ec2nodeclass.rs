//! `karpenter.k8s.aws/v1` EC2NodeClass: the AWS side of a node — AMI, subnets, security
//! groups, IAM identity, block devices, IMDS options, kubelet settings. `metadataOptions`
//! defaults as in the CRD; the default block devices of each AMI family are not stored in
//! the object (upstream applies them at launch), so they come from
//! [`EC2NodeClass::effective_block_device_mappings`].

use super::condition::{Condition, Conditions};
use super::kubelet::KubeletConfiguration;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Tag key → value; a `*` value matches any value of that key.
pub type Tags = BTreeMap<String, String>;

/// IAM's limit on a role name.
pub const MAX_ROLE_NAME: usize = 64;

/// How nodes of this class are launched on EC2.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    status = "EC2NodeClassStatus",
    category = "karpenter",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassSpec {
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    #[serde(
        rename = "associatePublicIPAddress",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

/// Selects subnets by id or by tags (terms are ORed, fields within a term ANDed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Selects security groups by id, name or tags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `open` reservations take any matching launch; `targeted` ones only explicit launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    Open,
    Targeted,
}

/// Selects capacity reservations by id, or by tags / owner / match criteria.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// Selects one placement group by name or id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlacementGroupSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Selects AMIs: by `alias` (`family@version`, exclusive with everything else), id, name,
/// owner, tags or an SSM parameter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: Tags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

impl AmiSelectorTerm {
    /// The alias split into family and version (`al2023@latest` → (`al2023`, `latest`)).
    pub fn alias_parts(&self) -> Option<(&str, &str)> {
        self.alias.as_deref().and_then(|a| a.split_once('@'))
    }
}

/// The AMI family: decides user-data format, default block devices and AMI lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AmiFamily {
    #[serde(rename = "AL2")]
    Al2,
    #[serde(rename = "AL2023")]
    Al2023,
    Bottlerocket,
    Custom,
    Windows2019,
    Windows2022,
    Windows2025,
}

impl AmiFamily {
    pub const ALL: [AmiFamily; 7] = [
        AmiFamily::Al2,
        AmiFamily::Al2023,
        AmiFamily::Bottlerocket,
        AmiFamily::Custom,
        AmiFamily::Windows2019,
        AmiFamily::Windows2022,
        AmiFamily::Windows2025,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AmiFamily::Al2 => "AL2",
            AmiFamily::Al2023 => "AL2023",
            AmiFamily::Bottlerocket => "Bottlerocket",
            AmiFamily::Custom => "Custom",
            AmiFamily::Windows2019 => "Windows2019",
            AmiFamily::Windows2022 => "Windows2022",
            AmiFamily::Windows2025 => "Windows2025",
        }
    }

    /// The family named by an alias prefix (`al2`, `al2023`, `bottlerocket`, `windows20xx`).
    pub fn from_alias_family(family: &str) -> Option<Self> {
        match family {
            "al2" => Some(AmiFamily::Al2),
            "al2023" => Some(AmiFamily::Al2023),
            "bottlerocket" => Some(AmiFamily::Bottlerocket),
            "windows2019" => Some(AmiFamily::Windows2019),
            "windows2022" => Some(AmiFamily::Windows2022),
            "windows2025" => Some(AmiFamily::Windows2025),
            _ => None,
        }
    }

    /// The family of a whole `amiSelectorTerms[].alias` such as `al2023@latest` (Custom
    /// has no alias; the version must be non-empty).
    pub fn from_alias(alias: &str) -> Result<Self, AmiFamilyError> {
        let malformed = || AmiFamilyError::Alias(alias.to_owned());
        let (family, version) = alias.split_once('@').ok_or_else(malformed)?;
        if version.is_empty() || version.contains('@') {
            return Err(malformed());
        }
        AmiFamily::from_alias_family(family).ok_or_else(malformed)
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

    /// Whether kube-reserved memory is sized from ENI-limited pods (ignoring `maxPods`), as
    /// upstream does for the families whose bootstrap computes it that way.
    pub fn uses_eni_limited_memory_overhead(self) -> bool {
        self != AmiFamily::Bottlerocket && !self.is_windows()
    }

    /// Whether the family's bootstrap honours `podsPerCore` (Bottlerocket does not).
    pub fn pods_per_core_enabled(self) -> bool {
        self != AmiFamily::Bottlerocket
    }

    /// Whether the default max pods is ENI-limited (else 110, as on Windows).
    pub fn supports_eni_limited_pod_density(self) -> bool {
        !self.is_windows()
    }

    /// The block devices upstream attaches when the EC2NodeClass lists none.
    pub fn default_block_device_mappings(self) -> Vec<BlockDeviceMapping> {
        match self {
            AmiFamily::Al2 | AmiFamily::Al2023 => vec![default_gp3("/dev/xvda", "20Gi")],
            AmiFamily::Bottlerocket => vec![
                default_gp3("/dev/xvda", "4Gi"),
                default_gp3("/dev/xvdb", "20Gi"),
            ],
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
                vec![default_gp3("/dev/sda1", "50Gi")]
            }
            AmiFamily::Custom => Vec::new(),
        }
    }

    /// The device that backs the kubelet's root dir (node ephemeral storage) by default.
    pub fn ephemeral_device_name(self) -> Option<&'static str> {
        match self {
            AmiFamily::Al2 | AmiFamily::Al2023 => Some("/dev/xvda"),
            AmiFamily::Bottlerocket => Some("/dev/xvdb"),
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
                Some("/dev/sda1")
            }
            AmiFamily::Custom => None,
        }
    }
}

impl fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AmiFamily {
    type Err = AmiFamilyError;

    /// A `spec.amiFamily` value, exactly as the CRD spells it.
    fn from_str(name: &str) -> Result<Self, AmiFamilyError> {
        AmiFamily::ALL
            .into_iter()
            .find(|family| family.as_str() == name)
            .ok_or_else(|| AmiFamilyError::Family(name.to_owned()))
    }
}

/// Why an AMI family name or alias was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmiFamilyError {
    #[error(
        "unknown AMI family {0:?} (expected AL2, AL2023, Bottlerocket, Custom, Windows2019, Windows2022 or Windows2025)"
    )]
    Family(String),
    #[error(
        "AMI alias {0:?} is not <family>@<version> with family al2, al2023, bottlerocket, windows2019, windows2022 or windows2025"
    )]
    Alias(String),
}

fn default_gp3(device: &str, size: &str) -> BlockDeviceMapping {
    BlockDeviceMapping {
        device_name: Some(device.to_owned()),
        ebs: Some(BlockDevice {
            encrypted: Some(true),
            volume_size: Some(Quantity(size.to_owned())),
            volume_type: Some(VolumeType::Gp3),
            ..BlockDevice::default()
        }),
        root_volume: false,
    }
}

/// One EBS device attached at launch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Marks the device mounted as the kubelet root dir (at most one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_volume: bool,
}

/// EBS volume type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    Standard,
    Io1,
    Io2,
    Gp2,
    Sc1,
    St1,
    Gp3,
}

/// EBS volume parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(rename = "kmsKeyID", default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(
        rename = "snapshotID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_initialization_rate: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
}

/// How instance-store disks are used (`RAID0`: striped and used for ephemeral storage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    #[serde(rename = "RAID0")]
    Raid0,
}

/// `enabled` / `disabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EnabledState {
    Enabled,
    Disabled,
}

/// `required` (IMDSv2 only) / `optional`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    Required,
    Optional,
}

/// Instance Metadata Service exposure of launched nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    #[serde(default = "enabled")]
    pub http_endpoint: EnabledState,
    #[serde(rename = "httpProtocolIPv6", default = "disabled")]
    pub http_protocol_ipv6: EnabledState,
    #[serde(default = "default_hop_limit")]
    pub http_put_response_hop_limit: i64,
    #[serde(default = "required")]
    pub http_tokens: HttpTokens,
}

fn enabled() -> EnabledState {
    EnabledState::Enabled
}
fn disabled() -> EnabledState {
    EnabledState::Disabled
}
fn default_hop_limit() -> i64 {
    1
}
fn required() -> HttpTokens {
    HttpTokens::Required
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            http_endpoint: enabled(),
            http_protocol_ipv6: disabled(),
            http_put_response_hop_limit: default_hop_limit(),
            http_tokens: required(),
        }
    }
}

/// `interface` (regular ENI) or `efa-only`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InterfaceType {
    Interface,
    EfaOnly,
}

impl InterfaceType {
    /// EC2's name of the type (`interface`, `efa-only`).
    pub fn as_str(self) -> &'static str {
        match self {
            InterfaceType::Interface => "interface",
            InterfaceType::EfaOnly => "efa-only",
        }
    }
}

/// An explicit network interface of the launch template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    pub network_card_index: i32,
    pub device_index: i32,
    pub interface_type: InterfaceType,
}

/// Connection tracking idle timeouts, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTracking {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_established_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_stream_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_timeout: Option<i32>,
}

/// CPU options of the launch template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<EnabledState>,
}

/// Resolved subnets, security groups, AMIs, reservations and instance profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<Ami>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A resolved subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    #[serde(rename = "zoneID", default, skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `default` reservations or `capacity-block`s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationType {
    #[default]
    Default,
    CapacityBlock,
}

/// Whether a reservation is `active` or `expiring`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CapacityReservationState {
    #[default]
    Active,
    Expiring,
}

/// A resolved capacity reservation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    pub availability_zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    pub id: String,
    pub instance_match_criteria: InstanceMatchCriteria,
    pub instance_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    #[serde(rename = "ownerID")]
    pub owner_id: String,
    #[serde(default)]
    pub reservation_type: CapacityReservationType,
    #[serde(default)]
    pub state: CapacityReservationState,
}

/// A resolved AMI and the node requirements (arch, GPU, ...) it is compatible with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ami {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
    pub requirements: Vec<NodeSelectorRequirement>,
}

impl EC2NodeClass {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The alias term, if the AMIs are selected by alias.
    pub fn alias(&self) -> Option<&str> {
        self.spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
    }

    /// The alias version (`latest`, `v20240625`, `1.20.1`), if selected by alias.
    pub fn alias_version(&self) -> Option<&str> {
        self.alias().and_then(|a| a.split_once('@')).map(|(_, v)| v)
    }

    /// `spec.amiFamily` when set, otherwise the family named by the alias; `Custom` when
    /// neither is known (validation requires one of them).
    pub fn ami_family(&self) -> AmiFamily {
        self.spec
            .ami_family
            .or_else(|| self.alias().and_then(|a| AmiFamily::from_alias(a).ok()))
            .unwrap_or(AmiFamily::Custom)
    }

    /// The block devices a launch uses: the spec's when it lists any, else the family's.
    pub fn effective_block_device_mappings(&self) -> Vec<BlockDeviceMapping> {
        if self.spec.block_device_mappings.is_empty() {
            self.ami_family().default_block_device_mappings()
        } else {
            self.spec.block_device_mappings.clone()
        }
    }

    /// The device backing node ephemeral storage: the one marked `rootVolume`, else the
    /// family's usual root device when present.
    pub fn ephemeral_block_device(&self) -> Option<BlockDeviceMapping> {
        let mappings = self.effective_block_device_mappings();
        if let Some(root) = mappings.iter().find(|m| m.root_volume) {
            return Some(root.clone());
        }
        let device = self.ami_family().ephemeral_device_name()?;
        mappings
            .into_iter()
            .find(|m| m.device_name.as_deref() == Some(device))
    }

    pub fn kubelet(&self) -> Option<&KubeletConfiguration> {
        self.spec.kubelet.as_ref()
    }

    pub fn role(&self) -> Option<&str> {
        self.spec.role.as_deref()
    }

    /// What is wrong with `spec.role` that the schema lets through: a name longer than IAM
    /// allows, which no role can have (the instance profile for it can never be made).
    pub fn role_name_problem(&self) -> Option<String> {
        let length = self.role()?.chars().count();
        (length > MAX_ROLE_NAME).then(|| {
            format!(
                "spec.role is {length} characters; IAM role names are at most {MAX_ROLE_NAME}, so no such role can exist (a long cluster name in KarpenterNodeRole-${{CLUSTER_NAME}} is the usual cause): create the role with a shorter name"
            )
        })
    }

    pub fn instance_profile(&self) -> Option<&str> {
        self.spec.instance_profile.as_deref()
    }

    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }

    pub fn is_condition_true(&self, type_: &str) -> bool {
        self.conditions().is_condition_true(type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodeclass(spec: serde_json::Value) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "n"}, "spec": spec
        }))
        .unwrap()
    }

    fn base(extra: serde_json::Value) -> serde_json::Value {
        let mut spec = serde_json::json!({
            "role": "r", "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}], "amiSelectorTerms": [{"alias": "bottlerocket@1.20.0"}]
        });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    }

    #[test]
    fn ami_family_comes_from_the_spec_or_the_alias() {
        let nc = nodeclass(base(serde_json::json!({})));
        assert_eq!(nc.ami_family(), AmiFamily::Bottlerocket);
        assert_eq!(nc.alias_version(), Some("1.20.0"));
        let custom = nodeclass(base(serde_json::json!({"amiFamily": "Custom"})));
        assert_eq!(custom.ami_family(), AmiFamily::Custom);
        let by_id = nodeclass(base(
            serde_json::json!({"amiFamily": "AL2", "amiSelectorTerms": [{"id": "ami-1"}]}),
        ));
        assert_eq!(by_id.ami_family(), AmiFamily::Al2);
        assert_eq!(by_id.alias(), None);
    }

    #[test]
    fn default_block_devices_per_family() {
        let bottlerocket = nodeclass(base(serde_json::json!({}))).effective_block_device_mappings();
        let sizes: Vec<_> = bottlerocket
            .iter()
            .map(|m| {
                (
                    m.device_name.clone().unwrap(),
                    m.ebs.as_ref().unwrap().volume_size.clone().unwrap().0,
                )
            })
            .collect();
        assert_eq!(
            sizes,
            [
                ("/dev/xvda".into(), "4Gi".into()),
                ("/dev/xvdb".into(), "20Gi".into())
            ]
        );
        let ephemeral = nodeclass(base(serde_json::json!({})))
            .ephemeral_block_device()
            .unwrap();
        assert_eq!(ephemeral.device_name.as_deref(), Some("/dev/xvdb"));

        let al2023 = AmiFamily::Al2023.default_block_device_mappings();
        let ebs = al2023[0].ebs.as_ref().unwrap();
        assert_eq!(al2023[0].device_name.as_deref(), Some("/dev/xvda"));
        assert_eq!(
            (
                ebs.volume_size.as_ref().unwrap().0.as_str(),
                ebs.volume_type,
                ebs.encrypted
            ),
            ("20Gi", Some(VolumeType::Gp3), Some(true))
        );
        assert_eq!(
            AmiFamily::Windows2022.default_block_device_mappings()[0]
                .device_name
                .as_deref(),
            Some("/dev/sda1")
        );
        assert!(AmiFamily::Custom.default_block_device_mappings().is_empty());

        let own = nodeclass(base(serde_json::json!({"blockDeviceMappings": [
            {"deviceName": "/dev/xvdc", "rootVolume": true, "ebs": {"volumeSize": "100Gi"}}
        ]})));
        assert_eq!(own.effective_block_device_mappings().len(), 1);
        assert_eq!(
            own.ephemeral_block_device().unwrap().device_name.as_deref(),
            Some("/dev/xvdc")
        );
    }

    #[test]
    fn ami_family_names_and_aliases() {
        assert_eq!("AL2023".parse::<AmiFamily>(), Ok(AmiFamily::Al2023));
        for family in AmiFamily::ALL {
            assert_eq!(family.as_str().parse::<AmiFamily>(), Ok(family));
        }
        let unknown = "al2023".parse::<AmiFamily>().unwrap_err();
        assert_eq!(unknown, AmiFamilyError::Family("al2023".into()));
        assert!(
            unknown.to_string().contains("expected AL2, AL2023"),
            "{unknown}"
        );
        assert_eq!(
            AmiFamily::from_alias("bottlerocket@v1.20.0"),
            Ok(AmiFamily::Bottlerocket)
        );
        assert_eq!(
            AmiFamily::from_alias("windows2022@latest"),
            Ok(AmiFamily::Windows2022)
        );
        for bad in [
            "custom@latest",
            "al2023",
            "al2023@",
            "al2023@a@b",
            "AL2023@latest",
        ] {
            assert_eq!(
                AmiFamily::from_alias(bad),
                Err(AmiFamilyError::Alias(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn family_behaviour() {
        let windows: Vec<_> = AmiFamily::ALL
            .into_iter()
            .filter(|f| f.is_windows())
            .collect();
        assert_eq!(
            windows,
            [
                AmiFamily::Windows2019,
                AmiFamily::Windows2022,
                AmiFamily::Windows2025
            ]
        );
        assert_eq!(AmiFamily::Windows2022.windows_build(), Some("10.0.20348"));
        assert!(!AmiFamily::Bottlerocket.pods_per_core_enabled());
        assert!(!AmiFamily::Bottlerocket.uses_eni_limited_memory_overhead());
        assert!(!AmiFamily::Windows2019.uses_eni_limited_memory_overhead());
        assert!(AmiFamily::Custom.uses_eni_limited_memory_overhead());
        assert!(!AmiFamily::Windows2025.supports_eni_limited_pod_density());
        assert!(AmiFamily::Al2.supports_eni_limited_pod_density());
    }

    #[test]
    fn metadata_options_default_as_the_crd() {
        let nc = nodeclass(base(
            serde_json::json!({"metadataOptions": {"httpTokens": "optional"}}),
        ));
        let m = &nc.spec.metadata_options;
        assert_eq!(
            (
                m.http_endpoint,
                m.http_protocol_ipv6,
                m.http_put_response_hop_limit,
                m.http_tokens
            ),
            (
                EnabledState::Enabled,
                EnabledState::Disabled,
                1,
                HttpTokens::Optional
            )
        );
        assert_eq!(
            nodeclass(base(serde_json::json!({}))).spec.metadata_options,
            MetadataOptions::default()
        );
    }
}
