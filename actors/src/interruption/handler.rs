//! Handling one queue message: parse it, find the NodeClaim of each instance it names
//! through cluster state's instance-id index, publish upstream's Events, mark an interrupted
//! spot (or reserved) offering unavailable, delete the NodeClaim when the message means the
//! instance is going away, and delete the message. The deletion hands the NodeClaim to the
//! termination flow (taint, drain, terminate, finalizer); this module evicts nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::cloudprovider::OfferingRef;
use kerf::interruption::{Action, Kind, Message, QueueMessage, parse};
use kerf::labels;
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions};

use super::events;
use crate::events::EventRecorder;
use crate::metrics::{
    INTERRUPTION_DELETED, INTERRUPTION_QUEUE_DURATION, INTERRUPTION_RECEIVED,
    INTERRUPTION_UNPARSEABLE, nodeclaim_disrupted,
};
use crate::offering_cache::OfferingCacheHandle;
use crate::state::ClusterState;
use kerf::interruption::InterruptionQueue;

/// How long a NodeClaim this handler deleted is remembered, so a second message about the
/// same instance (EC2 sends a spot warning, then state changes) arriving before the watch
/// shows the deletion is not counted twice. Longer than any watch lag worth thinking about.
const REMEMBER_DELETED: Duration = Duration::from_secs(5 * 60);

/// The offering-cache reason of an interrupted offering (upstream's message kind).
const SPOT_INTERRUPTION_REASON: &str = "SpotInterruption";
const CAPACITY_RESERVATION_REASON: &str = "CapacityReservationInterruption";

/// What the handler needs.
#[derive(Clone)]
pub struct HandlerDeps {
    pub queue: Arc<dyn InterruptionQueue>,
    pub state: Arc<ClusterState>,
    /// Fenced: writes only while this replica leads.
    pub client: Client,
    pub events: EventRecorder,
    /// Where interrupted offerings are marked; without a cloud provider there is none.
    pub offerings: Option<OfferingCacheHandle>,
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// Parsed, acted on and deleted; the NodeClaims this message deleted.
    Done { kind: Kind, deleted: Vec<String> },
    /// Not an event kerf can read: logged, counted and deleted.
    Unparseable,
    /// Acting failed: left in the queue for redelivery.
    Failed,
    /// Acted on, but deleting it from the queue failed (it will be delivered again, and
    /// handling it again is harmless).
    NotDeleted,
}

/// Handles messages; shared by the concurrent handlers.
pub struct Handler {
    deps: HandlerDeps,
    nodeclaims: Api<NodeClaim>,
    deleted: Mutex<HashMap<String, Instant>>,
}

