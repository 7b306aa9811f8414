//! [`SimulatedCloudProvider`]: kerf's [`CloudProvider`] over the simulated EC2 and the
//! embedded catalog, doing what the AWS provider does with real EC2. Create narrows the
//! catalog to the instance types compatible with the NodeClaim's requirements whose
//! allocatable fits its requests (dropping exotic types and overpriced spot as upstream),
//! keeps the 60 cheapest, picks spot when allowed and offered, and sends one `CreateFleet`
//! whose overrides are those types × their compatible zones less the offerings marked
//! unavailable; an answer without instances becomes `InsufficientCapacity` listing the
//! refused offerings, and so does a launch with no offering left (naming none). Get, List and Delete go
//! through `DescribeInstances` and `TerminateInstances`, so every call is counted and can
//! be throttled. Create is idempotent per NodeClaim, as the AWS provider's: the NodeClaim
//! tag goes on the instance in the CreateFleet request itself, Create first looks for a live
//! instance so tagged and adopts it, and the request carries a client token derived from the
//! NodeClaim's uid ([`kerf::launch_attempts`]), so a retry the search misses (its answer
//! lost, DescribeInstances lagging) gets the first launch's instance back from EC2.

use super::types::{
    CapacityType as Ec2CapacityType, CreateFleetOutput, CreateFleetRequest,
    DescribeInstancesRequest, Filter, FleetOverride, Instance, InstanceState, LaunchTemplateConfig,
    OfferingKey, PricedOffering,
};
use super::{CapacityReservation, Ec2Config, Ec2Error, ReservationType, SimulatedEc2};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf::api::nodeclaim::DEFAULT_EXPIRE_AFTER;
use kerf::api::{
    NillableDuration, NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference, NodePool,
    ResourceList,
};
use kerf::catalog::{
    AllocatableSettings, CapacityType, Catalog, CatalogError, CatalogSnapshot, InstanceType,
    Offering,
};
use kerf::cloudprovider::{
    BoxFuture, CloudProvider, CloudProviderError, CloudResult, DriftReason, InstanceTagger,
    NodeClassReconciler, OfferingRef, SPOT_SLR_ERROR_CODE, SPOT_SLR_REASON, UnavailableOfferings,
    launched_provider_id, parse_aws_provider_id, spot_service_linked_role_message,
};
use kerf::labels;
use kerf::launch_attempts::{LaunchAttempts, NextAttempt};
use kerf::requirements::{AllowUndefined, Requirement, Requirements};
use kerf::resources::{Quantity, Resources};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The AWS provider's cap on the instance types one launch offers to CreateFleet (upstream's
/// `maxInstanceTypes`, applied after unavailable offerings are removed).
pub const MAX_INSTANCE_TYPES: usize = 60;

/// The EC2 tag keys kerf (like Karpenter) puts on the instances it launches.
pub mod tags {
    pub const NODEPOOL: &str = "karpenter.sh/nodepool";
    pub const NODECLAIM: &str = "karpenter.sh/nodeclaim";
    pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
    pub const EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
    /// Set to the node name by the tagging controller once the node registers.
    pub const NAME: &str = "Name";
    /// `kubernetes.io/cluster/<cluster-name>: owned`.
    pub fn cluster_ownership(cluster: &str) -> String {
        format!("kubernetes.io/cluster/{cluster}")
    }
}

/// What the simulated provider launches with.
#[derive(Clone, Debug)]
pub struct SimulatedCloudProviderConfig {
    /// `CLUSTER_NAME`: tagged on instances and used to list them.
    pub cluster_name: String,
    /// The AMI launches use; changing it later makes running instances drift.
    pub image_id: String,
}

impl Default for SimulatedCloudProviderConfig {
    fn default() -> Self {
        Self {
            cluster_name: "kerf-sim".to_owned(),
            image_id: "ami-0000000000000000a".to_owned(),
        }
    }
}

/// The simulated cloud provider.
pub struct SimulatedCloudProvider {
    ec2: SimulatedEc2,
    cluster_name: String,
    /// Shared by every replica's view ([`SimulatedCloudProvider::for_replica`]): a new AMI
    /// is the region's, not one controller's.
    image_id: Arc<Mutex<String>>,
    instance_types: Vec<Arc<InstanceType>>,
    /// Per instance type (same order), what Create matches against: its requirements and
    /// allocatable, computed once.
    launch_facts: Arc<Vec<(Requirements, Resources)>>,
    by_name: Arc<HashMap<String, Arc<InstanceType>>>,
    /// Offerings the controller marked unavailable (interrupted, out of capacity), left out
    /// of launches as the AWS provider leaves them out of CreateFleet's overrides.
    unavailable: OnceLock<Arc<dyn UnavailableOfferings>>,
    /// Per NodeClaim: its launch generation and the request whose answer was lost.
    attempts: LaunchAttempts<CreateFleetRequest>,
    /// Per EC2NodeClass: the reservations its status selected (kept by node class
    /// resolution), which its NodeClaims may launch into.
    pub(crate) selected_reservations: Arc<Mutex<HashMap<String, Vec<String>>>>,
    /// The controller's `ReservedCapacity` gate, shared by every replica's view: off, no
    /// reservation is resolved or launched into, as the AWS provider does.
    reserved_capacity: Arc<AtomicBool>,
}

