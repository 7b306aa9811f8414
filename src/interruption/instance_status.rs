//! Instance health from EC2's status checks, as upstream's AWS provider polls them
//! (DescribeInstanceStatus, once a minute: no EventBridge rule or queue carries them): the
//! *instance* check (the guest), the *system* check (the host) and scheduled events.
//!
//! This module is the pure half: the statuses as the [`InstanceStatusSource`] returns them
//! (the AWS provider, the simulated EC2) and [`assess`], which decides, as upstream:
//! - a failed instance or system check counts once impaired for [`UNHEALTHY_THRESHOLD`] (EC2
//!   flaps while an instance boots); the instance is then terminated forcefully, since a
//!   drain onto a broken machine cannot finish;
//! - a scheduled event (reboot, maintenance, retirement, stop) counts at once, the host being
//!   known bad: the instance is cordoned and drained; `[Completed]` or `[Canceled]` ones are
//!   over;
//! - EBS volume checks are ignored: a failed volume may be a pod's, not the node's.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use thiserror::Error;

use crate::cloudprovider::BoxFuture;

/// How long a check must have failed before the instance counts as impaired (upstream's).
pub const UNHEALTHY_THRESHOLD: Duration = Duration::from_secs(120);

/// The most instance IDs one DescribeInstanceStatus request may name (EC2's limit).
pub const MAX_IDS_PER_REQUEST: usize = 100;

/// The scheduled-event codes that mean the instance must go (upstream's filter).
pub const DISRUPTIVE_EVENT_CODES: [&str; 5] = [
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
];

/// Which status check found the instance unhealthy: upstream's `category` label values of
/// `karpenter_interruption_instance_status_unhealthy_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    InstanceStatus,
    SystemStatus,
    EventStatus,
}

impl Category {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InstanceStatus => "InstanceStatus",
            Self::SystemStatus => "SystemStatus",
            Self::EventStatus => "EventStatus",
        }
    }

    /// The message kind (`karpenter_nodeclaims_disrupted_total{reason}`, logs).
    pub fn kind(self) -> &'static str {
        match self {
            Self::InstanceStatus => "instance_status",
            Self::SystemStatus => "system_status",
            Self::EventStatus => "event_status",
        }
    }
}

/// One detail of an instance or system check (EC2's `InstanceStatusDetails`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusCheck {
    /// `reachability`.
    pub name: String,
    /// `passed`, `failed`, `insufficient-data` or `initializing`.
    pub status: String,
    /// When the check started failing; EC2 sets it only on a failed check.
    pub impaired_since: Option<Timestamp>,
}

/// One maintenance event EC2 scheduled for the instance (EC2's `InstanceStatusEvent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledEvent {
    /// `instance-reboot`, `system-maintenance`, `instance-retirement`, ...
    pub code: String,
    /// EC2 prefixes it with `[Completed]` or `[Canceled]` once the event is over.
    pub description: String,
    pub not_before: Option<Timestamp>,
}

/// What DescribeInstanceStatus says about one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceStatus {
    pub instance_id: String,
    pub instance_checks: Vec<StatusCheck>,
    pub system_checks: Vec<StatusCheck>,
    pub events: Vec<ScheduledEvent>,
}

/// What an unhealthy instance needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy {
    /// Its checks failed: terminate it now, without waiting for a drain.
    Terminate,
    /// EC2 scheduled an event for it: cordon and drain it before the event.
    Drain,
}

/// An instance that needs replacing, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    pub instance_id: String,
    /// Every category that found it unhealthy, in [`Category`] order.
    pub categories: Vec<Category>,
    pub remedy: Remedy,
}

/// What `status` means at `now`: `None` for a healthy instance.
pub fn assess(status: &InstanceStatus, now: Timestamp) -> Option<Unhealthy> {
    let impaired = |checks: &[StatusCheck]| checks.iter().any(|c| failed_long_enough(c, now));
    let mut categories = Vec::new();
    if impaired(&status.instance_checks) {
        categories.push(Category::InstanceStatus);
    }
    if impaired(&status.system_checks) {
        categories.push(Category::SystemStatus);
    }
    let checks_failed = !categories.is_empty();
    if status.events.iter().any(is_disruptive) {
        categories.push(Category::EventStatus);
    }
    if categories.is_empty() {
        return None;
    }
    Some(Unhealthy {
        instance_id: status.instance_id.clone(),
        categories,
        remedy: if checks_failed {
            Remedy::Terminate
        } else {
            Remedy::Drain
        },
    })
}

fn failed_long_enough(check: &StatusCheck, now: Timestamp) -> bool {
    if check.status != "failed" {
        return false;
    }
    // A failed check without a start time has been failing for as long as anyone knows.
    check.impaired_since.is_none_or(|since| {
        now.duration_since(since)
            .try_into()
            .is_ok_and(|failing: Duration| failing >= UNHEALTHY_THRESHOLD)
    })
}

