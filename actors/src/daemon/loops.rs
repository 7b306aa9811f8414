//! The daemon's loops beside its actors: disruption and its orchestrator, the alpha-gated
//! NodeOverlay and CapacityBuffer loops, batch triggers, storage advice, static capacity, the
//! state-driven status reconcilers and the cloud-side loops (launch templates, tagging,
//! garbage collection, capacity type).

use std::sync::Arc;

use kerf::cloudprovider::CloudProvider;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::batcher;
use crate::batcher::triggers::{self, Retrigger};
use crate::capacity_type;
use crate::cloud_metrics::MeteredCloudProvider;
use crate::created_claims::CreatedClaims;
use crate::disruption::{self, DisruptionDeps, Generation, Progress};
use crate::expiration;
use crate::garbage_collection;
use crate::launch_template_cache::{
    self, LAUNCH_TEMPLATE_CACHE_MAILBOX_CAPACITY, LaunchTemplateCache,
};
use crate::mailbox::{MailboxDepth, Outbox};
use crate::nodeclaim_disruption::{self, Departures, NodeClaimDisruption, podevents};
use crate::nodepool_status;
use crate::orchestrator::InQueue;
use crate::orchestrator::{self, OrchestratorDeps};
use crate::pod_watcher::Subscribers;
use crate::provisioner::Provisioning;
use crate::requeue::{self, Trigger};
use crate::settings::FeatureGates;
use crate::state::ClusterState;
use crate::static_capacity::{self, StaticCapacityDeps};
use crate::storage_advice;
use crate::supervisor;
use crate::tagging::{self, TAGGER_MAILBOX_CAPACITY, Tagger};
use crate::{capacity_buffer, node_overlay};

use super::environment::Timings;
use super::wiring::Wiring;

/// What the disruption loop publishes.
#[derive(Clone, Debug)]
pub struct DisruptionHandle {
    pub progress: watch::Receiver<Progress>,
    /// The nodes of the commands the Orchestrator is carrying out.
    pub in_queue: InQueue,
}

/// The Orchestrator and the disruption loop over the Provisioner's solving parts.
pub(super) fn start_disruption(
    w: &Wiring,
    provisioning: &Provisioning,
    timings: &Timings,
    feature_gates: FeatureGates,
    generation: &Generation,
) -> (DisruptionHandle, Vec<JoinHandle<()>>) {
    let (orchestrator, orchestrator_task) = orchestrator::spawn(
        OrchestratorDeps {
            client: w.client.clone(),
            state: w.state.clone(),
            creator: provisioning.creator.clone(),
            events: w.events.clone(),
            config: timings.orchestrator,
        },
        w.shutdown.clone(),
    );
    let (progress, progress_rx) = watch::channel(Progress::default());
    let handle = DisruptionHandle {
        progress: progress_rx,
        in_queue: orchestrator.in_queue().clone(),
    };
    let deps = DisruptionDeps {
        client: w.client.clone(),
        state: w.state.clone(),
        catalog: provisioning.catalog,
        offerings: provisioning.offerings.clone(),
        instance_types: provisioning.instance_types.clone(),
        controller: provisioning.controller,
        policies: provisioning.policies,
        feature_gates: disruption::core_gates(feature_gates),
        orchestrator,
        nominations: provisioning.created.clone(),
        events: w.events.clone(),
        leader: w.leader.clone(),
        generation: generation.clone(),
        config: timings.disruption.clone(),
    };
    let shutdown = w.shutdown.clone();
    let loop_task = supervisor::task(disruption::CONTROLLER, move || {
        disruption::run(deps.clone(), progress.clone(), shutdown.clone())
    });
    (handle, vec![orchestrator_task, loop_task])
}

/// With their gates: the NodeOverlay status loop (over the Provisioner's instance types, so
/// only with a cloud provider) and the CapacityBuffer controller, each woken by its kind's
/// changes (overlays also by NodePools and node classes, whose types they select).
pub(super) fn start_alpha_loops(
    w: &Wiring,
    provisioning: Option<&Provisioning>,
    gates: FeatureGates,
    retrigger: &Retrigger,
    hooks: &mut Subscribers,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if gates.node_overlay
        && let Some(provisioning) = provisioning
    {
        let trigger = Trigger::default();
        hooks.node_overlays.push(requeue::on_change(&[&trigger]));
        hooks.nodepools.push(requeue::on_change(&[&trigger]));
        hooks.nodeclasses.push(requeue::on_change(&[&trigger]));
        // A changed overlay may re-price what pending pods wait for.
        let again = retrigger.clone();
        hooks
            .node_overlays
            .push(Box::new(move |_, _| again.request()));
        let deps = node_overlay::Deps {
            client: w.client.clone(),
            state: w.state.clone(),
            catalog: provisioning.catalog,
            offerings: provisioning.offerings.clone(),
            instance_types: provisioning.instance_types.clone(),
            controller: provisioning.controller,
        };
        let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
        tasks.push(supervisor::task("nodeoverlay", move || {
            node_overlay::run(
                deps.clone(),
                trigger.clone(),
                leader.clone(),
                shutdown.clone(),
            )
        }));
    }
    if gates.capacity_buffer {
        let trigger = Trigger::default();
        hooks.capacity_buffers.push(requeue::on_change(&[&trigger]));
        let (client, state, retrigger) = (w.client.clone(), w.state.clone(), retrigger.clone());
        let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
        tasks.push(supervisor::task("capacitybuffer", move || {
            capacity_buffer::run(
                client.clone(),
                state.clone(),
                trigger.clone(),
                retrigger.clone(),
                leader.clone(),
                shutdown.clone(),
            )
        }));
    }
    tasks
}

