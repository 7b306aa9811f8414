//! CreateFleet launches. A launch asks for one instance with `type=instant`; its overrides are
//! the offerings of the 60 cheapest compatible instance types, each in its zone's chosen
//! subnet with the AMI its launch template was built for, priced for the allocation strategy
//! (spot `price-capacity-optimized`, on-demand `lowest-price`). One call per NodeClaim, never
//! batched: the NodeClaim tag goes on the instance in the request's tag specifications, so
//! no instance exists untagged for a retry to miss, and the request carries the NodeClaim's
//! client token ([`kerf::launch_attempts`]), so a retry of a launch whose answer was lost gets
//! the same instance back from EC2. The response's errors are classified into unavailable
//! offerings. A reserved launch targets its reservations through the launch templates (one
//! per reservation) and asks for the capacity type EC2 names for it: `capacity-block` for a
//! Capacity Block, `reserved-capacity` for an interruptible reservation, else `on-demand`.

use crate::errors::{
    ApiError, FleetError, FleetErrorAction, classify_fleet_error, spot_service_linked_role_message,
};
use crate::subnet::SubnetInfo;
use crate::tags;
use crate::unavailable::UnavailableOfferings;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetReservationType, FleetType, InstanceType,
    OnDemandOptionsRequest, ReservedCapacityOptionsRequest, ResourceType, SpotAllocationStrategy,
    SpotOptionsRequest, TagSpecification, TargetCapacitySpecificationRequest,
};
use kerf::labels::{CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// At most this many instance types go into one launch, as upstream.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// Offerings CreateFleet refused, one per error (labels `zone`, `capacity_type`, `reason`).
pub const LAUNCH_FAILURES: &str = "karpenter_cloudprovider_instance_launch_failures_total";

/// An offering a launch may use, and the launch template that fits its instance type.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchCandidate {
    pub instance_type: String,
    pub zone: String,
    pub price: f64,
    pub launch_template: String,
    pub image_id: String,
    /// The capacity reservation a reserved offering launches into (its launch template
    /// targets it).
    pub reservation_id: Option<String>,
}

/// One override of a CreateFleet request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetOverride {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub image_id: String,
    /// The offering's price in millionths of a dollar (hashable, unlike a float).
    pub price_micros: u64,
    /// The reservation this override's launch template targets.
    pub reservation_id: Option<String>,
}

/// The overrides that use one launch template.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetLaunchConfig {
    pub launch_template: String,
    pub overrides: Vec<FleetOverride>,
}

/// A launch request: everything but the NodeClaim's own tag and client token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetRequest {
    pub capacity_type: String,
    pub configs: Vec<FleetLaunchConfig>,
    pub tags: BTreeMap<String, String>,
    pub context: Option<String>,
    /// What kind of reservation a `reserved` launch targets; `None` otherwise.
    pub reservation: Option<FleetReservation>,
}

/// The kind of the reservations a reserved launch targets: one kind per launch, as
/// CreateFleet takes one default target capacity type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetReservation {
    /// `default` or `capacity-block`.
    pub reservation_type: String,
    pub interruptible: bool,
}

impl FleetReservation {
    fn is_capacity_block(&self) -> bool {
        self.reservation_type == kerf::catalog::CAPACITY_BLOCK
    }
}

/// The names of the `max` cheapest instance types among `candidates` (by their cheapest
/// offering; ties by name).
pub fn cheapest_types(candidates: &[LaunchCandidate], max: usize) -> Vec<String> {
    let mut cheapest: HashMap<&str, f64> = HashMap::new();
    for c in candidates {
        let entry = cheapest.entry(c.instance_type.as_str()).or_insert(c.price);
        if c.price < *entry {
            *entry = c.price;
        }
    }
    let mut types: Vec<(&str, f64)> = cheapest.into_iter().collect();
    types.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    types
        .into_iter()
        .take(max)
        .map(|(t, _)| t.to_owned())
        .collect()
}

