//! The Events upstream's interruption controller publishes, on the NodeClaim and (when
//! registered) its Node, with upstream's reasons, messages and de-duplication by UID.

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kerf::api::NodeClaim;
use kerf::interruption::{Event as Interruption, Message};

use crate::events::upstream::{DEFAULT_DEDUPE, node_claim_reference};
use crate::events::{Dedupe, Event, EventRecorder, EventType};

pub const SPOT_INTERRUPTED: &str = "SpotInterrupted";
pub const REBALANCE_RECOMMENDATION: &str = "SpotRebalanceRecommendation";
pub const INSTANCE_STOPPING: &str = "InstanceStopping";
pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
pub const INSTANCE_UNHEALTHY: &str = "InstanceUnhealthy";
pub const CAPACITY_RESERVATION_INTERRUPTED: &str = "CapacityReservationInstanceInterrupted";
pub const TERMINATING_ON_INTERRUPTION: &str = "TerminatingOnInterruption";

/// What the message says about the instance, before anything is done.
pub fn notify(recorder: &EventRecorder, message: &Message, claim: &NodeClaim, node: Option<&Node>) {
    let (type_, reason, text) = match &message.event {
        Interruption::SpotInterruption { .. } => (
            EventType::Warning,
            SPOT_INTERRUPTED,
            "Spot interruption warning was triggered",
        ),
        Interruption::RebalanceRecommendation { .. } => (
            EventType::Normal,
            REBALANCE_RECOMMENDATION,
            "Spot rebalance recommendation was triggered",
        ),
        Interruption::ScheduledChange { .. } => (
            EventType::Warning,
            INSTANCE_UNHEALTHY,
            "An unhealthy warning was triggered for the instance",
        ),
        Interruption::Stopping { .. } => (
            EventType::Warning,
            INSTANCE_STOPPING,
            "Instance is stopping",
        ),
        Interruption::Terminating { .. } => (
            EventType::Warning,
            INSTANCE_TERMINATING,
            "Instance is terminating",
        ),
        Interruption::CapacityReservationInterruption { .. } => (
            EventType::Warning,
            CAPACITY_RESERVATION_INTERRUPTED,
            "Capacity Reservation interruption warning was triggered",
        ),
        Interruption::NoOp { .. } => return,
    };
    publish(recorder, claim, node, type_, reason, text, text);
}

/// EC2's status checks or a scheduled event found the instance unhealthy (the
/// instance-health poller's counterpart of a Health scheduled change).
pub fn unhealthy(recorder: &EventRecorder, claim: &NodeClaim, node: Option<&Node>) {
    let text = "An unhealthy warning was triggered for the instance";
    publish(
        recorder,
        claim,
        node,
        EventType::Warning,
        INSTANCE_UNHEALTHY,
        text,
        text,
    );
}

/// The NodeClaim was deleted because of the message.
pub fn terminating(recorder: &EventRecorder, claim: &NodeClaim, node: Option<&Node>) {
    publish(
        recorder,
        claim,
        node,
        EventType::Warning,
        TERMINATING_ON_INTERRUPTION,
        "Interruption triggered termination for the NodeClaim",
        "Interruption triggered termination for the Node",
    );
}

fn publish(
    recorder: &EventRecorder,
    claim: &NodeClaim,
    node: Option<&Node>,
    type_: EventType,
    reason: &'static str,
    on_claim: &str,
    on_node: &str,
) {
    let event = |regarding: ObjectReference, message: &str| Event {
        dedupe: Some(Dedupe {
            values: vec![regarding.uid.clone().unwrap_or_default()],
            timeout: DEFAULT_DEDUPE,
        }),
        regarding,
        type_,
        reason,
        message: message.to_owned(),
        throttle: None,
    };
    recorder.publish(event(node_claim_reference(claim), on_claim));
    if let Some(node) = node {
        recorder.publish(event(node_reference(node), on_node));
    }
}

pub(crate) fn node_reference(node: &Node) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Node".to_owned()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}
