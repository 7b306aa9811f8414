//! The PodWatcher subscriptions the daemon wires: what starts a batch, what the lifecycle and
//! the TerminationDrainer are told, what ends the disruption loop's no-op memo, and the
//! trackers behind the observability metrics.

use std::sync::Arc;

use crate::batcher;
use crate::batcher::triggers::{self, Retrigger};
use crate::cluster_metrics::{ConditionTracker, StartupTracker};
use crate::disruption::Generation;
use crate::lifecycle::Changed;
use crate::mailbox::DeliverError;
use crate::mailbox::Outbox;
use crate::pod_watcher::Subscribers;
use crate::state::ClusterState;

use super::wiring::Wiring;

/// The trackers behind the metrics that need to see objects change: pod startup and binding
/// durations, and each kind's condition transitions and termination durations.
pub(super) fn subscribe_observability(subscribers: &mut Subscribers, state: &Arc<ClusterState>) {
    let mut startup = StartupTracker::reading(state.clone());
    subscribers.pods.push(Box::new(move |pod, change| {
        startup.observe(pod, change);
    }));
    let mut nodes = ConditionTracker::default();
    subscribers
        .nodes
        .push(Box::new(move |node, change| nodes.observe(node, change)));
    let mut nodeclaims = ConditionTracker::default();
    subscribers.nodeclaims.push(Box::new(move |claim, change| {
        nodeclaims.observe(claim, change)
    }));
    let mut nodepools = ConditionTracker::default();
    subscribers.nodepools.push(Box::new(move |pool, change| {
        nodepools.observe(pool, change)
    }));
    let mut nodeclasses = ConditionTracker::default();
    subscribers.nodeclasses.push(Box::new(move |class, change| {
        nodeclasses.observe(class, change)
    }));
}

/// The watch hooks that start a batch: pods to place, and changes that may let pods the
/// last round left pending fit now ([`Retrigger`]); and the startup-time tracker.
pub(super) fn subscribe_triggers(
    subscribers: &mut Subscribers,
    w: &Wiring,
    to_batcher: &Outbox<batcher::Trigger>,
    retrigger: &Retrigger,
) {
    subscribers.pods.push(Box::new(triggers::on_pod(
        w.state.clone(),
        to_batcher.clone(),
    )));
    subscribers
        .nodeclaims
        .push(Box::new(triggers::on_node_claim(retrigger.clone())));
    subscribers
        .nodepools
        .push(Box::new(triggers::on_node_pool(retrigger.clone())));
    subscribers
        .nodeclasses
        .push(Box::new(triggers::on_node_class(retrigger.clone())));
    subscribers
        .nodes
        .push(Box::new(triggers::on_node(retrigger.clone())));
}

/// Node and NodeClaim changes to the NodeClaim lifecycle or the TerminationDrainer; a full
/// mailbox drops one (counted), and the actor's periodic resync repairs the drop.
pub(super) fn subscribe_changes(subscribers: &mut Subscribers, lifecycle: &Outbox<Changed>) {
    let out = lifecycle.clone();
    subscribers.nodes.push(Box::new(move |node, _| {
        notify(
            &out,
            Changed::Node {
                name: node.metadata.name.clone().unwrap_or_default(),
                provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
            },
        );
    }));
    let out = lifecycle.clone();
    subscribers.nodeclaims.push(Box::new(move |claim, _| {
        notify(
            &out,
            Changed::NodeClaim(claim.metadata.name.clone().unwrap_or_default()),
        );
    }));
}

/// Every watched change the disruption decision reads bumps `generation`, ending the
/// disruption loop's no-op memo.
pub(super) fn subscribe_generation(subscribers: &mut Subscribers, generation: &Generation) {
    let g = generation.clone();
    subscribers.pods.push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers.nodes.push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers.nodeclaims.push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers.nodepools.push(Box::new(move |_, _| g.bump()));
    // An overlay re-prices what consolidation compares (upstream marks cluster state
    // unconsolidated after each overlay evaluation); a buffer changes the room it must keep.
    let g = generation.clone();
    subscribers
        .node_overlays
        .push(Box::new(move |_, _| g.bump()));
    let g = generation.clone();
    subscribers
        .capacity_buffers
        .push(Box::new(move |_, _| g.bump()));
}

/// A change an actor could not be told of: counted (`kerf_mailbox_dropped_total`) whether
/// its mailbox was full or it had stopped; a stopped actor is also warned about, since only
/// its restart (or the process's) repairs that.
pub(super) fn notify(lifecycle: &Outbox<Changed>, change: Changed) {
    match lifecycle.try_deliver(change) {
        // Counted by the outbox; the actor's resync repairs the drop.
        Ok(()) | Err(DeliverError::Full(_)) => {}
        Err(err @ DeliverError::Closed(_)) => {
            metrics::counter!(crate::metrics::MAILBOX_DROPPED, "mailbox" => lifecycle.depth().name().to_owned())
                .increment(1);
            tracing::warn!(error = %err, "notifying of a change");
        }
    }
}
