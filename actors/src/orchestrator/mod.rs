//! The Orchestrator (upstream's orchestration queue) executes the disruption loop's
//! commands: it taints the candidates' Nodes `karpenter.sh/disrupted:NoSchedule`, sets
//! `DisruptionReason` on their NodeClaims, creates the replacements through the
//! NodeClaimCreator (counted in `karpenter_nodeclaims_created_total` under the
//! disruption's reason), waits until each is `Initialized` (at most
//! [`REPLACEMENT_TIMEOUT`]), then deletes the candidates' NodeClaims and counts
//! `karpenter_nodeclaims_disrupted_total`. A replacement deleted or timed out rolls the
//! command back (marks off, replacements deleted, counted in
//! `karpenter_voluntary_disruption_queue_failures_total`).
//!
//! [`Orchestrator::submit`] returns once the candidates are marked and the replacements
//! exist in cluster state, so the loop's next pass never plans a held candidate's pods
//! again. Each command runs as its own task behind a bounded mailbox; the nodes of every
//! command in flight are in the shared [`InQueue`] until their NodeClaims are deleting.
//! Commands live in memory only, as upstream's: a new leader removes the marks they left.

mod marks;

pub use marks::{
    MarkError, has_disrupted_taint, has_disruption_reason, set_disrupted_taint,
    set_disruption_reason,
};

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::disruption::{Decision, Method, Reason};
use kerf::scheduling::PlannedNodeClaim;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::events::EventRecorder;
use crate::events::disruption::{self as events, Kind, Subject};
use crate::mailbox::Outbox;
use crate::metrics::{DISRUPTION_QUEUE_FAILURES, nodeclaim_disrupted};
use crate::nodeclaim_creator::CreateNodeClaim;
use crate::state::{ClusterState, ObjectKey};

/// The disruption loop sends one command per pass and waits until it has started, so it
/// uses one slot at a time; the bound only keeps another sender, or a stuck queue, from
/// piling up commands that would have to be re-validated anyway.
pub const ORCHESTRATOR_MAILBOX_CAPACITY: usize = 8;

/// Upstream gives a command's replacements ten minutes to initialize before rolling back.
pub const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// How often a waiting command looks at its replacements in cluster state (no API calls).
pub const REPLACEMENT_POLL: Duration = Duration::from_secs(1);

/// A replacement the watch has not shown within this time of its creation is taken as
/// gone (a deletion faster than the watch, as after a refused launch); upstream waits 5 s
/// before its first look for the same reason.
pub const UNSEEN_REPLACEMENT_GRACE: Duration = Duration::from_secs(5);

/// How long to wait for the store to show a deleted candidate's NodeClaim deleting before
/// releasing it anyway.
const DELETION_SEEN_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a command looks for its own writes in cluster state: they arrive within
/// milliseconds, and the disruption loop's next pass waits on the first look.
const SEEN_POLL: Duration = Duration::from_millis(10);

/// A node a command disrupts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub node: String,
    pub node_claim: String,
    pub node_pool: String,
    pub capacity_type: String,
}

/// One disruption decision to carry out.
#[derive(Debug, Clone)]
pub struct Command {
    pub method: Method,
    pub reason: Reason,
    pub decision: Decision,
    pub candidates: Vec<Candidate>,
    pub replacements: Vec<PlannedNodeClaim>,
}

impl Command {
    /// Upstream's `DisruptionReason` (and `nodeclaims_disrupted_total` reason).
    pub fn reason_name(&self) -> &'static str {
        reason_name(self.reason)
    }

    /// The reason as upstream's metric labels and replacement creations carry it.
    pub fn reason_label(&self) -> &'static str {
        reason_label(self.reason)
    }
}

pub fn reason_name(reason: Reason) -> &'static str {
    match reason {
        Reason::Empty => "Empty",
        Reason::Drifted => "Drifted",
        Reason::Expired => "Expired",
        Reason::Underutilized => "Underutilized",
    }
}

pub fn reason_label(reason: Reason) -> &'static str {
    match reason {
        Reason::Empty => "empty",
        Reason::Drifted => "drifted",
        Reason::Expired => "expired",
        Reason::Underutilized => "underutilized",
    }
}

