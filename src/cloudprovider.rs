//! The cloud provider boundary: the [`CloudProvider`] trait through which kerf's controller
//! launches, finds and removes capacity, and the errors it branches on. It follows upstream
//! Karpenter's `cloudprovider.CloudProvider` interface — Create hydrates a NodeClaim with
//! what was launched, Delete/Get/List work by providerID, GetInstanceTypes lists what a
//! NodePool may launch, IsDrifted compares a node to its current configuration — so the
//! controller's lifecycle logic reads like upstream's. Two implementations exist: the AWS
//! provider (EC2 CreateFleet) and the simulated one in `kerf-loadtest`. Capabilities only some
//! providers have hang off it: [`NodeClassReconciler`] (EC2NodeClass status) and
//! [`InstanceTagger`] (tags after registration). Beside it sits the [`UnavailableOfferings`]
//! trait through which launch failures reach the instance types the next solves use, and
//! [`CloudProvider::catalog`], the provider's refreshed catalog the solves plan with. This
//! module is pure: the traits, their data and the providerID format, no I/O.

use crate::api::{EC2NodeClass, EC2NodeClassStatus, NodeClaim, NodePool};
use crate::catalog::{CatalogSnapshot, InstanceType};
use crate::labels;
use crate::requirements::Requirements;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// A boxed, sendable future: what every [`CloudProvider`] method returns, so the trait stays
/// dyn-compatible and the controller can hold an `Arc<dyn CloudProvider>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The result of a cloud provider call.
pub type CloudResult<T> = Result<T, CloudProviderError>;

/// Launches and tracks the machines behind NodeClaims.
///
/// Implementations must be cheap to share (`Send + Sync`, held in an `Arc`) and safe to
/// call concurrently: the NodeClaim lifecycle launches many NodeClaims at once, the disruption and
/// garbage-collection loops list and get while launches are in flight.
///
/// Every machine a provider launches for kerf is identified by its providerID (AWS:
/// `aws:///<zone>/<instance-id>`), the same string the kubelet registers its Node with, which
/// is how the controller ties a NodeClaim to its Node.
pub trait CloudProvider: Send + Sync {
    /// The implementation's name (`aws`, `simulated`), for logs and metrics labels.
    fn name(&self) -> &str;

    /// Launches one machine for `node_claim` and returns the NodeClaim hydrated with what
    /// was launched:
    /// - `status.providerID`, `status.imageID`, `status.capacity`, `status.allocatable`;
    /// - labels resolved by the launch: instance type, zone (and zone id), capacity type,
    ///   architecture, OS and the instance type's other single-valued well-known labels,
    ///   merged under the NodeClaim's own labels (which win);
    /// - `status.nodeName`, when the provider knows at launch the name the machine's Node
    ///   will register under (see [`expected_node_name`]).
    ///
    /// The provider chooses among the instance types and offerings compatible with
    /// `spec.requirements` whose allocatable fits `spec.resources.requests`, preferring the
    /// cheapest (spot when the requirements allow it and a spot offering exists).
    /// Fails with [`CloudProviderError::InsufficientCapacity`] when no offering could be
    /// launched, listing the offerings that were refused so the caller can mark them
    /// unavailable.
    ///
    /// Idempotent per NodeClaim: every machine is tagged `karpenter.sh/nodeclaim` with the
    /// NodeClaim's name by the launch call itself, and Create first looks for a live one so
    /// tagged (left by a launch whose answer or status write was lost, a restart, a
    /// failover) and returns it hydrated instead of launching a second. Where that search
    /// lags behind the launch, the launch call's client token, derived from the NodeClaim's
    /// uid ([`crate::launch_attempts`]), makes the cloud answer with the first machine.
    fn create<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>>;

    /// Terminates the machine of `node_claim` (found by `status.providerID`). Fails with
    /// [`CloudProviderError::NodeClaimNotFound`] once the machine is gone, which is how the
    /// termination flow learns it may remove its finalizer; calling it again while the
    /// machine shuts down is not an error.
    fn delete<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>>;

