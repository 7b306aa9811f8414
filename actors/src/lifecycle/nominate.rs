//! Nomination: the pods a NodeClaim was created for get `status.nominatedNodeName` set to
//! its Node (KEP-5278), so the kube-scheduler tries that node first and counts them as
//! already there, and pods planned elsewhere do not take the room launched for them.
//! Writes start at launch, when the provider knows the Node's name
//! ([`kerf::cloudprovider::expected_node_name`]); registration writes what the launch did
//! not before it lifts `karpenter.sh/unregistered`, skipping pods already nominated there.
//! Each nomination is a pod write on the pods kind's client budget ([`crate::client`]), so
//! it never slows the NodeClaim and Node writes; the write slots
//! ([`super::nomination_slots`]) put one-per-node and placement-constrained pods, and
//! registering Nodes, first. Beside the field kerf writes its own condition
//! ([`kerf::pods::NOMINATION_CONDITION`]), so it keeps provisioning for a pod whose
//! nomination is its own. A nomination lasts while the Provisioner holds the pod
//! ([`NOMINATION_WINDOW`], [`NOMINATION_LIMIT`]) and is withdrawn then, or within
//! [`FUTILITY_CHECK_PERIOD`] once the pod could not use it: a round found it not
//! fitting there ([`crate::created_claims::CreatedClaims::release`]), or the kube-scheduler
//! refused it for a reason the Node cannot show ([`refusal_settles`]). It is an
//! optimisation: failures are logged and counted, never fail a launch or a registration,
//! and each step is bounded in time ([`NOMINATION_BUDGET`]).

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kerf::pods;
use kerf::pods::{LeanPod, PodLike};
use kerf::scheduling::PodRef;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use super::nomination_slots::{Class, Slot, Step};
use super::reconciler::{Reconciler, is_status};
use crate::created_claims::{NOMINATION_LIMIT, NOMINATION_WINDOW, refusal_settles};

/// How long registration waits for unconstrained pods' nominations once the constrained
/// ones are written: a node of a small scale-up gets them all, a large one's node opens.
const UNCONSTRAINED_GRACE: Duration = Duration::from_secs(1);

/// The longest registration waits for its nominations: the pods still unwritten then are
/// left unnominated (they are scheduled as without it) rather than hold the Node back. A
/// real Node turns Ready seconds after it registers, so this rarely delays its first pod.
pub const NOMINATION_BUDGET: Duration = Duration::from_secs(10);

/// Counter of nomination writes, by `result`: `nominated`, withdrawn at the window's end
/// (`expired`) or because the pod could not use it (`unusable`), `gone`, `failed`.
pub const PODS_NOMINATED: &str = "kerf_pods_nominated_total";

/// Counter of pods registration stopped waiting for: still unnominated to their Node when
/// it opened, so the kube-scheduler may place them (and others in their room) anywhere.
/// Read from the store when the wait ends (a write that landed a moment before may count).
pub const LEFT_UNNOMINATED: &str = "kerf_pods_left_unnominated_at_registration_total";

/// Counter of Nodes registered before every placement-constrained pod planned for them was
/// nominated ([`NOMINATION_BUDGET`] ran out). A large scale-up has a thousand, so it is a
/// count rather than a warning each: the kube-scheduler places those pods as it would
/// without kerf, and some may need capacity planned again.
pub const REGISTERED_BEFORE_NOMINATED: &str = "kerf_registered_before_nominated_total";

/// The reason of the condition once kerf withdrew its nomination at the window's end.
const WITHDRAWN_REASON: &str = "NominationExpired";

/// The reason of the condition once kerf withdrew a nomination its pod could not use.
const FUTILE_REASON: &str = "NominationUnusable";

/// How often, until the limit, an initialized Node's NodeClaim looks for nominations its
/// pods could not use (released by a round, or refused past the window): the room they keep
/// is lost to other pods meanwhile, and the look costs one store read per pod the NodeClaim
/// was created for.
pub const FUTILITY_CHECK_PERIOD: Duration = Duration::from_secs(2);

