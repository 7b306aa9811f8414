//! The actors the daemon starts: with a cloud, the NodeClaimCreator, the NodeClaim lifecycle
//! and the TerminationDrainer ([`LaunchingActors`]); always, the Batcher and the Provisioner
//! gated on leadership and shutdown ([`ProvisioningActors`]).

use std::sync::Arc;

use kerf::cloudprovider::CloudProvider;
use tokio::task::JoinHandle;

use crate::batcher::{self, BATCHER_MAILBOX_CAPACITY, BatchLimits, Batcher};
use crate::cloud_metrics::MeteredCloudProvider;
use crate::lifecycle::{LIFECYCLE_MAILBOX_CAPACITY, LaunchDeps, LifecycleDeps, NodeClaimLifecycle};
use crate::mailbox::{MailboxDepth, Outbox};
use crate::nodeclaim_creator::{
    NAME as NODECLAIM_CREATOR, NODECLAIM_CREATOR_MAILBOX_CAPACITY, NodeClaimCreator,
};
use crate::offering_cache::{
    OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache, UNAVAILABLE_OFFERINGS_TTL,
};
use crate::pod_watcher::Subscribers;
use crate::provisioner::{
    self, InstanceTypeCache, PROVISIONER_MAILBOX_CAPACITY, Provisioner, Provisioning,
};
use crate::shutdown;
use crate::shutdown::{GracefulShutdown, InFlight};
use crate::supervisor::{self, Supervised};
use crate::termination::{
    TERMINATION_MAILBOX_CAPACITY, TerminationDeps, TerminationDrainer, TerminationStats,
};

use super::environment::{Cloud, Timings};
use super::subscriptions::subscribe_changes;
use super::wiring::{Solving, Wiring};

/// Upstream's name for the controller that launches NodeClaims: the `controller` label of
/// the NodeClaim lifecycle's cloud provider metrics (launch, termination, lookups).
pub(super) const LAUNCH_CONTROLLER: &str = "nodeclaim.lifecycle";

/// The actors that exist only with a cloud: the NodeClaimCreator, the NodeClaim lifecycle
/// and the TerminationDrainer, and what the Provisioner launches through.
pub(super) struct LaunchingActors {
    pub(super) creator: Supervised<NodeClaimCreator>,
    pub(super) lifecycle: Supervised<NodeClaimLifecycle>,
    pub(super) lifecycle_depth: MailboxDepth,
    pub(super) termination: Supervised<TerminationDrainer>,
    pub(super) termination_depth: MailboxDepth,
    pub(super) termination_stats: Arc<TerminationStats>,
    pub(super) provisioning: Provisioning,
    /// The lifecycle's launches in flight, which a stopping daemon waits for.
    pub(super) launches: InFlight,
}

