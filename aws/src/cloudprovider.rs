//! The AWS implementation of kerf's [`CloudProvider`]: Create resolves the NodeClaim's
//! EC2NodeClass, picks instance types and a capacity type, renders user data and ensures a
//! launch template per (AMI, max pods) group, and launches through CreateFleet — after
//! looking for an instance already tagged with the NodeClaim, under the NodeClaim's client
//! token ([`kerf::launch_attempts`]), so no retry, restart or failover launches twice;
//! Delete, Get and List work on the instances tagged for this cluster; GetInstanceTypes
//! lists the NodePool's types with live offerings; IsDrifted compares an instance with its
//! node class. The controller supplies EC2NodeClasses through [`NodeClassStore`] and owns the
//! unavailable-offerings state through [`UnavailableOfferings`].

use crate::ami::AmiProvider;
use crate::capacityreservation::CapacityReservationProvider;
use crate::clients::AwsClients;
use crate::drift::{self, DriftInputs};
use crate::errors::{
    ApiError, FleetFailure, LaunchAnswer, fleet_failure, launch_answer, launch_failure_reason,
};
use crate::fleet::{
    FleetRequest, FleetReservation, LaunchCandidate, MAX_INSTANCE_TYPES, launch_configs,
    record_fleet_errors,
};
use crate::instance::{Instance, InstanceError, InstanceProvider};
use crate::instanceprofile::InstanceProfileProvider;
use crate::instancetype::{InstanceTypeProvider, LaunchScope};
use crate::launchtemplate::{
    BlockDeviceSpec, InterfaceSpec, LaunchTemplateConfig, LaunchTemplateProvider, MetadataSpec,
    PlacementSpec, ReservationTargeting,
};
use crate::nodeclass::NodeClassResolver;
use crate::placementgroup::{PlacementGroup, PlacementGroupProvider, partition_for};
use crate::pricing::PricingProvider;
use crate::securitygroup::SecurityGroupProvider;
use crate::selection::{
    claim_requests, claim_requirements, offering_allowed, reserved_offerings, select,
};
use crate::ssm::SsmProvider;
use crate::subnet::{SubnetInfo, SubnetProvider};
use crate::tags;
use crate::unavailable::UnavailableOfferings;
use crate::userdata::{self, BootstrapOptions, KubeletArgs, UserDataFormat};
use crate::version::KubernetesVersion;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf::api::condition::types;
use kerf::api::nodeclaim::{NodeClaimStatus, ResourceList};
use kerf::api::requirement::Operator;
use kerf::api::{AmiFamily, EC2NodeClass, NodeClaim, NodePool};
use kerf::catalog::{AllocatableSettings, CapacityType, CatalogSnapshot, InstanceType, Offering};
use kerf::cloudprovider::{
    BoxFuture, CloudProvider, CloudProviderError, CloudResult, DriftReason, InstanceTagger,
    NodeClassReconciler, OfferingRef, aws_provider_id, launched_provider_id, parse_aws_provider_id,
};
use kerf::labels;
use kerf::launch_attempts::{LaunchAttempts, NextAttempt};
use kerf::resources::{Quantity, Resources};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How soon a catalog refresh with a failed part is tried again; doubled after each failure
/// in a row, so an API that is down is not hammered while a blip costs seconds, not hours.
pub const REFRESH_RETRY_BASE: Duration = Duration::from_secs(10);
/// The longest wait between retries of a failing refresh (upstream's controllers back off
/// to 1,000 s).
pub const REFRESH_RETRY_MAX: Duration = Duration::from_secs(1000);

/// Cluster facts and controller settings the provider needs.
#[derive(Clone, Debug, PartialEq)]
pub struct AwsSettings {
    pub cluster_name: String,
    pub cluster_endpoint: String,
    pub ca_bundle: Option<String>,
    /// The service CIDR (AL2023 nodes need it).
    pub cluster_cidr: Option<String>,
    /// The cluster DNS service IP (kube-dns), unless the node class's kubelet sets one.
    pub kube_dns_ip: Option<String>,
    /// `1.31`-style version of the control plane, for AMI aliases; re-read while running.
    pub kubernetes_version: KubernetesVersion,
    pub isolated_vpc: bool,
    pub reserved_enis: u32,
    pub vm_memory_overhead_percent: f64,
    /// The `ReservedCapacity` feature gate: resolve `capacityReservationSelectorTerms` and
    /// launch into the reservations they select.
    pub reserved_capacity: bool,
}

/// Where the provider reads EC2NodeClasses (the controller's informer cache).
pub trait NodeClassStore: Send + Sync {
    fn get(&self, name: &str) -> Option<EC2NodeClass>;
}

/// A [`NodeClassStore`] held in memory.
#[derive(Default)]
pub struct InMemoryNodeClasses {
    classes: RwLock<HashMap<String, EC2NodeClass>>,
}

impl InMemoryNodeClasses {
    pub fn put(&self, node_class: EC2NodeClass) {
        self.classes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node_class.name().to_owned(), node_class);
    }
}