/// Withdraws kerf's nominations to `node` (of NodeClaim `nodeclaim`), initialized at
/// `initialized`: those of the NodeClaim's pods a round found not fitting there
/// ([`crate::created_claims::CreatedClaims::release`]); past the window also those of pods
/// it was not created for, and of its pods the kube-scheduler refused since whose fit the
/// Node cannot show ([`refusal_settles`]); at [`NOMINATION_LIMIT`], every one left.
/// Returns when to look again, while some may still be withdrawn.
pub async fn withdraw_expired(
    r: &Reconciler,
    nodeclaim: &str,
    node: &str,
    initialized: Timestamp,
) -> Option<Duration> {
    let since =
        Duration::try_from(Timestamp::now().duration_since(initialized)).unwrap_or_default();
    let left = |limit: Duration| limit.checked_sub(since).filter(|d| !d.is_zero());
    let created = &r.launch.created;
    let released = |pod: &LeanPod| created.is_released(nodeclaim, pod.meta().uid.unwrap_or(""));
    let no_room = format!("no longer fits on node {node} beside the pods bound there");
    withdraw_listed(r, nodeclaim, node, released, FUTILE_REASON, &no_room).await;
    if let Some(window_left) = left(NOMINATION_WINDOW) {
        // A later round may still add pods to the NodeClaim, or release some.
        return Some(window_left.min(FUTILITY_CHECK_PERIOD));
    }
    if !r.unlisted.is_withdrawn(node) {
        withdraw_unlisted(r, nodeclaim, node).await;
    }
    let Some(limit_left) = left(NOMINATION_LIMIT) else {
        let message = format!(
            "was not scheduled on node {node} within {NOMINATION_LIMIT:?} of it being initialized"
        );
        withdraw_listed(r, nodeclaim, node, |_| true, WITHDRAWN_REASON, &message).await;
        return None;
    };
    let refused = format!("reported unschedulable after node {node} was initialized");
    let settled = |pod: &LeanPod| refusal_settles(pod, initialized);
    let kept = withdraw_listed(r, nodeclaim, node, settled, FUTILE_REASON, &refused).await;
    (kept > 0).then(|| limit_left.min(FUTILITY_CHECK_PERIOD))
}

/// Withdraws, once the window has passed, the nominations to `node` of pending pods that
/// NodeClaim `nodeclaim` was not created for: ones a predecessor wrote (this process has no
/// list of its pods after a restart) or that outlived their own NodeClaim.
async fn withdraw_unlisted(r: &Reconciler, nodeclaim: &str, node: &str) {
    let listed = r.launch.created.nominated_pods(nodeclaim);
    let nominated = r.unlisted.nominated_to(&r.state, node).await;
    let stale: Vec<Arc<LeanPod>> = nominated
        .iter()
        .filter(|pod| !listed.iter().any(|held| held.uid == pod.uid))
        // The scan may be a moment old: only what the store still shows is withdrawn.
        .filter_map(|pod| r.state.pod(pod))
        .filter(|pod| !pods::is_bound(pod) && pods::kerf_nominated_node(pod) == Some(node))
        .collect();
    let message =
        format!("did not fit on node {node} within {NOMINATION_WINDOW:?} of it being initialized");
    let written = futures::future::join_all(
        stale
            .into_iter()
            .map(|pod| withdraw(r, pod, WITHDRAWN_REASON, &message)),
    );
    // Nominations to a node are written before it is initialized, so once these are
    // withdrawn, only the listed ones are left: one look per node and process (a restarted
    // controller looks again, for what its predecessor left).
    if written.await.into_iter().all(|done| done) {
        r.unlisted.withdrawn(&r.state, node);
    }
}