/// The launch configs of a request: the offerings of the cheapest types that have a subnet
/// in their zone, one override per (type, zone), grouped by launch template.
pub fn launch_configs(
    candidates: &[LaunchCandidate],
    zonal_subnets: &BTreeMap<String, SubnetInfo>,
    max_types: usize,
) -> Vec<FleetLaunchConfig> {
    let mut usable: Vec<LaunchCandidate> = candidates
        .iter()
        .filter(|c| zonal_subnets.contains_key(&c.zone))
        .cloned()
        .collect();
    // Cheapest first, so the override order reads as the price order.
    usable.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
    });
    let chosen: BTreeSet<String> = cheapest_types(&usable, max_types).into_iter().collect();
    let mut seen = BTreeSet::new();
    let mut configs: Vec<FleetLaunchConfig> = Vec::new();
    for c in usable.iter().filter(|c| chosen.contains(&c.instance_type)) {
        if !seen.insert((c.instance_type.clone(), c.zone.clone())) {
            continue;
        }
        let subnet = &zonal_subnets[&c.zone];
        let o = FleetOverride {
            instance_type: c.instance_type.clone(),
            zone: c.zone.clone(),
            subnet_id: subnet.id.clone(),
            image_id: c.image_id.clone(),
            price_micros: (c.price * 1e6).round().max(0.0) as u64,
            reservation_id: c.reservation_id.clone(),
        };
        match configs
            .iter_mut()
            .find(|cfg| cfg.launch_template == c.launch_template)
        {
            Some(cfg) => cfg.overrides.push(o),
            None => configs.push(FleetLaunchConfig {
                launch_template: c.launch_template.clone(),
                overrides: vec![o],
            }),
        }
    }
    configs
}

impl FleetRequest {
    /// The reservation the override for `instance_type` in `zone` launches into, if any.
    pub fn reservation_of(&self, instance_type: &str, zone: &str) -> Option<&str> {
        self.configs
            .iter()
            .flat_map(|c| &c.overrides)
            .find(|o| o.instance_type == instance_type && o.zone == zone)
            .and_then(|o| o.reservation_id.as_deref())
    }

    /// The CreateFleet call launching one instance for `node_claim`: tagged with it at
    /// launch, under `client_token`.
    pub fn to_call(
        &self,
        ec2: &aws_sdk_ec2::Client,
        node_claim: &str,
        client_token: &str,
    ) -> aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder {
        let mut instance_tags = self.tags.clone();
        instance_tags.insert(tags::NODECLAIM.to_owned(), node_claim.to_owned());
        let tag_specs = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ]
        .into_iter()
        .map(|r| {
            TagSpecification::builder()
                .resource_type(r)
                .set_tags(Some(tags::to_ec2(&instance_tags)))
                .build()
        })
        .collect();
        let spot = self.capacity_type == CAPACITY_TYPE_SPOT;
        let target_type = match &self.reservation {
            _ if spot => DefaultTargetCapacityType::Spot,
            Some(r) if r.is_capacity_block() => DefaultTargetCapacityType::CapacityBlock,
            Some(r) if r.interruptible => DefaultTargetCapacityType::ReservedCapacity,
            _ => DefaultTargetCapacityType::OnDemand,
        };
        let mut call = ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(client_token)
            .set_context(self.context.clone())
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(target_type.clone())
                    .build(),
            )
            .set_launch_template_configs(Some(self.configs.iter().map(config_request).collect()))
            .set_tag_specifications(Some(tag_specs));
        call = match target_type {
            DefaultTargetCapacityType::Spot => call.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            ),
            DefaultTargetCapacityType::ReservedCapacity => call.reserved_capacity_options(
                ReservedCapacityOptionsRequest::builder()
                    .reservation_types(FleetReservationType::InterruptibleCapacityReservation)
                    .build(),
            ),
            // A Capacity Block takes no allocation options.
            DefaultTargetCapacityType::CapacityBlock => call,
            _ => call.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            ),
        };
        call
    }
}

fn config_request(cfg: &FleetLaunchConfig) -> FleetLaunchTemplateConfigRequest {
    FleetLaunchTemplateConfigRequest::builder()
        .launch_template_specification(
            FleetLaunchTemplateSpecificationRequest::builder()
                .launch_template_name(&cfg.launch_template)
                .version("$Latest")
                .build(),
        )
        .set_overrides(Some(
            cfg.overrides
                .iter()
                .map(|o| {
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(InstanceType::from(o.instance_type.as_str()))
                        .subnet_id(&o.subnet_id)
                        .image_id(&o.image_id)
                        .availability_zone(&o.zone)
                        .priority(o.price_micros as f64 / 1e6)
                        .build()
                })
                .collect(),
        ))
        .build()
}