impl NodeClassStore for InMemoryNodeClasses {
    fn get(&self, name: &str) -> Option<EC2NodeClass> {
        self.classes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
}

/// The AWS cloud provider and the providers it is built from.
pub struct AwsCloudProvider {
    pub settings: AwsSettings,
    pub clients: AwsClients,
    node_classes: Arc<dyn NodeClassStore>,
    pub unavailable: Arc<dyn UnavailableOfferings>,
    pub subnets: Arc<SubnetProvider>,
    pub security_groups: Arc<SecurityGroupProvider>,
    pub ssm: Arc<SsmProvider>,
    pub amis: Arc<AmiProvider>,
    pub instance_profiles: Arc<InstanceProfileProvider>,
    pub pricing: Arc<PricingProvider>,
    pub instance_types: Arc<InstanceTypeProvider>,
    pub launch_templates: Arc<LaunchTemplateProvider>,
    pub instances: Arc<InstanceProvider>,
    pub capacity_reservations: Arc<CapacityReservationProvider>,
    pub placement_groups: Arc<PlacementGroupProvider>,
    /// Per NodeClaim uid: its launch generation (client token) and the request whose
    /// answer was lost.
    attempts: LaunchAttempts<FleetRequest>,
}

pub(crate) fn api_error(err: ApiError) -> CloudProviderError {
    if err.is_throttled() {
        CloudProviderError::Throttled {
            operation: err.operation.to_owned(),
            message: err.message,
        }
    } else {
        CloudProviderError::Other {
            operation: err.operation.to_owned(),
            message: err.code_and_message(),
        }
    }
}

pub(crate) fn instance_error(provider_id: &str, err: InstanceError) -> CloudProviderError {
    match err {
        InstanceError::NotFound(id) => CloudProviderError::NodeClaimNotFound {
            provider_id: provider_id.to_owned(),
            reason: format!("instance {id} does not exist"),
        },
        ended @ InstanceError::Ended { .. } => CloudProviderError::NodeClaimNotFound {
            provider_id: provider_id.to_owned(),
            reason: ended.to_string(),
        },
        InstanceError::Api(e) => api_error(e),
        InstanceError::Batch(e) => CloudProviderError::Other {
            operation: "EC2 batch".to_owned(),
            message: e.to_string(),
        },
    }
}

/// A resource list for the API, without zero entries.
fn resource_list(resources: &Resources) -> ResourceList {
    resources
        .iter()
        .filter(|(_, q)| *q != Quantity::ZERO)
        .map(|(name, q)| (name.to_owned(), K8sQuantity(q.to_string())))
        .collect()
}

/// Labels kubelets may not set on themselves (`kubernetes.io` / `k8s.io` domains).
fn is_restricted_label(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
}

impl AwsCloudProvider {
    pub fn new(
        clients: AwsClients,
        settings: AwsSettings,
        node_classes: Arc<dyn NodeClassStore>,
        unavailable: Arc<dyn UnavailableOfferings>,
    ) -> Self {
        let ssm = Arc::new(SsmProvider::new(clients.ssm.clone()));
        let pricing = Arc::new(PricingProvider::new(
            clients.pricing.clone(),
            clients.ec2.clone(),
            &clients.region,
            settings.isolated_vpc,
        ));
        Self {
            subnets: Arc::new(SubnetProvider::new(clients.ec2.clone())),
            capacity_reservations: Arc::new(CapacityReservationProvider::new(clients.ec2.clone())),
            placement_groups: Arc::new(PlacementGroupProvider::new(clients.ec2.clone())),
            security_groups: Arc::new(SecurityGroupProvider::new(clients.ec2.clone())),
            amis: Arc::new(AmiProvider::new(clients.ec2.clone(), ssm.clone())),
            instance_profiles: Arc::new(InstanceProfileProvider::new(
                clients.iam.clone(),
                &settings.cluster_name,
                &clients.region,
            )),
            instance_types: Arc::new(InstanceTypeProvider::new(
                clients.ec2.clone(),
                &clients.region,
                pricing.clone(),
                unavailable.clone(),
            )),
            launch_templates: Arc::new(LaunchTemplateProvider::new(
                clients.ec2.clone(),
                &settings.cluster_name,
            )),
            instances: Arc::new(InstanceProvider::new(
                clients.ec2.clone(),
                &settings.cluster_name,
            )),
            ssm,
            pricing,
            node_classes,
            unavailable,
            settings,
            clients,
            attempts: LaunchAttempts::default(),
        }
    }

    /// The resolver of EC2NodeClass statuses, sharing this provider's caches.
    pub fn node_class_resolver(&self) -> NodeClassResolver {
        NodeClassResolver {
            subnets: self.subnets.clone(),
            security_groups: self.security_groups.clone(),
            amis: self.amis.clone(),
            instance_profiles: self.instance_profiles.clone(),
            capacity_reservations: self
                .settings
                .reserved_capacity
                .then(|| self.capacity_reservations.clone()),
            placement_groups: self.placement_groups.clone(),
            kubernetes_version: self.settings.kubernetes_version.clone(),
        }
    }

    /// Deletes what kerf created for a deleted EC2NodeClass: its launch templates and the
    /// instance profile it managed.
    pub async fn delete_node_class_resources(&self, node_class: &str) -> Result<(), ApiError> {
        self.launch_templates.delete_all(node_class).await?;
        self.instance_profiles.delete(node_class).await
    }

    fn ready_node_class(&self, name: &str) -> CloudResult<EC2NodeClass> {
        let not_ready = |reason: String| CloudProviderError::NodeClassNotReady {
            node_class: name.to_owned(),
            reason,
        };
        let nc = self
            .node_classes
            .get(name)
            .ok_or_else(|| not_ready("EC2NodeClass not found".to_owned()))?;
        if !nc.is_condition_true(types::READY) {
            let message = nc
                .conditions()
                .iter()
                .find(|c| c.type_ == types::READY)
                .map(|c| c.message.clone())
                .unwrap_or_else(|| "status not resolved yet".to_owned());
            return Err(not_ready(format!("Ready is not True: {message}")));
        }
        Ok(nc)
    }

    fn allocatable_settings(&self, nc: &EC2NodeClass) -> CloudResult<AllocatableSettings> {
        AllocatableSettings::for_node_class(
            nc,
            self.settings.reserved_enis,
            self.settings.vm_memory_overhead_percent,
        )
        .map_err(|e| CloudProviderError::NodeClassNotReady {
            node_class: nc.name().to_owned(),
            reason: e.to_string(),
        })
    }

    fn scope(nc: &EC2NodeClass) -> LaunchScope {
        LaunchScope::from_subnets(
            nc.status
                .iter()
                .flat_map(|s| s.subnets.iter())
                .map(|s| (s.zone.as_str(), s.id.as_str())),
        )
    }

    fn types_for(&self, nc: &EC2NodeClass) -> CloudResult<Vec<InstanceType>> {
        let settings = self.allocatable_settings(nc)?;
        Ok(self.instance_types.list(&settings, &Self::scope(nc)))
    }

