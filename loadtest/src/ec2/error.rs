//! Errors the simulated EC2 API returns, named after the real EC2 error codes so callers
//! (the simulated cloud provider) branch on them as they would on AWS's.

use thiserror::Error;

/// A failed simulated EC2 call. `code()` gives the EC2 error code string.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Ec2Error {
    /// Injected throttling: the call was rejected before doing anything.
    #[error("{operation}: RequestLimitExceeded: Request limit exceeded.")]
    RequestLimitExceeded { operation: &'static str },
    /// One of the named instances does not exist.
    #[error(
        "{operation}: InvalidInstanceID.NotFound: The instance ID '{instance_id}' does not exist"
    )]
    InstanceNotFound {
        operation: &'static str,
        instance_id: String,
    },
    /// An instance id that is not `i-` followed by hex digits.
    #[error("{operation}: InvalidInstanceID.Malformed: Invalid id: \"{instance_id}\"")]
    MalformedInstanceId {
        operation: &'static str,
        instance_id: String,
    },
    /// A request EC2 would reject as a whole (no overrides, zero capacity, no capacity type).
    #[error("{operation}: InvalidParameterValue: {message}")]
    InvalidParameter {
        operation: &'static str,
        message: String,
    },
    /// An injected server-side failure: EC2's `InternalError`, which callers retry. With
    /// `after_launch` the call did its work before failing (a lost answer, as a timed-out
    /// request whose launch went through).
    #[error("{operation}: InternalError: An internal error has occurred{}", if *.after_launch { " (the request was carried out)" } else { "" })]
    Internal {
        operation: &'static str,
        after_launch: bool,
    },
    /// A client token EC2 has answered, repeated with other parameters.
    #[error(
        "{operation}: IdempotentParameterMismatch: client token {client_token} was used with other parameters"
    )]
    IdempotentParameterMismatch {
        operation: &'static str,
        client_token: String,
    },
    /// Interruption requested for an instance that is not a running spot instance.
    #[error("cannot interrupt {instance_id}: {reason}")]
    NotInterruptible { instance_id: String, reason: String },
}

impl Ec2Error {
    /// The EC2 error code (`RequestLimitExceeded`, `InvalidInstanceID.NotFound`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            Ec2Error::RequestLimitExceeded { .. } => "RequestLimitExceeded",
            Ec2Error::InstanceNotFound { .. } => "InvalidInstanceID.NotFound",
            Ec2Error::MalformedInstanceId { .. } => "InvalidInstanceID.Malformed",
            Ec2Error::InvalidParameter { .. } => "InvalidParameterValue",
            Ec2Error::Internal { .. } => "InternalError",
            Ec2Error::IdempotentParameterMismatch { .. } => "IdempotentParameterMismatch",
            Ec2Error::NotInterruptible { .. } => "IncorrectInstanceState",
        }
    }

    pub fn is_throttle(&self) -> bool {
        matches!(self, Ec2Error::RequestLimitExceeded { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Ec2Error::InstanceNotFound { .. })
    }
}

/// A fault-injection setting that makes no sense (e.g. a throttle fraction outside 0..=1).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Ec2ConfigError {
    #[error("throttle fraction must be between 0 and 1, got {0}")]
    ThrottleFraction(f64),
}