/// The priced, available offerings of `instance_types`: the pools the simulated region sells.
pub fn catalog_offerings(instance_types: &[InstanceType]) -> Vec<PricedOffering> {
    instance_types
        .iter()
        .flat_map(|it| it.available_offerings().map(move |o| (it, o)))
        .filter_map(|(it, o)| {
            let capacity_type = Ec2CapacityType::parse(o.capacity_type.as_str())?;
            Some(PricedOffering {
                key: OfferingKey::new(&it.name, &o.zone, capacity_type),
                price: o.price,
            })
        })
        .collect()
}

impl SimulatedCloudProvider {
    /// A provider launching `instance_types` (usually the embedded catalog's for the
    /// simulated region) into `ec2`.
    pub fn new(
        ec2: SimulatedEc2,
        instance_types: Vec<InstanceType>,
        config: SimulatedCloudProviderConfig,
    ) -> Self {
        let instance_types: Vec<Arc<InstanceType>> =
            instance_types.into_iter().map(Arc::new).collect();
        let by_name = instance_types
            .iter()
            .map(|it| (it.name.clone(), Arc::clone(it)))
            .collect();
        let launch_facts = instance_types
            .iter()
            .map(|it| (instance_type_requirements(it), it.allocatable()))
            .collect();
        Self {
            ec2,
            cluster_name: config.cluster_name,
            image_id: Arc::new(Mutex::new(config.image_id)),
            instance_types,
            launch_facts: Arc::new(launch_facts),
            by_name: Arc::new(by_name),
            unavailable: OnceLock::new(),
            attempts: LaunchAttempts::default(),
            selected_reservations: Arc::default(),
            reserved_capacity: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Shares the controller's unavailable offerings with launches (once; later calls are
    /// ignored). For one controller; replicas each take [`Self::for_replica`].
    pub fn share_unavailable_offerings(&self, offerings: Arc<dyn UnavailableOfferings>) {
        let _first_wins = self.unavailable.set(offerings);
    }

    /// The provider as one controller replica sees it: the same region (instances, AMI,
    /// catalog), launching around `offerings`, that replica's own unavailable offerings —
    /// as each replica of the AWS provider keeps its own cache, so what one replica marked
    /// does not steer another's launches.
    pub fn for_replica(&self, offerings: Arc<dyn UnavailableOfferings>) -> Self {
        Self {
            ec2: self.ec2.clone(),
            cluster_name: self.cluster_name.clone(),
            image_id: Arc::clone(&self.image_id),
            instance_types: self.instance_types.clone(),
            launch_facts: Arc::clone(&self.launch_facts),
            by_name: Arc::clone(&self.by_name),
            unavailable: OnceLock::from(offerings),
            attempts: LaunchAttempts::default(),
            selected_reservations: Arc::clone(&self.selected_reservations),
            reserved_capacity: Arc::clone(&self.reserved_capacity),
        }
    }

    /// Follows the controller's `ReservedCapacity` gate (on unless set).
    pub fn set_reserved_capacity(&self, on: bool) {
        self.reserved_capacity.store(on, Ordering::Relaxed);
    }

    /// Whether the `ReservedCapacity` gate is on.
    pub fn reserved_capacity(&self) -> bool {
        self.reserved_capacity.load(Ordering::Relaxed)
    }

    /// The provider with its EC2 calls made as `caller` (a replica's identity), so the
    /// region's write log ([`SimulatedEc2::writes`]) says which replica wrote what.
    pub fn calling_as(mut self, caller: &str) -> Self {
        self.ec2 = self.ec2.as_caller(caller);
        self
    }

    /// `overrides` without the offerings marked unavailable.
    fn available_overrides(
        &self,
        overrides: Vec<FleetOverride>,
        capacity_type: Ec2CapacityType,
    ) -> Vec<FleetOverride> {
        let Some(unavailable) = self.unavailable.get() else {
            return overrides;
        };
        overrides
            .into_iter()
            .filter(|o| {
                !unavailable.is_unavailable(&o.instance_type, &o.zone, capacity_type.as_str(), &[])
            })
            .collect()
    }

    /// A simulated region from the embedded catalog: EC2 selling every priced offering of
    /// `region`, and a provider launching its instance types (default AL2023 settings).
    pub fn for_region(
        region: &str,
        ec2_config: Ec2Config,
        config: SimulatedCloudProviderConfig,
    ) -> Result<Self, CatalogError> {
        let catalog = Catalog::embedded(region)?;
        let instance_types = catalog.instance_types(&AllocatableSettings::default());
        let ec2 = SimulatedEc2::new(ec2_config, catalog_offerings(&instance_types));
        Ok(Self::new(ec2, instance_types, config))
    }

    pub fn ec2(&self) -> &SimulatedEc2 {
        &self.ec2
    }

    /// `CLUSTER_NAME`, which launched instances are tagged and listed with.
    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }

    /// Every zone the region sells capacity in, with its zone id, sorted by zone.
    pub fn zones(&self) -> Vec<(String, String)> {
        let zones: BTreeMap<&str, &str> = self
            .instance_types
            .iter()
            .flat_map(|it| it.offerings.iter())
            .map(|o| (o.zone.as_str(), o.zone_id.as_str()))
            .collect();
        zones
            .into_iter()
            .map(|(zone, id)| (zone.to_owned(), id.to_owned()))
            .collect()
    }

    pub fn instance_type(&self, name: &str) -> Option<Arc<InstanceType>> {
        self.by_name.get(name).cloned()
    }

    /// Selects a new AMI: instances launched with another one report `AMIDrift`.
    pub fn set_image_id(&self, image_id: &str) {
        *self.image_id.lock().unwrap_or_else(PoisonError::into_inner) = image_id.to_owned();
    }

    pub fn image_id(&self) -> String {
        self.image_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn launch(&self, node_claim: &NodeClaim) -> CloudResult<NodeClaim> {
        let name = node_claim.name().to_owned();
        // A launch whose answer was lost (a timeout, a crash before the status write) left
        // an instance tagged with this NodeClaim: adopt it rather than launch a second.
        if let Some(instance) = self.tagged(&name).await? {
            return Ok(self.hydrate(node_claim, &instance));
        }
        let key = node_claim
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| name.clone());
        // At most twice: a token that launched an instance since ended is replaced once.
        let mut tries = 0;
        loop {
            tries += 1;
            let instance = self.launch_once(node_claim, &key).await?;
            if instance.state.is_live() || tries == 2 {
                return Ok(self.hydrate(node_claim, &instance));
            }
            self.attempts.answered_without_instance(&key);
        }
    }

    /// One CreateFleet for `node_claim` under its current client token; the instance EC2
    /// answers with (launched now, or by an earlier request with the same token).
    async fn launch_once(&self, node_claim: &NodeClaim, key: &str) -> CloudResult<Instance> {
        let name = node_claim.name();
        let request = match self.attempts.next(key) {
            NextAttempt::Resend { request, .. } => request,
            NextAttempt::Fresh { token, .. } => CreateFleetRequest {
                client_token: Some(token),
                ..self.fleet_request(node_claim)?
            },
        };
        let output = match self.ec2.create_fleet(&request).await {
            Ok(output) => output,
            // It may have launched: the next attempt sends it again under the same token.
            Err(error @ Ec2Error::Internal { .. }) => {
                self.attempts.unanswered(key, request);
                return Err(from_ec2(error));
            }
            // The token's first request may have launched: searched for again next time.
            Err(error @ Ec2Error::IdempotentParameterMismatch { .. }) => {
                return Err(from_ec2(error));
            }
            Err(error) => {
                self.attempts.answered_without_instance(key);
                return Err(from_ec2(error));
            }
        };
        let instance_id = match launched_instance(name, &output) {
            Ok(id) => id,
            Err(error) => {
                self.attempts.answered_without_instance(key);
                return Err(error);
            }
        };
        self.attempts.launched(key);
        self.ec2
            .instance(&instance_id)
            .ok_or_else(|| CloudProviderError::Other {
                operation: "CreateFleet".to_owned(),
                message: format!("launched instance {instance_id} is unknown"),
            })
    }

    /// The CreateFleet request for `node_claim` (without a client token): the cheapest
    /// compatible offerings, spot when allowed, tagged with the NodeClaim.
    fn fleet_request(&self, node_claim: &NodeClaim) -> CloudResult<CreateFleetRequest> {
        let name = node_claim.name().to_owned();
        let reqs = claim_requirements(node_claim)?;
        let requests = claim_requests(node_claim)?;
        // Reserved capacity first, as upstream: an on-demand fleet targeting the selected
        // reservations with room; a NodeClaim that allows only reserved and finds none is
        // refused like any launch without offerings.
        let reserved = self.reserved_overrides(node_claim, &reqs, &requests);
        if !reserved.is_empty() {
            return Ok(CreateFleetRequest {
                launch_template_configs: vec![LaunchTemplateConfig {
                    launch_template_name: format!("karpenter.k8s.aws/{}", self.cluster_name),
                    overrides: reserved,
                }],
                capacity_type: Some(Ec2CapacityType::OnDemand),
                total_target_capacity: 1,
                tags: self.launch_tags(node_claim),
                context: None,
                client_token: None,
            });
        }
        if !allows_capacity_type(&reqs, CapacityType::OnDemand)
            && !allows_capacity_type(&reqs, CapacityType::Spot)
        {
            return Err(CloudProviderError::InsufficientCapacity {
                node_claim: name,
                offerings: Vec::new(),
            });
        }
        let candidates = self.candidates(&name, &reqs, &requests)?;
        let mut capacity_type = choose_capacity_type(&reqs, &candidates);
        let image_id = self.image_id();
        let offered = |capacity_type| {
            self.available_overrides(
                overrides(&candidates, &reqs, capacity_type, &image_id),
                capacity_type,
            )
        };
        let mut chosen = offered(capacity_type);
        // Every spot offering unavailable: on-demand, when allowed, as the AWS provider falls back.
        if chosen.is_empty()
            && capacity_type == Ec2CapacityType::Spot
            && allows_capacity_type(&reqs, CapacityType::OnDemand)
        {
            capacity_type = Ec2CapacityType::OnDemand;
            chosen = offered(capacity_type);
        }
        // Nothing left to offer EC2 (it would refuse a fleet without overrides): insufficient
        // capacity naming no offering, as the AWS provider answers, so the NodeClaim is
        // deleted and its pods go to the next NodePool.
        if chosen.is_empty() {
            return Err(CloudProviderError::InsufficientCapacity {
                node_claim: name,
                offerings: Vec::new(),
            });
        }
        let request = CreateFleetRequest {
            launch_template_configs: vec![LaunchTemplateConfig {
                launch_template_name: format!("karpenter.k8s.aws/{}", self.cluster_name),
                overrides: chosen,
            }],
            capacity_type: Some(capacity_type),
            total_target_capacity: 1,
            tags: self.launch_tags(node_claim),
            context: None,
            client_token: None,
        };
        Ok(request)
    }

    /// Overrides into the reservations `node_claim`'s class selected that have room, are
    /// active, not marked unavailable, and whose type and zone its requirements allow and
    /// whose type fits its requests; empty when it does not allow `reserved`.
    fn reserved_overrides(
        &self,
        node_claim: &NodeClaim,
        reqs: &Requirements,
        requests: &Resources,
    ) -> Vec<FleetOverride> {
        if !allows_capacity_type(reqs, CapacityType::Reserved) || !self.reserved_capacity() {
            return Vec::new();
        }
        let selected = self
            .selected_reservations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&node_claim.node_class_ref().name)
            .cloned()
            .unwrap_or_default();
        if selected.is_empty() {
            return Vec::new();
        }
        let now = system_time(std::time::SystemTime::now()).as_second();
        let image_id = self.image_id();
        let mut overrides: Vec<(f64, FleetOverride)> = Vec::new();
        for view in self.ec2.describe_capacity_reservations() {
            let r = &view.reservation;
            let end = r.end_time.map(|t| system_time(t).as_second());
            let fits = self
                .instance_types
                .iter()
                .zip(self.launch_facts.iter())
                .find(|(it, _)| it.name == r.instance_type)
                .filter(|(_, (it_reqs, allocatable))| {
                    reqs.is_compatible(it_reqs, AllowUndefined::WellKnownLabels)
                        && requests.fits(allocatable)
                });
            let Some((it, _)) = fits else { continue };
            let zone_id = it
                .offerings
                .iter()
                .find(|o| o.zone == r.zone)
                .map(|o| o.zone_id.clone())
                .unwrap_or_default();
            let allowed = selected.contains(&r.id)
                && view.available > 0
                && kerf::catalog::reservation_state(reservation_type(r), end, now)
                    == kerf::api::ec2nodeclass::CapacityReservationState::Active
                && reqs.get(labels::ZONE).is_none_or(|z| z.has(&r.zone))
                && reqs
                    .get(labels::CAPACITY_RESERVATION_ID)
                    .is_none_or(|id| id.has(&r.id))
                && !self.unavailable.get().is_some_and(|u| {
                    u.is_unavailable(
                        &r.instance_type,
                        &r.zone,
                        labels::CAPACITY_TYPE_RESERVED,
                        &[],
                    )
                });
            if !allowed {
                continue;
            }
            let price = it
                .offerings
                .iter()
                .find(|o| o.capacity_type == CapacityType::OnDemand)
                .map_or(0.0, |o| o.price);
            overrides.push((
                price,
                FleetOverride {
                    instance_type: r.instance_type.clone(),
                    zone: r.zone.clone(),
                    subnet_id: Some(format!("subnet-{zone_id}")),
                    image_id: Some(image_id.clone()),
                    priority: None,
                    capacity_reservation_id: Some(r.id.clone()),
                },
            ));
        }
        overrides.sort_by(|a, b| a.0.total_cmp(&b.0));
        overrides.into_iter().map(|(_, o)| o).collect()
    }