    async fn launch(&self, claim: &NodeClaim) -> CloudResult<NodeClaim> {
        let claim_name = claim.name().to_owned();
        // Every instance is tagged with its NodeClaim at launch: one found here was started by
        // a launch whose answer or status write was lost. One this search misses (EC2's
        // eventual consistency) is answered by CreateFleet itself, under the same token.
        if let Some(instance) = self
            .instances
            .find_by_node_claim(&claim_name)
            .await
            .map_err(|e| instance_error("", e))?
        {
            tracing::info!(nodeclaim = %claim_name, instance_id = %instance.id, "adopting instance launched for nodeclaim");
            let mut adopted = self.adopted_claim(claim, &instance);
            // The launch that was lost labelled its NodeClaim with the group; without the
            // label the node would read as PlacementGroupDrift.
            if let Some(nc) = self.node_classes.get(&claim.node_class_ref().name)
                && let Some(group) = self.placement_group(&nc).await?
            {
                let labels = adopted.metadata.labels.get_or_insert_with(BTreeMap::new);
                labels.extend(placement_labels(&group, claim));
            }
            return Ok(adopted);
        }
        let nc = self.ready_node_class(&claim.node_class_ref().name)?;
        let launch_failed = |reason: &str, message: String| CloudProviderError::LaunchFailed {
            node_claim: claim_name.clone(),
            reason: reason.to_owned(),
            message,
        };
        let reqs = claim_requirements(claim)
            .map_err(|e| launch_failed("InvalidRequirements", e.to_string()))?;
        let requests = claim_requests(claim)
            .map_err(|e| launch_failed("InvalidResourceRequests", e.to_string()))?;
        let mut types = self.types_for(&nc)?;
        if self.settings.reserved_capacity {
            let reservations = nc
                .status
                .as_ref()
                .map(|s| s.capacity_reservations.as_slice())
                .unwrap_or_default();
            kerf::catalog::add_reserved_offerings(&mut types, reservations, |id| {
                self.capacity_reservations.available(id)
            });
        }
        let insufficient = |offerings: Vec<OfferingRef>| CloudProviderError::InsufficientCapacity {
            node_claim: claim_name.clone(),
            offerings,
        };
        let selection = select(&types, &reqs, &requests).ok_or_else(|| insufficient(Vec::new()))?;
        let capacity_type = selection.capacity_type;
        let chosen: Vec<&InstanceType> = selection
            .instance_types
            .into_iter()
            .take(MAX_INSTANCE_TYPES)
            .collect();
        let (reservation, offerings) = if capacity_type == CapacityType::Reserved {
            let (kind, offerings) =
                reserved_offerings(&chosen, &reqs).ok_or_else(|| insufficient(Vec::new()))?;
            (Some(kind), offerings)
        } else {
            let offerings = chosen
                .iter()
                .flat_map(|it| {
                    it.offerings
                        .iter()
                        .filter(|o| o.capacity_type == capacity_type && offering_allowed(&reqs, o))
                        .map(move |o| (*it, o))
                })
                .collect();
            (None, offerings)
        };
        // Resolved once per launch, so the template and the NodeClaim's labels agree.
        let group = self.placement_group(&nc).await?;

        let key = claim
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| claim_name.clone());
        let (mut template_renewed, mut instance_replaced) = (false, false);
        loop {
            let next = self.attempts.next(&key);
            let token = next.token().to_owned();
            let repeats_launch = matches!(
                next,
                NextAttempt::Fresh {
                    repeats_launch: true,
                    ..
                }
            );
            let (request, reserved) = match next {
                NextAttempt::Resend { request, .. } => (request, Vec::new()),
                NextAttempt::Fresh { .. } => {
                    self.fleet_request(
                        &nc,
                        claim,
                        &chosen,
                        &offerings,
                        capacity_type,
                        reservation.clone(),
                        group.as_ref(),
                    )
                    .await?
                }
            };
            if request.configs.is_empty() {
                return Err(insufficient(Vec::new()));
            }
            let capacity_type: CapacityType =
                request.capacity_type.parse().unwrap_or(capacity_type);
            let outcome = match self.instances.launch(&request, &claim_name, &token).await {
                Ok(outcome) => outcome,
                Err(InstanceError::Api(e)) => {
                    match launch_answer(&e) {
                        // It may have launched: sent again, exactly, under the same token.
                        LaunchAnswer::Lost => self.attempts.unanswered(&key, request.clone()),
                        // The token's first request may have launched: searched for again
                        // by tag on the next attempt, never replaced by a new token.
                        LaunchAnswer::TokenReused => {}
                        LaunchAnswer::Refused => self.attempts.answered_without_instance(&key),
                    }
                    if e.is_launch_template_not_found() && !template_renewed {
                        template_renewed = true;
                        for cfg in &request.configs {
                            self.launch_templates.invalidate(&cfg.launch_template);
                        }
                        continue;
                    }
                    let why = launch_failure_reason(&e.code_and_message());
                    return Err(launch_failed(why.reason, format!("{}: {}", why.message, e)));
                }
                Err(e) => return Err(instance_error("", e)),
            };
            let (marked, spot_blocked) = record_fleet_errors(
                &outcome.errors,
                capacity_type.as_str(),
                &claim_name,
                &*self.unavailable,
            );
            for (instance_type, zone) in &marked {
                if let Some(id) = request.reservation_of(instance_type, zone) {
                    self.capacity_reservations.mark_unavailable(id);
                }
            }
            for (subnet, ips) in &reserved {
                let used = outcome
                    .instance
                    .as_ref()
                    .and_then(|i| i.subnet_id.as_deref())
                    .is_some_and(|s| s == subnet);
                if !used {
                    self.subnets.release_reserved(subnet, *ips);
                }
            }
            for err in &outcome.errors {
                if err.code == crate::errors::codes::INSUFFICIENT_FREE_ADDRESSES
                    && let Some(subnet) = &err.subnet_id
                {
                    self.subnets.mark_exhausted(subnet);
                }
            }
            let Some(instance) = outcome.instance else {
                self.attempts.answered_without_instance(&key);
                if spot_blocked {
                    return Err(launch_failed(
                        kerf::cloudprovider::SPOT_SLR_REASON,
                        crate::errors::spot_service_linked_role_message(&claim_name),
                    ));
                }
                return Err(match fleet_failure(&outcome.errors) {
                    FleetFailure::Capacity => insufficient(
                        marked
                            .into_iter()
                            .map(|(t, z)| OfferingRef::new(capacity_type.as_str(), &t, &z))
                            .collect(),
                    ),
                    FleetFailure::Retryable { message, .. } => CloudProviderError::Other {
                        operation: "CreateFleet".to_owned(),
                        message,
                    },
                    FleetFailure::Unrecoverable { code, message } => launch_failed(&code, message),
                });
            };
            // The token launched before, and what it launched has ended since: a new launch.
            if repeats_launch && !instance_replaced && self.has_ended(&instance.instance_id).await {
                instance_replaced = true;
                self.attempts.answered_without_instance(&key);
                continue;
            }
            self.attempts.launched(&key);
            let it = types.iter().find(|t| t.name == instance.instance_type);
            let reserved_in = request
                .reservation_of(&instance.instance_type, &instance.zone)
                .zip(request.reservation.as_ref());
            if let Some((id, _)) = reserved_in {
                self.capacity_reservations.mark_launched(id);
            }
            let mut launched = self.launched_claim(claim, &nc, it, &instance, capacity_type);
            let labels = launched.metadata.labels.get_or_insert_with(BTreeMap::new);
            if let Some((id, kind)) = reserved_in {
                labels.extend(reservation_labels(id, kind));
            }
            if let Some(group) = &group {
                labels.extend(placement_labels(group, claim));
            }
            return Ok(launched);
        }
    }