/// Why acting on a message failed.
#[derive(Debug, thiserror::Error)]
enum ActError {
    #[error("deleting nodeclaim {name} on interruption message: {source}")]
    Delete {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl Handler {
    pub fn new(deps: HandlerDeps) -> Self {
        Self {
            nodeclaims: Api::all(deps.client.clone()),
            deps,
            deleted: Mutex::default(),
        }
    }

    /// Handles one message end to end, deleting it from the queue unless acting failed.
    pub async fn process(&self, raw: &QueueMessage) -> Handled {
        let queue = self.deps.queue.name();
        let message = match parse(&raw.body) {
            Ok(message) => message,
            Err(error) => {
                tracing::error!(%error, queue, message_id = %raw.id, "failed parsing interruption message");
                metrics::counter!(INTERRUPTION_UNPARSEABLE).increment(1);
                return self.delete_message(raw, Handled::Unparseable).await;
            }
        };
        let kind = message.kind();
        metrics::counter!(INTERRUPTION_RECEIVED, "message_type" => kind.as_str()).increment(1);
        match self.act(&message).await {
            Ok(deleted) => {
                observe_queue_duration(message.time);
                self.delete_message(raw, Handled::Done { kind, deleted })
                    .await
            }
            Err(error) => {
                tracing::error!(%error, queue, message_id = %raw.id, message_kind = kind.as_str(), "handling interruption message; left for redelivery");
                Handled::Failed
            }
        }
    }

    async fn delete_message(&self, raw: &QueueMessage, handled: Handled) -> Handled {
        match self.deps.queue.delete(raw).await {
            Ok(()) => {
                metrics::counter!(INTERRUPTION_DELETED).increment(1);
                handled
            }
            Err(error) => {
                tracing::error!(%error, "deleting interruption message");
                Handled::NotDeleted
            }
        }
    }

    /// Acts on every NodeClaim the message names; returns those it deleted.
    async fn act(&self, message: &Message) -> Result<Vec<String>, ActError> {
        let mut deleted = Vec::new();
        if message.kind() == Kind::NoOp {
            return Ok(deleted);
        }
        let mut failed = None;
        for instance_id in message.instance_ids() {
            let Some(claim) = self.deps.state.nodeclaim_by_instance_id(instance_id) else {
                tracing::debug!(
                    instance_id,
                    message_kind = message.kind().as_str(),
                    "no nodeclaim for interrupted instance"
                );
                continue;
            };
            let node = self.deps.state.node_by_instance_id(instance_id);
            match self.act_on(message, &claim, node.as_deref()).await {
                Ok(true) => deleted.push(claim.name().to_owned()),
                Ok(false) => {}
                Err(error) => failed = Some(error),
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(deleted),
        }
    }

    /// Returns whether this call deleted the NodeClaim.
    async fn act_on(
        &self,
        message: &Message,
        claim: &NodeClaim,
        node: Option<&Node>,
    ) -> Result<bool, ActError> {
        let kind = message.kind();
        let action = kind.action();
        tracing::info!(
            nodeclaim = claim.name(),
            node = node.and_then(|n| n.metadata.name.as_deref()),
            message_kind = kind.as_str(),
            action = action.as_str(),
            "interruption message for nodeclaim"
        );
        events::notify(&self.deps.events, message, claim, node);
        self.mark_unavailable(kind, claim);
        if action == Action::NoAction {
            return Ok(false);
        }
        self.delete_claim(kind, claim, node).await
    }

    fn mark_unavailable(&self, kind: Kind, claim: &NodeClaim) {
        let (capacity_type, reason) = match kind {
            Kind::SpotInterrupted => (labels::CAPACITY_TYPE_SPOT, SPOT_INTERRUPTION_REASON),
            Kind::CapacityReservationInterrupted => {
                (labels::CAPACITY_TYPE_RESERVED, CAPACITY_RESERVATION_REASON)
            }
            _ => return,
        };
        let (Some(offerings), Some(instance_type), Some(zone)) = (
            &self.deps.offerings,
            label(claim, labels::INSTANCE_TYPE),
            label(claim, labels::ZONE),
        ) else {
            return;
        };
        offerings.mark_offerings(
            &[OfferingRef {
                capacity_type: capacity_type.to_owned(),
                instance_type: instance_type.to_owned(),
                zone: zone.to_owned(),
            }],
            reason,
        );
    }

    async fn delete_claim(
        &self,
        kind: Kind,
        claim: &NodeClaim,
        node: Option<&Node>,
    ) -> Result<bool, ActError> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        // Taken before the request, so concurrent messages about one instance (a spot
        // warning and the state changes that follow) delete and count it once.
        if claim.metadata.deletion_timestamp.is_some() || !self.begin_delete(&uid) {
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()).filter(|u| !u.is_empty()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.nodeclaims.delete(claim.name(), &params).await {
            Ok(_) => {}
            // Gone already, or replaced by a NodeClaim of the same name (the uid
            // precondition failed): nothing of this instance is left to delete.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                return Ok(false);
            }
            Err(source) => {
                self.forget_delete(&uid);
                return Err(ActError::Delete {
                    name: claim.name().to_owned(),
                    source,
                });
            }
        }
        tracing::info!(
            nodeclaim = claim.name(),
            message_kind = kind.as_str(),
            "initiating delete from interruption message"
        );
        events::terminating(&self.deps.events, claim, node);
        nodeclaim_disrupted(
            kind.as_str(),
            label(claim, labels::NODEPOOL).unwrap_or_default(),
            label(claim, labels::CAPACITY_TYPE).unwrap_or_default(),
        );
        Ok(true)
    }

    /// Whether this call may delete the NodeClaim `uid`: no other handler deleted it
    /// within [`REMEMBER_DELETED`] or is deleting it now.
    fn begin_delete(&self, uid: &str) -> bool {
        let mut deleted = self.deleted.lock().unwrap_or_else(PoisonError::into_inner);
        deleted.retain(|_, at| at.elapsed() < REMEMBER_DELETED);
        if deleted.contains_key(uid) {
            return false;
        }
        deleted.insert(uid.to_owned(), Instant::now());
        true
    }

    /// The deletion failed: the next message may try again.
    fn forget_delete(&self, uid: &str) {
        self.deleted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

fn label<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn observe_queue_duration(time: Timestamp) {
    let seconds = Timestamp::now().duration_since(time).as_secs_f64().max(0.0);
    metrics::histogram!(INTERRUPTION_QUEUE_DURATION).record(seconds);
}