    /// `node_claim` with what `instance` resolved: its labels under the NodeClaim's own, and
    /// the status a launch reports, with the name its Node will register under.
    fn hydrate(&self, node_claim: &NodeClaim, instance: &Instance) -> NodeClaim {
        let mut launched = self.to_node_claim(instance);
        launched.metadata = node_claim.metadata.clone();
        let mut merged = launched_labels(
            &self.instance_type(&instance.instance_type),
            instance,
            self.reservation_of(instance).as_ref(),
        );
        merged.extend(node_claim.metadata.labels.clone().unwrap_or_default());
        launched.metadata.labels = Some(merged);
        launched.spec = node_claim.spec.clone();
        // The kubelet registers the Node under the instance's private DNS name.
        if let Some(status) = launched.status.as_mut() {
            status.node_name = Some(instance.private_dns_name.clone());
        }
        launched
    }

    /// The oldest pending or running instance of this cluster tagged with the NodeClaim
    /// `name`.
    async fn tagged(&self, name: &str) -> CloudResult<Option<Instance>> {
        let request = DescribeInstancesRequest {
            instance_ids: Vec::new(),
            filters: vec![
                Filter::Tag {
                    key: tags::NODECLAIM.to_owned(),
                    values: vec![name.to_owned()],
                },
                Filter::Tag {
                    key: tags::EKS_CLUSTER_NAME.to_owned(),
                    values: vec![self.cluster_name.clone()],
                },
                Filter::InstanceStateName(vec![InstanceState::Pending, InstanceState::Running]),
            ],
        };
        let found = self
            .ec2
            .describe_instances(&request)
            .await
            .map_err(from_ec2)?;
        Ok(found.into_iter().min_by_key(|i| i.launch_time))
    }