    /// Whether instance `id` is known to have ended (a failed lookup is not taken for it).
    async fn has_ended(&self, id: &str) -> bool {
        matches!(
            self.instances.get(id).await,
            Err(InstanceError::Ended { .. } | InstanceError::NotFound(_))
        )
    }

    /// The CreateFleet request for a launch, and the addresses reserved per subnet.
    #[allow(clippy::too_many_arguments)] // one launch's parts, each already resolved once
    async fn fleet_request(
        &self,
        nc: &EC2NodeClass,
        claim: &NodeClaim,
        chosen: &[&InstanceType],
        offerings: &[(&InstanceType, &Offering)],
        capacity_type: CapacityType,
        reservation: Option<FleetReservation>,
        group: Option<&PlacementGroup>,
    ) -> CloudResult<(FleetRequest, Vec<(String, i32)>)> {
        let status = nc.status.clone().unwrap_or_default();
        let node_pool = claim.nodepool_name().unwrap_or_default().to_owned();
        let tags = tags::launch_tags(
            &self.settings.cluster_name,
            &node_pool,
            nc.name(),
            &nc.spec.tags,
        );
        let placement = group.map(|group| placement_spec(group, claim));
        let efa_requested = claim
            .resource_requests()
            .is_some_and(|r| r.contains_key(labels::RESOURCE_EFA));
        let mut candidates = Vec::new();
        let mut templates: HashMap<(String, i64, Option<String>, i32), String> = HashMap::new();
        for (it, o) in offerings {
            let Some(ami) = drift::ami_for(&status.amis, &it.labels) else {
                continue;
            };
            let max_pods = it.capacity.pods().value();
            let reservation_id = o.reservation.as_ref().map(|r| r.id.clone());
            // As upstream, one template per EFA count: a launch requesting EFA attaches
            // every EFA interface its type has, unless the class lists its own interfaces.
            let efa_count = if efa_requested && nc.spec.network_interfaces.is_empty() {
                i32::try_from(it.capacity.get_or_zero(labels::RESOURCE_EFA).value()).unwrap_or(0)
            } else {
                0
            };
            let key = (ami.id.clone(), max_pods, reservation_id.clone(), efa_count);
            if !templates.contains_key(&key) {
                let targeting = match &o.reservation {
                    Some(r) => ReservationTargeting::Target {
                        id: r.id.clone(),
                        reservation_type: r.reservation_type.clone(),
                        interruptible: r.interruptible,
                    },
                    None if self.settings.reserved_capacity => ReservationTargeting::Excluded,
                    None => ReservationTargeting::Open,
                };
                let mut config =
                    self.template_config(nc, claim, &ami.id, max_pods, capacity_type, &tags)?;
                config.reservation = targeting;
                config.placement = placement.clone();
                config.efa_count = efa_count;
                let lt = self.launch_templates.ensure(&config).await.map_err(|e| {
                    let why = launch_failure_reason(&e.code_and_message());
                    CloudProviderError::LaunchFailed {
                        node_claim: claim.name().to_owned(),
                        reason: why.reason.to_owned(),
                        message: format!("getting launch templates: {e}"),
                    }
                })?;
                templates.insert(key.clone(), lt.name);
            }
            candidates.push(LaunchCandidate {
                instance_type: it.name.clone(),
                zone: o.zone.clone(),
                price: o.price,
                launch_template: templates[&key].clone(),
                image_id: ami.id.clone(),
                reservation_id,
            });
        }
        let subnet_candidates: Vec<SubnetInfo> = status
            .subnets
            .iter()
            .map(|s| SubnetInfo {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: s.zone_id.clone(),
                vpc_id: None,
                available_ip_count: 0,
                tags: BTreeMap::new(),
            })
            .collect();
        let min_pods = chosen
            .iter()
            .map(|t| t.capacity.pods().value())
            .min()
            .unwrap_or(0);
        let reserve = i32::try_from(min_pods).unwrap_or(i32::MAX);
        let zonal = self
            .subnets
            .zonal_subnets_for_launch(&subnet_candidates, |_| reserve);
        let reserved = zonal.values().map(|s| (s.id.clone(), reserve)).collect();
        let request = FleetRequest {
            capacity_type: capacity_type.as_str().to_owned(),
            configs: launch_configs(&candidates, &zonal, MAX_INSTANCE_TYPES),
            tags,
            context: fleet_context(nc, claim),
            reservation,
        };
        Ok((request, reserved))
    }