/// The loops that start a batch without a watch event: a nomination lapsing (with a cloud)
/// and the retrigger of pods left pending.
pub(super) fn start_trigger_loops(
    w: &Wiring,
    created: Option<CreatedClaims>,
    retrigger: Retrigger,
    to_batcher: Outbox<batcher::Trigger>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(created) = created {
        let (retrigger, shutdown) = (retrigger.clone(), w.shutdown.clone());
        tasks.push(supervisor::task("nomination_lapse", move || {
            triggers::on_nomination_lapse(created.clone(), retrigger.clone(), shutdown.clone())
        }));
    }
    let (state, leader, shutdown) = (w.state.clone(), w.leader.clone(), w.shutdown.clone());
    tasks.push(supervisor::task("retrigger", move || {
        triggers::retrigger(
            state.clone(),
            to_batcher.clone(),
            retrigger.clone(),
            leader.clone(),
            shutdown.clone(),
        )
    }));
    tasks
}

/// The in-tree storage warnings ([`storage_advice`]), published while leading.
pub(super) fn start_storage_advice(w: &Wiring) -> JoinHandle<()> {
    let (state, events) = (w.state.clone(), w.events.clone());
    let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
    supervisor::task("storage_advice", move || {
        storage_advice::run(
            state.clone(),
            events.clone(),
            leader.clone(),
            shutdown.clone(),
        )
    })
}

/// The loop holding static NodePools at their replicas (`StaticCapacity`), woken by
/// NodePool and NodeClaim changes.
pub(super) fn start_static_capacity(
    w: &Wiring,
    provisioning: &Provisioning,
    hooks: &mut Subscribers,
) -> JoinHandle<()> {
    let trigger = Trigger::default();
    hooks.nodepools.push(requeue::on_change(&[&trigger]));
    hooks.nodeclaims.push(requeue::on_change(&[&trigger]));
    hooks.nodeclasses.push(requeue::on_change(&[&trigger]));
    let deps = StaticCapacityDeps {
        client: w.client.clone(),
        state: w.state.clone(),
        creator: provisioning.creator.clone(),
        created: provisioning.created.clone(),
        catalog: provisioning.catalog,
        offerings: provisioning.offerings.clone(),
        instance_types: provisioning.instance_types.clone(),
        controller: provisioning.controller,
        deleted: static_capacity::Deleted::default(),
    };
    let (leader, shutdown) = (w.leader.clone(), w.shutdown.clone());
    supervisor::task(static_capacity::TASK_NAME, move || {
        static_capacity::run(
            deps.clone(),
            trigger.clone(),
            leader.clone(),
            shutdown.clone(),
        )
    })
}

/// The state-driven status reconcilers: NodeClaim disruption conditions and
/// `lastPodEventTime` (drift needs the cloud provider; without one only the NodePool's own
/// drift is seen), expiration, and NodePool hash and status. Each is woken by the watch
/// events it depends on.
pub(super) fn start_status_loops(
    client: &Client,
    state: &Arc<ClusterState>,
    provider: Option<Arc<dyn CloudProvider>>,
    hooks: &mut Subscribers,
    leader: &watch::Receiver<bool>,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let conditions = Trigger::default();
    let departures = Departures::default();
    hooks.pods.push(Box::new(podevents::on_pod(
        departures.clone(),
        conditions.clone(),
    )));
    let expiry = Trigger::default();
    let status = Trigger::default();
    hooks
        .nodeclaims
        .push(requeue::on_change(&[&conditions, &expiry, &status]));
    hooks
        .nodepools
        .push(requeue::on_change(&[&conditions, &status]));
    hooks
        .nodeclasses
        .push(requeue::on_change(&[&conditions, &expiry, &status]));
    hooks
        .nodes
        .push(requeue::on_change(&[&conditions, &status]));
    let metered = provider.map(|p| {
        Arc::new(MeteredCloudProvider::new(
            p,
            nodeclaim_disruption::CONTROLLER,
        )) as Arc<dyn CloudProvider>
    });
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    // Rebuilt after a panic with an empty memory; the departures the pod hook feeds are kept.
    let conditions_task = supervisor::task("nodeclaim_disruption", move || {
        let controller =
            NodeClaimDisruption::new(c.clone(), st.clone(), metered.clone(), departures.clone());
        nodeclaim_disruption::run(controller, conditions.clone(), l.clone(), s.clone())
    });
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    let expiration_task = supervisor::task("expiration", move || {
        expiration::run(c.clone(), st.clone(), expiry.clone(), l.clone(), s.clone())
    });
    let (c, st, l, s) = (
        client.clone(),
        state.clone(),
        leader.clone(),
        shutdown.clone(),
    );
    let status_task = supervisor::task("nodepool_status", move || {
        nodepool_status::run(c.clone(), st.clone(), status.clone(), l.clone(), s.clone())
    });
    vec![conditions_task, expiration_task, status_task]
}

