//! Classification of AWS API errors: which error codes mean "not found", "throttled" or
//! "capacity temporarily unavailable", how a CreateFleet error turns into unavailable-offering
//! entries (per offering, per capacity type, per subnet, as upstream Karpenter does), and the
//! `Launched` condition reason and message a failed launch reports. Everything here works on
//! codes and messages, so it is unit-tested without any AWS call; [`ApiError`] carries a
//! failed SDK call's operation, code and message to the callers that branch on them.

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use std::fmt::Debug;
use thiserror::Error;

/// EC2 and SSM error codes the provider branches on.
pub mod codes {
    pub const LAUNCH_TEMPLATE_NAME_NOT_FOUND: &str = "InvalidLaunchTemplateName.NotFoundException";
    pub const LAUNCH_TEMPLATE_ID_NOT_FOUND: &str = "InvalidLaunchTemplateId.NotFound";
    pub const LAUNCH_TEMPLATE_NAME_ALREADY_EXISTS: &str =
        "InvalidLaunchTemplateName.AlreadyExistsException";
    pub const INSTANCE_ID_NOT_FOUND: &str = "InvalidInstanceID.NotFound";
    pub const PARAMETER_NOT_FOUND: &str = "ParameterNotFound";
    pub const NO_SUCH_ENTITY: &str = "NoSuchEntity";
    pub const ENTITY_ALREADY_EXISTS: &str = "EntityAlreadyExists";
    pub const REQUEST_LIMIT_EXCEEDED: &str = "RequestLimitExceeded";
    pub const UNAUTHORIZED_OPERATION: &str = "UnauthorizedOperation";
    pub const DRY_RUN_OPERATION: &str = "DryRunOperation";
    pub const SPOT_SERVICE_LINKED_ROLE: &str = kerf::cloudprovider::SPOT_SLR_ERROR_CODE;
    pub const INSUFFICIENT_INSTANCE_CAPACITY: &str = "InsufficientInstanceCapacity";
    pub const INSUFFICIENT_FREE_ADDRESSES: &str = "InsufficientFreeAddressesInSubnet";
    pub const UNFULFILLABLE_CAPACITY: &str = "UnfulfillableCapacity";
    pub const MAX_SPOT_INSTANCE_COUNT_EXCEEDED: &str = "MaxSpotInstanceCountExceeded";
    pub const VCPU_LIMIT_EXCEEDED: &str = "VcpuLimitExceeded";
    pub const UNSUPPORTED: &str = "Unsupported";
    pub const MAX_FLEET_COUNT_EXCEEDED: &str = "MaxFleetCountExceeded";
    pub const RESERVATION_CAPACITY_EXCEEDED: &str = "ReservationCapacityExceeded";
    pub const IDEMPOTENT_PARAMETER_MISMATCH: &str = "IdempotentParameterMismatch";
}

/// Server-side failures after which a request may or may not have been carried out.
const SERVER_FAILURE_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
    "RequestTimeoutException",
];

/// What a failed CreateFleet says about whether it launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchAnswer {
    /// EC2 refused the request: nothing was launched.
    Refused,
    /// No answer (timeout, connection lost) or a server failure: it may have launched.
    Lost,
    /// The client token was used before with other parameters: that request may have
    /// launched.
    TokenReused,
}

/// Whether the failed CreateFleet `err` may have launched.
pub fn launch_answer(err: &ApiError) -> LaunchAnswer {
    match err.code.as_deref() {
        None => LaunchAnswer::Lost,
        Some(codes::IDEMPOTENT_PARAMETER_MISMATCH) => LaunchAnswer::TokenReused,
        Some(code) if SERVER_FAILURE_CODES.contains(&code) => LaunchAnswer::Lost,
        Some(_) => LaunchAnswer::Refused,
    }
}

pub use kerf::cloudprovider::{SPOT_SLR_FIX, spot_service_linked_role_message};