    fn template_config(
        &self,
        nc: &EC2NodeClass,
        claim: &NodeClaim,
        ami_id: &str,
        max_pods: i64,
        capacity_type: CapacityType,
        tags: &BTreeMap<String, String>,
    ) -> CloudResult<LaunchTemplateConfig> {
        let opts = self.bootstrap_options(nc, claim, max_pods, capacity_type);
        let format = match nc.ami_family() {
            AmiFamily::Al2 => UserDataFormat::Al2,
            AmiFamily::Al2023 => UserDataFormat::Al2023,
            AmiFamily::Bottlerocket => UserDataFormat::Bottlerocket,
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
                UserDataFormat::Windows
            }
            AmiFamily::Custom => UserDataFormat::Custom,
        };
        let user_data =
            userdata::render(format, &opts).map_err(|e| CloudProviderError::NodeClassNotReady {
                node_class: nc.name().to_owned(),
                reason: e.to_string(),
            })?;
        let status = nc.status.clone().unwrap_or_default();
        let metadata = &nc.spec.metadata_options;
        let word = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        Ok(LaunchTemplateConfig {
            node_class: nc.name().to_owned(),
            ami_id: ami_id.to_owned(),
            user_data,
            security_group_ids: status
                .security_groups
                .iter()
                .map(|g| g.id.clone())
                .collect(),
            instance_profile: status.instance_profile.clone(),
            block_device_mappings: nc
                .effective_block_device_mappings()
                .iter()
                .filter_map(block_device)
                .collect(),
            metadata: MetadataSpec {
                http_endpoint: word(serde_json::json!(metadata.http_endpoint)),
                http_protocol_ipv6: word(serde_json::json!(metadata.http_protocol_ipv6)),
                http_put_response_hop_limit: i32::try_from(metadata.http_put_response_hop_limit)
                    .unwrap_or(1),
                http_tokens: word(serde_json::json!(metadata.http_tokens)),
            },
            detailed_monitoring: nc.spec.detailed_monitoring.unwrap_or(false),
            associate_public_ip_address: nc.spec.associate_public_ip_address,
            ipv6: opts.is_ipv6(),
            capacity_type: capacity_type.as_str().to_owned(),
            reservation: ReservationTargeting::Open,
            placement: None,
            network_interfaces: nc
                .spec
                .network_interfaces
                .iter()
                .map(|nic| InterfaceSpec {
                    network_card_index: nic.network_card_index,
                    device_index: nic.device_index,
                    interface_type: nic.interface_type.as_str().to_owned(),
                })
                .collect(),
            efa_count: 0,
            ip_prefix_count: nc.spec.ip_prefix_count,
            tags: tags.clone(),
        })
    }

    /// The placement group the class selects, through the provider's cache. A class whose
    /// selector names no group is not Ready, so it does not launch.
    async fn placement_group(&self, nc: &EC2NodeClass) -> CloudResult<Option<PlacementGroup>> {
        self.placement_groups
            .get(nc.spec.placement_group_selector.as_ref())
            .await
            .map_err(api_error)
    }

    fn bootstrap_options(
        &self,
        nc: &EC2NodeClass,
        claim: &NodeClaim,
        max_pods: i64,
        capacity_type: CapacityType,
    ) -> BootstrapOptions {
        let mut node_labels: BTreeMap<String, String> = claim
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !is_restricted_label(k))
            .collect();
        node_labels.insert(
            labels::CAPACITY_TYPE.to_owned(),
            capacity_type.as_str().to_owned(),
        );
        if nc.ami_family() != AmiFamily::Custom {
            node_labels.insert(
                "karpenter.sh/do-not-sync-taints".to_owned(),
                "true".to_owned(),
            );
        }
        let mut taints: Vec<Taint> = claim
            .taints()
            .iter()
            .chain(claim.startup_taints())
            .cloned()
            .collect();
        if !taints
            .iter()
            .any(|t| t.key == labels::UNREGISTERED_TAINT && t.effect == "NoExecute")
        {
            taints.push(Taint {
                key: labels::UNREGISTERED_TAINT.to_owned(),
                value: None,
                effect: "NoExecute".to_owned(),
                time_added: None,
            });
        }
        BootstrapOptions {
            cluster_name: self.settings.cluster_name.clone(),
            cluster_endpoint: self.settings.cluster_endpoint.clone(),
            cluster_cidr: self.settings.cluster_cidr.clone(),
            ca_bundle: self.settings.ca_bundle.clone(),
            kubelet: self.kubelet_args(nc, max_pods),
            taints,
            labels: node_labels,
            custom_user_data: nc.spec.user_data.clone(),
            instance_store_raid0: nc.spec.instance_store_policy.is_some(),
        }
    }

    fn kubelet_args(&self, nc: &EC2NodeClass, max_pods: i64) -> KubeletArgs {
        let k = nc.kubelet().cloned().unwrap_or_default();
        let cluster_dns = if k.cluster_dns.is_empty() {
            self.settings.kube_dns_ip.iter().cloned().collect()
        } else {
            k.cluster_dns.clone()
        };
        KubeletArgs {
            cluster_dns,
            max_pods: k.max_pods.or_else(|| i32::try_from(max_pods).ok()),
            pods_per_core: k.pods_per_core,
            system_reserved: k.system_reserved.clone(),
            kube_reserved: k.kube_reserved.clone(),
            eviction_hard: k.eviction_hard.clone(),
            eviction_soft: k.eviction_soft.clone(),
            eviction_soft_grace_period: k.eviction_soft_grace_period.clone(),
            eviction_max_pod_grace_period: k.eviction_max_pod_grace_period,
            image_gc_high_threshold_percent: k.image_gc_high_threshold_percent,
            image_gc_low_threshold_percent: k.image_gc_low_threshold_percent,
            cpu_cfs_quota: k.cpu_cfs_quota,
            extra: k.other.clone(),
        }
    }

    /// The NodeClaim hydrated with what was launched.
    fn launched_claim(
        &self,
        claim: &NodeClaim,
        nc: &EC2NodeClass,
        it: Option<&InstanceType>,
        instance: &crate::fleet::FleetInstance,
        capacity_type: CapacityType,
    ) -> NodeClaim {
        let mut launched = claim.clone();
        let mut node_labels = it.map(|t| t.labels.clone()).unwrap_or_default();
        node_labels.insert(
            labels::INSTANCE_TYPE.to_owned(),
            instance.instance_type.clone(),
        );
        node_labels.insert(labels::ZONE.to_owned(), instance.zone.clone());
        node_labels.insert(
            labels::CAPACITY_TYPE.to_owned(),
            capacity_type.as_str().to_owned(),
        );
        if let Some(o) = it.and_then(|t| t.offerings.iter().find(|o| o.zone == instance.zone)) {
            node_labels.insert(labels::ZONE_ID.to_owned(), o.zone_id.clone());
        }
        node_labels.extend(claim.metadata.labels.clone().unwrap_or_default());
        launched.metadata.labels = Some(node_labels);
        let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
        for key in [labels::EC2NODECLASS_HASH, drift::HASH_VERSION_ANNOTATION] {
            if let Some(v) = nc.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
                annotations.insert(key.to_owned(), v.clone());
            }
        }
        launched.metadata.annotations = Some(annotations);
        let mut status = launched.status.take().unwrap_or_default();
        status.provider_id = Some(aws_provider_id(&instance.zone, &instance.instance_id));
        status.image_id = instance.image_id.clone();
        if let Some(t) = it {
            // As upstream, EFA is advertised only when the launch attached EFA interfaces:
            // the NodeClaim requested it, or the class lists its own interfaces.
            let efa_attached = !nc.spec.network_interfaces.is_empty()
                || claim
                    .resource_requests()
                    .is_some_and(|r| r.contains_key(labels::RESOURCE_EFA));
            let (mut capacity, mut allocatable) = (t.capacity.clone(), t.allocatable());
            if !efa_attached {
                capacity.remove(labels::RESOURCE_EFA);
                allocatable.remove(labels::RESOURCE_EFA);
            }
            status.capacity = resource_list(&capacity);
            status.allocatable = resource_list(&allocatable);
        }
        launched.status = Some(status);
        launched
    }

    /// `claim` hydrated from an instance launched for it earlier: the instance's labels
    /// under the NodeClaim's own, its providerID, image and resources, and the node class
    /// hash the launch would have recorded.
    fn adopted_claim(&self, claim: &NodeClaim, instance: &Instance) -> NodeClaim {
        let found = self.instance_claim(instance);
        let mut adopted = claim.clone();
        let mut node_labels = found.metadata.labels.unwrap_or_default();
        node_labels.extend(claim.metadata.labels.clone().unwrap_or_default());
        adopted.metadata.labels = Some(node_labels);
        if let Some(nc) = self.node_classes.get(&claim.node_class_ref().name) {
            let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
            for key in [labels::EC2NODECLASS_HASH, drift::HASH_VERSION_ANNOTATION] {
                if let Some(v) = nc.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
                    annotations
                        .entry(key.to_owned())
                        .or_insert_with(|| v.clone());
                }
            }
            adopted.metadata.annotations = Some(annotations);
        }
        adopted.status = found.status;
        adopted
    }

    /// The NodeClaim a live instance stands for.
    fn instance_claim(&self, instance: &Instance) -> NodeClaim {
        let it = self
            .instance_types
            .list(&AllocatableSettings::default(), &LaunchScope::default())
            .into_iter()
            .find(|t| t.name == instance.instance_type);
        let mut node_labels = it.as_ref().map(|t| t.labels.clone()).unwrap_or_default();
        node_labels.insert(
            labels::INSTANCE_TYPE.to_owned(),
            instance.instance_type.clone(),
        );
        node_labels.insert(labels::ZONE.to_owned(), instance.zone.clone());
        node_labels.insert(
            labels::CAPACITY_TYPE.to_owned(),
            instance.capacity_type.clone(),
        );
        // As upstream, reserved only under the gate: an instance kerf launched into a
        // reservation that has since left it (an ODCR that ended) reads as on-demand.
        if let Some(r) = instance
            .reservation
            .as_ref()
            .filter(|_| self.settings.reserved_capacity)
        {
            let kind = FleetReservation {
                reservation_type: r.reservation_type.clone(),
                interruptible: r.interruptible,
            };
            node_labels.extend(reservation_labels(&r.id, &kind));
        }
        if let Some(zone_id) = &instance.zone_id {
            node_labels.insert(labels::ZONE_ID.to_owned(), zone_id.clone());
        }
        if let Some(pool) = instance.tags.get(tags::NODEPOOL) {
            node_labels.insert(labels::NODEPOOL.to_owned(), pool.clone());
        }
        let spec: kerf::api::NodeClaimSpec = serde_json::from_value(serde_json::json!({
            "requirements": [],
            "nodeClassRef": {
                "group": labels::AWS_GROUP,
                "kind": "EC2NodeClass",
                "name": instance.tags.get(tags::EC2NODECLASS).cloned().unwrap_or_default(),
            },
        }))
        .expect("a minimal NodeClaim spec always deserialises");
        let name = instance
            .tags
            .get(tags::NODECLAIM)
            .map_or("", String::as_str);
        let mut claim = NodeClaim::new(name, spec);
        claim.metadata.labels = Some(node_labels);
        claim.metadata.creation_timestamp = instance
            .launch_time
            .and_then(|t| k8s_openapi::jiff::Timestamp::try_from(t).ok())
            .map(Time);
        if instance.state == "shutting-down" {
            claim.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        claim.status = Some(NodeClaimStatus {
            provider_id: Some(aws_provider_id(&instance.zone, &instance.id)),
            image_id: instance.image_id.clone(),
            capacity: it
                .as_ref()
                .map(|t| resource_list(&t.capacity))
                .unwrap_or_default(),
            allocatable: it
                .as_ref()
                .map(|t| resource_list(&t.allocatable()))
                .unwrap_or_default(),
            ..NodeClaimStatus::default()
        });
        claim
    }

    async fn drifted(&self, claim: &NodeClaim) -> CloudResult<Option<DriftReason>> {
        let Some(provider_id) = claim.provider_id() else {
            return Ok(None);
        };
        let Some(nc) = self.node_classes.get(&claim.node_class_ref().name) else {
            return Ok(None);
        };
        if !nc.is_condition_true(types::READY) {
            return Ok(None);
        }
        let id = parse_aws_provider_id(provider_id)?;
        let instance = self
            .instances
            .get(id.instance_id)
            .await
            .map_err(|e| instance_error(provider_id, e))?;
        let type_labels = self
            .types_for(&nc)?
            .into_iter()
            .find(|t| t.name == instance.instance_type)
            .map(|t| t.labels)
            .unwrap_or_default();
        let status = nc.status.clone().unwrap_or_default();
        let empty = BTreeMap::new();
        let subnet_ids: Vec<String> = status.subnets.iter().map(|s| s.id.clone()).collect();
        let group_ids: Vec<String> = status
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect();
        let image_id = claim
            .status
            .as_ref()
            .and_then(|s| s.image_id.clone())
            .or(instance.image_id.clone());
        let placement = self.placement_group(&nc).await?;
        let inputs = DriftInputs {
            node_class_annotations: nc.metadata.annotations.as_ref().unwrap_or(&empty),
            node_claim_annotations: claim.metadata.annotations.as_ref().unwrap_or(&empty),
            image_id: image_id.as_deref(),
            instance_type_labels: &type_labels,
            status_amis: &status.amis,
            subnet_id: instance.subnet_id.as_deref(),
            status_subnet_ids: &subnet_ids,
            security_group_ids: &instance.security_group_ids,
            status_security_group_ids: &group_ids,
            placement_group_id: claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::PLACEMENT_GROUP_ID))
                .map(String::as_str),
            resolved_placement_group_id: placement.as_ref().map(|g| g.id.as_str()),
        };
        Ok(drift::drift_reason(&inputs).map(DriftReason::new))
    }

    /// Background upkeep until dropped: refreshes instance types, offerings and prices at
    /// start and every `refresh_interval` (12 hours upstream) — after a refresh with a failed
    /// part, again after [`REFRESH_RETRY_BASE`] doubling up to [`REFRESH_RETRY_MAX`], as
    /// upstream's controllers requeue a failed reconcile — and, while `leader` is true,
    /// deletes launch templates unused for their TTL every minute (as upstream, only the
    /// leader deletes: a standby launches nothing, so every template would look unused to it);
    /// a deletion pass still running when leadership is lost is abandoned.
    pub async fn run_upkeep(
        self: Arc<Self>,
        refresh_interval: Duration,
        mut leader: tokio::sync::watch::Receiver<bool>,
    ) {
        let refresh = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(refresh);
        let mut retry = REFRESH_RETRY_BASE;
        let mut evict = tokio::time::interval(crate::launchtemplate::LAUNCH_TEMPLATE_TTL);
        loop {
            let leading = *leader.borrow_and_update();
            tokio::select! {
                () = &mut refresh => {
                    let wait = if self.instance_types.refresh().await {
                        retry = REFRESH_RETRY_BASE;
                        refresh_interval
                    } else {
                        let wait = retry.min(refresh_interval);
                        retry = (retry * 2).min(REFRESH_RETRY_MAX);
                        wait
                    };
                    refresh.as_mut().reset(tokio::time::Instant::now() + wait);
                }
                // Re-evaluates `leading`; a closed channel disables the branch.
                Ok(()) = leader.changed() => {}
                _ = evict.tick(), if leading => {
                    // Fenced as the controller's writes are: abandoned once leadership is
                    // lost (or its election is gone), the rest left to the next leader.
                    let mut lost = leader.clone();
                    tokio::select! {
                        evicted = self.launch_templates.evict_expired() => {
                            if let Err(e) = evicted {
                                tracing::warn!(error = %e, "deleting unused launch templates failed");
                            }
                        }
                        _ = lost.wait_for(|leading| !*leading) => tracing::warn!(
                            "deleting unused launch templates abandoned: this replica lost the leader lease"
                        ),
                    }
                }
            }
        }
    }
}

