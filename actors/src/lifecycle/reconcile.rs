//! One reconcile of one target, reading cluster state and writing through the API: a live
//! NodeClaim is launched ([`super::launch`]) until it is `Launched`, then goes through
//! registration, initialization and liveness and gets its status written once; a deleting
//! NodeClaim is left to [`crate::termination`]. Decisions come
//! from the pure modules beside this one; this file only reads, calls and writes. Every
//! write that replaces a list is locked to the version read ([`super::patch::locked`]), so
//! a reconcile working from a stale copy fails with 409 and is simply run again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::{Conditions, types};
use kerf::api::{NodeClaim, NodeClaimStatus};
use kerf::labels;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::conditions::ConditionSet;
use super::initialization::{self, Awaiting};
use super::launch;
use super::liveness::{self, Verdict};
use super::nomination_slots::Step;
use super::patch;
use super::reconciler::{ReconcileError, Reconciler, is_status, label};
use super::registration::{has_unregistered_taint, lacks_unregistered_taint, registered_node};
use crate::events::upstream as events;
use crate::metrics::{NODECLAIMS_INITIALIZED, NODECLAIMS_REGISTERED, NODES_CREATED};
use crate::workqueue::Outcome;
use kerf::finalizers::has_termination_finalizer;

/// Reconciles one NodeClaim.
pub async fn run(r: &Arc<Reconciler>, name: &str) -> Result<Outcome, ReconcileError> {
    nodeclaim(r, name).await
}

/// NodeClaims of node classes kerf provides (upstream's "managed" check).
pub fn is_managed(claim: &NodeClaim) -> bool {
    let class = claim.node_class_ref();
    class.group == labels::AWS_GROUP && class.kind == "EC2NodeClass"
}

async fn nodeclaim(r: &Arc<Reconciler>, name: &str) -> Result<Outcome, ReconcileError> {
    let Some(claim) = r.state.nodeclaim(name) else {
        r.superseded.forget(name);
        return Ok(Outcome::DONE);
    };
    // The watch has delivered it: rounds count the store's copy now, not the registry's.
    r.launch.created.seen(name);
    if r.superseded.is_stale(&claim) {
        return Ok(Outcome::DONE);
    }
    if !is_managed(&claim) {
        return Ok(Outcome::DONE);
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Outcome::DONE);
    }
    if !has_termination_finalizer(claim.metadata.finalizers.as_ref()) {
        // Nothing may be launched without the finalizer that guarantees its cleanup; the
        // write's watch event runs the rest.
        Box::pin(add_finalizer(r, &claim)).await?;
        return Ok(Outcome::DONE);
    }
    let now = Timestamp::now();
    // Each step's future boxed: a reconcile's own future is as large as its largest step,
    // and a large round's thousand launches wait for the client budget at once.
    if claim.is_condition_true(types::LAUNCHED) {
        Box::pin(launched(r, &claim, now)).await
    } else {
        Box::pin(unlaunched(r, name, &claim, now)).await
    }
}

