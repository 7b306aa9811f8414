//! The EC2 request and response shapes the simulated EC2 speaks. They mirror the fields of the
//! real `CreateFleet`, `DescribeInstances`, `TerminateInstances` and `CreateTags` calls that
//! kerf's AWS provider sends, so the simulated cloud provider builds exactly the request the
//! real one would and reads back the same kind of answer (instances plus per-override errors).

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

/// `spot` or `on-demand`, as EC2's `DefaultTargetCapacityType` and Karpenter's
/// `karpenter.sh/capacity-type` label spell them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapacityType {
    Spot,
    OnDemand,
}

impl CapacityType {
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Spot => kerf::labels::CAPACITY_TYPE_SPOT,
            CapacityType::OnDemand => kerf::labels::CAPACITY_TYPE_ON_DEMAND,
        }
    }

    /// Parses the label value; `None` for anything EC2 cannot launch (e.g. `reserved`).
    pub fn parse(text: &str) -> Option<CapacityType> {
        match text {
            kerf::labels::CAPACITY_TYPE_SPOT => Some(CapacityType::Spot),
            kerf::labels::CAPACITY_TYPE_ON_DEMAND => Some(CapacityType::OnDemand),
            _ => None,
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One capacity pool: an instance type in a zone bought one way. ICE is injected per pool.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
}

impl OfferingKey {
    pub fn new(instance_type: &str, zone: &str, capacity_type: CapacityType) -> Self {
        Self {
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
            capacity_type,
        }
    }
}

impl fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.capacity_type, self.instance_type, self.zone
        )
    }
}

/// A pool the simulated region sells, with its hourly price in USD.
#[derive(Clone, Debug, PartialEq)]
pub struct PricedOffering {
    pub key: OfferingKey,
    pub price: f64,
}

/// `CreateFleet` with `Type=instant`, reduced to the fields that change the outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreateFleetRequest {
    pub launch_template_configs: Vec<LaunchTemplateConfig>,
    /// `TargetCapacitySpecification.DefaultTargetCapacityType`.
    pub capacity_type: Option<CapacityType>,
    /// `TargetCapacitySpecification.TotalTargetCapacity`; kerf always asks for 1.
    pub total_target_capacity: u32,
    /// Tags of the `instance` tag specification, applied to every launched instance.
    pub tags: BTreeMap<String, String>,
    /// `Context` (EC2NodeClass `spec.context`), recorded but not interpreted.
    pub context: Option<String>,
    /// `ClientToken`: a request repeating a token EC2 has answered gets that answer again
    /// (nothing is launched); with other parameters it is `IdempotentParameterMismatch`.
    pub client_token: Option<String>,
}

/// One launch template with the overrides that may use it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaunchTemplateConfig {
    pub launch_template_name: String,
    pub overrides: Vec<FleetOverride>,
}

/// One candidate pool: instance type × subnet (zone), optionally with its own image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetOverride {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: Option<String>,
    pub image_id: Option<String>,
    /// Lower is preferred among equally priced pools (the `prioritized` strategies' field).
    pub priority: Option<f64>,
    /// The capacity reservation to launch into (on a real fleet, the launch template's
    /// `CapacityReservationSpecification.CapacityReservationTarget`).
    pub capacity_reservation_id: Option<String>,
}

/// What `CreateFleet` answers: the launched instances and one error per pool that failed.
/// An empty `instances` with errors is how EC2 reports that nothing could be launched.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreateFleetOutput {
    pub fleet_id: String,
    pub instances: Vec<FleetInstance>,
    pub errors: Vec<FleetError>,
}

/// Instances launched in one pool.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetInstance {
    pub instance_ids: Vec<String>,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub launch_template_name: String,
}

/// A pool that could not be launched, with EC2's error code.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetError {
    pub error_code: String,
    pub error_message: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub launch_template_name: String,
}

