//! The Launcher: turns each NodeClaim the Provisioner planned into capacity, as upstream
//! Karpenter's provisioner and NodeClaim lifecycle "launch" step do. It creates the NodeClaim
//! object (named `<nodepool>-` plus a server-generated suffix, owned by its NodePool, holding
//! the termination finalizer) and answers the Provisioner with it at once, so the next round
//! counts it as in-flight capacity; then, off the mailbox, it asks the [`CloudProvider`] for a
//! machine and records what was launched on the NodeClaim (labels, then status with
//! `Launched=True`). A launch refused for insufficient capacity first marks the refused
//! offerings in the OfferingCache, so the next solves plan around them, then deletes the
//! NodeClaim, so its pods turn up unschedulable again and are batched anew. Each pod of a
//! created NodeClaim gets upstream's `Nominated` event, a failed launch upstream's NodeClaim
//! event; launches are tracked so a stopping daemon can wait for them ([`crate::shutdown`]).

mod claim;
mod created;

use std::sync::Arc;

use actix::prelude::*;
use kerf::api::{NodeClaim, NodePool};
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kerf::scheduling::PlannedNodeClaim;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::events::{EventRecorder, upstream as events};
use crate::mailbox::MailboxDepth;
use crate::metrics::{NODECLAIMS_CREATED, NODECLAIMS_LAUNCHED};
use crate::offering_cache::OfferingCacheHandle;
use crate::shutdown::InFlight;

pub use claim::{CREATED_REASON_PROVISIONING, node_claim};
pub use created::{CreatedClaims, UNSEEN_NODECLAIM_GRACE};

/// The reason recorded with offerings a launch was refused for (the provider's error does
/// not carry EC2's code).
pub const INSUFFICIENT_CAPACITY_REASON: &str = "InsufficientCapacity";

/// Each message is answered after one API create (milliseconds), and the Provisioner waits
/// for every answer before its next round, so a short queue covers one round's claims being
/// created back to back without making the Provisioner wait on an idle Launcher.
pub const LAUNCHER_MAILBOX_CAPACITY: usize = 64;

/// Create a NodeClaim for `claim` in `pool` and launch it; answered with the created object.
#[derive(Message)]
#[rtype(result = "Result<NodeClaim, LaunchError>")]
pub struct Launch {
    pub claim: PlannedNodeClaim,
    pub pool: Arc<NodePool>,
}

/// Why a NodeClaim was not created.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("creating a NodeClaim for NodePool {pool}: {source}")]
    CreateNodeClaim {
        pool: String,
        #[source]
        source: kube::Error,
    },
}

/// The actor.
pub struct Launcher {
    nodeclaims: Api<NodeClaim>,
    cloud: Arc<dyn CloudProvider>,
    depth: MailboxDepth,
    events: EventRecorder,
    /// Launches running off the mailbox, which a stopping daemon waits for.
    in_flight: InFlight,
    created: CreatedClaims,
    offerings: Option<OfferingCacheHandle>,
}

impl Launcher {
    pub fn new(client: Client, cloud: Arc<dyn CloudProvider>, depth: MailboxDepth) -> Self {
        Self {
            nodeclaims: Api::all(client),
            cloud,
            depth,
            events: EventRecorder::disabled(),
            in_flight: InFlight::default(),
            created: CreatedClaims::default(),
            offerings: None,
        }
    }

    /// Publishes nominations and launch failures to `events`.
    pub fn with_events(mut self, events: EventRecorder) -> Self {
        self.events = events;
        self
    }

    /// The launches this Launcher has running.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.clone()
    }

    /// Records refused offerings in `offerings` before deleting an unlaunchable NodeClaim.
    pub fn with_offering_cache(mut self, offerings: OfferingCacheHandle) -> Self {
        self.offerings = Some(offerings);
        self
    }

    /// The NodeClaims this Launcher created, for the Provisioner to count as in-flight.
    pub fn created_claims(&self) -> CreatedClaims {
        self.created.clone()
    }

    /// Starts the actor with its bounded mailbox.
    pub fn start_bounded(self) -> Addr<Self> {
        Self::create(|ctx| {
            ctx.set_mailbox_capacity(LAUNCHER_MAILBOX_CAPACITY);
            self
        })
    }
}

impl Actor for Launcher {
    type Context = Context<Self>;
}

impl Handler<Launch> for Launcher {
    type Result = ResponseFuture<Result<NodeClaim, LaunchError>>;