/// Launches `claim`, or deletes it past its launch TTL.
async fn unlaunched(
    r: &Arc<Reconciler>,
    name: &str,
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<Outcome, ReconcileError> {
    // Past its launch TTL it is deleted rather than tried once more.
    if let Verdict::TimedOut { reason, ttl } = liveness::judge(claim, r.config.ttls(), now) {
        Box::pin(delete_for_timeout(r, claim, reason, ttl)).await?;
        return Ok(Outcome::DONE);
    }
    let launched = {
        let _launching = r.launching.start(name);
        r.launches.track(Box::pin(launch::launch(r, claim))).await?
    };
    // As soon as the machine exists, not at registration: its pods' nominations are
    // written while it boots, so registration finds them done instead of waiting. Beside
    // the reconcile, which goes on at once (they are bounded in time and write slots).
    if let Some(node) = launched.node {
        let (r, name) = (Arc::clone(r), name.to_owned());
        // A panic is logged and counted; registration nominates what this left undone.
        crate::supervisor::spawn_local_reported("nomination", async move {
            super::nominate::nominate(&r, Step::Launch, &name, &node).await;
        });
    }
    Ok(launched.outcome)
}

/// Registers and initializes a launched `claim`, and writes its status.
async fn launched(
    r: &Arc<Reconciler>,
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<Outcome, ReconcileError> {
    let mut set = ConditionSet::new(claim.conditions(), claim.metadata.generation, now);
    let mut node_name = claim.status.as_ref().and_then(|s| s.node_name.clone());
    let node = Box::pin(register(r, claim, &mut set, &mut node_name)).await?;
    Box::pin(initialize(r, claim, &mut set, node.as_ref())).await?;
    // Only the status is judged and written: a copy of the whole NodeClaim (its instance
    // types, ten kilobytes) per reconcile waiting for its write is megabytes at scale.
    let judged = NodeClaimStatus {
        conditions: set.into_vec(),
        node_name,
        ..claim.status.clone().unwrap_or_default()
    };
    match liveness::judge_conditions(claim, &judged.conditions, r.config.ttls(), now) {
        Verdict::TimedOut { reason, ttl } => {
            Box::pin(delete_for_timeout(r, claim, reason, ttl)).await?;
            Ok(Outcome::DONE)
        }
        Verdict::Waiting { remaining } => {
            Box::pin(write_status(r, claim, &judged)).await?;
            Ok(Outcome::after(remaining))
        }
        Verdict::Registered => {
            Box::pin(write_status(r, claim, &judged)).await?;
            Ok(Box::pin(withdraw_expired_nominations(r, claim.name(), &judged)).await)
        }
    }
}

/// Withdraws the nominations to its Node that its pods could not use: until the window of
/// its pods' nominations has passed, those the kube-scheduler found futile (and asks to
/// come back soon), then every one left but those of pods it has not tried yet, which go
/// when it refuses them or at the limit (see [`super::nominate::withdraw_expired`]).
async fn withdraw_expired_nominations(
    r: &Reconciler,
    name: &str,
    status: &NodeClaimStatus,
) -> Outcome {
    let node = status.node_name.as_deref();
    let initialized = status
        .conditions
        .condition(types::INITIALIZED)
        .filter(|c| c.is_true())
        .map(|c| c.last_transition_time.0);
    let (Some(node), Some(initialized)) = (node, initialized) else {
        return Outcome::DONE;
    };
    match super::nominate::withdraw_expired(r, name, node, initialized).await {
        Some(remaining) => Outcome::after(remaining),
        None => Outcome::DONE,
    }
}

async fn add_finalizer(r: &Reconciler, claim: &NodeClaim) -> Result<(), ReconcileError> {
    // The wanted copy goes before the write waits for the client: a scale-up's thousand
    // NodeClaims get their finalizers at once.
    let body = {
        let mut wanted = claim.clone();
        wanted
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(labels::TERMINATION_FINALIZER.to_owned());
        patch::locked(claim, &wanted, claim.metadata.resource_version.as_deref())
    };
    let Some(body) = body else {
        return Ok(());
    };
    r.nodeclaims
        .patch(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|source| ReconcileError::PatchNodeClaim {
            nodeclaim: claim.name().to_owned(),
            source,
        })?;
    // A reconcile that reads `claim` again before the write's watch event leaves it, rather
    // than writing the finalizer a second time.
    r.superseded.record(claim);
    Ok(())
}

/// Registers `claim`'s Node if it has one; returns the Node as it now is.
async fn register(
    r: &Reconciler,
    claim: &NodeClaim,
    set: &mut ConditionSet,
    node_name: &mut Option<String>,
) -> Result<Option<Node>, ReconcileError> {
    let nodes = r.state.nodes_of(claim);
    if set.is_true(types::REGISTERED) {
        return Ok(single(nodes));
    }
    let node = match nodes.as_slice() {
        [] => {
            let awaiting = Awaiting::node_not_found();
            set.set_unknown(types::REGISTERED, awaiting.reason, &awaiting.message);
            return Ok(None);
        }
        [node] => node,
        _ => {
            set.set_false(
                types::REGISTERED,
                "MultipleNodesFound",
                "Invariant violated, matched multiple nodes",
            );
            return Ok(None);
        }
    };
    let name = node.name_any();
    if lacks_unregistered_taint(node) {
        tracing::error!(
            nodeclaim = claim.name(),
            node = %name,
            taint = labels::UNREGISTERED_TAINT,
            "node registered without the taint that prevents registration races"
        );
    }
    // Before the taint that keeps pods off the Node goes, so no pod planned elsewhere can
    // take the room launched for these; and only while it is there: a registration run again
    // (its status write lost a race) finds the Node open, and waiting again would only hold
    // the NodeClaim back.
    let node = if has_unregistered_taint(node) {
        super::nominate::nominate(r, Step::Registration, claim.name(), &name).await;
        // The wait takes seconds, in which the kubelet writes the Node: the patch is locked
        // to the version it has now, or it would conflict and all this would run again.
        r.state.node(&name).unwrap_or_else(|| Arc::clone(node))
    } else {
        Arc::clone(node)
    };
    let body = patch::locked(
        &*node,
        &registered_node(claim, &node),
        node.metadata.resource_version.as_deref(),
    );
    let registered = match body {
        Some(body) => r
            .nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(body))
            .await
            .map_err(|source| ReconcileError::PatchNode {
                node: name.clone(),
                source,
            })?,
        None => (*node).clone(),
    };
    set.set_true(types::REGISTERED);
    *node_name = Some(name);
    Ok(Some(registered))
}

fn single(mut nodes: Vec<Arc<Node>>) -> Option<Node> {
    (nodes.len() == 1).then(|| (*nodes.remove(0)).clone())
}

/// Marks `claim` initialized once its registered `node` is.
async fn initialize(
    r: &Reconciler,
    claim: &NodeClaim,
    set: &mut ConditionSet,
    node: Option<&Node>,
) -> Result<(), ReconcileError> {
    if !set.is_true(types::REGISTERED) || set.is_true(types::INITIALIZED) {
        return Ok(());
    }
    let Some(node) = node else {
        let awaiting = Awaiting::node_not_found();
        set.set_unknown(types::INITIALIZED, awaiting.reason, &awaiting.message);
        return Ok(());
    };
    if let Err(awaiting) = initialization::check(claim, node) {
        set.set_unknown(types::INITIALIZED, awaiting.reason, &awaiting.message);
        return Ok(());
    }
    let labelled = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(labels::INITIALIZED).map(String::as_str) == Some("true"));
    if !labelled {
        let name = node.name_any();
        // Adding one label key cannot clobber a concurrent write, so no lock is needed.
        let body = json!({"metadata": {"labels": {labels::INITIALIZED: "true"}}});
        r.nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(body))
            .await
            .map_err(|source| ReconcileError::PatchNode { node: name, source })?;
    }
    set.set_true(types::INITIALIZED);
    Ok(())
}