/// Upstream's `consolidation_type` label of a method.
pub fn consolidation_type(method: Method) -> &'static str {
    match method {
        Method::Emptiness => "empty",
        Method::MultiNodeConsolidation => "multi",
        Method::SingleNodeConsolidation => "single",
        Method::Drift | Method::Expiration => "",
    }
}

pub fn decision_label(decision: Decision) -> &'static str {
    match decision {
        Decision::Delete => "delete",
        Decision::Replace => "replace",
    }
}

/// Names of the Nodes and NodeClaims held by commands in flight; clones share it.
#[derive(Clone, Debug, Default)]
pub struct InQueue(Arc<Mutex<Held>>);

#[derive(Debug, Default)]
struct Held {
    nodes: HashSet<String>,
    node_claims: HashSet<String>,
    commands: usize,
}

impl InQueue {
    fn hold(&self, command: &Command) {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.commands += 1;
        for c in &command.candidates {
            held.nodes.insert(c.node.clone());
            held.node_claims.insert(c.node_claim.clone());
        }
    }

    fn release(&self, command: &Command) {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.commands = held.commands.saturating_sub(1);
        for c in &command.candidates {
            held.nodes.remove(&c.node);
            held.node_claims.remove(&c.node_claim);
        }
    }

    pub fn holds_node(&self, name: &str) -> bool {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.nodes.contains(name)
    }

    /// The nodes held now.
    pub fn nodes(&self) -> HashSet<String> {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.nodes.clone()
    }

    pub fn holds_node_claim(&self, name: &str) -> bool {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.node_claims.contains(name)
    }

    /// Commands in flight.
    pub fn commands(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .commands
    }
}

/// The Orchestrator's timings (tests shorten them).
#[derive(Debug, Clone, Copy)]
pub struct OrchestratorConfig {
    pub replacement_timeout: Duration,
    pub poll: Duration,
}

impl Default for OrchestratorConfig {
    fn default() -> Self {
        Self {
            replacement_timeout: REPLACEMENT_TIMEOUT,
            poll: REPLACEMENT_POLL,
        }
    }
}

/// What the Orchestrator works with.
#[derive(Clone)]
pub struct OrchestratorDeps {
    pub client: Client,
    pub state: Arc<ClusterState>,
    /// Where replacements are created: the NodeClaimCreator, as for the Provisioner's NodeClaims.
    pub creator: Outbox<CreateNodeClaim>,
    pub events: EventRecorder,
    pub config: OrchestratorConfig,
}

/// A queued command and where to say it has started (dropped unsent: it never did).
type Queued = (Command, oneshot::Sender<()>);

/// The sending side: submit commands, see what is in flight.
#[derive(Clone, Debug)]
pub struct Orchestrator {
    mailbox: mpsc::Sender<Queued>,
    in_queue: InQueue,
}

/// Why a command was not accepted.
#[derive(Debug, thiserror::Error)]
#[error("the orchestration queue has stopped")]
pub struct Stopped;

impl Orchestrator {
    /// Queues `command` (waiting while the mailbox is full; its nodes are held from now on)
    /// and waits until it has started: its candidates marked and its replacements in
    /// cluster state, or the command rolled back.
    pub async fn submit(&self, command: Command) -> Result<(), Stopped> {
        let started = self.queue(command).await?;
        // An error only says the command will not start (rolled back, or the queue stopped).
        let _ = started.await;
        Ok(())
    }

    /// Queues `command`, waiting while the mailbox is full; the receiver hears when it
    /// has started.
    async fn queue(&self, command: Command) -> Result<oneshot::Receiver<()>, Stopped> {
        self.in_queue.hold(&command);
        let (started, on_start) = oneshot::channel();
        if let Err(mpsc::error::SendError((command, _))) =
            self.mailbox.send((command, started)).await
        {
            self.in_queue.release(&command);
            return Err(Stopped);
        }
        Ok(on_start)
    }

    pub fn in_queue(&self) -> &InQueue {
        &self.in_queue
    }
}