    /// The NodeClaim as the provider sees it (labels, capacity, providerID) for a live
    /// machine; [`CloudProviderError::NodeClaimNotFound`] when it does not exist or is
    /// terminated.
    fn get<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>>;

    /// The live machine launched for the NodeClaim named `node_claim` (found by its
    /// `karpenter.sh/nodeclaim` tag), as [`Self::get`] describes it; `None` when there is
    /// none. A deleting NodeClaim without a recorded providerID uses it to terminate what a
    /// launch in flight may have started.
    fn find_launched<'a>(
        &'a self,
        node_claim: &'a str,
    ) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>>;

    /// Every live machine this cluster's kerf launched, as NodeClaims (for garbage
    /// collection of machines whose NodeClaim is gone).
    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>>;

    /// Every instance type `node_pool` may use, with its offerings. Types or offerings that
    /// are currently unavailable are still returned (with `available` false where the
    /// provider knows it), so prices stay known to consolidation.
    fn get_instance_types<'a>(
        &'a self,
        node_pool: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>>;

    /// The instance types, zones and prices this provider last refreshed from its cloud,
    /// which the controller's rounds and disruption passes plan with, so that planning and
    /// launching see the same catalog; `None` before its first refresh, or for a provider
    /// that never refreshes: the controller then plans with the embedded catalog of its
    /// region. Cheap (a shared snapshot, no I/O). Required, so that a wrapping provider
    /// cannot forget to forward it.
    fn catalog(&self) -> Option<Arc<CatalogSnapshot>>;

    /// Instances that may still launch into the capacity reservation `id`, as the provider
    /// last learnt it (EC2's count, less its launches since); `None` for a reservation it
    /// does not know, which the solves then treat as full. Cheap (no I/O). Required, like
    /// [`Self::catalog`], so that a wrapping provider forwards it.
    fn reservation_capacity(&self, id: &str) -> Option<u32>;

    /// Whether the machine behind `node_claim` drifted from its provider configuration
    /// (e.g. a newer AMI was selected); `None` when it did not.
    fn is_drifted<'a>(
        &'a self,
        node_claim: &'a NodeClaim,
    ) -> BoxFuture<'a, CloudResult<Option<DriftReason>>>;

    /// How this provider resolves EC2NodeClasses into their status, if it does: the
    /// controller's LaunchTemplateCache actor then keeps every node class's status, hash
    /// annotations and termination finalizer, as upstream's node class controllers do.
    fn node_class_reconciler(&self) -> Option<&dyn NodeClassReconciler> {
        None
    }

    /// How this provider tags the machines of registered NodeClaims, if it does (upstream's
    /// AWS tagging controller).
    fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
        None
    }
}

/// What resolving an EC2NodeClass against the cloud produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeClassResolution {
    /// The status the node class should have: subnets, security groups, AMIs, instance
    /// profile and the conditions (`SubnetsReady`, ..., `Ready`), each `False` or `Unknown`
    /// with a message saying what to fix.
    pub status: EC2NodeClassStatus,
    /// Annotations the node class must carry (the hash of its static fields and the hash
    /// version), merged over its others.
    pub annotations: BTreeMap<String, String>,
}

/// Resolves EC2NodeClasses for the controller (upstream's node class status, hash and
/// termination controllers call the same providers). A failing cloud call is not an error of
/// [`Self::resolve`]: it leaves the concerned condition `Unknown` with the error, so the
/// status says what is wrong; `Err` means no status could be computed at all.
pub trait NodeClassReconciler: Send + Sync {
    /// The status and annotations `node_class` should have now.
    fn resolve<'a>(
        &'a self,
        node_class: &'a EC2NodeClass,
    ) -> BoxFuture<'a, CloudResult<NodeClassResolution>>;

    /// Deletes what the provider created for the node class named `node_class` (launch
    /// templates, a managed instance profile); called once it is deleted and no NodeClaim
    /// uses it any more.
    fn forget<'a>(&'a self, node_class: &'a str) -> BoxFuture<'a, CloudResult<()>>;
}