impl FleetError {
    /// Whether the code is one of the capacity errors Karpenter caches as an unavailable
    /// offering (as opposed to a configuration or permission problem).
    pub fn is_unfulfillable_capacity(&self) -> bool {
        UNFULFILLABLE_CAPACITY_CODES.contains(&self.error_code.as_str())
    }

    pub fn offering(&self) -> OfferingKey {
        OfferingKey::new(&self.instance_type, &self.zone, self.capacity_type)
    }
}

/// Fleet error code for a pool without capacity right now.
pub const INSUFFICIENT_INSTANCE_CAPACITY: &str = "InsufficientInstanceCapacity";
/// Fleet error code for a pool the region does not sell (type not offered in the zone).
pub const UNSUPPORTED: &str = "Unsupported";

/// The fleet error codes upstream treats as "this offering is unavailable for a while".
pub const UNFULFILLABLE_CAPACITY_CODES: &[&str] = &[
    INSUFFICIENT_INSTANCE_CAPACITY,
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    UNSUPPORTED,
    "InsufficientFreeAddressesInSubnet",
    "ReservationCapacityExceeded",
];

/// EC2 instance lifecycle states (`instance-state-name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
}

impl InstanceState {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Terminated => "terminated",
        }
    }

    /// Pending and running instances are the ones that exist from Karpenter's point of view.
    pub fn is_live(self) -> bool {
        matches!(self, InstanceState::Pending | InstanceState::Running)
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A simulated instance as `DescribeInstances` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub state: InstanceState,
    pub image_id: Option<String>,
    pub subnet_id: Option<String>,
    pub launch_template_name: String,
    pub private_ip_address: String,
    pub private_dns_name: String,
    pub launch_time: SystemTime,
    /// The hourly price of the pool it was launched in.
    pub price: f64,
    pub tags: BTreeMap<String, String>,
    /// Set once a spot interruption warning was issued for the instance.
    pub interruption: Option<SpotInterruption>,
    /// The capacity reservation it runs in.
    pub capacity_reservation_id: Option<String>,
}

impl Instance {
    /// `aws:///<zone>/<instance-id>`, the `spec.providerID` its Node registers with.
    pub fn provider_id(&self) -> String {
        kerf::cloudprovider::aws_provider_id(&self.zone, &self.instance_id)
    }
}

/// The two-minute warning EC2 sends before reclaiming a spot instance.
#[derive(Clone, Debug, PartialEq)]
pub struct SpotInterruption {
    pub instance_id: String,
    pub issued_at: SystemTime,
    /// When EC2 acts (terminates the instance).
    pub action_time: SystemTime,
}

/// A `DescribeInstances` filter.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// `tag-key`: the instance carries the tag, whatever its value.
    TagKey(String),
    /// `tag:<key>`: the tag's value is one of `values` (`*` matches any run of characters).
    Tag { key: String, values: Vec<String> },
    /// `instance-state-name`.
    InstanceStateName(Vec<InstanceState>),
    /// `instance-type`.
    InstanceType(Vec<String>),
    /// `availability-zone`.
    AvailabilityZone(Vec<String>),
}

/// `DescribeInstances`: ids (all must exist) and filters (all must match).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DescribeInstancesRequest {
    pub instance_ids: Vec<String>,
    pub filters: Vec<Filter>,
}

/// One row of a `TerminateInstances` answer.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceStateChange {
    pub instance_id: String,
    pub previous_state: InstanceState,
    pub current_state: InstanceState,
}

/// What happened to the simulated fleet, for the simulated kubelets, the interruption
/// handling and reports. Delivered on a broadcast channel ([`super::SimulatedEc2::subscribe`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Ec2Event {
    Launched {
        instance_id: String,
        provider_id: String,
    },
    StateChanged {
        instance_id: String,
        provider_id: String,
        state: InstanceState,
    },
    SpotInterruptionWarning(SpotInterruption),
    /// The owner of an interruptible capacity reservation reclaims it: EC2 warns each of
    /// its instances, then reclaims them after the notice.
    ReservationInterruptionWarning {
        instance_id: String,
        reservation_id: String,
        issued_at: SystemTime,
    },
}
