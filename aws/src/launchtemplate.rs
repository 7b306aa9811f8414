//! Launch templates: one per distinct launch configuration (AMI, user data, security groups,
//! instance profile, block devices, IMDS options, monitoring, public IP, capacity type,
//! reservation targeting, placement group, network interfaces and EFA count, IPv4 prefixes,
//! tags), named `karpenter.k8s.aws/<hash of the configuration>` so equal configurations share
//! a template across launches and restarts. Templates are created on first use (one creation
//! at a time, so concurrent launches of a new configuration create it once), remembered for
//! a minute after their last use, deleted from EC2 when they expire unused or when their
//! EC2NodeClass is deleted, and forgotten when a launch reports them missing.

use crate::cache::TtlCache;
use crate::errors::{ApiError, codes};
use crate::selectors::filter;
use crate::tags;
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceMetadataTagsState,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest, MarketType,
    RequestLaunchTemplateData, ResourceType, TagSpecification, VolumeType,
};
use base64::Engine;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The prefix of every launch template kerf creates.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws";

/// How long a template stays known (and alive in EC2) after its last use.
pub const LAUNCH_TEMPLATE_TTL: Duration = Duration::from_secs(60);

/// One EBS device of the template.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BlockDeviceSpec {
    pub device_name: String,
    pub delete_on_termination: Option<bool>,
    pub encrypted: Option<bool>,
    pub iops: Option<i32>,
    pub kms_key_id: Option<String>,
    pub snapshot_id: Option<String>,
    pub throughput: Option<i32>,
    pub volume_size_gib: Option<i32>,
    pub volume_type: Option<String>,
}

/// IMDS exposure (`spec.metadataOptions`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MetadataSpec {
    pub http_endpoint: String,
    pub http_protocol_ipv6: String,
    pub http_put_response_hop_limit: i32,
    pub http_tokens: String,
}

impl Default for MetadataSpec {
    /// The CRD's defaults.
    fn default() -> Self {
        Self {
            http_endpoint: "enabled".into(),
            http_protocol_ipv6: "disabled".into(),
            http_put_response_hop_limit: 1,
            http_tokens: "required".into(),
        }
    }
}

/// Which capacity reservations a template's instances may use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub enum ReservationTargeting {
    /// EC2's default (the `ReservedCapacity` gate off): any open reservation that matches.
    #[default]
    Open,
    /// None (the gate on, an on-demand or spot launch), as upstream: reservations are
    /// launched into only when planned, so an unplanned launch does not use up their room.
    Excluded,
    /// Only this reservation (a reserved launch).
    Target {
        id: String,
        /// `default` or `capacity-block` (launched on the `capacity-block` market).
        reservation_type: String,
        /// Launched on the `interruptible-capacity-reservation` market.
        interruptible: bool,
    },
}

/// The placement group instances launch into (`spec.placementGroupSelector`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PlacementSpec {
    pub group_id: String,
    /// The partition of a partition group, when the NodeClaim asks for one.
    pub partition_number: Option<i32>,
}

/// One explicit interface (`spec.networkInterfaces`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InterfaceSpec {
    pub network_card_index: i32,
    pub device_index: i32,
    /// `interface` or `efa-only`.
    pub interface_type: String,
}

/// EC2's interface type of an EFA-only interface, which carries no IP traffic.
pub const INTERFACE_TYPE_EFA_ONLY: &str = "efa-only";
/// EC2's interface type of an EFA interface that also carries IP traffic.
pub const INTERFACE_TYPE_EFA: &str = "efa";

