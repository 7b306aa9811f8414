//! `NodeRepairBlocked`, upstream's Warning when its 20% rule holds a NodePool's repair back:
//! on the unhealthy Node, its NodeClaim and the NodePool, de-duplicated by each one's UID.

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kerf::api::{NodeClaim, NodePool};
use kerf::labels;

use crate::events::upstream::{DEFAULT_DEDUPE, node_claim_reference};
use crate::events::{Dedupe, Event, EventRecorder, EventType};
use crate::interruption::events::node_reference;

pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";

/// Upstream's message.
pub const NODE_REPAIR_BLOCKED_MESSAGE: &str = "more than 20% nodes are unhealthy in the nodepool";

/// Repair of unhealthy `node` is held back by its NodePool's share of unhealthy Nodes.
pub fn repair_blocked(
    recorder: &EventRecorder,
    node: &Node,
    claim: Option<&NodeClaim>,
    nodepool: Option<&NodePool>,
) {
    let subjects = std::iter::once(node_reference(node))
        .chain(claim.map(node_claim_reference))
        .chain(nodepool.map(nodepool_reference));
    for regarding in subjects {
        recorder.publish(Event {
            dedupe: Some(Dedupe {
                values: vec![regarding.uid.clone().unwrap_or_default()],
                timeout: DEFAULT_DEDUPE,
            }),
            regarding,
            type_: EventType::Warning,
            reason: NODE_REPAIR_BLOCKED,
            message: NODE_REPAIR_BLOCKED_MESSAGE.to_owned(),
            throttle: None,
        });
    }
}

fn nodepool_reference(pool: &NodePool) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{}/v1", labels::GROUP)),
        kind: Some("NodePool".to_owned()),
        name: pool.metadata.name.clone(),
        uid: pool.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}