/// Starts the Orchestrator; it stops (abandoning commands in flight) when `shutdown` turns
/// true.
pub fn spawn(
    deps: OrchestratorDeps,
    shutdown: watch::Receiver<bool>,
) -> (Orchestrator, JoinHandle<()>) {
    let (orchestrator, inbox) = Orchestrator::new();
    let in_queue = orchestrator.in_queue.clone();
    // The mailbox and the commands running outlive a panicking loop: the next one goes on
    // taking commands, and no command in flight is abandoned half done.
    let carried = Arc::new(tokio::sync::Mutex::new((inbox, JoinSet::new())));
    let task = crate::supervisor::task("orchestrator", move || {
        run(
            deps.clone(),
            Arc::clone(&carried),
            in_queue.clone(),
            shutdown.clone(),
        )
    });
    (orchestrator, task)
}

/// Gives a command's nodes back to the disruption loop however the command ends (done,
/// rolled back, panicked or dropped).
struct Release {
    in_queue: InQueue,
    command: Arc<Command>,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.in_queue.release(&self.command);
    }
}

impl Orchestrator {
    /// The sending side and the mailbox the actor reads.
    fn new() -> (Self, mpsc::Receiver<Queued>) {
        let (mailbox, inbox) = mpsc::channel(ORCHESTRATOR_MAILBOX_CAPACITY);
        let in_queue = InQueue::default();
        (Self { mailbox, in_queue }, inbox)
    }
}

type Carried = (mpsc::Receiver<Queued>, JoinSet<()>);

async fn run(
    deps: OrchestratorDeps,
    carried: Arc<tokio::sync::Mutex<Carried>>,
    in_queue: InQueue,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut carried = carried.lock().await;
    let (inbox, running) = &mut *carried;
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            Some(ended) = running.join_next(), if !running.is_empty() => {
                if let Err(error) = ended
                    && error.is_panic()
                {
                    crate::supervisor::Supervision::current()
                        .report_panic("orchestrator_command", &*error.into_panic());
                }
            }
            queued = inbox.recv() => {
                let Some((command, started)) = queued else { break };
                let release = Release { in_queue: in_queue.clone(), command: Arc::new(command) };
                crate::supervisor::fault_point("orchestrator");
                let deps = deps.clone();
                // The command's task runs outside the loop's supervision scope: it carries the
                // scope's hook, so a fault armed for this replica reaches its commands alone.
                let fault = crate::supervisor::Supervision::current()
                    .faults()
                    .point("orchestrator_command")
                    .unwrap_or_default();
                running.spawn(async move {
                    fault.check();
                    execute(&deps, &release.command, started).await;
                    drop(release);
                });
            }
        }
    }
    running.shutdown().await;
}

/// Why a command was rolled back.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Mark(#[from] MarkError),
    #[error("NodePool {0} is gone")]
    NodePoolGone(String),
    #[error("creating a replacement: {0}")]
    Create(String),
    #[error("replacement NodeClaim {0} was deleted before it initialized")]
    ReplacementGone(String),
    #[error("replacements did not initialize within {0:?}")]
    Timeout(Duration),
}

/// Carries out `command`, saying on `started` once its replacements are in cluster state;
/// a command that fails before then drops `started` only after its rollback.
async fn execute(deps: &OrchestratorDeps, command: &Command, started: oneshot::Sender<()>) {
    let nodes: Api<Node> = Api::all(deps.client.clone());
    let claims: Api<NodeClaim> = Api::all(deps.client.clone());
    let mut replacements = Vec::new();
    let outcome = start(deps, command, &nodes, &claims, &mut replacements).await;
    let outcome = match outcome {
        Ok(()) => {
            wait_seen(deps, &replacements).await;
            let _ = started.send(());
            wait_initialized(deps, command, &replacements).await
        }
        Err(e) => Err(e),
    };
    match outcome {
        Ok(()) => delete_candidates(deps, command, &claims).await,
        Err(failure) => {
            tracing::warn!(
                nodes = ?command.candidates.iter().map(|c| &c.node).collect::<Vec<_>>(),
                reason = command.reason_name(),
                error = %failure,
                "disruption command failed; rolling back"
            );
            roll_back(command, &nodes, &claims, &replacements).await;
            metrics::counter!(
                DISRUPTION_QUEUE_FAILURES,
                "decision" => decision_label(command.decision),
                "reason" => command.reason_label(),
                "consolidation_type" => consolidation_type(command.method)
            )
            .increment(1);
        }
    }
}