    /// Compatible, fitting instance types, cheapest first, at most [`MAX_INSTANCE_TYPES`].
    fn candidates(
        &self,
        node_claim: &str,
        reqs: &Requirements,
        requests: &Resources,
    ) -> CloudResult<Vec<Arc<InstanceType>>> {
        let mut compatible: Vec<(f64, Arc<InstanceType>)> = self
            .instance_types
            .iter()
            .zip(self.launch_facts.iter())
            .filter(|(_, (it_reqs, allocatable))| {
                reqs.is_compatible(it_reqs, AllowUndefined::WellKnownLabels)
                    && requests.fits(allocatable)
            })
            .filter_map(|(it, _)| {
                cheapest_offering(it, reqs, None).map(|price| (price, Arc::clone(it)))
            })
            .collect();
        if !reqs.has_min_values() {
            compatible = drop_exotic(compatible);
            if allows_both_capacity_types(reqs, &compatible) {
                compatible = drop_overpriced_spot(compatible, reqs);
            }
        }
        compatible.sort_by(|(pa, a), (pb, b)| pa.total_cmp(pb).then_with(|| a.name.cmp(&b.name)));
        compatible.truncate(MAX_INSTANCE_TYPES);
        let types: Vec<Arc<InstanceType>> = compatible.into_iter().map(|(_, it)| it).collect();
        if types.is_empty() {
            return Err(CloudProviderError::InsufficientCapacity {
                node_claim: node_claim.to_owned(),
                offerings: Vec::new(),
            });
        }
        check_min_values(node_claim, reqs, &types)?;
        Ok(types)
    }

