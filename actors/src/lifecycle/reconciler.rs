//! What every lifecycle reconcile works with, below the steps that use it ([`super::launch`],
//! [`super::nominate`], [`super::reconcile`]): the [`Reconciler`] with its clients and the
//! memories shared across reconciles, the error a reconcile fails with, and the small
//! helpers the steps share. It decides nothing itself.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kerf::api::NodeClaim;
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kube::Client;
use kube::api::Api;

use super::LifecycleConfig;
use super::launch_memory::{LaunchedMemory, OnDemandFallback};
use super::launching::Launching;
use super::nomination_slots::Slots;
use super::superseded::Superseded;
use super::unlisted::Unlisted;
use crate::created_claims::CreatedClaims;
use crate::events::EventRecorder;
use crate::offering_cache::OfferingCacheHandle;
use crate::shutdown::InFlight;
use crate::state::ClusterState;

/// What the launch and registration steps need besides the reconciler's clients.
#[derive(Clone)]
pub struct LaunchDeps {
    pub events: EventRecorder,
    /// Where refused offerings are marked; `None` marks nothing (tests without a cache).
    pub offerings: Option<OfferingCacheHandle>,
    /// The NodeClaimCreator's registry of created NodeClaims, withdrawn from when one is refused,
    /// and read for the pods each was created for when its Node registers.
    pub created: CreatedClaims,
    /// Whether registration nominates those pods to the Node (`FEATURE_GATES`' `NominatePods`).
    pub nominate_pods: bool,
}

/// Why a reconcile failed; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("patching node {node}: {source}")]
    PatchNode {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("patching nodeclaim {nodeclaim}: {source}")]
    PatchNodeClaim {
        nodeclaim: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the status of nodeclaim {nodeclaim}: {source}")]
    PatchNodeClaimStatus {
        nodeclaim: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting nodeclaim {nodeclaim}: {source}")]
    DeleteNodeClaim {
        nodeclaim: String,
        #[source]
        source: kube::Error,
    },
    #[error("launching nodeclaim {nodeclaim}: {source}")]
    Launch {
        nodeclaim: String,
        #[source]
        source: CloudProviderError,
    },
}

impl crate::workqueue::Conflict for ReconcileError {
    fn is_conflict(&self) -> bool {
        ReconcileError::is_conflict(self)
    }
}

impl ReconcileError {
    /// A write refused because the object changed since it was read: routine, retried.
    pub fn is_conflict(&self) -> bool {
        let source = match self {
            Self::PatchNode { source, .. }
            | Self::PatchNodeClaim { source, .. }
            | Self::PatchNodeClaimStatus { source, .. }
            | Self::DeleteNodeClaim { source, .. } => source,
            Self::Launch { .. } => return false,
        };
        is_status(source, 409)
    }
}

pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// What every reconcile works with.
pub struct Reconciler {
    pub state: Arc<ClusterState>,
    pub nodes: Api<Node>,
    pub nodeclaims: Api<NodeClaim>,
    /// For the pod nominations: pod writes, which spend the pods kind's budget.
    pub client: Client,
    /// Nomination writes in flight, shared by every registration.
    pub nomination_slots: Slots,
    /// Nominations no NodeClaim of this process lists, and the Nodes rid of them.
    pub unlisted: Unlisted,
    pub cloud: Arc<dyn CloudProvider>,
    pub config: LifecycleConfig,
    pub launch: LaunchDeps,
    pub launched: LaunchedMemory,
    /// NodeClaims whose spot was refused, launching on-demand.
    pub fallback: OnDemandFallback,
    /// Launches running, which a stopping daemon waits for.
    pub launches: InFlight,
    /// The NodeClaims whose launch is running.
    pub launching: Launching,
    /// The NodeClaim versions its status writes replaced.
    pub superseded: Superseded,
}

impl Reconciler {
    pub fn new(
        state: Arc<ClusterState>,
        client: Client,
        cloud: Arc<dyn CloudProvider>,
        config: LifecycleConfig,
        launch: LaunchDeps,
    ) -> Self {
        Self {
            state,
            nodes: Api::all(client.clone()),
            nodeclaims: Api::all(client.clone()),
            client,
            nomination_slots: Slots::default(),
            unlisted: Unlisted::default(),
            cloud,
            config,
            launch,
            launched: LaunchedMemory::default(),
            fallback: OnDemandFallback::default(),
            launches: InFlight::default(),
            launching: Launching::default(),
            superseded: Superseded::default(),
        }
    }
}

pub fn label(claim: &NodeClaim, key: &str) -> String {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .cloned()
        .unwrap_or_default()
}
