//! What every part of the daemon is started with: the bound metrics and probe endpoints,
//! leadership (elected or alone), the fenced client with the event recorder, and the
//! settings a solve and a launch are made with.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use kerf::cluster::ControllerSettings;
use kerf::scheduling::SolvePolicies;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::leader::{self, Election};
use crate::state::ClusterState;
use crate::supervisor::Supervision;
use crate::{events, server};

use super::environment::{Cloud, StartError};

/// The metrics and probe endpoints, bound.
pub(super) struct Endpoints {
    pub(super) metrics_addr: SocketAddr,
    pub(super) probes_addr: SocketAddr,
    pub(super) tasks: Vec<JoinHandle<()>>,
}

impl Endpoints {
    /// Binds `/metrics` and the probes on `bind` at `(metrics, probes)` ports.
    pub(super) async fn serve(
        bind: Ipv4Addr,
        (metrics_port, health_probe_port): (u16, u16),
        served: server::Served,
        supervision: &Supervision,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<Self, StartError> {
        let metrics_at = SocketAddr::from((bind, metrics_port));
        let state = served.state.clone();
        let (metrics_addr, metrics_task) =
            server::serve_metrics(metrics_at, served, shutdown.clone())
                .await
                .map_err(|e| StartError::MetricsPort(metrics_at, e))?;
        let probes_at = SocketAddr::from((bind, health_probe_port));
        let (probes_addr, probes_task) = server::serve_probes(
            probes_at,
            state.clone(),
            supervision.exhausted(),
            shutdown.clone(),
        )
        .await
        .map_err(|e| StartError::HealthProbePort(probes_at, e))?;
        tracing::info!(metrics = %metrics_addr, probes = %probes_addr, "serving endpoints");
        Ok(Self {
            metrics_addr,
            probes_addr,
            tasks: vec![metrics_task, probes_task],
        })
    }
}

/// Whether this replica leads: elected through a Lease, or alone from the start.
pub(super) struct Leadership {
    pub(super) leader: watch::Receiver<bool>,
    pub(super) task: Option<JoinHandle<()>>,
    /// A lone replica's leadership, withdrawn on stop.
    pub(super) lone: Option<watch::Sender<bool>>,
}

impl Leadership {
    pub(super) fn start(
        client: Client,
        election: Option<Election>,
        shutdown: &watch::Receiver<bool>,
    ) -> Self {
        match election {
            Some(election) => {
                let (leader, task) = leader::spawn(client, election, shutdown.clone());
                Self {
                    leader,
                    task: Some(task),
                    lone: None,
                }
            }
            // A lone replica leads from the start until it stops.
            None => {
                let (lone, leader) = watch::channel(true);
                Self {
                    leader,
                    task: None,
                    lone: Some(lone),
                }
            }
        }
    }
}

/// What every actor and loop is started with.
pub(super) struct Wiring {
    /// Fenced: no write goes through once this replica stops leading ([`leader::fenced`]).
    pub(super) client: Client,
    pub(super) state: Arc<ClusterState>,
    pub(super) leader: watch::Receiver<bool>,
    pub(super) shutdown: watch::Receiver<bool>,
    pub(super) events: events::EventRecorder,
}

impl Wiring {
    pub(super) fn new(
        client: Client,
        state: Arc<ClusterState>,
        leader: watch::Receiver<bool>,
        reporting_instance: String,
        shutdown: watch::Receiver<bool>,
    ) -> (Self, JoinHandle<()>) {
        let client = leader::fenced(client, leader.clone());
        // Events spend a budget of their own (the client's is per kind), as upstream's event
        // recorder writes through a clientset of its own.
        let (events, events_task) =
            events::spawn(client.clone(), reporting_instance, shutdown.clone());
        let wiring = Self {
            client,
            state,
            leader,
            shutdown,
            events,
        };
        (wiring, events_task)
    }

    /// `cloud` with every write going through the fence, as every Kubernetes write does.
    pub(super) fn fence(&self, cloud: Cloud) -> Cloud {
        Cloud {
            provider: Arc::new(leader::FencedCloudProvider::new(
                cloud.provider,
                self.leader.clone(),
            )),
            ..cloud
        }
    }
}

/// The settings a solve and a launch are made with.
#[derive(Clone, Copy)]
pub(super) struct Solving {
    pub(super) controller: ControllerSettings,
    pub(super) policies: SolvePolicies,
    pub(super) nominate_pods: bool,
    /// The `ReservedCapacity` gate: plan with the node classes' capacity reservations.
    pub(super) reserved_capacity: bool,
}