    /// The reservation `instance` runs in, while the region still holds it.
    fn reservation_of(&self, instance: &Instance) -> Option<CapacityReservation> {
        let id = instance.capacity_reservation_id.as_deref()?;
        self.ec2
            .describe_capacity_reservations()
            .into_iter()
            .map(|v| v.reservation)
            .find(|r| r.id == id)
    }

    fn launch_tags(&self, node_claim: &NodeClaim) -> BTreeMap<String, String> {
        let mut tags = BTreeMap::new();
        tags.insert(tags::NODECLAIM.to_owned(), node_claim.name().to_owned());
        tags.insert(tags::EKS_CLUSTER_NAME.to_owned(), self.cluster_name.clone());
        tags.insert(
            tags::cluster_ownership(&self.cluster_name),
            "owned".to_owned(),
        );
        tags.insert(
            tags::EC2NODECLASS.to_owned(),
            node_claim.node_class_ref().name.clone(),
        );
        if let Some(pool) = node_claim.nodepool_name() {
            tags.insert(tags::NODEPOOL.to_owned(), pool.to_owned());
        }
        tags
    }

    /// The NodeClaim a live instance stands for (as upstream's `instanceToNodeClaim`).
    fn to_node_claim(&self, instance: &Instance) -> NodeClaim {
        let instance_type = self.instance_type(&instance.instance_type);
        let mut labels = launched_labels(
            &instance_type,
            instance,
            self.reservation_of(instance).as_ref(),
        );
        if let Some(pool) = instance.tags.get(tags::NODEPOOL) {
            labels.insert(labels::NODEPOOL.to_owned(), pool.clone());
        }
        let spec = NodeClaimSpec {
            taints: Vec::new(),
            startup_taints: Vec::new(),
            requirements: Vec::new(),
            resources: None,
            node_class_ref: NodeClassReference {
                group: labels::AWS_GROUP.to_owned(),
                kind: "EC2NodeClass".to_owned(),
                name: instance
                    .tags
                    .get(tags::EC2NODECLASS)
                    .cloned()
                    .unwrap_or_default(),
            },
            expire_after: NillableDuration::parse(DEFAULT_EXPIRE_AFTER)
                .expect("the default expireAfter is a valid duration"),
            termination_grace_period: None,
        };
        let name = instance
            .tags
            .get(tags::NODECLAIM)
            .map_or("", String::as_str);
        let mut node_claim = NodeClaim::new(name, spec);
        node_claim.metadata.labels = Some(labels);
        node_claim.metadata.creation_timestamp = Some(Time(system_time(instance.launch_time)));
        if !instance.state.is_live() {
            node_claim.metadata.deletion_timestamp =
                Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        node_claim.status = Some(NodeClaimStatus {
            provider_id: Some(instance.provider_id()),
            image_id: instance.image_id.clone(),
            capacity: instance_type
                .as_ref()
                .map(|it| resource_list(&it.capacity))
                .unwrap_or_default(),
            allocatable: instance_type
                .as_ref()
                .map(|it| resource_list(&it.allocatable()))
                .unwrap_or_default(),
            ..NodeClaimStatus::default()
        });
        node_claim
    }

    /// The instance behind `provider_id` if it exists (pending, running or shutting down).
    async fn find(&self, provider_id: &str) -> CloudResult<Instance> {
        let parsed = parse_aws_provider_id(provider_id)?;
        let request = DescribeInstancesRequest {
            instance_ids: vec![parsed.instance_id.to_owned()],
            filters: vec![existing_states()],
        };
        let found = self
            .ec2
            .describe_instances(&request)
            .await
            .map_err(from_ec2)?;
        found
            .into_iter()
            .next()
            .ok_or_else(|| CloudProviderError::NodeClaimNotFound {
                provider_id: provider_id.to_owned(),
                reason: "instance is terminated".to_owned(),
            })
    }
}

impl CloudProvider for SimulatedCloudProvider {
    fn name(&self) -> &str {
        "simulated"
    }