/// With a cloud provider: the LaunchTemplateCache and the Tagger (when the provider has
/// those capabilities) with their sweeps, and garbage collection. Returns the PodWatcher
/// subscriptions feeding the actors and the tasks to await on stop.
pub(super) fn start_cloud_loops(
    client: &Client,
    state: &Arc<ClusterState>,
    provider: Option<Arc<dyn CloudProvider>>,
    leader: &watch::Receiver<bool>,
    shutdown: &watch::Receiver<bool>,
) -> (Subscribers, Vec<JoinHandle<()>>) {
    let mut hooks = Subscribers::default();
    let mut tasks = Vec::new();
    let Some(provider) = provider else {
        return (hooks, tasks);
    };
    if provider.node_class_reconciler().is_some() {
        let depth = MailboxDepth::new(
            "launch_template_cache",
            LAUNCH_TEMPLATE_CACHE_MAILBOX_CAPACITY,
        );
        let addr = {
            let (client, state, provider, leader, mailbox) = (
                client.clone(),
                state.clone(),
                Arc::clone(&provider),
                leader.clone(),
                depth.clone(),
            );
            supervisor::start("launch_template_cache", depth.clone(), move || {
                Some(LaunchTemplateCache::new(
                    client.clone(),
                    state.clone(),
                    Arc::clone(&provider),
                    leader.clone(),
                    mailbox.clone(),
                ))
            })
        };
        let out = Outbox::new(&addr, depth);
        let (st, o, l, s) = (state.clone(), out.clone(), leader.clone(), shutdown.clone());
        tasks.push(supervisor::task("launch_template_cache_sweep", move || {
            launch_template_cache::sweep(st.clone(), o.clone(), l.clone(), s.clone())
        }));
        hooks
            .nodeclasses
            .push(Box::new(launch_template_cache::on_change(
                state.clone(),
                out,
            )));
    }
    if provider.instance_tagger().is_some() {
        let depth = MailboxDepth::new("tagger", TAGGER_MAILBOX_CAPACITY);
        let addr = {
            let (client, state, provider, leader, mailbox) = (
                client.clone(),
                state.clone(),
                Arc::clone(&provider),
                leader.clone(),
                depth.clone(),
            );
            supervisor::start("tagger", depth.clone(), move || {
                Some(Tagger::new(
                    client.clone(),
                    state.clone(),
                    Arc::clone(&provider),
                    leader.clone(),
                    mailbox.clone(),
                ))
            })
        };
        let out = Outbox::new(&addr, depth);
        let (st, o, s) = (state.clone(), out.clone(), shutdown.clone());
        tasks.push(supervisor::task("tagging_sweep", move || {
            tagging::sweep(st.clone(), o.clone(), s.clone())
        }));
        hooks
            .nodeclaims
            .push(Box::new(tagging::on_change(state.clone(), out)));
    }
    tasks.push(cloud_pass(
        "garbage_collection",
        garbage_collection::CONTROLLER,
        garbage_collection::run,
        (client, state, &provider, leader, shutdown),
    ));
    tasks.push(cloud_pass(
        "capacity_type",
        capacity_type::CONTROLLER,
        capacity_type::run,
        (client, state, &provider, leader, shutdown),
    ));
    (hooks, tasks)
}

/// What a leader-only pass over the cloud runs with: the client, cluster state, provider,
/// leadership and shutdown.
type CloudPassArgs<'a> = (
    &'a Client,
    &'a Arc<ClusterState>,
    &'a Arc<dyn CloudProvider>,
    &'a watch::Receiver<bool>,
    &'a watch::Receiver<bool>,
);

/// Supervises `run` (a pass on [`crate::periodic`]'s loop) as task `name`, its cloud calls
/// metered under its upstream `controller` name.
fn cloud_pass<F, Fut>(
    name: &'static str,
    controller: &'static str,
    run: F,
    (client, state, provider, leader, shutdown): CloudPassArgs<'_>,
) -> JoinHandle<()>
where
    F: Fn(
            Client,
            Arc<ClusterState>,
            Arc<dyn CloudProvider>,
            watch::Receiver<bool>,
            watch::Receiver<bool>,
        ) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let metered: Arc<dyn CloudProvider> =
        Arc::new(MeteredCloudProvider::new(Arc::clone(provider), controller));
    let (client, state) = (client.clone(), state.clone());
    let (leader, shutdown) = (leader.clone(), shutdown.clone());
    supervisor::task(name, move || {
        run(
            client.clone(),
            state.clone(),
            Arc::clone(&metered),
            leader.clone(),
            shutdown.clone(),
        )
    })
}