/// Writes the status `judged` holds if it differs from `claim`'s, then counts the
/// transitions it made. The write is locked to the version read, so a transition is
/// written, and counted, once.
async fn write_status(
    r: &Reconciler,
    claim: &NodeClaim,
    after: &NodeClaimStatus,
) -> Result<(), ReconcileError> {
    let Some(before) = claim.status.as_ref() else {
        return Ok(());
    };
    if before == after {
        return Ok(());
    }
    let mut status = json!({ "conditions": after.conditions });
    if let Some(node_name) = &after.node_name {
        status["nodeName"] = json!(node_name);
    }
    let body = json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": status,
    });
    let written = r
        .nodeclaims
        .patch_status(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(|source| ReconcileError::PatchNodeClaimStatus {
            nodeclaim: claim.name().to_owned(),
            source,
        })?;
    // A patch that changed nothing leaves the version, and brings no watch event to wait for.
    if written.metadata.resource_version != claim.metadata.resource_version {
        r.superseded.record(claim);
    }
    count_transitions(claim, after);
    Ok(())
}

fn count_transitions(claim: &NodeClaim, after: &NodeClaimStatus) {
    let became =
        |type_: &str| !claim.is_condition_true(type_) && after.conditions.is_condition_true(type_);
    let pool = claim.nodepool_name().unwrap_or_default().to_owned();
    let node = after.node_name.clone().unwrap_or_default();
    if became(types::REGISTERED) {
        let zone = label(claim, labels::ZONE);
        metrics::counter!(NODECLAIMS_REGISTERED, "nodepool" => pool.clone()).increment(1);
        metrics::counter!(NODES_CREATED, "nodepool" => pool.clone(), "zone" => zone).increment(1);
        tracing::info!(nodeclaim = claim.name(), %node, "registered nodeclaim");
    }
    if became(types::INITIALIZED) {
        metrics::counter!(NODECLAIMS_INITIALIZED, "nodepool" => pool).increment(1);
        tracing::info!(nodeclaim = claim.name(), %node, "initialized nodeclaim");
    }
}