    fn create<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(self.launch(node_claim))
    }

    fn delete<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(async move {
            let provider_id = launched_provider_id(node_claim)?;
            let instance = self.find(provider_id).await?;
            if instance.state == InstanceState::ShuttingDown {
                return Ok(());
            }
            self.ec2
                .terminate_instances(&[instance.instance_id])
                .await
                .map_err(from_ec2)?;
            Ok(())
        })
    }

    fn get<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(async move { Ok(self.to_node_claim(&self.find(provider_id).await?)) })
    }

    fn find_launched<'a>(
        &'a self,
        node_claim: &'a str,
    ) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>> {
        Box::pin(async move {
            let found = self.tagged(node_claim).await?;
            Ok(found.map(|instance| self.to_node_claim(&instance)))
        })
    }

    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
        Box::pin(async move {
            let request = DescribeInstancesRequest {
                instance_ids: Vec::new(),
                filters: vec![
                    Filter::TagKey(tags::NODEPOOL.to_owned()),
                    Filter::TagKey(tags::EC2NODECLASS.to_owned()),
                    Filter::Tag {
                        key: tags::EKS_CLUSTER_NAME.to_owned(),
                        values: vec![self.cluster_name.clone()],
                    },
                    existing_states(),
                ],
            };
            let instances = self
                .ec2
                .describe_instances(&request)
                .await
                .map_err(from_ec2)?;
            Ok(instances.iter().map(|i| self.to_node_claim(i)).collect())
        })
    }

    fn get_instance_types<'a>(
        &'a self,
        _node_pool: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
        Box::pin(async move { Ok(self.instance_types.clone()) })
    }

    /// Never refreshed: the simulated region sells the instance types it was built with
    /// (the embedded catalog's, for [`Self::for_region`]), which is what the controller
    /// plans with when a provider has no catalog of its own.
    fn catalog(&self) -> Option<Arc<CatalogSnapshot>> {
        None
    }

    fn reservation_capacity(&self, id: &str) -> Option<u32> {
        if !self.reserved_capacity() {
            return None;
        }
        self.ec2
            .describe_capacity_reservations()
            .into_iter()
            .find(|v| v.reservation.id == id)
            .map(|v| v.available)
    }

    fn is_drifted<'a>(
        &'a self,
        node_claim: &'a NodeClaim,
    ) -> BoxFuture<'a, CloudResult<Option<DriftReason>>> {
        Box::pin(async move {
            let Some(provider_id) = node_claim.provider_id() else {
                return Ok(None);
            };
            let instance = self.find(provider_id).await?;
            let current = self.image_id();
            Ok((instance.image_id.as_deref() != Some(current.as_str()))
                .then(|| DriftReason::new(DriftReason::AMI_DRIFT)))
        })
    }

    fn node_class_reconciler(&self) -> Option<&dyn NodeClassReconciler> {
        Some(self)
    }

    fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
        Some(self)
    }
}

fn existing_states() -> Filter {
    Filter::InstanceStateName(vec![
        InstanceState::Pending,
        InstanceState::Running,
        InstanceState::ShuttingDown,
    ])
}

fn from_ec2(error: Ec2Error) -> CloudProviderError {
    match error {
        Ec2Error::RequestLimitExceeded { operation } => CloudProviderError::Throttled {
            operation: operation.to_owned(),
            message: error.to_string(),
        },
        Ec2Error::InstanceNotFound {
            ref instance_id, ..
        } => CloudProviderError::NodeClaimNotFound {
            provider_id: instance_id.clone(),
            reason: error.to_string(),
        },
        other => CloudProviderError::Other {
            operation: other.code().to_owned(),
            message: other.to_string(),
        },
    }
}

/// The id of the launched instance, or the error the fleet's answer amounts to.
fn launched_instance(node_claim: &str, output: &CreateFleetOutput) -> CloudResult<String> {
    if let Some(id) = output
        .instances
        .iter()
        .flat_map(|i| i.instance_ids.iter())
        .next()
    {
        return Ok(id.clone());
    }
    if output.errors.iter().all(|e| e.is_unfulfillable_capacity()) {
        let mut offerings: Vec<OfferingRef> = output
            .errors
            .iter()
            .map(|e| OfferingRef::new(e.capacity_type.as_str(), &e.instance_type, &e.zone))
            .collect();
        offerings.sort();
        offerings.dedup();
        return Err(CloudProviderError::InsufficientCapacity {
            node_claim: node_claim.to_owned(),
            offerings,
        });
    }
    if output
        .errors
        .iter()
        .any(|e| e.error_code == SPOT_SLR_ERROR_CODE)
    {
        return Err(CloudProviderError::LaunchFailed {
            node_claim: node_claim.to_owned(),
            reason: SPOT_SLR_REASON.to_owned(),
            message: spot_service_linked_role_message(node_claim),
        });
    }
    let codes: BTreeSet<String> = output
        .errors
        .iter()
        .map(|e| format!("{}: {}", e.error_code, e.error_message))
        .collect();
    let reason = output
        .errors
        .iter()
        .find(|e| !e.is_unfulfillable_capacity())
        .map_or("LaunchFailed", |e| e.error_code.as_str());
    Err(CloudProviderError::LaunchFailed {
        node_claim: node_claim.to_owned(),
        reason: reason.to_owned(),
        message: codes.into_iter().collect::<Vec<_>>().join("; "),
    })
}