/// Marks the candidates and creates the replacements (their names go to `replacements` as
/// they are created, so a rollback deletes them).
async fn start(
    deps: &OrchestratorDeps,
    command: &Command,
    nodes: &Api<Node>,
    claims: &Api<NodeClaim>,
    replacements: &mut Vec<(String, Instant)>,
) -> Result<(), Failure> {
    for c in &command.candidates {
        set_disrupted_taint(nodes, &c.node, true).await?;
        set_disruption_reason(claims, &c.node_claim, Some(command.reason_name())).await?;
    }
    for claim in &command.replacements {
        let pool = deps
            .state
            .nodepools
            .get(&ObjectKey::new(None, &claim.node_pool))
            .ok_or_else(|| Failure::NodePoolGone(claim.node_pool.clone()))?;
        let created = deps
            .creator
            .deliver(CreateNodeClaim {
                claim: claim.clone(),
                pool,
                reason: command.reason_label(),
            })
            .await
            .map_err(|e| Failure::Create(e.to_string()))?
            .map_err(|e| Failure::Create(e.to_string()))?;
        deps.events.publish(events::launching(
            &subject(Kind::NodeClaim, &created),
            command.reason_label(),
        ));
        replacements.push((created.name_any(), Instant::now()));
    }
    Ok(())
}

fn subject<K: ResourceExt>(kind: Kind, object: &K) -> Subject {
    Subject {
        kind,
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
    }
}

/// Waits until cluster state holds every replacement (the watch delivers a created object
/// within milliseconds), at most [`UNSEEN_REPLACEMENT_GRACE`]: one not seen by then is
/// taken as gone by [`wait_initialized`].
async fn wait_seen(deps: &OrchestratorDeps, replacements: &[(String, Instant)]) {
    let deadline = Instant::now() + UNSEEN_REPLACEMENT_GRACE;
    let unseen = |(name, _): &(String, Instant)| {
        let key = ObjectKey::new(None, name);
        deps.state.nodeclaims.get(&key).is_none() && !deps.state.nodeclaims.recently_deleted(&key)
    };
    while Instant::now() < deadline && replacements.iter().any(unseen) {
        tokio::time::sleep(SEEN_POLL).await;
    }
}

/// Waits until every replacement is `Initialized`, as cluster state shows them.
async fn wait_initialized(
    deps: &OrchestratorDeps,
    command: &Command,
    replacements: &[(String, Instant)],
) -> Result<(), Failure> {
    let deadline = Instant::now() + deps.config.replacement_timeout;
    let mut announced = HashSet::new();
    loop {
        let mut waiting = false;
        for (name, created) in replacements {
            let key = ObjectKey::new(None, name);
            match deps.state.nodeclaims.get(&key) {
                Some(claim) if claim.metadata.deletion_timestamp.is_some() => {
                    return Err(Failure::ReplacementGone(name.clone()));
                }
                Some(claim) if claim.is_condition_true(types::INITIALIZED) => {}
                Some(claim) => {
                    waiting = true;
                    if announced.insert(name.clone()) {
                        deps.events.publish(events::waiting_on_readiness(&subject(
                            Kind::NodeClaim,
                            claim.as_ref(),
                        )));
                    }
                }
                None if deps.state.nodeclaims.recently_deleted(&key)
                    || created.elapsed() > UNSEEN_REPLACEMENT_GRACE =>
                {
                    return Err(Failure::ReplacementGone(name.clone()));
                }
                None => waiting = true,
            }
        }
        if !waiting {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Failure::Timeout(deps.config.replacement_timeout));
        }
        tracing::trace!(command = ?command.method, "waiting for replacements");
        tokio::time::sleep(deps.config.poll).await;
    }
}

