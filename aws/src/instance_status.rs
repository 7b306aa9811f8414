//! EC2's status checks and scheduled events for kerf's instances (DescribeInstanceStatus),
//! read for the instance-health poller ([`kerf::interruption::instance_status`] decides what
//! they mean).
//!
//! Upstream asks EC2 for every impaired instance in the account with server-side filters
//! (`instance-status.status`, `system-status.status`, `event.code`), three paginated calls a
//! minute whatever the cluster's size. kerf names its own instances instead, up to
//! [`MAX_IDS_PER_REQUEST`] a request, and reads every status: the answer holds only the
//! cluster's instances (upstream drops other instances after the call), the decision stays
//! in one pure function, and moto, which implements none of those filters, answers it.
//! A page token, if EC2 sends one, is followed. EC2 fails a whole request when one ID names
//! no instance; that batch is then asked for one ID at a time, so one NodeClaim whose
//! instance vanished (garbage collection removes it within minutes) costs a few extra
//! calls instead of blinding the poller to every other instance.

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{InstanceStatusDetails, InstanceStatusEvent, InstanceStatusSummary};
use k8s_openapi::jiff::Timestamp;
use kerf::cloudprovider::BoxFuture;
use kerf::interruption::instance_status::{
    InstanceStatus, InstanceStatusSource, MAX_IDS_PER_REQUEST, ScheduledEvent, StatusCheck,
    StatusError,
};

use crate::errors::ApiError;

/// EC2's answers to a role without `ec2:DescribeInstanceStatus`.
const UNAUTHORIZED_CODES: [&str; 2] = ["UnauthorizedOperation", "AccessDenied"];

/// EC2's answers when an ID in the request names no instance (long terminated, or never).
const NOT_FOUND_CODES: [&str; 2] = ["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"];

/// DescribeInstanceStatus on one region's EC2.
#[derive(Clone, Debug)]
pub struct Ec2InstanceStatus {
    client: Client,
}

impl Ec2InstanceStatus {
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    async fn describe_all(&self, ids: &[String]) -> Result<Vec<InstanceStatus>, StatusError> {
        let mut statuses = Vec::new();
        for batch in ids.chunks(MAX_IDS_PER_REQUEST) {
            match self.describe_batch(batch).await {
                Ok(found) => statuses.extend(found),
                // One ID EC2 no longer knows fails the whole request: ask for each alone,
                // so a NodeClaim whose instance vanished does not blind the rest.
                Err(error) if is_not_found(&error) && batch.len() > 1 => {
                    for id in batch {
                        match self.describe_batch(std::slice::from_ref(id)).await {
                            Ok(found) => statuses.extend(found),
                            Err(error) if is_not_found(&error) => {}
                            Err(error) => return Err(status_error(error)),
                        }
                    }
                }
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Err(status_error(error)),
            }
        }
        Ok(statuses)
    }

    /// One request's worth of IDs, following the page token if EC2 sends one.
    async fn describe_batch(&self, ids: &[String]) -> Result<Vec<InstanceStatus>, ApiError> {
        let mut statuses = Vec::new();
        let mut token = None;
        loop {
            let output = self
                .client
                .describe_instance_status()
                .set_instance_ids(Some(ids.to_vec()))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| ApiError::from_sdk("DescribeInstanceStatus", e))?;
            statuses.extend(
                output
                    .instance_statuses
                    .unwrap_or_default()
                    .iter()
                    .filter_map(from_sdk),
            );
            token = output.next_token.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(statuses);
            }
        }
    }
}

fn is_not_found(error: &ApiError) -> bool {
    error
        .code
        .as_deref()
        .is_some_and(|c| NOT_FOUND_CODES.contains(&c))
}

impl InstanceStatusSource for Ec2InstanceStatus {
    fn describe<'a>(
        &'a self,
        instance_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceStatus>, StatusError>> {
        Box::pin(self.describe_all(instance_ids))
    }
}

fn status_error(error: ApiError) -> StatusError {
    let code = error.code.as_deref().unwrap_or_default();
    if UNAUTHORIZED_CODES.contains(&code) {
        StatusError::Unauthorized {
            reason: error.to_string(),
        }
    } else {
        StatusError::Describe {
            reason: error.to_string(),
        }
    }
}