impl LaunchingActors {
    pub(super) fn start(
        w: &Wiring,
        cloud: Cloud,
        provider: Option<Arc<dyn CloudProvider>>,
        timings: &Timings,
        solving: Solving,
    ) -> Self {
        let lifecycle_depth = MailboxDepth::new("lifecycle", LIFECYCLE_MAILBOX_CAPACITY);
        let termination_depth = MailboxDepth::new("termination", TERMINATION_MAILBOX_CAPACITY);
        let creator_depth =
            MailboxDepth::new(NODECLAIM_CREATOR, NODECLAIM_CREATOR_MAILBOX_CAPACITY);
        let offerings = cloud.offerings.unwrap_or_else(|| {
            OfferingCache::start(
                UNAVAILABLE_OFFERINGS_TTL,
                MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
            )
        });
        let creator = NodeClaimCreator::new(w.client.clone(), creator_depth.clone())
            .with_events(w.events.clone());
        let created = creator.created_claims();
        let metered = MeteredCloudProvider::new(cloud.provider, LAUNCH_CONTROLLER);
        let metered: Arc<dyn CloudProvider> = Arc::new(metered);
        let resolves_node_classes = metered.node_class_reconciler().is_some();
        let deps = LifecycleDeps {
            state: w.state.clone(),
            client: w.client.clone(),
            cloud: Arc::clone(&metered),
            leader: w.leader.clone(),
            shutdown: w.shutdown.clone(),
            depth: lifecycle_depth.clone(),
            launch: LaunchDeps {
                events: w.events.clone(),
                offerings: Some(offerings.clone()),
                created: created.clone(),
                nominate_pods: solving.nominate_pods,
            },
        };
        let lifecycle = NodeClaimLifecycle::new(deps, timings.lifecycle);
        let launches = lifecycle.launches();
        let launching = lifecycle.launching();
        let lifecycle = supervisor::start(
            "lifecycle",
            lifecycle_depth.clone(),
            supervisor::rebuilding(lifecycle, NodeClaimLifecycle::restarted),
        );
        let (termination, termination_stats) = TerminationDrainer::new(
            TerminationDeps {
                state: w.state.clone(),
                client: w.client.clone(),
                cloud: metered,
                events: w.events.clone(),
                launching,
                leader: w.leader.clone(),
                shutdown: w.shutdown.clone(),
                depth: termination_depth.clone(),
            },
            timings.termination,
        );
        let termination = supervisor::start(
            "termination",
            termination_depth.clone(),
            supervisor::rebuilding(termination, TerminationDrainer::restarted),
        );
        let creator = supervisor::start(
            NODECLAIM_CREATOR,
            creator_depth.clone(),
            supervisor::rebuilding(creator, NodeClaimCreator::restarted),
        );
        let provisioning = Provisioning {
            creator: Outbox::new(&creator, creator_depth),
            created,
            offerings: Some(offerings),
            catalog: cloud.catalog,
            controller: solving.controller,
            policies: solving.policies,
            events: w.events.clone(),
            instance_types: InstanceTypeCache::following(provider)
                .with_reserved_capacity(solving.reserved_capacity),
            resolves_node_classes,
        };
        Self {
            creator,
            lifecycle,
            lifecycle_depth,
            termination,
            termination_depth,
            termination_stats,
            provisioning,
            launches,
        }
    }

    /// Tells the lifecycle and the TerminationDrainer what changed.
    pub(super) fn subscribe(&self, subscribers: &mut Subscribers) {
        let lifecycle = Outbox::new(&self.lifecycle, self.lifecycle_depth.clone());
        subscribe_changes(subscribers, &lifecycle);
        let termination = Outbox::new(&self.termination, self.termination_depth.clone());
        subscribe_changes(subscribers, &termination);
    }
}

/// The Batcher and the Provisioner, gated on leadership and shutdown.
pub(super) struct ProvisioningActors {
    pub(super) provisioner: provisioner::Started,
    pub(super) batcher: Supervised<Batcher>,
    pub(super) to_batcher: Outbox<batcher::Trigger>,
    pub(super) graceful: GracefulShutdown,
    pub(super) gate_task: JoinHandle<()>,
}

impl ProvisioningActors {
    pub(super) fn start(
        w: &Wiring,
        provisioning: Option<Provisioning>,
        launches: Option<InFlight>,
        limits: BatchLimits,
    ) -> Self {
        let created = provisioning.as_ref().map(|p| shutdown::Created {
            claims: p.created.clone(),
            state: w.state.clone(),
        });
        let (graceful, draining) = GracefulShutdown::new(launches.unwrap_or_default(), created);
        // The Provisioner runs rounds only while this replica leads and is not stopping.
        let (may_provision, gate_task) =
            shutdown::gate(w.leader.clone(), draining, w.shutdown.clone());
        let provisioner_depth = MailboxDepth::new("provisioner", PROVISIONER_MAILBOX_CAPACITY);
        let provisioner = Provisioner::start(
            w.state.clone(),
            may_provision,
            provisioner_depth.clone(),
            provisioning,
        );
        let batcher_depth = MailboxDepth::new("batcher", BATCHER_MAILBOX_CAPACITY);
        let to_provisioner = Outbox::new(&provisioner.addr, provisioner_depth);
        let mailbox = batcher_depth.clone();
        let batcher = supervisor::start("batcher", batcher_depth.clone(), move || {
            Some(Batcher::new(
                limits,
                to_provisioner.clone(),
                mailbox.clone(),
            ))
        });
        let to_batcher = Outbox::new(&batcher, batcher_depth);
        Self {
            provisioner,
            batcher,
            to_batcher,
            graceful,
            gate_task,
        }
    }
}