/// Withdraws the nominations to `node` of the pods NodeClaim `nodeclaim` was created for
/// that `release` picks, saying why; returns how many of them keep theirs.
async fn withdraw_listed(
    r: &Reconciler,
    nodeclaim: &str,
    node: &str,
    release: impl Fn(&LeanPod) -> bool,
    reason: &str,
    message: &str,
) -> usize {
    let (released, kept): (Vec<Arc<LeanPod>>, Vec<Arc<LeanPod>>) = r
        .launch
        .created
        .nominated_pods(nodeclaim)
        .iter()
        .filter_map(|pod| {
            let stored = r.state.pod(pod)?;
            let ours = !pods::is_bound(&stored) && pods::kerf_nominated_node(&stored) == Some(node);
            ours.then_some(stored)
        })
        .partition(|stored| release(stored));
    futures::future::join_all(
        released
            .into_iter()
            .map(|pod| withdraw(r, pod, reason, message)),
    )
    .await;
    kept.len()
}

/// Withdraws kerf's nomination from `pod`, saying why; whether it is gone (written, or the
/// pod is).
async fn withdraw(r: &Reconciler, pod: Arc<LeanPod>, reason: &str, message: &str) -> bool {
    let body = json!({"status": {
        "nominatedNodeName": null,
        "conditions": [{
            "type": pods::NOMINATION_CONDITION,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": Timestamp::now().to_string(),
        }],
    }});
    let slot = r
        .nomination_slots
        .acquire(Class::Constrained, Step::Registration);
    let Some(_slot) = slot.await else {
        return false;
    };
    let result = if reason == FUTILE_REASON {
        "unusable"
    } else {
        "expired"
    };
    patch_status(r, &pod, body, result).await != Written::Failed
}

/// Nominates to `node` the pods NodeClaim `nodeclaim` was created for that still wait for
/// a node; returns how many were written. The placement-constrained pods' nominations are
/// waited for (within [`NOMINATION_BUDGET`]); the others' only for
/// [`UNCONSTRAINED_GRACE`] more.
pub async fn nominate(r: &Reconciler, step: Step, nodeclaim: &str, node: &str) -> usize {
    if !r.launch.nominate_pods {
        return 0;
    }
    let held = r.launch.created.nominated_pods(nodeclaim);
    let (constrained, others): (Vec<_>, Vec<_>) = held
        .iter()
        .filter_map(|pod| {
            let stored = waiting_pod(r, pod, node)?;
            Some((pod, Class::of(&stored)))
        })
        .partition(|(_, class)| *class != Class::Unconstrained);
    if constrained.is_empty() && others.is_empty() {
        return 0;
    }
    let asked: Vec<&PodRef> = constrained.iter().chain(&others).map(|(p, _)| *p).collect();
    let deadline = Instant::now() + NOMINATION_BUDGET;
    let mut constrained = pin!(write_all(r, constrained, nodeclaim, node, step));
    let mut others = pin!(write_all(r, others, nodeclaim, node, step));
    let (mut constrained_done, mut others_done) = (None, None);
    let budget = tokio::time::sleep_until(deadline);
    let mut budget = pin!(budget);
    while constrained_done.is_none() {
        tokio::select! {
            done = &mut constrained => constrained_done = Some(done),
            done = &mut others, if others_done.is_none() => others_done = Some(done),
            () = &mut budget => break,
        }
    }
    if others_done.is_none() && constrained_done.is_some() {
        let grace = deadline.min(Instant::now() + UNCONSTRAINED_GRACE);
        others_done = tokio::time::timeout_at(grace, others).await.ok();
    }
    if step == Step::Registration && (constrained_done.is_none() || others_done.is_none()) {
        let left = asked
            .iter()
            .filter(|pod| waiting_pod(r, pod, node).is_some())
            .count();
        metrics::counter!(LEFT_UNNOMINATED).increment(left as u64);
    }
    match step {
        _ if constrained_done.is_some() => {}
        Step::Launch => tracing::debug!(
            nodeclaim,
            %node,
            budget = ?NOMINATION_BUDGET,
            "placement-constrained pods left for registration to nominate"
        ),
        Step::Registration => {
            metrics::counter!(REGISTERED_BEFORE_NOMINATED).increment(1);
            tracing::debug!(
                nodeclaim,
                %node,
                budget = ?NOMINATION_BUDGET,
                "registering before every placement-constrained pod was nominated to the node"
            );
        }
    }
    constrained_done.unwrap_or(0) + others_done.unwrap_or(0)
}