/// The SDK's status as kerf reads it; `None` without an instance ID (EC2 always sends one).
pub fn from_sdk(status: &aws_sdk_ec2::types::InstanceStatus) -> Option<InstanceStatus> {
    Some(InstanceStatus {
        instance_id: status.instance_id.clone()?,
        instance_checks: checks(status.instance_status.as_ref()),
        system_checks: checks(status.system_status.as_ref()),
        events: status.events().iter().map(event).collect(),
    })
}

fn checks(summary: Option<&InstanceStatusSummary>) -> Vec<StatusCheck> {
    summary.map_or_else(Vec::new, |s| s.details().iter().map(check).collect())
}

fn check(details: &InstanceStatusDetails) -> StatusCheck {
    StatusCheck {
        name: details
            .name
            .as_ref()
            .map(|n| n.as_str().to_owned())
            .unwrap_or_default(),
        status: details
            .status
            .as_ref()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        impaired_since: details.impaired_since.as_ref().and_then(timestamp),
    }
}

fn event(event: &InstanceStatusEvent) -> ScheduledEvent {
    ScheduledEvent {
        code: event
            .code
            .as_ref()
            .map(|c| c.as_str().to_owned())
            .unwrap_or_default(),
        description: event.description.clone().unwrap_or_default(),
        not_before: event.not_before.as_ref().and_then(timestamp),
    }
}

fn timestamp(time: &aws_sdk_ec2::primitives::DateTime) -> Option<Timestamp> {
    Timestamp::new(time.secs(), i32::try_from(time.subsec_nanos()).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::primitives::DateTime;
    use aws_sdk_ec2::types::{
        EventCode, InstanceStatus as SdkStatus, StatusName, StatusType, SummaryStatus,
    };
    use kerf::interruption::instance_status::{Category, Remedy, assess};

    fn summary(status: StatusType, since: Option<i64>) -> InstanceStatusSummary {
        let mut details = InstanceStatusDetails::builder()
            .name(StatusName::Reachability)
            .status(status);
        if let Some(since) = since {
            details = details.impaired_since(DateTime::from_secs(since));
        }
        InstanceStatusSummary::builder()
            .status(SummaryStatus::Impaired)
            .details(details.build())
            .build()
    }

    /// What EC2 answers for an instance on a failed host with a retirement scheduled, built
    /// with the SDK's own types (moto reports every check as passed and no events).
    #[test]
    fn an_impaired_sdk_status_is_read_with_its_checks_times_and_events() {
        let sdk = SdkStatus::builder()
            .instance_id("i-0abc")
            .instance_status(summary(StatusType::Passed, None))
            .system_status(summary(StatusType::Failed, Some(1_764_000_000)))
            .events(
                InstanceStatusEvent::builder()
                    .code(EventCode::InstanceRetirement)
                    .description("The instance is running on degraded hardware")
                    .not_before(DateTime::from_secs(1_764_100_000))
                    .build(),
            )
            .build();
        let status = from_sdk(&sdk).expect("has an instance id");
        assert_eq!(status.instance_id, "i-0abc");
        assert_eq!(status.system_checks[0].status, "failed");
        assert_eq!(
            status.system_checks[0].impaired_since,
            Some(Timestamp::from_second(1_764_000_000).unwrap())
        );
        assert_eq!(status.events[0].code, "instance-retirement");
        let later = Timestamp::from_second(1_764_000_000 + 600).unwrap();
        let unhealthy = assess(&status, later).expect("impaired for ten minutes");
        assert_eq!(
            unhealthy.categories,
            vec![Category::SystemStatus, Category::EventStatus]
        );
        assert_eq!(unhealthy.remedy, Remedy::Terminate);
    }

    #[test]
    fn a_missing_permission_is_told_apart() {
        let denied = ApiError {
            operation: "DescribeInstanceStatus",
            code: Some("UnauthorizedOperation".into()),
            message: "You are not authorized to perform this operation.".into(),
        };
        let error = status_error(denied);
        assert!(matches!(error, StatusError::Unauthorized { .. }));
        assert!(error.to_string().contains("ec2:DescribeInstanceStatus"));
    }
}
