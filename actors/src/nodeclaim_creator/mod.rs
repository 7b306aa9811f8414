//! The NodeClaimCreator: turns each NodeClaim the Provisioner planned into a NodeClaim object, as
//! upstream Karpenter's provisioner does. It creates the object (named `<nodepool>-` plus a
//! server-generated suffix, owned by its NodePool, holding the termination finalizer),
//! records it in [`CreatedClaims`] and answers the Provisioner with it at once, so the next
//! round counts it as in-flight capacity. Each pod of a created NodeClaim gets upstream's
//! `Nominated` event. The machine is launched by the NodeClaim lifecycle
//! ([`crate::lifecycle`]), which reconciles every NodeClaim that is not `Launched` — this
//! one as soon as its watch event arrives, and any other left unlaunched by a failed
//! attempt, a restart or a failover.

mod claim;

use kerf::buffer::is_virtual_uid;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use actix::prelude::*;
use futures::FutureExt;
use kerf::api::{NodeClaim, NodePool};
use kerf::scheduling::PlannedNodeClaim;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use crate::created_claims::CreatedClaims;
use crate::events::{EventRecorder, upstream as events};
use crate::mailbox::MailboxDepth;
use crate::metrics::NODECLAIMS_CREATED;
use crate::state::Lean;
use crate::supervisor::{Supervision, panic_message};

pub use claim::{CREATED_REASON_PROVISIONING, node_claim};

/// Each message is answered after one API create (milliseconds), and the Provisioner waits
/// for every answer before its next round, so a short queue covers one round's claims being
/// created back to back without making the Provisioner wait on an idle NodeClaimCreator.
pub const NODECLAIM_CREATOR_MAILBOX_CAPACITY: usize = 64;

/// The name the NodeClaimCreator is supervised, and its panics counted, under.
pub const NAME: &str = "nodeclaim_creator";

/// Create a NodeClaim for `claim` in `pool`; answered with the created object.
#[derive(Message)]
#[rtype(result = "Result<NodeClaim, CreateError>")]
pub struct CreateNodeClaim {
    pub claim: PlannedNodeClaim,
    pub pool: Arc<NodePool>,
    /// Why it is created: the `reason` label of `karpenter_nodeclaims_created_total`
    /// ([`CREATED_REASON_PROVISIONING`], or a disruption's reason for a replacement).
    pub reason: &'static str,
}

/// Why a NodeClaim was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("creating a NodeClaim for NodePool {pool}: {source}")]
    CreateNodeClaim {
        pool: String,
        #[source]
        source: kube::Error,
    },
    /// The create panicked; the panic was reported to the supervision scope, so it is
    /// logged, counted and held against the restart budget like the actor's own.
    #[error("creating a NodeClaim panicked: {0}")]
    Panicked(String),
}

/// The actor.
pub struct NodeClaimCreator {
    nodeclaims: Api<NodeClaim>,
    depth: MailboxDepth,
    events: EventRecorder,
    created: CreatedClaims,
}

impl NodeClaimCreator {
    pub fn new(client: Client, depth: MailboxDepth) -> Self {
        Self {
            nodeclaims: Api::all(client),
            depth,
            events: EventRecorder::disabled(),
            created: CreatedClaims::default(),
        }
    }

    /// Publishes nominations to `events`.
    pub fn with_events(mut self, events: EventRecorder) -> Self {
        self.events = events;
        self
    }

    /// The NodeClaims this NodeClaimCreator created, for the Provisioner to count as in-flight.
    pub fn created_claims(&self) -> CreatedClaims {
        self.created.clone()
    }

    /// Starts the actor with its bounded mailbox.
    pub fn start_bounded(self) -> Addr<Self> {
        Self::create(|ctx| {
            ctx.set_mailbox_capacity(NODECLAIM_CREATOR_MAILBOX_CAPACITY);
            self
        })
    }

    /// The incarnation its supervisor starts after a panic: the same [`CreatedClaims`], so
    /// the NodeClaims created before the panic still count as in flight (and none is created
    /// twice for one round). Creates in flight finish beside the actor and answer anyway.
    pub fn restarted(&self) -> Self {
        Self {
            nodeclaims: self.nodeclaims.clone(),
            depth: self.depth.clone(),
            events: self.events.clone(),
            created: self.created.clone(),
        }
    }
}

impl Actor for NodeClaimCreator {
    type Context = Context<Self>;
}

impl Handler<CreateNodeClaim> for NodeClaimCreator {
    type Result = ResponseFuture<Result<NodeClaim, CreateError>>;

    fn handle(&mut self, mut launch: CreateNodeClaim, _ctx: &mut Context<Self>) -> Self::Result {
        self.depth.taken();
        let api = self.nodeclaims.clone();
        let recorder = self.events.clone();
        let registry = self.created.clone();
        // Actix runs the answer on a detached task of its own, outside the actor's context
        // and its supervision scope: the scope is taken here, where the message is handled.
        let supervision = Supervision::current();
        let create = async move {
            let pool = launch.pool.name().to_owned();
            let wanted = node_claim(&launch.claim, &launch.pool);
            let mut created =
                api.create(&PostParams::default(), &wanted)
                    .await
                    .map_err(|source| CreateError::CreateNodeClaim {
                        pool: pool.clone(),
                        source,
                    })?;
            // As the stores keep it: the server's managedFields are kilobytes per NodeClaim,
            // and a large round's registry holds a copy of every one until the watch
            // delivers it.
            created.lean();
            metrics::counter!(
                NODECLAIMS_CREATED,
                "reason" => launch.reason,
                "nodepool" => pool.clone(),
                "min_values_relaxed" => if launch.claim.min_values_relaxed { "true" } else { "false" }
            )
            .increment(1);
            tracing::info!(
                nodeclaim = %created.name_any(),
                nodepool = %pool,
                pods = launch.claim.pods.len(),
                requests = %launch.claim.requests,
                instance_types = %instance_type_list(&launch.claim),
                "created nodeclaim"
            );
            // A CapacityBuffer's virtual pods exist nowhere to carry an event.
            for pod in launch.claim.pods.iter().filter(|p| !is_virtual_uid(&p.uid)) {
                recorder.publish(events::nominate_pod(pod, &created.name_any()));
            }
            // Recorded before the answer, so the Provisioner's next round counts it. The pods
            // move: while a large round's creates wait for the client budget, a copy would
            // hold every planned pod twice.
            registry.insert(created.clone(), std::mem::take(&mut launch.claim.pods));
            Ok(created)
        };
        Box::pin(async move {
            // The create shares only the registry, which it writes last, and the recorder:
            // unwinding leaves both as usable as a panic in the handler itself does.
            AssertUnwindSafe(create)
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    supervision.report_panic(NAME, &*panic);
                    Err(CreateError::Panicked(panic_message(&*panic)))
                })
        })
    }
}

/// Upstream's instance-type list for the "created nodeclaim" line: the five cheapest names
/// and how many more, so a 600-type NodeClaim stays one readable line.
fn instance_type_list(claim: &PlannedNodeClaim) -> String {
    const SHOWN: usize = 5;
    let names: Vec<&str> = claim
        .instance_types
        .iter()
        .take(SHOWN)
        .map(|it| it.name.as_str())
        .collect();
    let more = claim.instance_types.len().saturating_sub(SHOWN);
    match more {
        0 => names.join(", "),
        n => format!("{} and {n} other(s)", names.join(", ")),
    }
}

#[cfg(test)]
mod tests;