/// An instance a fleet launched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetInstance {
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: Option<String>,
    pub image_id: Option<String>,
}

/// What a launch got: its instance (if any) and the fleet's errors.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetOutcome {
    pub fleet_id: Option<String>,
    pub instance: Option<FleetInstance>,
    pub errors: Vec<FleetError>,
}

/// Launches one instance for `node_claim` with `request` under `client_token`.
pub async fn launch(
    ec2: &aws_sdk_ec2::Client,
    request: &FleetRequest,
    node_claim: &str,
    client_token: &str,
) -> Result<FleetOutcome, ApiError> {
    let out = request
        .to_call(ec2, node_claim, client_token)
        .send()
        .await
        .map_err(|e| ApiError::from_sdk("CreateFleet", e))?;
    let errors: Vec<FleetError> = out.errors().iter().map(FleetError::from).collect();
    let mut instances: Vec<FleetInstance> = Vec::new();
    for launched in out.instances() {
        let overrides = launched
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        for id in launched.instance_ids() {
            instances.push(FleetInstance {
                instance_id: id.clone(),
                instance_type: launched
                    .instance_type()
                    .map(|t| t.as_str().to_owned())
                    .or_else(|| {
                        overrides
                            .and_then(|o| o.instance_type())
                            .map(|t| t.as_str().to_owned())
                    })
                    .unwrap_or_default(),
                zone: overrides
                    .and_then(|o| o.availability_zone())
                    .unwrap_or_default()
                    .to_owned(),
                subnet_id: overrides.and_then(|o| o.subnet_id()).map(str::to_owned),
                image_id: overrides.and_then(|o| o.image_id()).map(str::to_owned),
            });
        }
    }
    if instances.len() > 1 {
        tracing::error!(
            node_claim,
            received = instances.len(),
            "CreateFleet returned more instances than requested; ignoring the extra ones"
        );
    }
    Ok(FleetOutcome {
        fleet_id: out.fleet_id().map(str::to_owned),
        instance: instances.into_iter().next(),
        errors,
    })
}

