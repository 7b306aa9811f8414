//! Liveness, as upstream's lifecycle controller judges it: a NodeClaim that is not
//! `Launched` within the launch TTL (5 minutes), or launched but not `Registered` within the
//! registration TTL (15 minutes), is deleted, so its pods are planned onto new capacity. The
//! launch clock starts at the `Launched` condition's last transition (upstream records a
//! failed launch there) or, without one, at the NodeClaim's creation; the registration clock
//! at the `Registered` condition's last transition (set `Unknown` by the first reconcile after
//! launch), else at the launch. A registered NodeClaim is never judged again.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::{Condition, Conditions, types};

/// `reason` of `karpenter_nodeclaims_disrupted_total` for a NodeClaim that never launched.
pub const LAUNCH_TIMEOUT_REASON: &str = "launch_timeout";
/// `reason` of `karpenter_nodeclaims_disrupted_total` for a Node that never registered.
pub const REGISTRATION_TIMEOUT_REASON: &str = "registration_timeout";

/// What a person should check when a launched machine never became a Node, in the order
/// Karpenter's troubleshooting guide and the node-join posts give them.
pub fn registration_timeout_message(claim: &NodeClaim, ttl: Duration) -> String {
    let instance = claim.provider_id().unwrap_or("(no providerID)");
    format!(
        "instance {instance} of nodeclaim {} did not register a Node within {}s; check: the node role's EKS access entry (or its aws-auth mapRoles entry), that the node security group reaches the API server on 443, that the subnet reaches the STS and ECR endpoints (VPC endpoints in private subnets), and the EC2NodeClass user data (the node's /var/log/cloud-init-output.log)",
        claim.name(),
        ttl.as_secs()
    )
}

/// The two TTLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttls {
    pub launch: Duration,
    pub registration: Duration,
}

/// What liveness decides for one NodeClaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Registered: liveness no longer applies.
    Registered,
    /// Still within its TTL; judge again after `remaining`.
    Waiting { remaining: Duration },
    /// Past its TTL: delete it.
    TimedOut { reason: &'static str, ttl: Duration },
}

/// Judges `claim` at `now`.
pub fn judge(claim: &NodeClaim, ttls: Ttls, now: Timestamp) -> Verdict {
    judge_conditions(claim, claim.conditions(), ttls, now)
}

/// Judges `claim` with `conditions` (as they will be written) at `now`.
pub fn judge_conditions(
    claim: &NodeClaim,
    conditions: &[Condition],
    ttls: Ttls,
    now: Timestamp,
) -> Verdict {
    if conditions.is_condition_true(types::REGISTERED) {
        return Verdict::Registered;
    }
    let launched = conditions.condition(types::LAUNCHED);
    if !launched.is_some_and(|c| c.is_true()) {
        let since = launched
            .map(|c| c.last_transition_time.0)
            .or_else(|| claim.metadata.creation_timestamp.as_ref().map(|t| t.0));
        return against(since, ttls.launch, LAUNCH_TIMEOUT_REASON, now);
    }
    let since = conditions
        .condition(types::REGISTERED)
        .or(launched)
        .map(|c| c.last_transition_time.0);
    against(since, ttls.registration, REGISTRATION_TIMEOUT_REASON, now)
}

fn against(
    since: Option<Timestamp>,
    ttl: Duration,
    reason: &'static str,
    now: Timestamp,
) -> Verdict {
    // Without any timestamp (never so on an object read from the API server) the clock
    // starts now, so the TTL still bounds the wait.
    let elapsed = since.map_or(Duration::ZERO, |since| {
        Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
    });
    match ttl.checked_sub(elapsed) {
        Some(remaining) if !remaining.is_zero() => Verdict::Waiting { remaining },
        _ => Verdict::TimedOut { reason, ttl },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TTLS: Ttls = Ttls {
        launch: Duration::from_secs(300),
        registration: Duration::from_secs(900),
    };

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).expect("valid")
    }

    fn claim(conditions: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "creationTimestamp": at(0).to_string()},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"conditions": conditions}
        }))
        .expect("valid NodeClaim")
    }

    fn condition(type_: &str, status: &str, second: i64) -> serde_json::Value {
        json!({"type": type_, "status": status, "lastTransitionTime": at(second).to_string()})
    }

    #[test]
    fn an_unlaunched_claim_times_out_five_minutes_after_creation() {
        let c = claim(json!([]));
        assert_eq!(
            judge(&c, TTLS, at(60)),
            Verdict::Waiting {
                remaining: Duration::from_secs(240)
            }
        );
        assert_eq!(
            judge(&c, TTLS, at(300)),
            Verdict::TimedOut {
                reason: LAUNCH_TIMEOUT_REASON,
                ttl: TTLS.launch
            }
        );
    }

    #[test]
    fn a_failed_launch_is_timed_from_its_condition() {
        let c = claim(json!([condition("Launched", "Unknown", 100)]));
        assert_eq!(
            judge(&c, TTLS, at(350)),
            Verdict::Waiting {
                remaining: Duration::from_secs(50)
            }
        );
        assert!(matches!(
            judge(&c, TTLS, at(400)),
            Verdict::TimedOut {
                reason: LAUNCH_TIMEOUT_REASON,
                ..
            }
        ));
    }

    #[test]
    fn a_launched_claim_must_register_within_fifteen_minutes() {
        let c = claim(json!([
            condition("Launched", "True", 10),
            condition("Registered", "Unknown", 20)
        ]));
        assert_eq!(
            judge(&c, TTLS, at(900)),
            Verdict::Waiting {
                remaining: Duration::from_secs(20)
            }
        );
        assert_eq!(
            judge(&c, TTLS, at(920)),
            Verdict::TimedOut {
                reason: REGISTRATION_TIMEOUT_REASON,
                ttl: TTLS.registration
            }
        );
        let without_registered = claim(json!([condition("Launched", "True", 10)]));
        assert_eq!(
            judge(&without_registered, TTLS, at(910)),
            Verdict::TimedOut {
                reason: REGISTRATION_TIMEOUT_REASON,
                ttl: TTLS.registration
            }
        );
    }

    #[test]
    fn registered_claims_are_never_timed_out() {
        let c = claim(json!([
            condition("Launched", "True", 10),
            condition("Registered", "True", 20)
        ]));
        assert_eq!(judge(&c, TTLS, at(100_000)), Verdict::Registered);
    }

    #[test]
    fn clock_skew_does_not_underflow() {
        let c = claim(json!([]));
        assert_eq!(
            judge(&c, TTLS, at(-30)),
            Verdict::Waiting {
                remaining: TTLS.launch
            }
        );
    }
}