/// Deletes the candidates' NodeClaims, counts each, and waits (bounded) until the store
/// shows them deleting, so the loop never mistakes their taint for a stale one.
async fn delete_candidates(deps: &OrchestratorDeps, command: &Command, claims: &Api<NodeClaim>) {
    for c in &command.candidates {
        if let Some(node) = deps.state.nodes.get(&ObjectKey::new(None, &c.node)) {
            deps.events.publish(events::terminating(
                &subject(Kind::Node, node.as_ref()),
                command.reason_label(),
            ));
        }
        if let Some(claim) = deps
            .state
            .nodeclaims
            .get(&ObjectKey::new(None, &c.node_claim))
        {
            deps.events.publish(events::terminating(
                &subject(Kind::NodeClaim, claim.as_ref()),
                command.reason_label(),
            ));
        }
        match claims.delete(&c.node_claim, &DeleteParams::default()).await {
            Ok(_) => {
                nodeclaim_disrupted(command.reason_name(), &c.node_pool, &c.capacity_type);
                tracing::info!(
                    nodeclaim = %c.node_claim,
                    node = %c.node,
                    reason = command.reason_name(),
                    method = ?command.method,
                    "disrupted nodeclaim"
                );
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                tracing::warn!(nodeclaim = %c.node_claim, %error, "deleting disrupted nodeclaim");
            }
        }
    }
    let deadline = Instant::now() + DELETION_SEEN_TIMEOUT;
    while Instant::now() < deadline
        && command.candidates.iter().any(|c| {
            deps.state
                .nodeclaims
                .get(&ObjectKey::new(None, &c.node_claim))
                .is_some_and(|claim| claim.metadata.deletion_timestamp.is_none())
        })
    {
        tokio::time::sleep(deps.config.poll.min(Duration::from_millis(100))).await;
    }
}

/// Removes the marks and deletes the replacements created so far.
async fn roll_back(
    command: &Command,
    nodes: &Api<Node>,
    claims: &Api<NodeClaim>,
    replacements: &[(String, Instant)],
) {
    for (name, _) in replacements {
        match claims.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => tracing::warn!(nodeclaim = %name, %error, "deleting replacement"),
        }
    }
    for c in &command.candidates {
        if let Err(error) = set_disrupted_taint(nodes, &c.node, false).await {
            tracing::warn!(node = %c.node, %error, "removing disrupted taint");
        }
        if let Err(error) = set_disruption_reason(claims, &c.node_claim, None).await {
            tracing::warn!(nodeclaim = %c.node_claim, %error, "clearing DisruptionReason");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(node: &str) -> Command {
        Command {
            method: Method::Emptiness,
            reason: Reason::Empty,
            decision: Decision::Delete,
            candidates: vec![Candidate {
                node: node.to_owned(),
                node_claim: format!("{node}-claim"),
                node_pool: "default".to_owned(),
                capacity_type: "spot".to_owned(),
            }],
            replacements: Vec::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_mailbox_is_bounded_and_holds_nodes_from_submission() {
        let (orchestrator, mut inbox) = Orchestrator::new();
        for i in 0..ORCHESTRATOR_MAILBOX_CAPACITY {
            orchestrator
                .queue(command(&format!("n{i}")))
                .await
                .expect("room in the mailbox");
        }
        assert!(orchestrator.in_queue().holds_node("n0"));
        assert!(orchestrator.in_queue().holds_node_claim("n0-claim"));
        assert_eq!(
            orchestrator.in_queue().commands(),
            ORCHESTRATOR_MAILBOX_CAPACITY
        );
        let full = tokio::time::timeout(Duration::from_secs(1), orchestrator.queue(command("x")));
        assert!(full.await.is_err(), "a full mailbox makes the sender wait");
        let (taken, _) = inbox.recv().await.expect("a command");
        orchestrator.in_queue().release(&taken);
        assert!(!orchestrator.in_queue().holds_node("n0"));
        drop(inbox);
        assert!(orchestrator.submit(command("y")).await.is_err(), "stopped");
        assert!(
            !orchestrator.in_queue().holds_node("y"),
            "a refused command holds nothing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn submit_returns_once_the_command_has_started() {
        let (orchestrator, mut inbox) = Orchestrator::new();
        let submitted = tokio::spawn(async move { orchestrator.submit(command("n")).await });
        let (_, started) = inbox.recv().await.expect("a command");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!submitted.is_finished(), "queued is not started");
        started.send(()).expect("the submitter waits");
        submitted.await.expect("no panic").expect("accepted");

        let (orchestrator, mut inbox) = Orchestrator::new();
        let submitted = tokio::spawn(async move { orchestrator.submit(command("m")).await });
        drop(inbox.recv().await.expect("a command"));
        assert!(
            submitted.await.expect("no panic").is_ok(),
            "a command that will not start releases its sender"
        );
    }
}