/// Records a fleet's errors in the unavailable-offerings cache; returns the offerings
/// marked unavailable, and whether spot was blocked for lack of its service-linked role.
pub fn record_fleet_errors(
    errors: &[FleetError],
    capacity_type: &str,
    node_claim: &str,
    unavailable: &dyn UnavailableOfferings,
) -> (Vec<(String, String)>, bool) {
    let mut marked = Vec::new();
    let mut spot_blocked = false;
    for err in errors {
        metrics::counter!(
            LAUNCH_FAILURES,
            "zone" => err.zone.clone().unwrap_or_default(),
            "capacity_type" => capacity_type.to_owned(),
            "reason" => crate::errors::launch_failure_reason(&format!("{}: {}", err.code, err.message)).reason
        )
        .increment(1);
        for action in classify_fleet_error(err, capacity_type) {
            match action {
                FleetErrorAction::MarkOfferingUnavailable {
                    instance_type,
                    zone,
                    capacity_type,
                    reason,
                } => {
                    // A reservation out of room is that reservation's state (the caller
                    // empties it), not the pool's: other reservations and markets stay open.
                    if capacity_type != CAPACITY_TYPE_RESERVED {
                        unavailable.mark_unavailable(
                            &instance_type,
                            &zone,
                            &capacity_type,
                            &reason,
                        );
                    }
                    marked.push((instance_type, zone));
                }
                FleetErrorAction::MarkSubnetUnavailable { subnet_id } => {
                    unavailable.mark_subnet_unavailable(&subnet_id);
                }
                FleetErrorAction::BlockSpot => {
                    unavailable.mark_capacity_type_unavailable(CAPACITY_TYPE_SPOT);
                    if !spot_blocked {
                        tracing::error!("{}", spot_service_linked_role_message(node_claim));
                    }
                    spot_blocked = true;
                }
            }
        }
    }
    (marked, spot_blocked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unavailable::UnavailableOfferingsCache;

    fn cand(t: &str, zone: &str, price: f64, lt: &str) -> LaunchCandidate {
        LaunchCandidate {
            instance_type: t.into(),
            zone: zone.into(),
            price,
            launch_template: lt.into(),
            image_id: format!("ami-{lt}"),
            reservation_id: None,
        }
    }

    fn subnets(zones: &[&str]) -> BTreeMap<String, SubnetInfo> {
        zones
            .iter()
            .map(|z| {
                (
                    (*z).to_owned(),
                    SubnetInfo {
                        id: format!("subnet-{z}"),
                        zone: (*z).into(),
                        zone_id: None,
                        vpc_id: None,
                        available_ip_count: 100,
                        tags: BTreeMap::new(),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn keeps_the_cheapest_types_and_only_zones_with_subnets() {
        let candidates = vec![
            cand("m5.xlarge", "us-east-1a", 0.192, "lt-amd"),
            cand("m5.large", "us-east-1a", 0.096, "lt-amd"),
            cand("m5.large", "us-east-1b", 0.096, "lt-amd"),
            cand("m6g.large", "us-east-1a", 0.077, "lt-arm"),
            cand("m5.large", "us-east-1c", 0.090, "lt-amd"),
        ];
        let configs = launch_configs(&candidates, &subnets(&["us-east-1a", "us-east-1b"]), 2);
        let all: Vec<(&str, &str, &str)> = configs
            .iter()
            .flat_map(|c| {
                c.overrides.iter().map(move |o| {
                    (
                        c.launch_template.as_str(),
                        o.instance_type.as_str(),
                        o.zone.as_str(),
                    )
                })
            })
            .collect();
        assert_eq!(
            all,
            [
                ("lt-arm", "m6g.large", "us-east-1a"),
                ("lt-amd", "m5.large", "us-east-1a"),
                ("lt-amd", "m5.large", "us-east-1b"),
            ]
        );
        assert_eq!(configs[1].overrides[0].subnet_id, "subnet-us-east-1a");
        assert_eq!(configs[1].overrides[0].price_micros, 96_000);
        assert_eq!(configs[0].overrides[0].image_id, "ami-lt-arm");
    }

    #[test]
    fn sixty_types_at_most() {
        let candidates: Vec<LaunchCandidate> = (0..100)
            .map(|i| cand(&format!("t{i:03}"), "us-east-1a", 1.0 + f64::from(i), "lt"))
            .collect();
        let configs = launch_configs(&candidates, &subnets(&["us-east-1a"]), MAX_INSTANCE_TYPES);
        assert_eq!(configs[0].overrides.len(), 60);
        assert_eq!(configs[0].overrides[59].instance_type, "t059");
    }

    #[test]
    fn request_carries_strategy_capacity_and_tags() {
        let conf = aws_sdk_ec2::Config::builder()
            .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
            .build();
        let ec2 = aws_sdk_ec2::Client::from_conf(conf);
        let request = FleetRequest {
            capacity_type: "spot".into(),
            configs: launch_configs(
                &[cand("m5.large", "us-east-1a", 0.1, "lt")],
                &subnets(&["us-east-1a"]),
                60,
            ),
            tags: BTreeMap::from([("karpenter.sh/nodepool".into(), "default".into())]),
            context: None,
            reservation: None,
        };
        let call = request.to_call(&ec2, "default-x7k2p", "kerf-uid-0");
        let input = call.as_input();
        assert_eq!(input.get_type(), &Some(FleetType::Instant));
        assert_eq!(input.get_client_token().as_deref(), Some("kerf-uid-0"));
        let target = input.get_target_capacity_specification().as_ref().unwrap();
        assert_eq!(target.total_target_capacity(), Some(1));
        assert_eq!(
            target.default_target_capacity_type(),
            Some(&DefaultTargetCapacityType::Spot)
        );
        assert_eq!(
            input
                .get_spot_options()
                .as_ref()
                .unwrap()
                .allocation_strategy(),
            Some(&SpotAllocationStrategy::PriceCapacityOptimized)
        );
        assert!(input.get_on_demand_options().is_none());
        let specs = input.get_tag_specifications().as_ref().unwrap();
        assert_eq!(specs.len(), 3);
        let instance_tags = tags::from_ec2(specs[0].tags());
        assert_eq!(instance_tags["karpenter.sh/nodeclaim"], "default-x7k2p");

        let on_demand = FleetRequest {
            capacity_type: "on-demand".into(),
            ..request
        };
        let input = on_demand.to_call(&ec2, "default-x7k2p", "kerf-uid-1");
        assert_eq!(
            input
                .as_input()
                .get_on_demand_options()
                .as_ref()
                .unwrap()
                .allocation_strategy(),
            Some(&FleetOnDemandAllocationStrategy::LowestPrice)
        );
    }

    #[test]
    fn reserved_launches_ask_for_their_reservation_kind() {
        let conf = aws_sdk_ec2::Config::builder()
            .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
            .build();
        let ec2 = aws_sdk_ec2::Client::from_conf(conf);
        let request = |reservation_type: &str, interruptible: bool| FleetRequest {
            capacity_type: "reserved".into(),
            configs: launch_configs(
                &[LaunchCandidate {
                    reservation_id: Some("cr-1".into()),
                    ..cand("m5.large", "us-east-1a", 0.0, "lt")
                }],
                &subnets(&["us-east-1a"]),
                60,
            ),
            tags: BTreeMap::new(),
            context: None,
            reservation: Some(FleetReservation {
                reservation_type: reservation_type.into(),
                interruptible,
            }),
        };
        let odcr = request("default", false);
        assert_eq!(odcr.reservation_of("m5.large", "us-east-1a"), Some("cr-1"));
        assert_eq!(odcr.reservation_of("m5.large", "us-east-1b"), None);
        let call = odcr.to_call(&ec2, "nc", "t");
        let input = call.as_input();
        assert_eq!(
            input
                .get_target_capacity_specification()
                .as_ref()
                .and_then(|t| t.default_target_capacity_type()),
            Some(&DefaultTargetCapacityType::OnDemand)
        );
        assert!(input.get_on_demand_options().is_some());

        let block = request("capacity-block", false).to_call(&ec2, "nc", "t");
        assert_eq!(
            block
                .as_input()
                .get_target_capacity_specification()
                .as_ref()
                .and_then(|t| t.default_target_capacity_type()),
            Some(&DefaultTargetCapacityType::CapacityBlock)
        );
        assert!(block.as_input().get_on_demand_options().is_none());

        let interruptible = request("default", true).to_call(&ec2, "nc", "t");
        let input = interruptible.as_input();
        assert_eq!(
            input
                .get_target_capacity_specification()
                .as_ref()
                .and_then(|t| t.default_target_capacity_type()),
            Some(&DefaultTargetCapacityType::ReservedCapacity)
        );
        assert_eq!(
            input
                .get_reserved_capacity_options()
                .as_ref()
                .map(|o| o.reservation_types().to_vec()),
            Some(vec![FleetReservationType::InterruptibleCapacityReservation])
        );
    }

    #[test]
    fn fleet_errors_mark_offerings_subnets_and_spot() {
        let cache = UnavailableOfferingsCache::default();
        let err = |code: &str| FleetError {
            code: code.into(),
            message: "m".into(),
            instance_type: Some("m5.large".into()),
            zone: Some("us-east-1a".into()),
            subnet_id: Some("subnet-a".into()),
        };
        let (marked, spot_blocked) = record_fleet_errors(
            &[
                err("InsufficientInstanceCapacity"),
                err("AuthFailure.ServiceLinkedRoleCreationNotPermitted"),
            ],
            "spot",
            "nc-1",
            &cache,
        );
        assert_eq!(marked, [("m5.large".to_owned(), "us-east-1a".to_owned())]);
        assert!(spot_blocked);
        assert!(cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]));
        assert!(cache.is_unavailable("c5.large", "us-east-1b", "spot", &[]));
        assert!(!cache.is_unavailable("c5.large", "us-east-1b", "on-demand", &[]));

        record_fleet_errors(
            &[err("InsufficientFreeAddressesInSubnet")],
            "on-demand",
            "nc-2",
            &cache,
        );
        assert!(cache.is_unavailable(
            "c5.large",
            "us-east-1a",
            "on-demand",
            &["subnet-a".to_owned()]
        ));
    }
}
