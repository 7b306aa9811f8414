//! Expiration as upstream's `nodeclaim.expiration` controller: a NodeClaim older than its
//! `spec.expireAfter` (counted from its creation) is deleted, whatever the disruption budgets
//! say; the termination drainer then drains it, honouring PDBs until the
//! `terminationGracePeriod`. `expireAfter: Never` never expires. Each deletion counts
//! `karpenter_nodeclaims_disrupted_total{reason="expired"}` (upstream's `ExpiredReason`); like
//! upstream, no Event is published here (the drainer's `DisruptionTerminating` follows).
//!
//! A NodeClaim in a Capacity Block is deleted the same way once the block enters its
//! expiration window ([`kerf::catalog::CAPACITY_BLOCK_EXPIRATION_WINDOW`], from its end
//! time in the EC2NodeClass's status), as upstream drains such nodes ten minutes before EC2
//! reclaims them; its pods move while there is time, instead of with the instance.
//!
//! The pass sleeps until the next NodeClaim expires, so an expiry is acted on within
//! [`crate::requeue::MIN_GAP`] of its time, and only the leader deletes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::ec2nodeclass::CapacityReservationType;
use kerf::api::{EC2NodeClass, NillableDuration, NodeClaim};
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

/// NodeClaims in a Capacity Block whose class's status says it ends within the expiration
/// window at `now`, and the wait until the next block enters its window.
pub fn in_ending_blocks(
    claims: &[Arc<NodeClaim>],
    classes: &[Arc<EC2NodeClass>],
    now: Timestamp,
) -> (Vec<Arc<NodeClaim>>, Option<Duration>) {
    let window = kerf::catalog::CAPACITY_BLOCK_EXPIRATION_WINDOW;
    let mut drain_at = std::collections::HashMap::new();
    for reservation in classes
        .iter()
        .filter_map(|c| c.status.as_ref())
        .flat_map(|s| &s.capacity_reservations)
        .filter(|r| r.reservation_type == CapacityReservationType::CapacityBlock)
    {
        let Some(end) = &reservation.end_time else {
            continue;
        };
        let Ok(window) = k8s_openapi::jiff::SignedDuration::try_from(window) else {
            continue;
        };
        if let Ok(at) = end.0.checked_sub(window) {
            drain_at.insert(reservation.id.as_str(), at);
        }
    }
    let mut due = Vec::new();
    let mut next: Option<Duration> = None;
    for claim in claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let Some(at) = claim
            .labels()
            .get(labels::CAPACITY_RESERVATION_ID)
            .and_then(|id| drain_at.get(id.as_str()))
        else {
            continue;
        };
        if *at <= now {
            due.push(Arc::clone(claim));
        } else {
            let wait = Duration::try_from(at.duration_since(now)).unwrap_or(MAX_SLEEP);
            next = Some(next.map_or(wait, |n| n.min(wait)));
        }
    }
    (due, next)
}

/// Deletes every expired NodeClaim and every one in an ending Capacity Block; a failed
/// delete is retried by the next pass.
pub async fn expire(client: &Client, state: &ClusterState) -> Result<Pass, kube::Error> {
    let now = Timestamp::now();
    let claims = state.nodeclaims.snapshot();
    let (due, next) = due(&claims, now);
    let (ending, next_block) = in_ending_blocks(&claims, &state.nodeclasses.snapshot(), now);
    let next = match (next, next_block) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let api: Api<NodeClaim> = Api::all(client.clone());
    let mut pass = Pass {
        next,
        ..Pass::default()
    };
    for claim in due {
        if !delete(&api, &claim).await? {
            continue;
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
    let ending: Vec<Arc<NodeClaim>> = ending
        .into_iter()
        .filter(|c| !pass.expired.contains(&c.name_any()))
        .collect();
    for claim in ending {
        if !delete(&api, &claim).await? {
            continue;
        }
        tracing::info!(
            nodeclaim = claim.name_any(),
            capacity_reservation = claim.labels().get(labels::CAPACITY_RESERVATION_ID),
            "deleting nodeclaim ahead of its capacity block's end"
        );
        pass.expired.push(claim.name_any());
    }
    Ok(pass)
}

/// Deletes `claim`; `false` when it is already gone.
async fn delete(api: &Api<NodeClaim>, claim: &NodeClaim) -> Result<bool, kube::Error> {
    match api
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
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

    #[test]
    fn nodeclaims_in_a_capacity_block_are_due_forty_minutes_before_its_end() {
        let class: Arc<EC2NodeClass> = Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "default"},
                "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                         "subnetSelectorTerms": [{"id": "s"}],
                         "securityGroupSelectorTerms": [{"id": "g"}]},
                "status": {"capacityReservations": [
                    {"id": "cr-block", "instanceType": "p5.48xlarge",
                     "availabilityZone": "us-east-1a", "instanceMatchCriteria": "targeted",
                     "ownerID": "123456789012", "reservationType": "capacity-block",
                     "endTime": "2026-01-01T12:00:00Z"},
                    {"id": "cr-odcr", "instanceType": "m5.large",
                     "availabilityZone": "us-east-1a", "instanceMatchCriteria": "targeted",
                     "ownerID": "123456789012", "endTime": "2026-01-01T11:00:00Z"}
                ]}
            }))
            .expect("a valid EC2NodeClass"),
        );
        let in_reservation = |name: &str, id: &str| {
            let mut claim = claim(name, "2026-01-01T00:00:00Z", "Never");
            Arc::make_mut(&mut claim)
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(labels::CAPACITY_RESERVATION_ID.into(), id.into());
            claim
        };
        let claims = vec![
            in_reservation("block", "cr-block"),
            in_reservation("odcr", "cr-odcr"),
            claim("plain", "2026-01-01T00:00:00Z", "Never"),
        ];
        let at = |t: &str| t.parse::<Timestamp>().expect("timestamp");
        let (due, next) = in_ending_blocks(
            &claims,
            std::slice::from_ref(&class),
            at("2026-01-01T11:10:00Z"),
        );
        assert!(due.is_empty());
        assert_eq!(next, Some(Duration::from_secs(10 * 60)));
        let (due, _) = in_ending_blocks(&claims, &[class], at("2026-01-01T11:20:00Z"));
        let names: Vec<String> = due.iter().map(|c| c.name_any()).collect();
        assert_eq!(
            names,
            ["block"],
            "only the Capacity Block's NodeClaim, not the ODCR's"
        );
    }
}