fn block_device(m: &kerf::api::BlockDeviceMapping) -> Option<BlockDeviceSpec> {
    let ebs = m.ebs.as_ref();
    let gib = ebs
        .and_then(|e| e.volume_size.as_ref())
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map(|q| {
            let bytes = q.as_approximate_f64();
            (bytes / f64::from(1u32 << 30)).ceil() as i32
        });
    Some(BlockDeviceSpec {
        device_name: m.device_name.clone()?,
        delete_on_termination: ebs.and_then(|e| e.delete_on_termination),
        encrypted: ebs.and_then(|e| e.encrypted),
        iops: ebs.and_then(|e| e.iops).and_then(|v| i32::try_from(v).ok()),
        kms_key_id: ebs.and_then(|e| e.kms_key_id.clone()),
        snapshot_id: ebs.and_then(|e| e.snapshot_id.clone()),
        throughput: ebs
            .and_then(|e| e.throughput)
            .and_then(|v| i32::try_from(v).ok()),
        volume_size_gib: gib,
        volume_type: ebs
            .and_then(|e| e.volume_type)
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|v| v.as_str().map(str::to_owned)),
    })
}

impl CloudProvider for AwsCloudProvider {
    fn name(&self) -> &str {
        "aws"
    }

    fn create<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(self.launch(node_claim))
    }

    fn delete<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(async move {
            let provider_id = launched_provider_id(node_claim)?;
            let id = parse_aws_provider_id(provider_id)?;
            self.instances
                .terminate(id.instance_id)
                .await
                .map_err(|e| instance_error(provider_id, e))?;
            let labels = node_claim.metadata.labels.as_ref();
            let reserved = labels
                .and_then(|l| l.get(labels::CAPACITY_TYPE))
                .is_some_and(|c| c == labels::CAPACITY_TYPE_RESERVED);
            if let Some(reservation) = labels
                .and_then(|l| l.get(labels::CAPACITY_RESERVATION_ID))
                .filter(|_| reserved)
            {
                self.capacity_reservations.mark_terminated(reservation);
            }
            Ok(())
        })
    }

    fn get<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(async move {
            let id = parse_aws_provider_id(provider_id)?;
            let instance = self
                .instances
                .get(id.instance_id)
                .await
                .map_err(|e| instance_error(provider_id, e))?;
            Ok(self.instance_claim(&instance))
        })
    }

    fn find_launched<'a>(
        &'a self,
        node_claim: &'a str,
    ) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>> {
        Box::pin(async move {
            let found = self
                .instances
                .find_by_node_claim(node_claim)
                .await
                .map_err(|e| instance_error("", e))?;
            Ok(found.map(|i| self.instance_claim(&i)))
        })
    }

    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
        Box::pin(async move {
            let instances = self
                .instances
                .list()
                .await
                .map_err(|e| instance_error("", e))?;
            Ok(instances.iter().map(|i| self.instance_claim(i)).collect())
        })
    }

    fn get_instance_types<'a>(
        &'a self,
        node_pool: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
        Box::pin(async move {
            let Some(nc) = self.node_classes.get(&node_pool.node_class_ref().name) else {
                return Ok(Vec::new());
            };
            if !nc.is_condition_true(types::READY) {
                return Ok(Vec::new());
            }
            Ok(self.types_for(&nc)?.into_iter().map(Arc::new).collect())
        })
    }

    fn catalog(&self) -> Option<Arc<CatalogSnapshot>> {
        self.instance_types.refreshed()
    }

    /// EC2's last count for the reservation, less launches into it since and plus
    /// terminations; none with the `ReservedCapacity` gate off.
    fn reservation_capacity(&self, id: &str) -> Option<u32> {
        if !self.settings.reserved_capacity {
            return None;
        }
        self.capacity_reservations.available(id)
    }

    fn is_drifted<'a>(
        &'a self,
        node_claim: &'a NodeClaim,
    ) -> BoxFuture<'a, CloudResult<Option<DriftReason>>> {
        Box::pin(self.drifted(node_claim))
    }

    fn node_class_reconciler(&self) -> Option<&dyn NodeClassReconciler> {
        Some(self)
    }

    fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
        Some(self)
    }
}