/// Tags the machine of a registered NodeClaim.
pub trait InstanceTagger: Send + Sync {
    /// Tags the machine behind `node_claim` (which has `status.providerID` and
    /// `status.nodeName`) with `Name` = its node name, `karpenter.sh/nodeclaim` and the
    /// cluster name, leaving any of these keys the machine already carries as they are.
    /// [`CloudProviderError::NodeClaimNotFound`] once the machine is gone.
    fn tag_registered<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>>;
}

/// EC2's error for a spot launch in an account without the spot service-linked role, which
/// the caller may not create.
pub const SPOT_SLR_ERROR_CODE: &str = "AuthFailure.ServiceLinkedRoleCreationNotPermitted";
/// The `Launched=False` reason for it, as upstream.
pub const SPOT_SLR_REASON: &str = "SpotSLRCreationFailed";
/// The command the user runs once per account.
pub const SPOT_SLR_FIX: &str =
    "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com";

/// What the user reads when spot launches are blocked for want of the role.
pub fn spot_service_linked_role_message(node_claim: &str) -> String {
    format!(
        "Spot launches are blocked for nodeclaim {node_claim}: the account has no spot \
         service-linked role and this identity may not create it. Create it once with \
         `{SPOT_SLR_FIX}`, or grant iam:CreateServiceLinkedRole for spot.amazonaws.com"
    )
}

/// Why a NodeClaim drifted, as it appears in the `Drifted` condition's reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DriftReason(pub String);

impl DriftReason {
    /// The image the machine runs is no longer one the node class selects.
    pub const AMI_DRIFT: &str = "AMIDrift";
    /// The machine's subnet is no longer one the node class selects.
    pub const SUBNET_DRIFT: &str = "SubnetDrift";
    /// The machine's security groups differ from the node class's.
    pub const SECURITY_GROUP_DRIFT: &str = "SecurityGroupDrift";
    /// The node class's static fields changed since the NodeClaim was launched.
    pub const NODE_CLASS_DRIFT: &str = "NodeClassDrift";

    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DriftReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How long an offering that failed to launch stays unavailable (upstream's
/// `UnavailableOfferingsTTL`): long enough that the next rounds plan elsewhere, short enough
/// that capacity returning to the pool is used again soon.
pub const UNAVAILABLE_OFFERINGS_TTL: Duration = Duration::from_secs(180);

/// Records and answers which offerings may not be launched right now: offerings
/// (capacity type × instance type × zone), whole capacity types and subnets that recently
/// failed to launch. Writers are the launch paths (the AWS provider on fleet errors, the
/// controller's NodeClaim lifecycle on [`CloudProviderError::InsufficientCapacity`]); readers are
/// whoever lists instance types for a solve. Implementations are shared (`Arc<dyn ..>`) and
/// called concurrently, so every method takes `&self`.
pub trait UnavailableOfferings: Send + Sync {
    /// Whether the offering, its capacity type, or every one of `subnet_ids` (when there are
    /// any) is marked unavailable.
    fn is_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        subnet_ids: &[String],
    ) -> bool;
    /// Marks one offering unavailable; `reason` is the cloud's error code, for logs.
    fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str, reason: &str);
    /// Marks a whole capacity type unavailable (spot without its service-linked role).
    fn mark_capacity_type_unavailable(&self, capacity_type: &str);
    /// Marks a subnet unavailable (no free addresses).
    fn mark_subnet_unavailable(&self, subnet_id: &str);
    /// A number that changes whenever an entry affecting `instance_type` is added or
    /// expires, which caches of instance types key on to notice changes.
    fn seq_num(&self, instance_type: &str) -> u64;
}