const NOT_FOUND_CODES: &[&str] = &[
    "InvalidCapacityReservationId.NotFound",
    codes::INSTANCE_ID_NOT_FOUND,
    codes::LAUNCH_TEMPLATE_NAME_NOT_FOUND,
    codes::LAUNCH_TEMPLATE_ID_NOT_FOUND,
    "QueueDoesNotExist",
    codes::NO_SUCH_ENTITY,
    codes::PARAMETER_NOT_FOUND,
];

/// Codes meaning the capacity asked for cannot be had right now (the pool, the account's
/// quota, or the subnet's addresses), so the offering should be skipped for a while.
const UNFULFILLABLE_CAPACITY_CODES: &[&str] = &[
    codes::INSUFFICIENT_INSTANCE_CAPACITY,
    codes::MAX_SPOT_INSTANCE_COUNT_EXCEEDED,
    codes::VCPU_LIMIT_EXCEEDED,
    codes::UNFULFILLABLE_CAPACITY,
    codes::UNSUPPORTED,
    codes::INSUFFICIENT_FREE_ADDRESSES,
    codes::MAX_FLEET_COUNT_EXCEEDED,
    codes::RESERVATION_CAPACITY_EXCEEDED,
];

/// Codes the SDK's standard retry strategy treats as throttling (and backs off on).
const THROTTLING_CODES: &[&str] = &[
    codes::REQUEST_LIMIT_EXCEEDED,
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestThrottled",
    "RequestThrottledException",
];

pub fn is_not_found_code(code: &str) -> bool {
    NOT_FOUND_CODES.contains(&code)
}

pub fn is_unfulfillable_capacity_code(code: &str) -> bool {
    UNFULFILLABLE_CAPACITY_CODES.contains(&code)
}

pub fn is_launch_template_not_found_code(code: &str) -> bool {
    code == codes::LAUNCH_TEMPLATE_NAME_NOT_FOUND || code == codes::LAUNCH_TEMPLATE_ID_NOT_FOUND
}

pub fn is_throttling_code(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// A failed AWS API call: which operation, the service's error code when it answered, and
/// the full message (including transport causes when it did not).
#[derive(Clone, Debug, Error, PartialEq)]
#[error("{operation} failed: {}{message}", code.as_deref().map(|c| format!("{c}: ")).unwrap_or_default())]
pub struct ApiError {
    pub operation: &'static str,
    pub code: Option<String>,
    pub message: String,
}

/// An error and its sources in their own words, `: `-joined (repeats dropped): one line. The
/// SDK's `DisplayErrorContext` ends with the whole error's debug dump, which is not for users.
fn display_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let words = cause.to_string();
        if !text.contains(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        source = cause.source();
    }
    text
}

