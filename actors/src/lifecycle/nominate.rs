//! Nomination at registration: before registration lifts `karpenter.sh/unregistered` off a
//! NodeClaim's Node, the pods the Launcher created the NodeClaim for get
//! `status.nominatedNodeName` set to that Node, as KEP-5278 lets an autoscaler say where it
//! expects a pod to go. The kube-scheduler tries a pod's nominated node first and, while
//! filtering any node, counts the pods nominated to it (of equal or higher priority) as
//! already there — so pods planned elsewhere no longer take the room kerf launched for these
//! pods, which otherwise leaves them pending and makes the next round launch again.
//! Beside the field kerf writes its own condition ([`kerf::pods::NOMINATION_CONDITION`]),
//! so kerf keeps provisioning for a pod whose nomination is its own (upstream provisions for
//! no pod nominated by a preemption). Nomination is an optimisation: failures are logged and
//! counted, never fail the registration, and the whole step is bounded in time.
//! A nomination lasts as long as the Provisioner holds the pods on the NodeClaim: until
//! [`NOMINATION_WINDOW`] after the Node is initialized. A pod still pending then did not fit
//! (or lost its room); its nomination is withdrawn, or the kube-scheduler (which since
//! Kubernetes 1.34 leaves `nominatedNodeName` to whoever wrote it) would keep room on that
//! node for a pod that will not go there, and the pod would wait for a place kerf cannot
//! see is taken.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kerf::pods;
use kerf::scheduling::PodRef;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::reconcile::{Reconciler, is_status};
use crate::launcher::NOMINATION_WINDOW;
use crate::state::ObjectKey;

/// Nomination writes in flight at once, across every registering Node: the client serves
/// requests in order through one rate limit, so this many at most stand in front of the
/// lifecycle's own writes (a scale-up nominates thousands of pods).
pub const NOMINATION_CONCURRENCY: usize = 16;

/// The longest registration waits for its nominations: the pods still unwritten then are
/// left unnominated (they are scheduled as without it) rather than hold the Node back. A
/// real Node turns Ready seconds after it registers, so this rarely delays its first pod.
pub const NOMINATION_BUDGET: Duration = Duration::from_secs(10);

/// Counter of nomination writes, by `result` (`nominated`, `withdrawn`, `gone`, `failed`).
pub const PODS_NOMINATED: &str = "kerf_pods_nominated_total";

/// The reason of the condition once kerf withdrew its nomination.
const WITHDRAWN_REASON: &str = "NominationExpired";

/// Withdraws kerf's nominations to `node`, initialized at `initialized`, from pods still
/// pending once the window has passed; returns how long until it has, if it has not.
pub async fn withdraw_expired(
    r: &Reconciler,
    node: &str,
    initialized: Timestamp,
) -> Option<Duration> {
    let since =
        Duration::try_from(Timestamp::now().duration_since(initialized)).unwrap_or_default();
    if let Some(remaining) = NOMINATION_WINDOW
        .checked_sub(since)
        .filter(|d| !d.is_zero())
    {
        return Some(remaining);
    }
    let stale: Vec<Arc<Pod>> = r
        .state
        .pods
        .snapshot()
        .into_iter()
        .filter(|pod| !pods::is_bound(pod) && pods::kerf_nominated_node(pod) == Some(node))
        .collect();
    futures::future::join_all(stale.into_iter().map(|pod| withdraw(r, pod, node))).await;
    None
}

async fn withdraw(r: &Reconciler, pod: Arc<Pod>, node: &str) {
    let body = json!({"status": {
        "nominatedNodeName": null,
        "conditions": [{
            "type": pods::NOMINATION_CONDITION,
            "status": "False",
            "reason": WITHDRAWN_REASON,
            "message": format!("did not fit on node {node} within {NOMINATION_WINDOW:?} of it being initialized"),
            "lastTransitionTime": Timestamp::now().to_string(),
        }],
    }});
    patch_status(r, &pod, body, "withdrawn").await;
}

/// Nominates to `node` the pods NodeClaim `nodeclaim` was created for that still wait for
/// a node; returns how many were written.
pub async fn nominate(r: &Reconciler, nodeclaim: &str, node: &str) -> usize {
    if !r.launch.nominate_pods {
        return 0;
    }
    let waiting: Vec<Arc<Pod>> = r
        .launch
        .created
        .nominated_pods(nodeclaim)
        .iter()
        .filter_map(|pod| waiting_pod(r, pod, node))
        .collect();
    if waiting.is_empty() {
        return 0;
    }
    // The shared slots bound the writes in flight; this Node's simply queue for them.
    let writes = futures::future::join_all(
        waiting
            .into_iter()
            .map(|pod| write(r, pod, nodeclaim, node)),
    );
    match tokio::time::timeout(NOMINATION_BUDGET, writes).await {
        Ok(written) => written.into_iter().filter(|w| *w).count(),
        Err(_) => {
            tracing::warn!(
                nodeclaim,
                %node,
                budget = ?NOMINATION_BUDGET,
                "registering before every pod was nominated to the node"
            );
            0
        }
    }
}

/// The pod `pod` refers to, as the store has it, if it still waits for a node and is not
/// nominated to `node` already.
fn waiting_pod(r: &Reconciler, pod: &PodRef, node: &str) -> Option<Arc<Pod>> {
    let stored = r
        .state
        .pods
        .get(&ObjectKey::new(Some(&pod.namespace), &pod.name))?;
    let same = stored.metadata.uid.as_deref() == Some(pod.uid.as_str());
    let waiting = !pods::is_bound(&stored)
        && stored.metadata.deletion_timestamp.is_none()
        && pods::kerf_nominated_node(&stored) != Some(node);
    (same && waiting).then_some(stored)
}

/// Writes the nomination onto one pod's status; whether it was written.
async fn write(r: &Reconciler, pod: Arc<Pod>, nodeclaim: &str, node: &str) -> bool {
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
    patch_status(r, &pod, body, "nominated").await
}

/// Patches `pod`'s status (strategic merge: the condition merges by type) once one of the
/// [`NOMINATION_CONCURRENCY`] slots is free; counted under `result`, or `gone`/`failed`.
async fn patch_status(
    r: &Reconciler,
    pod: &Pod,
    body: serde_json::Value,
    result: &'static str,
) -> bool {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(r.client.clone(), namespace);
    let Ok(_slot) = r.nomination_slots.acquire().await else {
        return false;
    };
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(body))
        .await
    {
        Ok(_) => {
            metrics::counter!(PODS_NOMINATED, "result" => result).increment(1);
            true
        }
        Err(error) if is_status(&error, 404) => {
            metrics::counter!(PODS_NOMINATED, "result" => "gone").increment(1);
            false
        }
        Err(error) => {
            metrics::counter!(PODS_NOMINATED, "result" => "failed").increment(1);
            tracing::warn!(pod = %format!("{namespace}/{name}"), %error, result, "writing pod nomination");
            false
        }
    }
}