/// An offering (capacity pool) a launch was refused for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingRef {
    pub capacity_type: String,
    pub instance_type: String,
    pub zone: String,
}

impl OfferingRef {
    pub fn new(capacity_type: &str, instance_type: &str, zone: &str) -> Self {
        Self {
            capacity_type: capacity_type.to_owned(),
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
        }
    }
}

impl fmt::Display for OfferingRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.capacity_type, self.instance_type, self.zone
        )
    }
}

/// A failed cloud provider call. The variants are the cases the controller handles
/// differently; their messages name the NodeClaim, machine or operation concerned.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CloudProviderError {
    /// No offering could be launched. `offerings` lists the pools the cloud refused for lack
    /// of capacity (the caller marks them unavailable for a while); it is empty when no
    /// compatible offering was available to try at all.
    #[error("insufficient capacity launching nodeclaim {node_claim}: {}", describe_offerings(.offerings))]
    InsufficientCapacity {
        node_claim: String,
        offerings: Vec<OfferingRef>,
    },
    /// The machine does not exist (never did, or is terminated).
    #[error("nodeclaim not found for providerID {provider_id:?}: {reason}")]
    NodeClaimNotFound { provider_id: String, reason: String },
    /// The cloud API rate-limited the call; retry with backoff.
    #[error("{operation} throttled: {message}")]
    Throttled { operation: String, message: String },
    /// The node class the NodeClaim points at is missing or not resolved yet.
    #[error("node class {node_class:?} not ready: {reason}")]
    NodeClassNotReady { node_class: String, reason: String },
    /// The launch failed for a reason other than capacity; `reason` is a CamelCase word for
    /// the NodeClaim's `Launched` condition (e.g. `InstanceTypeResolutionFailed`).
    #[error("launching nodeclaim {node_claim} failed ({reason}): {message}")]
    LaunchFailed {
        node_claim: String,
        reason: String,
        message: String,
    },
    /// A providerID that is not in the provider's format.
    #[error("invalid providerID {provider_id:?}: {reason}")]
    InvalidProviderId { provider_id: String, reason: String },
    /// Any other failure of a cloud API call.
    #[error("{operation} failed: {message}")]
    Other { operation: String, message: String },
    /// The controller's fence refused the write, or abandoned it in flight, because this
    /// replica does not lead: what it would have written is the leader's to write. Not a
    /// failure of the cloud: nothing is marked unavailable or recorded on the NodeClaim.
    #[error("{operation} {}: this replica does not hold the leader lease", if *.in_flight { "abandoned in flight" } else { "refused" })]
    NotLeader { operation: String, in_flight: bool },
}

impl CloudProviderError {
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(self, CloudProviderError::InsufficientCapacity { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, CloudProviderError::NodeClaimNotFound { .. })
    }

    /// Whether the write was refused or abandoned because this replica does not lead.
    pub fn is_not_leader(&self) -> bool {
        matches!(self, CloudProviderError::NotLeader { .. })
    }

    /// Whether retrying the same call later can succeed without anything else changing.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CloudProviderError::Throttled { .. } | CloudProviderError::Other { .. }
        )
    }

    /// The reason to record on the NodeClaim's `Launched=False` condition.
    pub fn condition_reason(&self) -> &str {
        match self {
            CloudProviderError::InsufficientCapacity { .. } => "InsufficientCapacity",
            CloudProviderError::NodeClaimNotFound { .. } => "NotFound",
            CloudProviderError::Throttled { .. } => "Throttled",
            CloudProviderError::NodeClassNotReady { .. } => "NodeClassNotReady",
            CloudProviderError::LaunchFailed { reason, .. } => reason,
            CloudProviderError::InvalidProviderId { .. } => "InvalidProviderID",
            CloudProviderError::Other { .. } => "LaunchFailed",
            CloudProviderError::NotLeader { .. } => "NotLeader",
        }
    }
}