fn claim_requirements(node_claim: &NodeClaim) -> CloudResult<Requirements> {
    let mut reqs = Requirements::new();
    for (i, r) in node_claim.requirements().iter().enumerate() {
        let min_values = r.min_values.and_then(|m| u32::try_from(m).ok());
        let req = Requirement::parse(&r.key, r.operator.as_str(), &r.values, min_values).map_err(
            |e| CloudProviderError::LaunchFailed {
                node_claim: node_claim.name().to_owned(),
                reason: "InvalidRequirements".to_owned(),
                message: format!("spec.requirements[{i}] ({}): {e}", r.key),
            },
        )?;
        reqs.add(req);
    }
    Ok(reqs)
}

fn claim_requests(node_claim: &NodeClaim) -> CloudResult<Resources> {
    let mut requests = Resources::new();
    for (name, quantity) in node_claim.resource_requests().into_iter().flatten() {
        let parsed =
            Quantity::parse(&quantity.0).map_err(|e| CloudProviderError::LaunchFailed {
                node_claim: node_claim.name().to_owned(),
                reason: "InvalidResourceRequests".to_owned(),
                message: format!(
                    "spec.resources.requests[{name}]: invalid quantity {:?}: {e}",
                    quantity.0
                ),
            })?;
        requests.insert(name, parsed);
    }
    Ok(requests)
}

/// The instance type as requirements: its single-valued labels, and "does not exist" for
/// the well-known keys it lacks (a GPU-less type has no GPU count).
pub fn instance_type_requirements(it: &InstanceType) -> Requirements {
    let mut reqs: Requirements = it
        .labels
        .iter()
        .map(|(k, v)| Requirement::in_values(k, [v.as_str()]))
        .collect();
    for key in kerf::catalog::INSTANCE_TYPE_LABEL_KEYS {
        if !it.labels.contains_key(*key) {
            reqs.add(Requirement::does_not_exist(key));
        }
    }
    reqs
}

fn offering_allowed(reqs: &Requirements, offering: &Offering) -> bool {
    let allows = |key: &str, value: &str| reqs.get(key).is_none_or(|r| r.has(value));
    offering.available
        && allows(labels::ZONE, &offering.zone)
        && allows(labels::ZONE_ID, &offering.zone_id)
        && allows(labels::CAPACITY_TYPE, offering.capacity_type.as_str())
}