/// Everything that distinguishes one launch template from another.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LaunchTemplateConfig {
    pub node_class: String,
    pub ami_id: String,
    /// Rendered user data, plain text.
    pub user_data: String,
    pub security_group_ids: Vec<String>,
    pub instance_profile: Option<String>,
    pub block_device_mappings: Vec<BlockDeviceSpec>,
    pub metadata: MetadataSpec,
    pub detailed_monitoring: bool,
    pub associate_public_ip_address: Option<bool>,
    /// The cluster's pod network is IPv6 (instances get a primary IPv6 address).
    pub ipv6: bool,
    pub capacity_type: String,
    pub reservation: ReservationTargeting,
    /// Fields below are left out of the name while unset, so templates of launches that
    /// use none of them keep their names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
    /// `spec.networkInterfaces`: when listed, exactly these interfaces are attached.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<InterfaceSpec>,
    /// EFA interfaces to attach, one per network card, when the NodeClaim requests
    /// `vpc.amazonaws.com/efa` and the class lists no interfaces (upstream's EFA count).
    #[serde(skip_serializing_if = "is_zero")]
    pub efa_count: i32,
    /// `spec.ipPrefixCount`: prefixes assigned to each IP-carrying interface (IPv6 prefixes
    /// on an IPv6 cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    pub tags: BTreeMap<String, String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl LaunchTemplateConfig {
    /// `karpenter.k8s.aws/<hash>`; equal configurations (in any order of their security
    /// groups) give equal names.
    pub fn name(&self) -> String {
        let mut canonical = self.clone();
        canonical.security_group_ids.sort();
        let json =
            serde_json::to_vec(&canonical).expect("a launch template config always serialises");
        format!("{NAME_PREFIX}/{}", fnv1a64(&json))
    }
}

pub use kerf::api::nodeclass_hash::fnv1a64;

/// A launch template known to exist in EC2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchTemplateRef {
    pub id: String,
    pub name: String,
}

/// Creates, caches and deletes launch templates.
pub struct LaunchTemplateProvider {
    ec2: aws_sdk_ec2::Client,
    cluster_name: String,
    cache: TtlCache<String, LaunchTemplateRef>,
    creation: tokio::sync::Mutex<()>,
}

impl LaunchTemplateProvider {
    pub fn new(ec2: aws_sdk_ec2::Client, cluster_name: &str) -> Self {
        Self::with_ttl(ec2, cluster_name, LAUNCH_TEMPLATE_TTL)
    }

    pub fn with_ttl(ec2: aws_sdk_ec2::Client, cluster_name: &str, ttl: Duration) -> Self {
        Self {
            ec2,
            cluster_name: cluster_name.to_owned(),
            cache: TtlCache::new(ttl),
            creation: tokio::sync::Mutex::new(()),
        }
    }

    /// The template for `config`, found in the cache, in EC2, or created.
    pub async fn ensure(
        &self,
        config: &LaunchTemplateConfig,
    ) -> Result<LaunchTemplateRef, ApiError> {
        let name = config.name();
        if let Some(hit) = self.cache.get_and_touch(&name) {
            return Ok(hit);
        }
        let _single_flight = self.creation.lock().await;
        if let Some(hit) = self.cache.get_and_touch(&name) {
            return Ok(hit);
        }
        let found = match self.describe(&name).await? {
            Some(existing) => existing,
            None => match self.create(&name, config).await {
                Ok(created) => created,
                // Another process created it between our describe and create.
                Err(e) if e.code.as_deref() == Some(codes::LAUNCH_TEMPLATE_NAME_ALREADY_EXISTS) => {
                    self.describe(&name).await?.ok_or(e)?
                }
                Err(e) => return Err(e),
            },
        };
        self.cache.insert(name, found.clone());
        Ok(found)
    }

