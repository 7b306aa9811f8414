//! The events upstream Karpenter publishes that kerf's actors raise, with upstream's
//! reasons, messages, types and de-duplication, so `kubectl describe` and alerting on event
//! reasons read the same: on pods, `FailedScheduling` when a solve cannot place them and
//! `Nominated` when a new NodeClaim is created for them; on NodeClaims, the launch failures
//! `InsufficientCapacityError` and `NodeClassNotReady`.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kerf::api::NodeClaim;
use kerf::labels;
use kerf::scheduling::PodRef;

use super::{Dedupe, Event, EventType, Throttle};

pub const FAILED_SCHEDULING: &str = "FailedScheduling";
pub const NOMINATED: &str = "Nominated";
pub const INSUFFICIENT_CAPACITY_ERROR: &str = "InsufficientCapacityError";
pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
/// A launch failed for a reason other than capacity or the node class (kerf's; upstream
/// records it on the `Launched` condition only).
pub const LAUNCH_FAILED: &str = "LaunchFailed";
/// A launched machine did not register a Node within the registration TTL (kerf's).
pub const REGISTRATION_TIMEOUT: &str = "RegistrationTimeout";

/// Upstream de-duplicates scheduling failures for longer than other events: a pod stays
/// unschedulable across many batches, and one warning per five minutes is enough.
pub const FAILED_SCHEDULING_DEDUPE: Duration = Duration::from_secs(5 * 60);
/// Upstream's default de-duplication timeout.
pub const DEFAULT_DEDUPE: Duration = Duration::from_secs(2 * 60);

/// Launch errors can carry long offering lists; upstream shortens them on NodeClaim events.
const MAX_LAUNCH_ERROR_CHARS: usize = 300;

/// The pod in a scheduling result, as an event's subject.
pub fn pod_reference(pod: &PodRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: Some(pod.uid.clone()).filter(|u| !u.is_empty()),
        ..ObjectReference::default()
    }
}

/// A NodeClaim as an event's subject.
pub fn node_claim_reference(claim: &NodeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{}/v1", labels::GROUP)),
        kind: Some("NodeClaim".to_owned()),
        name: Some(claim.name().to_owned()),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// The solve could not place `pod`, for `reason`.
pub fn pod_failed_to_schedule(pod: &PodRef, reason: &str) -> Event {
    Event {
        regarding: pod_reference(pod),
        type_: EventType::Warning,
        reason: FAILED_SCHEDULING,
        message: format!("Failed to schedule pod, {reason}"),
        dedupe: Some(Dedupe {
            values: vec![pod.uid.clone()],
            timeout: FAILED_SCHEDULING_DEDUPE,
        }),
        throttle: None,
    }
}

/// `pod` should land on the new NodeClaim `node_claim`.
pub fn nominate_pod(pod: &PodRef, node_claim: &str) -> Event {
    Event {
        regarding: pod_reference(pod),
        type_: EventType::Normal,
        reason: NOMINATED,
        message: format!("Pod should schedule on: nodeclaim/{node_claim}"),
        dedupe: Some(Dedupe {
            values: vec![pod.uid.clone()],
            timeout: DEFAULT_DEDUPE,
        }),
        throttle: Some(Throttle::PodNomination),
    }
}

/// No offering could be launched for `claim`.
pub fn insufficient_capacity(claim: &NodeClaim, error: &impl std::fmt::Display) -> Event {
    launch_failure(claim, INSUFFICIENT_CAPACITY_ERROR, error)
}

/// `claim`'s node class is missing or not ready.
pub fn node_class_not_ready(claim: &NodeClaim, error: &impl std::fmt::Display) -> Event {
    launch_failure(claim, NODE_CLASS_NOT_READY, error)
}

/// `claim`'s launch failed for a reason other than capacity or its node class; the message
/// carries the provider's error (EC2's code and message).
pub fn launch_failed(claim: &NodeClaim, error: &impl std::fmt::Display) -> Event {
    launch_failure(claim, LAUNCH_FAILED, error)
}

/// `claim`'s machine never registered a Node; `message` says what to check.
pub fn registration_timeout(claim: &NodeClaim, message: &str) -> Event {
    launch_failure(claim, REGISTRATION_TIMEOUT, &message)
}

fn launch_failure(
    claim: &NodeClaim,
    reason: &'static str,
    error: &impl std::fmt::Display,
) -> Event {
    Event {
        regarding: node_claim_reference(claim),
        type_: EventType::Warning,
        reason,
        message: format!(
            "NodeClaim {} event: {}",
            claim.name(),
            truncate(&error.to_string(), MAX_LAUNCH_ERROR_CHARS)
        ),
        dedupe: Some(Dedupe {
            values: vec![claim.metadata.uid.clone().unwrap_or_default()],
            timeout: DEFAULT_DEDUPE,
        }),
        throttle: None,
    }
}

/// `text` cut to `max` characters, marked as cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}...", &text[..end]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodRef {
        PodRef::new("default", "web-1", "uid-1")
    }

    #[test]
    fn scheduling_events_read_as_upstreams() {
        let failed = pod_failed_to_schedule(&pod(), "no instance type satisfied resources");
        assert_eq!(failed.reason, "FailedScheduling");
        assert_eq!(failed.type_, EventType::Warning);
        assert_eq!(
            failed.message,
            "Failed to schedule pod, no instance type satisfied resources"
        );
        assert_eq!(failed.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(failed.regarding.uid.as_deref(), Some("uid-1"));
        assert_eq!(
            failed.dedupe_key().as_deref(),
            Some("failedscheduling-uid-1")
        );

        let nominated = nominate_pod(&pod(), "default-x7k2p");
        assert_eq!(nominated.reason, "Nominated");
        assert_eq!(nominated.type_, EventType::Normal);
        assert_eq!(
            nominated.message,
            "Pod should schedule on: nodeclaim/default-x7k2p"
        );
        assert_eq!(nominated.throttle, Some(Throttle::PodNomination));
    }

    #[test]
    fn launch_failures_name_the_nodeclaim_and_cut_long_errors() {
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "uid": "claim-uid"},
            "spec": {"requirements": [], "nodeClassRef": {
                "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }))
        .expect("valid nodeclaim");
        let event = insufficient_capacity(&claim, &"x".repeat(400));
        assert_eq!(event.reason, "InsufficientCapacityError");
        assert_eq!(event.regarding.kind.as_deref(), Some("NodeClaim"));
        assert_eq!(
            event.regarding.api_version.as_deref(),
            Some("karpenter.sh/v1")
        );
        assert_eq!(event.regarding.namespace, None);
        let expected = format!("NodeClaim default-abc event: {}...", "x".repeat(300));
        assert_eq!(event.message, expected);
    }

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate("héllo", 2), "hé...");
        assert_eq!(truncate("hi", 2), "hi");
    }
}