/// The cheapest available offering compatible with `reqs` (of one capacity type if given).
fn cheapest_offering(
    it: &InstanceType,
    reqs: &Requirements,
    only: Option<CapacityType>,
) -> Option<f64> {
    it.offerings
        .iter()
        .filter(|o| offering_allowed(reqs, o) && only.is_none_or(|c| o.capacity_type == c))
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

fn allows_capacity_type(reqs: &Requirements, capacity_type: CapacityType) -> bool {
    reqs.get(labels::CAPACITY_TYPE)
        .is_none_or(|r| r.has(capacity_type.as_str()))
}

/// Spot when the requirements allow it and some candidate offers it, else on-demand.
fn choose_capacity_type(reqs: &Requirements, candidates: &[Arc<InstanceType>]) -> Ec2CapacityType {
    let spot_offered = allows_capacity_type(reqs, CapacityType::Spot)
        && candidates
            .iter()
            .any(|it| cheapest_offering(it, reqs, Some(CapacityType::Spot)).is_some());
    if spot_offered {
        Ec2CapacityType::Spot
    } else {
        Ec2CapacityType::OnDemand
    }
}

fn allows_both_capacity_types(
    reqs: &Requirements,
    candidates: &[(f64, Arc<InstanceType>)],
) -> bool {
    let offered = |c: CapacityType| {
        allows_capacity_type(reqs, c)
            && candidates
                .iter()
                .any(|(_, it)| cheapest_offering(it, reqs, Some(c)).is_some())
    };
    offered(CapacityType::Spot) && offered(CapacityType::OnDemand)
}

/// Upstream's `filterExoticInstanceTypes`: metal and accelerator types only when nothing
/// else fits.
fn drop_exotic(candidates: Vec<(f64, Arc<InstanceType>)>) -> Vec<(f64, Arc<InstanceType>)> {
    let accelerators = [
        labels::RESOURCE_NVIDIA_GPU,
        labels::RESOURCE_AMD_GPU,
        labels::RESOURCE_AWS_NEURON,
        labels::RESOURCE_AWS_NEURON_CORE,
        labels::RESOURCE_HABANA_GAUDI,
    ];
    let exotic = |it: &InstanceType| {
        it.label(labels::INSTANCE_SIZE)
            .is_some_and(|s| s.contains("metal"))
            || accelerators
                .iter()
                .any(|r| it.capacity.get_or_zero(r) > Quantity::ZERO)
    };
    let generic: Vec<_> = candidates
        .iter()
        .filter(|(_, it)| !exotic(it))
        .cloned()
        .collect();
    if generic.is_empty() {
        candidates
    } else {
        generic
    }
}

/// Upstream's `filterUnwantedSpot`: with both capacity types possible, drop types whose
/// cheapest offering costs more than the cheapest on-demand one.
fn drop_overpriced_spot(
    candidates: Vec<(f64, Arc<InstanceType>)>,
    reqs: &Requirements,
) -> Vec<(f64, Arc<InstanceType>)> {
    let cheapest_on_demand = candidates
        .iter()
        .filter_map(|(_, it)| cheapest_offering(it, reqs, Some(CapacityType::OnDemand)))
        .min_by(f64::total_cmp)
        .unwrap_or(f64::INFINITY);
    candidates
        .into_iter()
        .filter(|(price, _)| *price <= cheapest_on_demand)
        .collect()
}

/// Upstream's `SatisfiesMinValues` on the truncated list.
fn check_min_values(
    node_claim: &str,
    reqs: &Requirements,
    types: &[Arc<InstanceType>],
) -> CloudResult<()> {
    for req in reqs.iter() {
        let Some(min) = req.min_values() else {
            continue;
        };
        let distinct: BTreeSet<&str> = types.iter().filter_map(|it| it.label(req.key())).collect();
        if (distinct.len() as u64) < u64::from(min) {
            return Err(CloudProviderError::LaunchFailed {
                node_claim: node_claim.to_owned(),
                reason: "InstanceTypeResolutionFailed".to_owned(),
                message: format!(
                    "minValues requirement is not met for {:?}: {} of {min} values among the {} cheapest instance types",
                    req.key(),
                    distinct.len(),
                    types.len()
                ),
            });
        }
    }
    Ok(())
}

fn overrides(
    candidates: &[Arc<InstanceType>],
    reqs: &Requirements,
    capacity_type: Ec2CapacityType,
    image_id: &str,
) -> Vec<FleetOverride> {
    candidates
        .iter()
        .flat_map(|it| it.offerings.iter().map(move |o| (it, o)))
        .filter(|(_, o)| {
            o.capacity_type.as_str() == capacity_type.as_str() && offering_allowed(reqs, o)
        })
        .map(|(it, o)| FleetOverride {
            capacity_reservation_id: None,
            instance_type: it.name.clone(),
            zone: o.zone.clone(),
            subnet_id: Some(format!("subnet-{}", o.zone_id)),
            image_id: Some(image_id.to_owned()),
            priority: None,
        })
        .collect()
}

/// Labels a launched instance resolves: the type's labels, zone, zone id, capacity type.
fn launched_labels(
    instance_type: &Option<Arc<InstanceType>>,
    instance: &Instance,
    reservation: Option<&CapacityReservation>,
) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = instance_type
        .as_ref()
        .map(|it| it.labels.clone())
        .unwrap_or_default();
    labels.insert(
        labels::INSTANCE_TYPE.to_owned(),
        instance.instance_type.clone(),
    );
    labels.insert(labels::ZONE.to_owned(), instance.zone.clone());
    labels.insert(
        labels::CAPACITY_TYPE.to_owned(),
        instance.capacity_type.as_str().to_owned(),
    );
    if let Some(reservation) = reservation {
        labels.insert(
            labels::CAPACITY_TYPE.to_owned(),
            labels::CAPACITY_TYPE_RESERVED.to_owned(),
        );
        labels.insert(
            labels::CAPACITY_RESERVATION_ID.to_owned(),
            reservation.id.clone(),
        );
        labels.insert(
            labels::CAPACITY_RESERVATION_TYPE.to_owned(),
            reservation.reservation_type.as_str().to_owned(),
        );
        labels.insert(
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
            reservation.interruptible.to_string(),
        );
    }
    let zone_id = instance_type
        .as_ref()
        .and_then(|it| it.offerings.iter().find(|o| o.zone == instance.zone))
        .map(|o| o.zone_id.clone());
    if let Some(zone_id) = zone_id {
        labels.insert(labels::ZONE_ID.to_owned(), zone_id);
    }
    labels
}

/// A resource list for the API, without zero entries (as upstream drops them).
pub fn resource_list(resources: &Resources) -> ResourceList {
    resources.to_api()
}

/// The API's reservation type of a simulated reservation.
pub(crate) fn reservation_type(
    r: &CapacityReservation,
) -> kerf::api::ec2nodeclass::CapacityReservationType {
    match r.reservation_type {
        ReservationType::Default => kerf::api::ec2nodeclass::CapacityReservationType::Default,
        ReservationType::CapacityBlock => {
            kerf::api::ec2nodeclass::CapacityReservationType::CapacityBlock
        }
    }
}

pub(crate) fn system_time(time: std::time::SystemTime) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
}