    async fn describe(&self, name: &str) -> Result<Option<LaunchTemplateRef>, ApiError> {
        match self
            .ec2
            .describe_launch_templates()
            .launch_template_names(name)
            .send()
            .await
        {
            Ok(out) => Ok(out.launch_templates().first().and_then(template_ref)),
            Err(e) => {
                let err = ApiError::from_sdk("DescribeLaunchTemplates", e);
                if err.is_not_found() {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    async fn create(
        &self,
        name: &str,
        config: &LaunchTemplateConfig,
    ) -> Result<LaunchTemplateRef, ApiError> {
        let mut template_tags = config.tags.clone();
        template_tags.insert(tags::EKS_CLUSTER_NAME.to_owned(), self.cluster_name.clone());
        template_tags.insert(tags::EC2NODECLASS.to_owned(), config.node_class.clone());
        let out = self
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(launch_template_data(config))
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(tags::to_ec2(&template_tags)))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| ApiError::from_sdk("CreateLaunchTemplate", e))?;
        let created = out
            .launch_template()
            .and_then(template_ref)
            .ok_or_else(|| ApiError {
                operation: "CreateLaunchTemplate",
                code: None,
                message: format!("the response for {name} named no launch template"),
            })?;
        tracing::debug!(name, id = created.id, "created launch template");
        Ok(created)
    }

    /// Forgets a template a launch reported missing, so the next launch recreates it.
    pub fn invalidate(&self, name: &str) {
        tracing::debug!(name, "invalidating launch template that no longer exists");
        self.cache.remove(&name.to_owned());
    }

    /// Loads the cluster's existing templates, so they are reused, or deleted if they stay
    /// unused for a TTL.
    pub async fn hydrate(&self) -> Result<usize, ApiError> {
        let templates = self.list_tagged(None).await?;
        let count = templates.len();
        for t in templates {
            self.cache.insert(t.name.clone(), t);
        }
        Ok(count)
    }

    /// Deletes templates unused for a TTL from EC2; returns their names.
    pub async fn evict_expired(&self) -> Result<Vec<String>, ApiError> {
        let mut deleted = Vec::new();
        for (name, template) in self.cache.take_expired() {
            self.delete(&template).await?;
            deleted.push(name);
        }
        Ok(deleted)
    }

    /// Deletes every template of `node_class` (when the EC2NodeClass is deleted).
    pub async fn delete_all(&self, node_class: &str) -> Result<Vec<String>, ApiError> {
        let templates = self.list_tagged(Some(node_class)).await?;
        let mut deleted = Vec::new();
        for t in templates {
            self.delete(&t).await?;
            self.cache.remove(&t.name);
            deleted.push(t.name);
        }
        Ok(deleted)
    }

    async fn delete(&self, template: &LaunchTemplateRef) -> Result<(), ApiError> {
        match self
            .ec2
            .delete_launch_template()
            .launch_template_id(&template.id)
            .send()
            .await
        {
            Ok(_) => {
                tracing::debug!(
                    name = template.name,
                    id = template.id,
                    "deleted launch template"
                );
                Ok(())
            }
            Err(e) => {
                let err = ApiError::from_sdk("DeleteLaunchTemplate", e);
                if err.is_not_found() { Ok(()) } else { Err(err) }
            }
        }
    }

    async fn list_tagged(
        &self,
        node_class: Option<&str>,
    ) -> Result<Vec<LaunchTemplateRef>, ApiError> {
        let mut filters = vec![filter(
            &format!("tag:{}", tags::EKS_CLUSTER_NAME),
            [self.cluster_name.clone()],
        )];
        if let Some(nc) = node_class {
            filters.push(filter(
                &format!("tag:{}", tags::EC2NODECLASS),
                [nc.to_owned()],
            ));
        }
        let mut pages = self
            .ec2
            .describe_launch_templates()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        let mut found = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| ApiError::from_sdk("DescribeLaunchTemplates", e))?;
            found.extend(page.launch_templates().iter().filter_map(template_ref));
        }
        Ok(found)
    }
}

fn template_ref(t: &aws_sdk_ec2::types::LaunchTemplate) -> Option<LaunchTemplateRef> {
    Some(LaunchTemplateRef {
        id: t.launch_template_id()?.to_owned(),
        name: t.launch_template_name()?.to_owned(),
    })
}

