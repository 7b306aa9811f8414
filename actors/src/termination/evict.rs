//! Evicting one pod through the eviction subresource, which honours its
//! PodDisruptionBudgets, as upstream's eviction queue does: each pod is asked at most once
//! per backoff delay ([`super::backoff`]); a refusal (429) publishes a `FailedEviction`
//! event on the pod naming the budget and logs it; any other failure is logged with why (the
//! code and message, or no answer in time); an acceptance publishes `Evicted` and counts the
//! pod as drained. Every answer is counted by its code in
//! `karpenter_pods_eviction_requests_total`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf::pods::{LeanPod, PodLike};
use kube::api::{Api, DeleteParams, EvictParams, Preconditions};
use tokio::time::Instant;

use super::backoff::PodKey;
use super::events;
use super::reconcile::Terminator;
use crate::metrics::{PODS_DRAINED, PODS_EVICTION_REQUESTS};

/// Evictions sent at once while draining one Node.
pub const EVICTION_CONCURRENCY: usize = 16;

/// The message of the API server's refusal to evict a pod covered by several budgets.
pub const MULTIPLE_PDBS_MESSAGE: &str = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// What an eviction request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The API server accepted the eviction; the pod is terminating.
    Accepted,
    /// The pod is gone (404) or is another pod by now (409, UID precondition).
    Gone,
    /// A PodDisruptionBudget forbids it for now (429, or several budgets): retry later.
    Blocked,
    /// Any other failure; retried after the same backoff.
    Failed,
    /// Not asked: the pod's backoff has not passed yet.
    Deferred,
}

/// Reads an eviction error's status code and message.
pub fn answer(code: u16, message: &str) -> Answer {
    match code {
        200..=299 => Answer::Accepted,
        404 | 409 => Answer::Gone,
        429 => Answer::Blocked,
        _ if message == MULTIPLE_PDBS_MESSAGE => Answer::Blocked,
        _ => Answer::Failed,
    }
}

/// The budget a refusal names: the API server's cause reads "The disruption budget NAME
/// needs …" (or "… NAME is still being processed …").
pub fn refusing_budget(status: &kube::core::Status) -> Option<String> {
    const PREFIX: &str = "The disruption budget ";
    status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .filter(|c| c.reason == "DisruptionBudget")
        .find_map(|c| {
            let rest = c.message.strip_prefix(PREFIX)?;
            rest.split_whitespace().next().map(str::to_owned)
        })
}

/// What the API server's refusal comes to, with the budget that refused (`Blocked`) or the
/// code and message (`Failed`, so the log says why).
fn refusal(status: &kube::core::Status) -> (Answer, Option<String>) {
    let answer = answer(status.code, &status.message);
    let detail = match answer {
        Answer::Blocked => refusing_budget(status),
        _ => Some(format!("{} {}", status.code, status.message)),
    };
    (answer, detail)
}

fn key(pod: &LeanPod) -> PodKey {
    PodKey {
        namespace: pod.meta().namespace.unwrap_or_default().to_owned(),
        name: pod.meta().name.unwrap_or_default().to_owned(),
        uid: pod.meta().uid.unwrap_or_default().to_owned(),
    }
}

/// Evicts `pod` unless its backoff holds it; `reason` labels a successful drain.
pub async fn evict(t: &Terminator, pod: Arc<LeanPod>, reason: &str) -> Answer {
    let key = key(&pod);
    let now = Instant::now();
    {
        let mut backoffs = t.backoffs();
        backoffs.enqueue(key.clone(), now);
        if !backoffs.ready(&key, now) {
            return Answer::Deferred;
        }
    }
    let api: Api<Pod> = Api::namespaced(t.client.clone(), &key.namespace);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            // Only this pod: a replacement under the same name is not ours to evict.
            preconditions: Some(Preconditions {
                uid: Some(key.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    // The refusing budget for `Blocked`, why for `Failed`.
    let (answer, detail) = match tokio::time::timeout(
        t.config.eviction_timeout,
        api.evict(&key.name, &params),
    )
    .await
    {
        // An API server that does not answer in time is retried like a failure.
        Err(_elapsed) => (
            Answer::Failed,
            Some(format!("no answer within {:?}", t.config.eviction_timeout)),
        ),
        Ok(Ok(_)) => {
            metrics::counter!(PODS_EVICTION_REQUESTS, "code" => "200").increment(1);
            (Answer::Accepted, None)
        }
        Ok(Err(kube::Error::Api(status))) => {
            metrics::counter!(PODS_EVICTION_REQUESTS, "code" => status.code.to_string())
                .increment(1);
            refusal(&status)
        }
        Ok(Err(error)) => (Answer::Failed, Some(error.to_string())),
    };
    record(t, &pod, key, answer, detail.as_deref(), reason);
    answer
}

fn record(
    t: &Terminator,
    pod: &LeanPod,
    key: PodKey,
    answer: Answer,
    detail: Option<&str>,
    reason: &str,
) {
    match answer {
        Answer::Accepted => {
            t.backoffs().forget(&key);
            t.stats.record_evicted();
            metrics::counter!(PODS_DRAINED, "reason" => reason.to_owned()).increment(1);
            t.events.publish(events::evicted(pod));
        }
        Answer::Gone => t.backoffs().forget(&key),
        Answer::Blocked => {
            let retry_in = t.backoffs().refused(key.clone(), Instant::now());
            t.stats.record_blocked();
            t.events.publish(events::failed_eviction(pod, detail));
            tracing::info!(
                pod = %key.name,
                namespace = %key.namespace,
                pdb = detail.unwrap_or("unknown"),
                ?retry_in,
                "eviction refused by a disruption budget"
            );
        }
        Answer::Failed => {
            let retry_in = t.backoffs().refused(key.clone(), Instant::now());
            tracing::warn!(
                pod = %key.name,
                namespace = %key.namespace,
                ?retry_in,
                cause = detail.unwrap_or("unknown"),
                "eviction failed"
            );
        }
        Answer::Deferred => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn eviction_answers() {
        assert_eq!(answer(201, ""), Answer::Accepted);
        assert_eq!(answer(404, "not found"), Answer::Gone);
        assert_eq!(answer(409, "uid mismatch"), Answer::Gone);
        assert_eq!(answer(429, "budget"), Answer::Blocked);
        assert_eq!(answer(500, MULTIPLE_PDBS_MESSAGE), Answer::Blocked);
        assert_eq!(answer(500, "etcd down"), Answer::Failed);
    }

    #[test]
    fn the_refusing_budget_is_read_from_the_api_servers_cause() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "code": 429, "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web-pdb needs 1 healthy pods and has 1 currently"}]}
        }))
        .expect("a status");
        assert_eq!(refusing_budget(&status).as_deref(), Some("web-pdb"));
        let bare: kube::core::Status =
            serde_json::from_value(json!({"code": 429})).expect("a status");
        assert_eq!(refusing_budget(&bare), None);
        assert_eq!(
            refusal(&status),
            (Answer::Blocked, Some("web-pdb".to_owned()))
        );
    }

    #[test]
    fn a_failed_eviction_says_the_code_and_message_it_got() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "code": 503, "reason": "ServiceUnavailable", "message": "the server is busy"
        }))
        .expect("a status");
        assert_eq!(
            refusal(&status),
            (Answer::Failed, Some("503 the server is busy".to_owned()))
        );
    }
}