/// The labels of an instance in reservation `id` of `kind`.
/// The partition values the NodeClaim allows (`karpenter.k8s.aws/placement-group-partition In`).
fn allowed_partitions(claim: &NodeClaim) -> Vec<String> {
    claim
        .requirements()
        .iter()
        .filter(|r| r.key == labels::PLACEMENT_GROUP_PARTITION && r.operator == Operator::In)
        .flat_map(|r| r.values.clone())
        .collect()
}

/// Where a launch for `claim` goes in `group`.
fn placement_spec(group: &PlacementGroup, claim: &NodeClaim) -> PlacementSpec {
    PlacementSpec {
        group_id: group.id.clone(),
        partition_number: partition_for(group, &allowed_partitions(claim)),
    }
}

/// `karpenter.k8s.aws/placement-group-id`, and the partition a partition-group launch
/// targeted, as upstream labels the NodeClaim.
fn placement_labels(group: &PlacementGroup, claim: &NodeClaim) -> Vec<(String, String)> {
    let mut found = vec![(labels::PLACEMENT_GROUP_ID.to_owned(), group.id.clone())];
    if let Some(partition) = placement_spec(group, claim).partition_number {
        found.push((
            labels::PLACEMENT_GROUP_PARTITION.to_owned(),
            partition.to_string(),
        ));
    }
    found
}