/// The EC2 request body of a template.
pub fn launch_template_data(config: &LaunchTemplateConfig) -> RequestLaunchTemplateData {
    let user_data = base64::engine::general_purpose::STANDARD.encode(config.user_data.as_bytes());
    let mut tag_specs = vec![resource_tags(ResourceType::NetworkInterface, &config.tags)];
    if config.capacity_type == kerf::labels::CAPACITY_TYPE_SPOT {
        tag_specs.push(resource_tags(
            ResourceType::SpotInstancesRequest,
            &config.tags,
        ));
    }
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(&config.ami_id)
        .user_data(user_data)
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(config.detailed_monitoring)
                .build(),
        )
        .metadata_options(metadata_options(&config.metadata))
        .set_block_device_mappings(Some(
            config
                .block_device_mappings
                .iter()
                .map(block_device)
                .collect(),
        ))
        .set_tag_specifications(Some(tag_specs));
    if let Some(profile) = &config.instance_profile {
        data = data.iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(profile)
                .build(),
        );
    }
    let interfaces = network_interfaces(config);
    if interfaces.is_empty() {
        data = data.set_security_group_ids(Some(config.security_group_ids.clone()));
    } else {
        data = data.set_network_interfaces(Some(interfaces));
    }
    if let Some(placement) = &config.placement {
        data = data.placement(
            LaunchTemplatePlacementRequest::builder()
                .group_id(&placement.group_id)
                .set_partition_number(placement.partition_number)
                .build(),
        );
    }
    match &config.reservation {
        ReservationTargeting::Open => {}
        ReservationTargeting::Excluded => {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_preference(CapacityReservationPreference::None)
                    .build(),
            );
        }
        ReservationTargeting::Target {
            id,
            reservation_type,
            interruptible,
        } => {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_preference(
                        CapacityReservationPreference::CapacityReservationsOnly,
                    )
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(id)
                            .build(),
                    )
                    .build(),
            );
            let market = if reservation_type == kerf::catalog::CAPACITY_BLOCK {
                Some(MarketType::CapacityBlock)
            } else if *interruptible {
                Some(MarketType::InterruptibleCapacityReservation)
            } else {
                None
            };
            if let Some(market) = market {
                data = data.instance_market_options(
                    LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(market)
                        .build(),
                );
            }
        }
    }
    data.build()
}

/// The template's interfaces, built as upstream builds them: the class's own list when it
/// has one (EFA-only interfaces get no addresses, prefixes or public IP); else one EFA
/// interface per network card for an EFA launch (the first the primary, device 0, the others
/// device 1); else one primary interface when a public-IP choice, IPv6 or prefixes need it.
/// Empty: the security groups go on the template itself and EC2 makes the interface.
pub fn network_interfaces(
    config: &LaunchTemplateConfig,
) -> Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest> {
    let addressed = |eni: aws_sdk_ec2::types::builders::LaunchTemplateInstanceNetworkInterfaceSpecificationRequestBuilder| {
        let eni = eni.set_associate_public_ip_address(config.associate_public_ip_address);
        if config.ipv6 {
            eni.primary_ipv6(true)
                .ipv6_address_count(1)
                .set_ipv6_prefix_count(config.ip_prefix_count)
        } else {
            eni.set_ipv4_prefix_count(config.ip_prefix_count)
        }
    };
    let groups = Some(config.security_group_ids.clone());
    if !config.network_interfaces.is_empty() {
        return config
            .network_interfaces
            .iter()
            .map(|nic| {
                let eni = LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .network_card_index(nic.network_card_index)
                    .device_index(nic.device_index)
                    .interface_type(&nic.interface_type)
                    .set_groups(groups.clone());
                if nic.interface_type == INTERFACE_TYPE_EFA_ONLY {
                    eni.build()
                } else {
                    addressed(eni).build()
                }
            })
            .collect();
    }
    if config.efa_count > 0 {
        return (0..config.efa_count)
            .map(|card| {
                addressed(
                    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                        .network_card_index(card)
                        .device_index(if card == 0 { 0 } else { 1 })
                        .interface_type(INTERFACE_TYPE_EFA)
                        .set_groups(groups.clone()),
                )
                .build()
            })
            .collect();
    }
    if config.associate_public_ip_address.is_some()
        || config.ipv6
        || config.ip_prefix_count.is_some()
    {
        return vec![
            addressed(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .set_groups(groups),
            )
            .build(),
        ];
    }
    Vec::new()
}

fn resource_tags(
    resource: ResourceType,
    tags: &BTreeMap<String, String>,
) -> LaunchTemplateTagSpecificationRequest {
    LaunchTemplateTagSpecificationRequest::builder()
        .resource_type(resource)
        .set_tags(Some(tags::to_ec2(tags)))
        .build()
}