fn describe_offerings(offerings: &[OfferingRef]) -> String {
    if offerings.is_empty() {
        return "no compatible offering is available".to_owned();
    }
    let listed: Vec<String> = offerings.iter().map(ToString::to_string).collect();
    format!("all offerings refused ({})", listed.join(", "))
}

/// Every offering of `instance_types` that `requirements` allow by instance type, zone,
/// zone id and capacity type: all that a launch under those requirements could have used.
/// What a refusal marks when the provider could not say which offerings it refused (it
/// found none it could try), so the next solves stop planning the same NodeClaim.
pub fn offerings_allowed(
    instance_types: &[Arc<InstanceType>],
    requirements: &Requirements,
) -> Vec<OfferingRef> {
    let allows = |key: &str, value: &str| requirements.get(key).is_none_or(|r| r.has(value));
    instance_types
        .iter()
        .filter(|it| allows(labels::INSTANCE_TYPE, &it.name))
        .flat_map(|it| it.offerings.iter().map(move |o| (it, o)))
        .filter(|(_, o)| {
            allows(labels::ZONE, &o.zone)
                && allows(labels::ZONE_ID, &o.zone_id)
                && allows(labels::CAPACITY_TYPE, o.capacity_type.as_str())
        })
        .map(|(it, o)| OfferingRef::new(o.capacity_type.as_str(), &it.name, &o.zone))
        .collect()
}

/// The providerID a launched NodeClaim carries; a NodeClaim without one was never launched
/// (or its launch was not recorded), which Delete cannot act on.
pub fn launched_provider_id(node_claim: &NodeClaim) -> CloudResult<&str> {
    node_claim
        .provider_id()
        .ok_or_else(|| CloudProviderError::InvalidProviderId {
            provider_id: String::new(),
            reason: format!("nodeclaim {} has no status.providerID", node_claim.name()),
        })
}

/// The name the Node of a just-launched NodeClaim is expected to register under, when the
/// provider knew it at launch (EC2's private DNS name, which EKS names its Nodes by): the
/// launch result carries it in `status.nodeName`. It is only a forecast — a custom DHCP
/// domain or hostname type names the Node otherwise — so callers use it for what may be
/// wrong at no cost (early pod nominations) and never write it as the NodeClaim's
/// `status.nodeName`, which registration sets from the Node that actually registers.
pub fn expected_node_name(launched: &NodeClaim) -> Option<&str> {
    launched
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|name| !name.is_empty())
}

/// The providerID scheme of AWS nodes.
pub const AWS_PROVIDER_ID_PREFIX: &str = "aws:///";

/// `aws:///<zone>/<instance-id>`, the providerID the kubelet of an EC2 instance registers.
pub fn aws_provider_id(zone: &str, instance_id: &str) -> String {
    format!("{AWS_PROVIDER_ID_PREFIX}{zone}/{instance_id}")
}

/// The parts of an AWS providerID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsProviderId<'a> {
    pub zone: &'a str,
    pub instance_id: &'a str,
}

