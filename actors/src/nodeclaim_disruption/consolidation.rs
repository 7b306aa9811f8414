//! `Consolidatable` as upstream: a NodeClaim of a NodePool whose `consolidateAfter` is not
//! `Never`, once initialized, becomes consolidatable `consolidateAfter` after its last pod
//! event (`status.lastPodEventTime`), or after initialization when no pod event was recorded.
//! Before that the condition is absent and the NodeClaim is looked at again at that instant.
//! NodeClaims of static NodePools (`replicas`) are never consolidatable.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::types;
use kerf::api::{NillableDuration, NodeClaim, NodePool};

/// What the condition should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Absent, and nothing will change it by itself.
    Clear,
    /// Absent until the given wait has passed.
    ClearFor(Duration),
    /// `True`.
    Consolidatable,
}

pub fn verdict(pool: &NodePool, claim: &NodeClaim, now: Timestamp) -> Verdict {
    // Static NodePools (`replicas`) are never consolidated.
    if pool.is_static() {
        return Verdict::Clear;
    }
    let NillableDuration::After(after) = &pool.disruption().consolidate_after else {
        return Verdict::Clear;
    };
    let Some(initialized) = claim
        .conditions()
        .iter()
        .find(|c| c.type_ == types::INITIALIZED && c.is_true())
    else {
        return Verdict::Clear;
    };
    let since = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map_or(initialized.last_transition_time.0, |t| t.0);
    let Ok(after) = k8s_openapi::jiff::SignedDuration::try_from(after.as_std()) else {
        return Verdict::Clear;
    };
    let Ok(at) = since.checked_add(after) else {
        return Verdict::Clear;
    };
    if at <= now {
        Verdict::Consolidatable
    } else {
        Verdict::ClearFor(Duration::try_from(at.duration_since(now)).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(consolidate_after: &str) -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"disruption": {"consolidateAfter": consolidate_after},
                "template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
        }))
        .expect("a valid NodePool")
    }

    fn claim(initialized_at: Option<&str>, last_pod_event: Option<&str>) -> NodeClaim {
        let conditions: Vec<_> = initialized_at
            .map(|t| serde_json::json!({"type": "Initialized", "status": "True", "lastTransitionTime": t, "reason": "Initialized"}))
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"conditions": conditions, "lastPodEventTime": last_pod_event},
        }))
        .expect("a valid NodeClaim")
    }

    #[test]
    fn consolidatable_after_consolidate_after_since_the_last_pod_event() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().expect("time");
        let p = pool("10m");
        let initialized = Some("2026-01-01T11:00:00Z");
        assert_eq!(
            verdict(&p, &claim(initialized, None), now),
            Verdict::Consolidatable
        );
        assert_eq!(
            verdict(&p, &claim(initialized, Some("2026-01-01T11:55:00Z")), now),
            Verdict::ClearFor(Duration::from_secs(300))
        );
        assert_eq!(
            verdict(&p, &claim(initialized, Some("2026-01-01T11:50:00Z")), now),
            Verdict::Consolidatable
        );
        assert_eq!(
            verdict(&p, &claim(None, None), now),
            Verdict::Clear,
            "not initialized"
        );
        assert_eq!(
            verdict(&pool("Never"), &claim(initialized, None), now),
            Verdict::Clear
        );
    }
}