fn metadata_options(m: &MetadataSpec) -> LaunchTemplateInstanceMetadataOptionsRequest {
    LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
            m.http_endpoint.as_str(),
        ))
        .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
            m.http_protocol_ipv6.as_str(),
        ))
        .http_put_response_hop_limit(m.http_put_response_hop_limit)
        .http_tokens(LaunchTemplateHttpTokensState::from(m.http_tokens.as_str()))
        .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::Disabled)
        .build()
}

fn block_device(b: &BlockDeviceSpec) -> LaunchTemplateBlockDeviceMappingRequest {
    let ebs = LaunchTemplateEbsBlockDeviceRequest::builder()
        .set_delete_on_termination(b.delete_on_termination)
        .set_encrypted(b.encrypted)
        .set_iops(b.iops)
        .set_kms_key_id(b.kms_key_id.clone())
        .set_snapshot_id(b.snapshot_id.clone())
        .set_throughput(b.throughput)
        .set_volume_size(b.volume_size_gib)
        .set_volume_type(b.volume_type.as_deref().map(VolumeType::from))
        .build();
    LaunchTemplateBlockDeviceMappingRequest::builder()
        .device_name(&b.device_name)
        .ebs(ebs)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LaunchTemplateConfig {
        LaunchTemplateConfig {
            node_class: "default".into(),
            ami_id: "ami-1".into(),
            user_data: "#!/bin/bash".into(),
            security_group_ids: vec!["sg-2".into(), "sg-1".into()],
            capacity_type: "spot".into(),
            ..LaunchTemplateConfig::default()
        }
    }

    #[test]
    fn names_are_stable_and_change_with_the_configuration() {
        let a = config();
        let mut reordered = config();
        reordered.security_group_ids.reverse();
        assert_eq!(a.name(), reordered.name());
        assert!(a.name().starts_with("karpenter.k8s.aws/"));
        let mut other_ami = config();
        other_ami.ami_id = "ami-2".into();
        assert_ne!(a.name(), other_ami.name());
        let mut other_user_data = config();
        other_user_data.user_data.push('\n');
        assert_ne!(a.name(), other_user_data.name());
        // FNV-1a of the empty input is its offset basis: the hash is not process-seeded.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn request_data_follows_the_configuration() {
        let mut c = config();
        c.block_device_mappings = vec![BlockDeviceSpec {
            device_name: "/dev/xvda".into(),
            encrypted: Some(true),
            volume_size_gib: Some(20),
            volume_type: Some("gp3".into()),
            ..BlockDeviceSpec::default()
        }];
        c.instance_profile = Some("profile".into());
        let data = launch_template_data(&c);
        assert_eq!(data.image_id(), Some("ami-1"));
        assert_eq!(data.security_group_ids(), ["sg-2", "sg-1"]);
        assert!(data.network_interfaces().is_empty());
        assert_eq!(
            data.block_device_mappings()[0]
                .ebs()
                .and_then(|e| e.volume_size()),
            Some(20)
        );
        assert_eq!(
            data.iam_instance_profile().and_then(|p| p.name()),
            Some("profile")
        );
        let resources: Vec<&ResourceType> = data
            .tag_specifications()
            .iter()
            .filter_map(|t| t.resource_type())
            .collect();
        assert_eq!(
            resources,
            [
                &ResourceType::NetworkInterface,
                &ResourceType::SpotInstancesRequest
            ]
        );
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data.user_data().unwrap())
            .unwrap();
        assert_eq!(decoded, b"#!/bin/bash");

        c.associate_public_ip_address = Some(false);
        let data = launch_template_data(&c);
        assert!(data.security_group_ids().is_empty());
        let eni = &data.network_interfaces()[0];
        assert_eq!(eni.groups(), ["sg-2", "sg-1"]);
        assert_eq!(eni.associate_public_ip_address(), Some(false));
    }

    #[test]
    fn reservation_targeting_sets_the_preference_target_and_market() {
        let mut c = config();
        assert!(
            launch_template_data(&c)
                .capacity_reservation_specification()
                .is_none()
        );
        c.reservation = ReservationTargeting::Excluded;
        let open_name = config().name();
        assert_ne!(c.name(), open_name);
        let data = launch_template_data(&c);
        let spec = data.capacity_reservation_specification().unwrap();
        assert_eq!(
            spec.capacity_reservation_preference(),
            Some(&CapacityReservationPreference::None)
        );
        assert!(spec.capacity_reservation_target().is_none());
        assert!(data.instance_market_options().is_none());

        let target = |reservation_type: &str, interruptible: bool| ReservationTargeting::Target {
            id: "cr-1".into(),
            reservation_type: reservation_type.into(),
            interruptible,
        };
        for (targeting, market) in [
            (target("default", false), None),
            (
                target("capacity-block", false),
                Some(MarketType::CapacityBlock),
            ),
            (
                target("default", true),
                Some(MarketType::InterruptibleCapacityReservation),
            ),
        ] {
            c.reservation = targeting;
            let data = launch_template_data(&c);
            let spec = data.capacity_reservation_specification().unwrap();
            assert_eq!(
                spec.capacity_reservation_preference(),
                Some(&CapacityReservationPreference::CapacityReservationsOnly)
            );
            assert_eq!(
                spec.capacity_reservation_target()
                    .and_then(|t| t.capacity_reservation_id()),
                Some("cr-1")
            );
            assert_eq!(
                data.instance_market_options().and_then(|m| m.market_type()),
                market.as_ref()
            );
        }
    }

    #[test]
    fn interfaces_follow_the_class_list_the_efa_count_or_the_prefixes() {
        let mut c = config();
        c.ip_prefix_count = Some(2);
        c.placement = Some(PlacementSpec {
            group_id: "pg-1".into(),
            partition_number: Some(2),
        });
        let data = launch_template_data(&c);
        assert!(data.security_group_ids().is_empty());
        let [primary] = data.network_interfaces() else {
            panic!("one primary interface: {:?}", data.network_interfaces())
        };
        assert_eq!(primary.device_index(), Some(0));
        assert_eq!(primary.ipv4_prefix_count(), Some(2));
        assert_eq!(primary.groups(), ["sg-2", "sg-1"]);
        let placement = data.placement().expect("placement");
        assert_eq!(placement.group_id(), Some("pg-1"));
        assert_eq!(placement.partition_number(), Some(2));

        c.efa_count = 3;
        let efa = network_interfaces(&c);
        let shape: Vec<_> = efa
            .iter()
            .map(|n| {
                (
                    n.network_card_index(),
                    n.device_index(),
                    n.interface_type(),
                    n.ipv4_prefix_count(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (Some(0), Some(0), Some("efa"), Some(2)),
                (Some(1), Some(1), Some("efa"), Some(2)),
                (Some(2), Some(1), Some("efa"), Some(2)),
            ]
        );

        c.associate_public_ip_address = Some(true);
        c.network_interfaces = vec![
            InterfaceSpec {
                network_card_index: 0,
                device_index: 0,
                interface_type: "interface".into(),
            },
            InterfaceSpec {
                network_card_index: 1,
                device_index: 0,
                interface_type: INTERFACE_TYPE_EFA_ONLY.into(),
            },
        ];
        let listed = network_interfaces(&c);
        assert_eq!(listed.len(), 2, "the class's list replaces the EFA count");
        assert_eq!(listed[0].interface_type(), Some("interface"));
        assert_eq!(listed[0].ipv4_prefix_count(), Some(2));
        assert_eq!(listed[0].associate_public_ip_address(), Some(true));
        assert_eq!(listed[1].network_card_index(), Some(1));
        assert_eq!(listed[1].interface_type(), Some("efa-only"));
        assert_eq!(listed[1].ipv4_prefix_count(), None);
        assert_eq!(listed[1].associate_public_ip_address(), None);

        let plain = config();
        assert!(network_interfaces(&plain).is_empty());
        assert_eq!(launch_template_data(&plain).security_group_ids().len(), 2);
        assert!(launch_template_data(&plain).placement().is_none());
        // Unset, the new fields leave names as they were.
        let named = serde_json::to_value(&plain).expect("serialises");
        for field in [
            "placement",
            "network_interfaces",
            "efa_count",
            "ip_prefix_count",
        ] {
            assert!(named.get(field).is_none(), "{field}");
        }
    }
}