/// Splits `aws:///<zone>/<instance-id>`; anything else is
/// [`CloudProviderError::InvalidProviderId`].
pub fn parse_aws_provider_id(provider_id: &str) -> CloudResult<AwsProviderId<'_>> {
    let invalid = |reason: &str| CloudProviderError::InvalidProviderId {
        provider_id: provider_id.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = provider_id
        .strip_prefix(AWS_PROVIDER_ID_PREFIX)
        .ok_or_else(|| invalid("expected aws:///<zone>/<instance-id>"))?;
    let (zone, instance_id) = rest
        .split_once('/')
        .ok_or_else(|| invalid("expected aws:///<zone>/<instance-id>"))?;
    if zone.is_empty() || instance_id.is_empty() || instance_id.contains('/') {
        return Err(invalid("expected aws:///<zone>/<instance-id>"));
    }
    if !instance_id.starts_with("i-") {
        return Err(invalid("instance id must start with \"i-\""));
    }
    Ok(AwsProviderId { zone, instance_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let id = aws_provider_id("us-east-1a", "i-0123456789abcdef0");
        assert_eq!(id, "aws:///us-east-1a/i-0123456789abcdef0");
        let parsed = parse_aws_provider_id(&id).expect("well-formed");
        assert_eq!(parsed.zone, "us-east-1a");
        assert_eq!(parsed.instance_id, "i-0123456789abcdef0");
    }

    #[test]
    fn malformed_provider_ids_are_named_in_the_error() {
        for bad in [
            "",
            "aws://us-east-1a/i-1",
            "aws:///i-1",
            "aws:///z/",
            "aws:///z/x",
            "gce:///z/i-1",
        ] {
            let err = parse_aws_provider_id(bad).expect_err(bad);
            assert!(
                matches!(err, CloudProviderError::InvalidProviderId { .. }),
                "{bad}"
            );
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn insufficient_capacity_lists_the_refused_offerings() {
        let err = CloudProviderError::InsufficientCapacity {
            node_claim: "default-abcde".into(),
            offerings: vec![
                OfferingRef::new("spot", "m5.large", "us-east-1a"),
                OfferingRef::new("spot", "m5.large", "us-east-1b"),
            ],
        };
        let text = err.to_string();
        assert!(text.contains("default-abcde"), "{text}");
        assert!(
            text.contains("spot/m5.large/us-east-1a, spot/m5.large/us-east-1b"),
            "{text}"
        );
        assert!(err.is_insufficient_capacity());
        assert_eq!(err.condition_reason(), "InsufficientCapacity");
    }

    #[test]
    fn only_transient_errors_are_retryable() {
        let throttled = CloudProviderError::Throttled {
            operation: "CreateFleet".into(),
            message: "RequestLimitExceeded".into(),
        };
        assert!(throttled.is_retryable());
        let not_found = CloudProviderError::NodeClaimNotFound {
            provider_id: "aws:///a/i-1".into(),
            reason: "terminated".into(),
        };
        assert!(!not_found.is_retryable());
        assert!(not_found.is_not_found());
        let fenced = CloudProviderError::NotLeader {
            operation: "Create".into(),
            in_flight: true,
        };
        assert!(!fenced.is_retryable() && fenced.is_not_leader());
        assert!(
            fenced.to_string().contains("abandoned in flight"),
            "{fenced}"
        );
    }

    #[test]
    fn offerings_allowed_follow_type_zone_and_capacity_type_requirements() {
        use crate::requirements::Requirement;
        let types: Vec<Arc<InstanceType>> = crate::catalog::Catalog::embedded("us-east-1")
            .expect("embedded region")
            .instance_types(&crate::catalog::AllocatableSettings::default())
            .into_iter()
            .filter(|it| it.name == "m5.large" || it.name == "c5.large")
            .map(Arc::new)
            .collect();
        let reqs: Requirements = [
            Requirement::in_values(labels::INSTANCE_TYPE, ["m5.large"]),
            Requirement::in_values(labels::ZONE, ["us-east-1a"]),
            Requirement::in_values(labels::CAPACITY_TYPE, ["spot"]),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            offerings_allowed(&types, &reqs),
            [OfferingRef::new("spot", "m5.large", "us-east-1a")]
        );
        let any_zone: Requirements = [Requirement::in_values(labels::INSTANCE_TYPE, ["c5.large"])]
            .into_iter()
            .collect();
        let all = offerings_allowed(&types, &any_zone);
        assert!(all.len() > 2, "every zone and capacity type: {all:?}");
        assert!(all.iter().all(|o| o.instance_type == "c5.large"));
    }

    /// The traits must stay usable as `Arc<dyn CloudProvider>` and
    /// `Arc<dyn UnavailableOfferings>`.
    #[test]
    fn trait_is_dyn_compatible() {
        fn takes(_: Option<Arc<dyn CloudProvider>>, _: Option<Arc<dyn UnavailableOfferings>>) {}
        takes(None, None);
    }
}