impl ApiError {
    /// Captures an SDK error of any AWS service client.
    pub fn from_sdk<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: Debug,
    {
        let code = err.code().map(str::to_owned);
        let message = match err.message() {
            Some(m) => m.to_owned(),
            None => display_chain(&err),
        };
        Self {
            operation,
            code,
            message,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code.as_deref().is_some_and(is_not_found_code)
    }

    pub fn is_throttled(&self) -> bool {
        self.code.as_deref().is_some_and(is_throttling_code)
    }

    pub fn is_launch_template_not_found(&self) -> bool {
        self.code
            .as_deref()
            .is_some_and(is_launch_template_not_found_code)
    }

    pub fn is_already_exists(&self) -> bool {
        self.code.as_deref() == Some(codes::ENTITY_ALREADY_EXISTS)
    }

    /// The `code: message` text the reason classification reads.
    pub fn code_and_message(&self) -> String {
        match &self.code {
            Some(code) => format!("{code}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

/// The `Launched=False` condition reason and message for a failed launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchFailureReason {
    pub reason: &'static str,
    pub message: &'static str,
}

const fn reason(reason: &'static str, message: &'static str) -> LaunchFailureReason {
    LaunchFailureReason { reason, message }
}

/// Maps an AWS error text (`code: message`) to the condition reason upstream Karpenter
/// reports. Capacity errors are matched last so a mix of errors reports the specific one.
pub fn launch_failure_reason(text: &str) -> LaunchFailureReason {
    let has = |needle: &str| text.contains(needle);
    if has(codes::SPOT_SERVICE_LINKED_ROLE) {
        return reason(
            kerf::cloudprovider::SPOT_SLR_REASON,
            "User does not have sufficient permission to create the Spot ServiceLinkedRole to launch spot instances",
        );
    }
    if has("UnauthorizedOperation") || has("AccessDenied") || has("AuthFailure") {
        return unauthorized_reason(text);
    }
    if has("InvalidParameter") && has("belong to different networks") {
        return reason(
            "SecurityGroupSubnetVPCMismatch",
            "Security groups and subnets must be in the same VPC.",
        );
    }
    if has("iamInstanceProfile.name is invalid") {
        return reason(
            "InstanceProfileNameInvalid",
            "Instance profile name used from EC2NodeClass status does not exist",
        );
    }
    let ordered: &[(&str, LaunchFailureReason)] = &[
        (
            codes::LAUNCH_TEMPLATE_ID_NOT_FOUND,
            reason(
                "LaunchTemplateNotFound",
                "Launch template used for instance launch wasn't found",
            ),
        ),
        (
            codes::LAUNCH_TEMPLATE_NAME_NOT_FOUND,
            reason(
                "LaunchTemplateNotFound",
                "Launch template used for instance launch wasn't found",
            ),
        ),
        (
            "User data is limited to",
            reason(
                "UserDataSizeLimitExceeded",
                "Rendered user data exceeds the EC2 user data size limit",
            ),
        ),
        (
            "InvalidAMIID.Malformed",
            reason("InvalidAMIID", "AMI used for instance launch is invalid"),
        ),
        (
            "InvalidAMIID.NotFound",
            reason(
                "AMINotFound",
                "AMI used for instance launch either does not exist or you don't have permissions to use it",
            ),
        ),
        (
            codes::REQUEST_LIMIT_EXCEEDED,
            reason("RequestLimitExceeded", "Request limit exceeded"),
        ),
        (
            "InternalError",
            reason("InternalError", "An internal error has occurred"),
        ),
        (
            "not eligible for Free Tier",
            reason(
                "FreeTierIneligible",
                "The specified instance type is not eligible for Free Tier",
            ),
        ),
        (
            codes::MAX_FLEET_COUNT_EXCEEDED,
            reason(
                "FleetQuotaExceeded",
                "A fleet launch was requested but this would exceed your fleet request quota",
            ),
        ),
        (
            "PendingVerification",
            reason(
                "AccountPendingVerification",
                "An instance launch was requested but the request for launching resources in this region is still being verified",
            ),
        ),
        (
            codes::MAX_SPOT_INSTANCE_COUNT_EXCEEDED,
            reason(
                "SpotQuotaExceeded",
                "A spot instance launch was requested but this would exceed your spot instance quota",
            ),
        ),
        (
            codes::VCPU_LIMIT_EXCEEDED,
            reason(
                "VCPULimitExceeded",
                "An instance was requested that would exceed your VCPU quota",
            ),
        ),
        (
            codes::INSUFFICIENT_FREE_ADDRESSES,
            reason(
                "InsufficientFreeAddressesInSubnet",
                "There are not enough free IP addresses to launch an instance in this subnet",
            ),
        ),
    ];
    ordered
        .iter()
        .find(|(needle, _)| has(needle))
        .map(|(_, r)| *r)
        .unwrap_or(reason("LaunchFailed", "Instance launch failed"))
}

fn unauthorized_reason(text: &str) -> LaunchFailureReason {
    if text.contains("with an explicit deny in a permissions boundary") {
        return reason(
            "Unauthorized",
            "User is not authorized to perform this operation due to a permission boundary",
        );
    }
    if text.contains("with an explicit deny in a service control policy") {
        return reason(
            "Unauthorized",
            "User is not authorized to perform this operation due to a service control policy",
        );
    }
    if text.contains("Not authorized for images") {
        return reason(
            "AMIAuthorizationFailure",
            "User is not authorized for AMI used in instance launch",
        );
    }
    reason(
        "Unauthorized",
        "User is not authorized to perform this operation because no identity-based policy allows it",
    )
}

/// One entry of a CreateFleet response's `Errors`, reduced to what classification needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetError {
    pub code: String,
    pub message: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub subnet_id: Option<String>,
}

impl From<&aws_sdk_ec2::types::CreateFleetError> for FleetError {
    fn from(err: &aws_sdk_ec2::types::CreateFleetError) -> Self {
        let overrides = err
            .launch_template_and_overrides()
            .and_then(|lt| lt.overrides());
        Self {
            code: err.error_code().unwrap_or_default().to_owned(),
            message: err.error_message().unwrap_or_default().to_owned(),
            instance_type: overrides
                .and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_owned()),
            zone: overrides
                .and_then(|o| o.availability_zone())
                .map(str::to_owned),
            subnet_id: overrides.and_then(|o| o.subnet_id()).map(str::to_owned),
        }
    }
}

/// What a CreateFleet error tells the unavailable-offerings cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetErrorAction {
    /// This instance type in this zone for this capacity type cannot be launched for now.
    MarkOfferingUnavailable {
        instance_type: String,
        zone: String,
        capacity_type: String,
        reason: String,
    },
    /// The subnet ran out of free addresses: every offering launched through it is skipped.
    MarkSubnetUnavailable { subnet_id: String },
    /// The account cannot create the spot service-linked role: no spot launches at all
    /// until the user creates it.
    BlockSpot,
}

/// Classifies one CreateFleet error for a launch of `capacity_type`. A subnet out of
/// addresses is marked as a subnet and, being a capacity error too, as an offering.
pub fn classify_fleet_error(err: &FleetError, capacity_type: &str) -> Vec<FleetErrorAction> {
    let mut actions = Vec::new();
    if err.code == codes::INSUFFICIENT_FREE_ADDRESSES
        && let Some(subnet_id) = err.subnet_id.as_ref().filter(|s| !s.is_empty())
    {
        actions.push(FleetErrorAction::MarkSubnetUnavailable {
            subnet_id: subnet_id.clone(),
        });
    }
    if is_unfulfillable_capacity_code(&err.code)
        && let (Some(instance_type), Some(zone)) = (&err.instance_type, &err.zone)
    {
        actions.push(FleetErrorAction::MarkOfferingUnavailable {
            instance_type: instance_type.clone(),
            zone: zone.clone(),
            capacity_type: capacity_type.to_owned(),
            reason: err.code.clone(),
        });
    }
    if err.code == codes::SPOT_SERVICE_LINKED_ROLE {
        actions.push(FleetErrorAction::BlockSpot);
    }
    actions
}

/// Why a CreateFleet call that launched nothing failed, classified as upstream does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetFailure {
    /// Every error is an unfulfillable-capacity one (or EC2 gave none): try other offerings.
    Capacity,
    /// A transient error (throttling, EC2's internal errors): the same call may succeed later.
    Retryable { code: String, message: String },
    /// EC2 refused the request itself (an invalid parameter or block device mapping, an
    /// unusable KMS key, a missing permission): retrying changes nothing until the user
    /// fixes the EC2NodeClass or the account. `code` is EC2's first such code.
    Unrecoverable { code: String, message: String },
}