/// The nominations of `pods`, each class's waiting in one line of the write slots and
/// written as its slots come; how many were written.
async fn write_all(
    r: &Reconciler,
    pods: Vec<(&PodRef, Class)>,
    nodeclaim: &str,
    node: &str,
    step: Step,
) -> usize {
    let mut by_class: Vec<(Class, Vec<&PodRef>)> = Vec::new();
    for (pod, class) in pods {
        match by_class.iter_mut().find(|(c, _)| *c == class) {
            Some((_, listed)) => listed.push(pod),
            None => by_class.push((class, vec![pod])),
        }
    }
    let lines = by_class
        .into_iter()
        .map(|(class, pods)| write_line(r, pods, class, nodeclaim, node, step));
    futures::future::join_all(lines).await.into_iter().sum()
}

/// The nominations of `pods`, all of `class`: one line of the write slots, and a write
/// started for the next pod each time it is given a slot; how many were written.
async fn write_line(
    r: &Reconciler,
    pods: Vec<&PodRef>,
    class: Class,
    nodeclaim: &str,
    node: &str,
    step: Step,
) -> usize {
    let mut line = r.nomination_slots.line(class, step, pods.len());
    let mut pods = pods.into_iter();
    let mut writing = FuturesUnordered::new();
    let mut written = 0;
    loop {
        tokio::select! {
            Some(slot) = line.next(), if pods.len() > 0 => {
                if let Some(pod) = pods.next() {
                    writing.push(write(r, slot, pod, nodeclaim, node));
                }
            }
            Some(done) = writing.next() => written += usize::from(done),
            else => break,
        }
    }
    written
}

/// The pod `pod` refers to, as the store has it, if it still waits for a node and is not
/// nominated to `node` already.
fn waiting_pod(r: &Reconciler, pod: &PodRef, node: &str) -> Option<Arc<LeanPod>> {
    let stored = r.state.pod(pod)?;
    let waiting = !pods::is_bound(&stored)
        && stored.meta().deletion_timestamp.is_none()
        && pods::kerf_nominated_node(&stored) != Some(node);
    waiting.then_some(stored)
}

/// Writes the nomination onto one pod's status in `slot`, if the pod still waits; whether it
/// was written.
async fn write(r: &Reconciler, slot: Slot<'_>, pod: &PodRef, nodeclaim: &str, node: &str) -> bool {
    let _slot = slot;
    // The scheduler may have bound it while this write queued.
    let Some(pod) = waiting_pod(r, pod, node) else {
        return false;
    };
    let body = json!({"status": {
        "nominatedNodeName": node,
        "conditions": [{
            "type": pods::NOMINATION_CONDITION,
            "status": "True",
            "reason": pods::NOMINATION_REASON,
            "message": pods::nomination_message(node, nodeclaim),
            "lastTransitionTime": Timestamp::now().to_string(),
        }],
    }});
    patch_status(r, &pod, body, "nominated").await == Written::Yes
}

/// How a status write ended.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    Yes,
    /// The pod is gone.
    Gone,
    Failed,
}