    fn handle(&mut self, launch: Launch, _ctx: &mut Context<Self>) -> Self::Result {
        self.depth.taken();
        let api = self.nodeclaims.clone();
        let cloud = Arc::clone(&self.cloud);
        let recorder = self.events.clone();
        let in_flight = self.in_flight.clone();
        let registry = self.created.clone();
        let offerings = self.offerings.clone();
        Box::pin(async move {
            let pool = launch.pool.name().to_owned();
            let wanted = node_claim(&launch.claim, &launch.pool);
            let created = api
                .create(&PostParams::default(), &wanted)
                .await
                .map_err(|source| LaunchError::CreateNodeClaim {
                    pool: pool.clone(),
                    source,
                })?;
            metrics::counter!(
                NODECLAIMS_CREATED,
                "reason" => CREATED_REASON_PROVISIONING,
                "nodepool" => pool.clone(),
                "min_values_relaxed" => "false"
            )
            .increment(1);
            tracing::info!(
                nodeclaim = %created.name_any(),
                nodepool = %pool,
                pods = launch.claim.pods.len(),
                "created nodeclaim"
            );
            for pod in &launch.claim.pods {
                recorder.publish(events::nominate_pod(pod, &created.name_any()));
            }
            // Recorded before the answer, so the Provisioner's next round counts it.
            registry.insert(created.clone());
            // The machine is launched off the mailbox: a slow cloud call must not hold up
            // the creation of the round's other NodeClaims.
            let refused = Refused {
                registry,
                offerings,
            };
            let launching = launch_machine(api, cloud, created.clone(), recorder, refused);
            tokio::spawn(in_flight.track(launching));
            Ok(created)
        })
    }
}

/// Where a refused launch is recorded.
struct Refused {
    registry: CreatedClaims,
    offerings: Option<OfferingCacheHandle>,
}

/// Launches the machine behind `created` and records it; logs instead of failing, because a
/// NodeClaim left unlaunched is found again by the lifecycle's liveness check upstream does.
async fn launch_machine(
    api: Api<NodeClaim>,
    cloud: Arc<dyn CloudProvider>,
    created: NodeClaim,
    recorder: EventRecorder,
    refused: Refused,
) {
    let name = created.name_any();
    match cloud.create(&created).await {
        Ok(launched) => match record_launch(&api, &created, &launched).await {
            Ok(()) => {
                let pool = created.nodepool_name().unwrap_or_default().to_owned();
                metrics::counter!(NODECLAIMS_LAUNCHED, "nodepool" => pool).increment(1);
                tracing::info!(
                    nodeclaim = %name,
                    provider_id = launched.provider_id().unwrap_or_default(),
                    "launched nodeclaim"
                );
            }
            Err(error) => tracing::error!(nodeclaim = %name, %error, "recording launch"),
        },
        Err(error) if error.is_insufficient_capacity() => {
            recorder.publish(events::insufficient_capacity(&created, &error));
            tracing::warn!(nodeclaim = %name, %error, "no capacity; deleting nodeclaim");
            if let (Some(cache), CloudProviderError::InsufficientCapacity { offerings, .. }) =
                (&refused.offerings, &error)
            {
                cache.mark_offerings(offerings, INSUFFICIENT_CAPACITY_REASON);
            }
            refused.registry.withdraw(&name);
            if let Err(error) = api.delete(&name, &DeleteParams::default()).await {
                tracing::error!(nodeclaim = %name, %error, "deleting unlaunchable nodeclaim");
            }
        }
        Err(error) => {
            if matches!(error, CloudProviderError::NodeClassNotReady { .. }) {
                recorder.publish(events::node_class_not_ready(&created, &error));
            }
            tracing::error!(nodeclaim = %name, %error, "launching nodeclaim");
        }
    }
}

/// Writes what the cloud provider launched: the labels it resolved (under the NodeClaim's
/// own) and the annotations it added, then the status with `Launched=True` through the status subresource.
async fn record_launch(
    api: &Api<NodeClaim>,
    created: &NodeClaim,
    launched: &NodeClaim,
) -> Result<(), kube::Error> {
    let name = created.name_any();
    let labels = claim::merged_labels(created, launched);
    let annotations = claim::added_annotations(created, launched);
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": labels, "annotations": annotations}})),
    )
    .await?;
    let status = claim::launched_status(created, launched);
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}