/// Codes worth retrying as they are.
const RETRYABLE_FLEET_CODES: &[&str] = &[
    codes::REQUEST_LIMIT_EXCEEDED,
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
];

/// Classifies the errors of a CreateFleet call that launched nothing; the message lists each
/// distinct code with one of its messages ([`combine_fleet_errors`]).
pub fn fleet_failure(errors: &[FleetError]) -> FleetFailure {
    let Some(other) = errors
        .iter()
        .find(|e| !is_unfulfillable_capacity_code(&e.code))
    else {
        return FleetFailure::Capacity;
    };
    let code = other.code.clone();
    let message = combine_fleet_errors(errors);
    if RETRYABLE_FLEET_CODES.contains(&code.as_str()) {
        FleetFailure::Retryable { code, message }
    } else {
        FleetFailure::Unrecoverable { code, message }
    }
}

/// A combined error for a CreateFleet call that launched nothing, listing each distinct
/// code with one of its messages.
pub fn combine_fleet_errors(errors: &[FleetError]) -> String {
    if errors.is_empty() {
        return "CreateFleet launched no instance and returned no error".to_owned();
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut parts = Vec::new();
    for err in errors {
        if seen.contains(&err.code.as_str()) {
            continue;
        }
        seen.push(&err.code);
        parts.push(format!("{}: {}", err.code, err.message));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet_err(code: &str) -> FleetError {
        FleetError {
            code: code.to_owned(),
            message: "msg".to_owned(),
            instance_type: Some("m5.large".to_owned()),
            zone: Some("us-east-1a".to_owned()),
            subnet_id: Some("subnet-1".to_owned()),
        }
    }

    #[test]
    fn capacity_codes_mark_the_offering_for_its_capacity_type() {
        for code in [
            "InsufficientInstanceCapacity",
            "UnfulfillableCapacity",
            "MaxSpotInstanceCountExceeded",
            "VcpuLimitExceeded",
            "Unsupported",
            "MaxFleetCountExceeded",
        ] {
            let actions = classify_fleet_error(&fleet_err(code), "spot");
            assert_eq!(
                actions,
                vec![FleetErrorAction::MarkOfferingUnavailable {
                    instance_type: "m5.large".into(),
                    zone: "us-east-1a".into(),
                    capacity_type: "spot".into(),
                    reason: code.into(),
                }],
                "{code}"
            );
        }
    }

    #[test]
    fn free_address_exhaustion_marks_the_subnet_and_the_offering() {
        let actions =
            classify_fleet_error(&fleet_err("InsufficientFreeAddressesInSubnet"), "on-demand");
        assert_eq!(
            actions[0],
            FleetErrorAction::MarkSubnetUnavailable {
                subnet_id: "subnet-1".into()
            }
        );
        assert!(matches!(
            &actions[1],
            FleetErrorAction::MarkOfferingUnavailable { capacity_type, .. } if capacity_type == "on-demand"
        ));
    }

    #[test]
    fn missing_spot_service_linked_role_blocks_spot() {
        let actions = classify_fleet_error(
            &fleet_err("AuthFailure.ServiceLinkedRoleCreationNotPermitted"),
            "spot",
        );
        assert_eq!(actions, vec![FleetErrorAction::BlockSpot]);
        let message = spot_service_linked_role_message("default-abc");
        assert!(
            message.contains(
                "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"
            )
        );
        assert!(message.contains("default-abc"));
    }

    #[test]
    fn other_fleet_errors_change_nothing() {
        assert!(classify_fleet_error(&fleet_err("InvalidParameterValue"), "spot").is_empty());
        let mut no_zone = fleet_err("InsufficientInstanceCapacity");
        no_zone.zone = None;
        assert!(classify_fleet_error(&no_zone, "spot").is_empty());
    }

    #[test]
    fn code_sets() {
        assert!(is_not_found_code("InvalidInstanceID.NotFound"));
        assert!(is_not_found_code("ParameterNotFound"));
        assert!(!is_not_found_code("InsufficientInstanceCapacity"));
        assert!(is_launch_template_not_found_code(
            "InvalidLaunchTemplateName.NotFoundException"
        ));
        assert!(is_launch_template_not_found_code(
            "InvalidLaunchTemplateId.NotFound"
        ));
        assert!(is_throttling_code("RequestLimitExceeded"));
        assert!(!is_unfulfillable_capacity_code("RequestLimitExceeded"));
    }

    #[test]
    fn launch_failure_reasons_follow_upstream_precedence() {
        let r = |t: &str| launch_failure_reason(t).reason;
        assert_eq!(
            r("AuthFailure.ServiceLinkedRoleCreationNotPermitted: x"),
            "SpotSLRCreationFailed"
        );
        assert_eq!(r("UnauthorizedOperation: nope"), "Unauthorized");
        assert_eq!(
            launch_failure_reason(
                "UnauthorizedOperation: with an explicit deny in a service control policy"
            )
            .message,
            "User is not authorized to perform this operation due to a service control policy"
        );
        assert_eq!(
            r("AuthFailure: Not authorized for images: [ami-1]"),
            "AMIAuthorizationFailure"
        );
        assert_eq!(
            r("InvalidParameter: security group and subnet belong to different networks"),
            "SecurityGroupSubnetVPCMismatch"
        );
        assert_eq!(
            r("InvalidLaunchTemplateName.NotFoundException: gone"),
            "LaunchTemplateNotFound"
        );
        assert_eq!(r("InvalidAMIID.NotFound: ami-1"), "AMINotFound");
        assert_eq!(r("RequestLimitExceeded: slow down"), "RequestLimitExceeded");
        // A specific error wins over capacity errors reported alongside it.
        assert_eq!(
            r("VcpuLimitExceeded: a; InvalidAMIID.Malformed: b"),
            "InvalidAMIID"
        );
        assert_eq!(
            r("MaxSpotInstanceCountExceeded: quota"),
            "SpotQuotaExceeded"
        );
        assert_eq!(r("VcpuLimitExceeded: quota"), "VCPULimitExceeded");
        assert_eq!(
            r("InsufficientFreeAddressesInSubnet: none"),
            "InsufficientFreeAddressesInSubnet"
        );
        assert!(
            launch_failure_reason("InsufficientFreeAddressesInSubnet: none")
                .message
                .contains(kerf::troubleshooting::documented("subnet-full"))
        );
        assert_eq!(r("something else"), "LaunchFailed");
    }

    #[test]
    fn a_fleet_that_launched_nothing_is_capacity_only_when_every_error_is() {
        let with_message = |code: &str, message: &str| FleetError {
            message: message.to_owned(),
            ..fleet_err(code)
        };
        assert_eq!(fleet_failure(&[]), FleetFailure::Capacity);
        assert_eq!(
            fleet_failure(&[
                fleet_err(codes::INSUFFICIENT_INSTANCE_CAPACITY),
                fleet_err(codes::UNFULFILLABLE_CAPACITY)
            ]),
            FleetFailure::Capacity
        );
        let refused = fleet_failure(&[
            fleet_err(codes::INSUFFICIENT_INSTANCE_CAPACITY),
            with_message(
                "InvalidBlockDeviceMapping",
                "The device /dev/xvdb is invalid",
            ),
        ]);
        let FleetFailure::Unrecoverable { code, message } = refused else {
            panic!("{refused:?}")
        };
        assert_eq!(code, "InvalidBlockDeviceMapping");
        assert!(message.contains("InvalidBlockDeviceMapping: The device /dev/xvdb is invalid"));
        assert!(
            message.contains(codes::INSUFFICIENT_INSTANCE_CAPACITY),
            "{message}"
        );
        assert!(matches!(
            fleet_failure(&[fleet_err(codes::REQUEST_LIMIT_EXCEEDED)]),
            FleetFailure::Retryable { .. }
        ));
    }

    #[test]
    fn combined_fleet_errors_list_each_code_once() {
        let errors = vec![
            fleet_err("InsufficientInstanceCapacity"),
            fleet_err("InsufficientInstanceCapacity"),
            fleet_err("VcpuLimitExceeded"),
        ];
        assert_eq!(
            combine_fleet_errors(&errors),
            "InsufficientInstanceCapacity: msg; VcpuLimitExceeded: msg"
        );
    }

    #[test]
    fn a_launch_may_have_happened_unless_ec2_refused_it() {
        let err = |code: Option<&str>| ApiError {
            operation: "CreateFleet",
            code: code.map(str::to_owned),
            message: "m".into(),
        };
        assert_eq!(launch_answer(&err(None)), LaunchAnswer::Lost);
        assert_eq!(
            launch_answer(&err(Some("InternalError"))),
            LaunchAnswer::Lost
        );
        assert_eq!(
            launch_answer(&err(Some("IdempotentParameterMismatch"))),
            LaunchAnswer::TokenReused
        );
        assert_eq!(
            launch_answer(&err(Some("RequestLimitExceeded"))),
            LaunchAnswer::Refused
        );
        assert_eq!(
            launch_answer(&err(Some("InvalidLaunchTemplateName.NotFoundException"))),
            LaunchAnswer::Refused
        );
    }
}