fn is_disruptive(event: &ScheduledEvent) -> bool {
    let over =
        event.description.starts_with("[Completed]") || event.description.starts_with("[Canceled]");
    !over && DISRUPTIVE_EVENT_CODES.contains(&event.code.as_str())
}

/// Why the statuses could not be read.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum StatusError {
    #[error(
        "describing instance status: ec2:DescribeInstanceStatus is not allowed; add it to the controller's IAM policy: {reason}"
    )]
    Unauthorized { reason: String },
    #[error("describing instance status: {reason}")]
    Describe { reason: String },
}

/// Where instance statuses come from: EC2 in a real cluster, the simulated EC2 in the
/// simulated one. Safe to call concurrently.
pub trait InstanceStatusSource: Send + Sync {
    /// The statuses of the running instances among `instance_ids`, in as many requests as
    /// the API needs ([`MAX_IDS_PER_REQUEST`] IDs each, following its pagination); an
    /// instance that is not running, or not found, is left out.
    fn describe<'a>(
        &'a self,
        instance_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceStatus>, StatusError>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff;

    fn now() -> Timestamp {
        "2026-11-25T12:00:00Z".parse().unwrap()
    }

    fn check(status: &str, failing_for: Option<i64>) -> StatusCheck {
        StatusCheck {
            name: "reachability".into(),
            status: status.into(),
            impaired_since: failing_for.map(|s| now() - jiff::SignedDuration::from_secs(s)),
        }
    }

    fn event(code: &str, description: &str) -> ScheduledEvent {
        ScheduledEvent {
            code: code.into(),
            description: description.into(),
            not_before: Some(now() + jiff::SignedDuration::from_hours(72)),
        }
    }

    fn status() -> InstanceStatus {
        InstanceStatus {
            instance_id: "i-1".into(),
            instance_checks: vec![check("passed", None)],
            system_checks: vec![check("passed", None)],
            events: vec![],
        }
    }

    #[test]
    fn passing_and_initializing_checks_are_healthy() {
        assert_eq!(assess(&status(), now()), None);
        let booting = InstanceStatus {
            instance_checks: vec![check("initializing", None)],
            system_checks: vec![check("insufficient-data", None)],
            ..status()
        };
        assert_eq!(assess(&booting, now()), None);
    }

    #[test]
    fn a_failed_check_counts_only_after_two_minutes() {
        let young = InstanceStatus {
            system_checks: vec![check("failed", Some(119))],
            ..status()
        };
        assert_eq!(assess(&young, now()), None);
        let old = InstanceStatus {
            system_checks: vec![check("failed", Some(120))],
            ..status()
        };
        let unhealthy = assess(&old, now()).expect("impaired for two minutes");
        assert_eq!(unhealthy.categories, vec![Category::SystemStatus]);
        assert_eq!(unhealthy.remedy, Remedy::Terminate);
        let undated = InstanceStatus {
            instance_checks: vec![check("failed", None)],
            ..status()
        };
        assert_eq!(
            assess(&undated, now()).map(|u| u.categories),
            Some(vec![Category::InstanceStatus])
        );
    }

    #[test]
    fn a_scheduled_event_drains_at_once_unless_it_is_over_or_harmless() {
        let scheduled = InstanceStatus {
            events: vec![event(
                "instance-retirement",
                "The instance is running on degraded hardware",
            )],
            ..status()
        };
        let unhealthy = assess(&scheduled, now()).expect("retirement scheduled");
        assert_eq!(unhealthy.categories, vec![Category::EventStatus]);
        assert_eq!(unhealthy.remedy, Remedy::Drain);
        for over in [
            "[Completed] Scheduled reboot",
            "[Canceled] Scheduled reboot",
        ] {
            let done = InstanceStatus {
                events: vec![event("system-reboot", over)],
                ..status()
            };
            assert_eq!(assess(&done, now()), None, "{over}");
        }
        let unknown = InstanceStatus {
            events: vec![event("network-maintenance", "future code")],
            ..status()
        };
        assert_eq!(assess(&unknown, now()), None);
    }

    #[test]
    fn failed_checks_and_an_event_terminate_and_report_every_category() {
        let both = InstanceStatus {
            instance_checks: vec![check("failed", Some(600))],
            system_checks: vec![check("failed", Some(600))],
            events: vec![event("system-maintenance", "Scheduled maintenance")],
            ..status()
        };
        let unhealthy = assess(&both, now()).expect("unhealthy");
        assert_eq!(
            unhealthy.categories,
            vec![
                Category::InstanceStatus,
                Category::SystemStatus,
                Category::EventStatus
            ]
        );
        assert_eq!(unhealthy.remedy, Remedy::Terminate);
    }
}
