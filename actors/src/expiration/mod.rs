//! Expiration as upstream's `nodeclaim.expiration` controller: a NodeClaim older than its
//! `spec.expireAfter` (counted from its creation) is deleted, whatever the disruption budgets
//! say; the termination drainer then drains it, honouring PDBs until the
//! `terminationGracePeriod`. `expireAfter: Never` never expires. Each deletion counts
//! `karpenter_nodeclaims_disrupted_total{reason="expired"}` (upstream's `ExpiredReason`); like
//! upstream, no Event is published here (the drainer's `DisruptionTerminating` follows).
//!
//! The pass sleeps until the next NodeClaim expires, so an expiry is acted on within
//! [`crate::requeue::MIN_GAP`] of its time, and only the leader deletes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::{NillableDuration, NodeClaim};
use kerf::labels;
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::requeue::{self, MAX_SLEEP, Trigger};
use crate::state::ClusterState;

/// Upstream's controller name (reconcile metrics).
pub const CONTROLLER: &str = "nodeclaim.expiration";
/// `reason` of `karpenter_nodeclaims_disrupted_total` for an expired NodeClaim.
pub const EXPIRED_REASON: &str = "expired";

/// When `claim` expires, if it ever does.
pub fn expires_at(claim: &NodeClaim) -> Option<Timestamp> {
    let NillableDuration::After(after) = &claim.spec.expire_after else {
        return None;
    };
    let created = claim.metadata.creation_timestamp.as_ref()?.0;
    let after = k8s_openapi::jiff::SignedDuration::try_from(after.as_std()).ok()?;
    created.checked_add(after).ok()
}

/// What one pass found: the NodeClaims it expired and how long until the next one expires.
#[derive(Debug, Default)]
pub struct Pass {
    pub expired: Vec<String>,
    pub next: Option<Duration>,
}

/// The NodeClaims due at `now` and the wait until the next one is.
pub fn due(claims: &[Arc<NodeClaim>], now: Timestamp) -> (Vec<Arc<NodeClaim>>, Option<Duration>) {
    let mut due = Vec::new();
    let mut next: Option<Duration> = None;
    for claim in claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let Some(at) = expires_at(claim) else {
            continue;
        };
        if at <= now {
            due.push(Arc::clone(claim));
        } else {
            let wait = Duration::try_from(at.duration_since(now)).unwrap_or(MAX_SLEEP);
            next = Some(next.map_or(wait, |n| n.min(wait)));
        }
    }
    (due, next)
}

/// Deletes every expired NodeClaim; a failed delete is retried by the next pass.
pub async fn expire(client: &Client, state: &ClusterState) -> Result<Pass, kube::Error> {
    let (due, next) = due(&state.nodeclaims.snapshot(), Timestamp::now());
    let api: Api<NodeClaim> = Api::all(client.clone());
    let mut pass = Pass {
        next,
        ..Pass::default()
    };
    for claim in due {
        match api
            .delete(&claim.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(e),
        }
        let label = |key: &str| claim.labels().get(key).cloned().unwrap_or_default();
        crate::metrics::nodeclaim_disrupted(
            EXPIRED_REASON,
            &label(labels::NODEPOOL),
            &label(labels::CAPACITY_TYPE),
        );
        tracing::info!(nodeclaim = claim.name_any(), "deleting expired nodeclaim");
        pass.expired.push(claim.name_any());
    }
    Ok(pass)
}

/// Runs expiration passes until `shutdown`.
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    trigger: Trigger,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let pass_state = Arc::clone(&state);
    requeue::run(state, trigger, leader, shutdown, move || {
        let (client, state) = (client.clone(), Arc::clone(&pass_state));
        async move {
            match crate::metrics::reconcile(CONTROLLER, expire(&client, &state)).await {
                Ok(pass) => pass.next.unwrap_or(MAX_SLEEP),
                Err(error) => {
                    tracing::warn!(%error, "expiring nodeclaims");
                    requeue::MIN_GAP
                }
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, created: &str, expire_after: &str) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "creationTimestamp": created},
                "spec": {"requirements": [], "expireAfter": expire_after,
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            }))
            .expect("a valid NodeClaim"),
        )
    }

    #[test]
    fn due_are_those_past_expire_after_and_the_wait_is_to_the_next() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().expect("time");
        let claims = [
            claim("old", "2026-01-01T10:00:00Z", "1h"),
            claim("exact", "2026-01-01T11:00:00Z", "1h"),
            claim("soon", "2026-01-01T11:30:00Z", "1h"),
            claim("later", "2026-01-01T11:50:00Z", "1h"),
            claim("never", "2020-01-01T00:00:00Z", "Never"),
        ];
        let (due, next) = due(&claims, now);
        let names: Vec<_> = due.iter().map(|c| c.name_any()).collect();
        assert_eq!(names, ["old", "exact"]);
        assert_eq!(next, Some(Duration::from_secs(30 * 60)));
    }
}