fn reservation_labels(id: &str, kind: &FleetReservation) -> [(String, String); 4] {
    [
        (
            labels::CAPACITY_TYPE.to_owned(),
            labels::CAPACITY_TYPE_RESERVED.to_owned(),
        ),
        (labels::CAPACITY_RESERVATION_ID.to_owned(), id.to_owned()),
        (
            labels::CAPACITY_RESERVATION_TYPE.to_owned(),
            kind.reservation_type.clone(),
        ),
        (
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
            kind.interruptible.to_string(),
        ),
    ]
}

/// The EC2NodeClass's `context` for CreateFleet, except for a NodeClaim whose minValues were
/// relaxed: as upstream, its launch goes without the context, whose reserved capacity was
/// sized for the NodePool's full flexibility.
fn fleet_context(nc: &EC2NodeClass, claim: &NodeClaim) -> Option<String> {
    let relaxed = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(kerf::labels::NODECLAIM_MIN_VALUES_RELAXED))
        .is_some_and(|v| v == "true");
    if relaxed {
        None
    } else {
        nc.spec.context.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelets_may_not_set_kubernetes_io_labels() {
        assert!(is_restricted_label("topology.kubernetes.io/zone"));
        assert!(is_restricted_label("node.kubernetes.io/instance-type"));
        assert!(is_restricted_label("kubernetes.io/arch"));
        assert!(is_restricted_label("k8s.io/x"));
        assert!(!is_restricted_label("karpenter.k8s.aws/instance-family"));
        assert!(!is_restricted_label("karpenter.sh/nodepool"));
        assert!(!is_restricted_label("team"));
    }

    #[test]
    fn throttling_maps_to_throttled() {
        let err = api_error(ApiError {
            operation: "CreateFleet",
            code: Some("RequestLimitExceeded".into()),
            message: "slow down".into(),
        });
        assert!(matches!(err, CloudProviderError::Throttled { .. }));
        assert!(err.is_retryable());
    }

    #[test]
    fn a_nodeclaim_with_relaxed_min_values_launches_without_the_fleet_context() {
        let nc: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"role": "r", "context": "ctx-1234", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]},
        }))
        .expect("a node class");
        let claim = |annotations: serde_json::Value| -> NodeClaim {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "c", "annotations": annotations},
                "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            }))
            .expect("a nodeclaim")
        };
        let relaxed = kerf::labels::NODECLAIM_MIN_VALUES_RELAXED;
        assert_eq!(
            fleet_context(&nc, &claim(serde_json::json!({}))).as_deref(),
            Some("ctx-1234")
        );
        assert_eq!(
            fleet_context(&nc, &claim(serde_json::json!({relaxed: "false"}))).as_deref(),
            Some("ctx-1234")
        );
        assert_eq!(
            fleet_context(&nc, &claim(serde_json::json!({relaxed: "true"}))),
            None
        );
    }
}