async fn delete_for_timeout(
    r: &Reconciler,
    claim: &NodeClaim,
    reason: &'static str,
    ttl: Duration,
) -> Result<(), ReconcileError> {
    match r
        .nodeclaims
        .delete(claim.name(), &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(error) if is_status(&error, 404) => return Ok(()),
        Err(source) => {
            return Err(ReconcileError::DeleteNodeClaim {
                nodeclaim: claim.name().to_owned(),
                source,
            });
        }
    }
    crate::metrics::nodeclaim_disrupted(
        reason,
        claim.nodepool_name().unwrap_or_default(),
        &label(claim, labels::CAPACITY_TYPE),
    );
    if reason == liveness::REGISTRATION_TIMEOUT_REASON {
        let message = liveness::registration_timeout_message(claim, ttl);
        r.launch
            .events
            .publish(events::registration_timeout(claim, &message));
        tracing::warn!(nodeclaim = claim.name(), reason, "{message}");
    } else {
        tracing::info!(
            nodeclaim = claim.name(),
            reason,
            ttl = ?ttl,
            "deleting nodeclaim past its liveness timeout"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ClusterState;

    /// The most a reconcile's own future may hold. Up to `MAX_CONCURRENT_RECONCILES` wait at
    /// once in a large scale-up (launching, registering while nominations are written), so
    /// each step's future is boxed and only the step a reconcile waits in takes room; inline
    /// they made every reconcile hold the largest step's 12 KiB.
    const RECONCILE_MAX_BYTES: usize = 3 * 1024;

    /// Node `node-a` of instance `i-0abc` at `version`, tainted unregistered while `tainted`.
    fn kubelets_node(version: &str, tainted: bool) -> Node {
        let taints: Vec<serde_json::Value> = if tainted {
            vec![json!({"key": labels::UNREGISTERED_TAINT, "effect": "NoExecute"})]
        } else {
            Vec::new()
        };
        serde_json::from_value(json!({
            "metadata": {"name": "node-a", "resourceVersion": version},
            "spec": {"providerID": "aws:///us-west-2a/i-0abc", "taints": taints},
        }))
        .expect("valid node")
    }

    #[tokio::test(start_paused = true)]
    async fn registration_patches_the_node_as_the_nomination_wait_left_it_and_waits_once() {
        use super::super::nominate::{NOMINATION_BUDGET, tests as nominate};
        use crate::state::ObjectKey;
        let (state, mut writers) = ClusterState::new();
        writers.pods.apply(
            ObjectKey::new(Some("default"), "pinned"),
            nominate::pinned_pod(),
        );
        let node_key = ObjectKey::new(None, "node-a");
        writers
            .nodes
            .apply(node_key.clone(), kubelets_node("1", true));
        // The pinned pod's nomination never lands: registration waits its whole budget.
        let (r, sent) = nominate::registering_reconciler(state);
        nominate::created_for(&r, &["pinned"]);
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "a"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                "name": "default"}, "requirements": []},
            "status": {"providerID": "aws:///us-west-2a/i-0abc"},
        }))
        .expect("valid nodeclaim");
        let fresh = || ConditionSet::new(&[], Some(1), Timestamp::now());

        let (mut set, mut node_name) = (fresh(), None);
        let started = tokio::time::Instant::now();
        let kubelet = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writers
                .nodes
                .apply(node_key.clone(), kubelets_node("2", true));
        };
        let (registered, ()) =
            tokio::join!(register(&r, &claim, &mut set, &mut node_name), kubelet);
        registered.expect("registered");
        assert_eq!(
            started.elapsed(),
            NOMINATION_BUDGET,
            "waited for the nomination"
        );
        assert!(set.is_true(types::REGISTERED));
        let patches: Vec<serde_json::Value> = sent
            .lock()
            .expect("not poisoned")
            .drain(..)
            .map(|(_, body)| serde_json::from_str(&body).expect("json"))
            .collect();
        assert_eq!(patches.len(), 1, "{patches:?}");
        assert_eq!(
            patches[0]["metadata"]["resourceVersion"], "2",
            "locked to the Node the kubelet wrote during the wait, not the one read before it"
        );

        // Run again (its status write lost a race) on the Node it opened: no second wait.
        writers.nodes.apply(node_key, kubelets_node("3", false));
        let (mut set, mut node_name) = (fresh(), None);
        let started = tokio::time::Instant::now();
        register(&r, &claim, &mut set, &mut node_name)
            .await
            .expect("registered");
        assert_eq!(started.elapsed(), Duration::ZERO, "did not wait again");
        assert!(set.is_true(types::REGISTERED));
    }

    #[tokio::test]
    async fn a_reconcile_holds_only_the_step_it_waits_in() {
        let r = Arc::new(super::super::nominate::tests::reconciler());
        let reconcile = run(&r, "default-abc");
        let bytes = std::mem::size_of_val(&reconcile);
        assert!(
            bytes <= RECONCILE_MAX_BYTES,
            "a reconcile's future holds {bytes} bytes"
        );
    }
}
