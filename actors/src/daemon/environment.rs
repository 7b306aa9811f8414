//! What a daemon is started with besides its settings: its clients, identity and cloud
//! ([`Environment`], [`Cloud`]), the reconcilers' timings, and why a start can fail.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use kerf::catalog::Catalog;
use kerf::cloudprovider::CloudProvider;
use kube::Client;

use crate::disruption::DisruptionConfig;
use crate::leader::Timing;
use crate::lifecycle::LifecycleConfig;
use crate::offering_cache::OfferingCacheHandle;
use crate::orchestrator::OrchestratorConfig;
use crate::termination::TerminationConfig;

/// The reconcilers' timings; the defaults are upstream's, tests shorten them.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    pub lifecycle: LifecycleConfig,
    pub termination: TerminationConfig,
    pub disruption: DisruptionConfig,
    pub orchestrator: OrchestratorConfig,
}

/// What the daemon needs besides its settings.
#[derive(Clone)]
pub struct Environment {
    pub client: Client,
    /// Leader election's own client: not the rate-limited one, so a renewal never waits
    /// behind creates and patches.
    pub leader_client: Client,
    /// The namespace the controller runs in (its leader Lease lives there by default).
    pub namespace: String,
    /// This replica's name in leader election (unique per process).
    pub identity: String,
    /// Leader election timing (controller-runtime's defaults outside tests).
    pub leader_timing: Timing,
    /// Address the metrics and probe listeners bind to.
    pub bind: Ipv4Addr,
    /// Where capacity comes from; without it rounds are observed but nothing is launched.
    pub cloud: Option<Cloud>,
}

/// The cloud the controller launches into.
#[derive(Clone)]
pub struct Cloud {
    pub provider: Arc<dyn CloudProvider>,
    /// The region's embedded catalog, which the scheduler plans with until `provider`'s
    /// first refresh ([`CloudProvider::catalog`]).
    pub catalog: Catalog,
    /// The unavailable-offerings state to share with `provider` (start it with
    /// [`OfferingCache::start`] and hand the provider a clone); `None`: the daemon starts
    /// its own, which only the NodeClaimCreator writes.
    pub offerings: Option<OfferingCacheHandle>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding the metrics endpoint on {0}: {1}")]
    MetricsPort(SocketAddr, #[source] std::io::Error),
    #[error("binding the health probe endpoint on {0}: {1}")]
    HealthProbePort(SocketAddr, #[source] std::io::Error),
}