/// Patches `pod`'s status (strategic merge: the condition merges by type), holding one of
/// the [`NOMINATION_CONCURRENCY`] slots; counted under `result`, or `gone`/`failed`.
/// Boxed: the client's future is kilobytes, and a caller's own future would otherwise hold
/// room for it from the start, while it waits for its slot (see [`withdraw`]).
fn patch_status<'a>(
    r: &'a Reconciler,
    pod: &'a LeanPod,
    body: serde_json::Value,
    result: &'static str,
) -> BoxFuture<'a, Written> {
    Box::pin(async move {
        let namespace = pod.meta().namespace.unwrap_or("default");
        let name = pod.meta().name.unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(r.client.clone(), namespace);
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
            .await
        {
            Ok(_) => {
                metrics::counter!(PODS_NOMINATED, "result" => result).increment(1);
                Written::Yes
            }
            Err(error) if is_status(&error, 404) => {
                metrics::counter!(PODS_NOMINATED, "result" => "gone").increment(1);
                Written::Gone
            }
            Err(error) => {
                metrics::counter!(PODS_NOMINATED, "result" => "failed").increment(1);
                tracing::warn!(pod = %format!("{namespace}/{name}"), %error, result, "writing pod nomination");
                Written::Failed
            }
        }
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::lifecycle::nomination_slots::NOMINATION_CONCURRENCY;
    use crate::state::ObjectKey;

    /// The most a NodeClaim's nominations waiting for their slots (or a withdrawal waiting
    /// for its own) may hold, in bytes, besides their list of pods: a large scale-up queues
    /// them for every NodeClaim at once.
    const WAITING_WRITE_MAX_BYTES: usize = 512;

    /// A Reconciler whose clients answer `{}` to every request.
    pub(in crate::lifecycle) fn reconciler() -> Reconciler {
        recording_reconciler(crate::state::ClusterState::new().0).0
    }

    /// The path and body of each request a [`recording_reconciler`]'s clients sent.
    pub(in crate::lifecycle) type Sent = Arc<std::sync::Mutex<Vec<(String, String)>>>;

    /// A Reconciler over `state` whose client answers `{}` to every request and records it.
    fn recording_reconciler(state: Arc<crate::state::ClusterState>) -> (Reconciler, Sent) {
        let (client, sent) = recording_client();
        (reconciler_over(state, client), sent)
    }

    /// A Reconciler over `state` whose client never answers: every write stalls.
    fn stalled_reconciler(state: Arc<crate::state::ClusterState>) -> Reconciler {
        reconciler_over(state, stalled_client())
    }

    /// A Reconciler over `state` whose client answers `{}` to every request but the pods'
    /// and records it, and whose nomination writes stall: registration waits its whole budget.
    pub(in crate::lifecycle) fn registering_reconciler(
        state: Arc<crate::state::ClusterState>,
    ) -> (Reconciler, Sent) {
        let (client, sent) = recording_client();
        let stalled = stalled_client();
        let pods_stall = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let to = if request.uri().path().contains("/pods/") {
                stalled.clone()
            } else {
                client.clone()
            };
            async move { to.send(request).await }
        });
        let client = kube::Client::new(pods_stall, "default");
        (reconciler_over(state, client), sent)
    }

    /// A client that answers `{}` to every request, and the requests it was sent.
    fn recording_client() -> (kube::Client, Sent) {
        let sent = Sent::default();
        let record = Arc::clone(&sent);
        let answer = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let record = Arc::clone(&record);
            async move {
                let path = request.uri().path().to_owned();
                let body = http_body_util::BodyExt::collect(request.into_body())
                    .await
                    .expect("a request body")
                    .to_bytes();
                let body = String::from_utf8_lossy(&body).into_owned();
                record.lock().expect("not poisoned").push((path, body));
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    b"{}".to_vec(),
                )))
            }
        });
        (kube::Client::new(answer, "default"), sent)
    }

    /// A client that never answers.
    fn stalled_client() -> kube::Client {
        let never = tower::service_fn(|_: http::Request<kube::client::Body>| {
            std::future::pending::<
                Result<http::Response<kube::client::Body>, std::convert::Infallible>,
            >()
        });
        kube::Client::new(never, "default")
    }

    /// A Reconciler over `state` with the controller's client `client`.
    fn reconciler_over(state: Arc<crate::state::ClusterState>, client: kube::Client) -> Reconciler {
        let cloud = kerf_loadtest::ec2::SimulatedCloudProvider::for_region(
            "us-west-2",
            kerf_loadtest::ec2::Ec2Config::instant("us-west-2"),
            kerf_loadtest::ec2::SimulatedCloudProviderConfig::default(),
        )
        .expect("embedded region");
        let launch = super::super::LaunchDeps {
            events: crate::events::EventRecorder::disabled(),
            offerings: None,
            created: crate::created_claims::CreatedClaims::default(),
            nominate_pods: true,
        };
        let config = super::super::LifecycleConfig::default();
        Reconciler::new(state, client, Arc::new(cloud), config, launch)
    }

    /// Records NodeClaim `a` as created by `r`'s NodeClaimCreator for the pods named `pods` (in
    /// `default`, each with its name as uid).
    pub(in crate::lifecycle) fn created_for(r: &Reconciler, pods: &[&str]) {
        let claim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "a"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                "name": "default"}, "requirements": []},
        }))
        .expect("valid nodeclaim");
        let pods = pods
            .iter()
            .map(|name| PodRef::new("default", *name, *name))
            .collect();
        r.launch.created.record(claim, pods);
    }

    /// Pending pod `default/pinned`, placement-constrained (a node selector): registration
    /// waits for its nomination.
    pub(in crate::lifecycle) fn pinned_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pinned", "namespace": "default", "uid": "pinned"},
            "spec": {"containers": [], "nodeSelector": {"team": "a"}},
            "status": {"phase": "Pending"},
        }))
        .expect("valid pod")
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_registered_before_its_nominations_are_written_is_counted() {
        crate::metrics::handle();
        let (state, mut writers) = crate::state::ClusterState::new();
        writers
            .pods
            .apply(ObjectKey::new(Some("default"), "pinned"), pinned_pod());
        let r = stalled_reconciler(state);
        created_for(&r, &["pinned"]);
        let before = crate::testing::counter(REGISTERED_BEFORE_NOMINATED);
        let left_before = crate::testing::counter(LEFT_UNNOMINATED);

        let started = Instant::now();
        let written = nominate(&r, Step::Registration, "a", "node-a").await;
        assert_eq!(written, 0, "the stalled write never landed");
        assert_eq!(
            started.elapsed(),
            NOMINATION_BUDGET,
            "registration waited for the whole budget, and no longer"
        );
        assert!(
            crate::testing::counter(REGISTERED_BEFORE_NOMINATED) > before,
            "the early registration is counted"
        );
        assert!(
            crate::testing::counter(LEFT_UNNOMINATED) > left_before,
            "and so is the pod it left unnominated"
        );
    }

    #[tokio::test]
    async fn a_nodeclaims_queued_writes_wait_in_one_line_not_one_waiter_per_pod() {
        let r = reconciler();
        let held: Vec<_> = (0..NOMINATION_CONCURRENCY)
            .filter_map(|_| {
                let slot = r
                    .nomination_slots
                    .acquire(Class::Constrained, Step::Registration);
                futures::FutureExt::now_or_never(slot).flatten()
            })
            .collect();
        assert_eq!(held.len(), NOMINATION_CONCURRENCY, "every slot held");
        let pods: Vec<PodRef> = (0..1000)
            .map(|i| PodRef::new("default", format!("web-{i}"), format!("uid-{i}")))
            .collect();
        let listed = pods.iter().map(|p| (p, Class::Constrained)).collect();
        let queued = write_all(&r, listed, "default-abc", "node-a", Step::Registration);
        let bytes = std::mem::size_of_val(&queued);
        assert!(
            bytes <= WAITING_WRITE_MAX_BYTES,
            "a NodeClaim's queued nominations hold {bytes} bytes besides their list"
        );
        let mut queued = pin!(queued);
        assert!(futures::poll!(&mut queued).is_pending());
        assert_eq!(r.nomination_slots.lines(), 1, "one line for the 1,000 pods");
        drop(held);
        assert_eq!(
            queued.await,
            0,
            "none waits in the store: nothing is written"
        );
        assert_eq!(r.nomination_slots.lines(), 0, "the line is closed");
        let withdrawal = withdraw(&r, Arc::new(LeanPod::default()), "r", "m");
        let bytes = std::mem::size_of_val(&withdrawal);
        assert!(
            bytes <= WAITING_WRITE_MAX_BYTES,
            "a queued withdrawal holds {bytes} bytes"
        );
    }

    /// A pending pod kerf nominated to `node`, reported unschedulable at `reported`.
    pub(in crate::lifecycle) fn nominated_pod(
        name: &str,
        node: &str,
        reported: Option<&str>,
    ) -> Pod {
        let mut conditions = vec![serde_json::json!({
            "type": pods::NOMINATION_CONDITION, "status": "True",
            "reason": pods::NOMINATION_REASON,
            "message": pods::nomination_message(node, "a"),
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        })];
        if let Some(at) = reported {
            conditions.push(serde_json::json!({
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "lastTransitionTime": at,
            }));
        }
        serde_json::from_value::<Pod>(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "status": {"phase": "Pending", "nominatedNodeName": node, "conditions": conditions},
        }))
        .expect("valid pod")
    }

    /// The pods whose nominations `sent` withdrew, with the reason given, sorted.
    fn withdrawn(sent: &Sent) -> Vec<(String, String)> {
        let mut withdrawn: Vec<(String, String)> = sent
            .lock()
            .expect("not poisoned")
            .drain(..)
            .map(|(path, body)| {
                let body: serde_json::Value = serde_json::from_str(&body).expect("json");
                assert!(body["status"]["nominatedNodeName"].is_null(), "{body}");
                let pod = path.trim_end_matches("/status").rsplit('/').next();
                let reason = body["status"]["conditions"][0]["reason"].as_str();
                (
                    pod.unwrap_or_default().to_owned(),
                    reason.unwrap_or_default().to_owned(),
                )
            })
            .collect();
        withdrawn.sort();
        withdrawn
    }

    #[tokio::test]
    async fn past_the_window_a_nomination_lasts_until_released_refused_for_good_or_the_limit() {
        let (state, mut writers) = crate::state::ClusterState::new();
        let initialized = Timestamp::now() - NOMINATION_WINDOW - Duration::from_secs(5);
        let after = (initialized + Duration::from_secs(2)).to_string();
        let after = Some(after.as_str());
        let pods = [
            ("untried", None),
            ("refused", after),
            ("spread", after),
            ("released", None),
        ];
        for (name, reported) in pods {
            let mut pod = nominated_pod(name, "node-a", reported);
            if name == "spread" {
                // Its fit depends on peers elsewhere: the refusal withdraws it.
                pod.spec = serde_json::from_value(serde_json::json!({"containers": [],
                    "topologySpreadConstraints": [{"maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule"}]}))
                .expect("valid spec");
            }
            writers
                .pods
                .apply(ObjectKey::new(Some("default"), name), pod);
        }
        // Nominated by a predecessor: this process has no list with it.
        writers.pods.apply(
            ObjectKey::new(Some("default"), "foreign"),
            nominated_pod("foreign", "node-a", None),
        );
        let (r, sent) = recording_reconciler(state);
        created_for(&r, &["untried", "refused", "spread", "released"]);
        // A round found no room left for it on the Node.
        r.launch.created.release("a", ["released"]);

        let again = withdraw_expired(&r, "a", "node-a", initialized).await;
        assert_eq!(
            withdrawn(&sent),
            [
                ("foreign".to_owned(), WITHDRAWN_REASON.to_owned()),
                ("released".to_owned(), FUTILE_REASON.to_owned()),
                ("spread".to_owned(), FUTILE_REASON.to_owned())
            ],
            "past the window, the pods not tried yet or whose fit the Node shows keep theirs"
        );
        assert!(
            again.is_some_and(|after| after <= FUTILITY_CHECK_PERIOD),
            "looked at again while it waits: {again:?}"
        );

        let initialized = Timestamp::now() - NOMINATION_LIMIT;
        let again = withdraw_expired(&r, "a", "node-a", initialized).await;
        let reasons: Vec<(String, String)> = withdrawn(&sent);
        assert!(
            reasons.contains(&("untried".to_owned(), WITHDRAWN_REASON.to_owned())),
            "the limit withdraws it: {reasons:?}"
        );
        assert_eq!(again, None, "and nothing is left to look at");
    }
}
