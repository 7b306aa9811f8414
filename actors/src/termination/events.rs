//! The events the termination drainer publishes, with upstream's reasons: on pods,
//! `Evicted` and `FailedEviction` (naming the PodDisruptionBudget that refused) and
//! `Disrupted` when the termination timestamp forces a deletion; on Nodes, `FailedDraining`
//! while pods hold the drain and `AwaitingVolumeDetachment`; on NodeClaims,
//! `TerminationGracePeriodExpiring`.

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kerf::api::NodeClaim;
use kerf::pods::{LeanPod, PodLike};

use crate::events::upstream::{DEFAULT_DEDUPE, node_claim_reference, pod_reference};
use crate::events::{Dedupe, Event, EventType};

pub const EVICTED: &str = "Evicted";
pub const FAILED_EVICTION: &str = "FailedEviction";
pub const DISRUPTED: &str = "Disrupted";
pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
pub const FAILED_DRAINING: &str = "FailedDraining";
pub const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";

fn on_pod(pod: &LeanPod, type_: EventType, reason: &'static str, message: String) -> Event {
    Event {
        regarding: pod_reference(&pod.pod_ref()),
        type_,
        reason,
        message,
        dedupe: Some(Dedupe {
            values: vec![
                pod.meta().namespace.unwrap_or_default().to_owned(),
                pod.meta().name.unwrap_or_default().to_owned(),
            ],
            timeout: DEFAULT_DEDUPE,
        }),
        throttle: None,
    }
}

pub fn evicted(pod: &LeanPod) -> Event {
    on_pod(pod, EventType::Normal, EVICTED, "Evicted pod".to_owned())
}

/// A budget refused `pod`'s eviction; `budget` is its name when the API server said it.
pub fn failed_eviction(pod: &LeanPod, budget: Option<&str>) -> Event {
    let pod_name = format!(
        "{}/{}",
        pod.meta().namespace.unwrap_or_default(),
        pod.meta().name.unwrap_or_default()
    );
    let message = match budget {
        Some(budget) => format!("evicting pod {pod_name} violated PodDisruptionBudget {budget}"),
        None => format!("evicting pod {pod_name} violated a PDB"),
    };
    on_pod(pod, EventType::Warning, FAILED_EVICTION, message)
}

/// `pod` is deleted with `grace` seconds because its node must be gone by `deadline`.
pub fn disrupted(pod: &LeanPod, grace: i64, deadline: &str) -> Event {
    let own = pod
        .spec()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(super::drain::DEFAULT_POD_GRACE_SECONDS);
    on_pod(
        pod,
        EventType::Normal,
        DISRUPTED,
        format!(
            "Deleting the pod to accommodate the terminationTime {deadline} of the node. The pod was granted {grace} seconds of grace-period of its {own} terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt annotation."
        ),
    )
}

fn on_node(node: &Node, reason: &'static str, message: String) -> Event {
    let name = node.metadata.name.clone().unwrap_or_default();
    Event {
        regarding: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(name.clone()),
            uid: node.metadata.uid.clone(),
            ..ObjectReference::default()
        },
        type_: EventType::Warning,
        reason,
        message,
        dedupe: Some(Dedupe {
            values: vec![name],
            timeout: DEFAULT_DEDUPE,
        }),
        throttle: None,
    }
}

pub fn awaiting_volume_detachment(node: &Node, attachments: usize) -> Event {
    on_node(
        node,
        AWAITING_VOLUME_DETACHMENT,
        format!("Awaiting deletion of {attachments} VolumeAttachments bound to node"),
    )
}

/// Pods still hold the drain of `node` (upstream's words, so a user's alerts and searches
/// on the message keep working).
pub fn failed_draining(node: &Node, waiting: usize) -> Event {
    on_node(
        node,
        FAILED_DRAINING,
        format!("Failed to drain node, {waiting} pods are waiting to be evicted"),
    )
}

pub fn termination_grace_period_expiring(claim: &NodeClaim, deadline: &str) -> Event {
    Event {
        regarding: node_claim_reference(claim),
        type_: EventType::Warning,
        reason: TERMINATION_GRACE_PERIOD_EXPIRING,
        message: format!("All pods will be deleted by {deadline}"),
        dedupe: Some(Dedupe {
            values: vec![claim.name().to_owned()],
            timeout: DEFAULT_DEDUPE,
        }),
        throttle: None,
    }
}
