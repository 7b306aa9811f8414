//! The Lease record as leader election reads and writes it, and the candidate's own
//! observation of it: when the record last changed by the candidate's clock.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

use super::{Election, LeaseError};

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// A Lease held by `election.identity` from now.
pub(super) fn fresh(election: &Election, transitions: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(election.name.clone()),
            namespace: Some(election.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(election.identity.clone()),
            lease_duration_seconds: Some(seconds(election.timing.lease_duration)),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// The current holder, if any.
pub(super) fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// Our Lease, renewed now.
pub(super) fn renewed(mut lease: Lease) -> Lease {
    lease.spec.get_or_insert_with(LeaseSpec::default).renew_time = Some(now());
    lease
}

/// Someone else's (expired or released) Lease, taken by us now.
pub(super) fn taken_over(lease: Lease, election: &Election) -> Lease {
    let transitions = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    let mut next = fresh(election, transitions.saturating_add(1));
    // Keeps the resourceVersion so the write is an optimistic update.
    next.metadata = lease.metadata;
    next
}

/// Gives the Lease up: no holder, so a standby acquires it on its next attempt.
pub(super) async fn release(api: &Api<Lease>, election: &Election) -> Result<(), LeaseError> {
    let name = &election.name;
    let Some(mut lease) = api
        .get_opt(name)
        .await
        .map_err(|e| LeaseError::Read(name.clone(), e))?
    else {
        return Ok(());
    };
    if holder(&lease) != Some(election.identity.as_str()) {
        return Ok(());
    }
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    api.replace(name, &PostParams::default(), &lease)
        .await
        .map(|_| ())
        .map_err(|e| LeaseError::Write(name.clone(), e))
}

/// What a candidate last saw of the Lease and when, by its own clock.
#[derive(Debug, Default)]
pub(super) struct Observed {
    version: Option<String>,
    changed_at: Option<Instant>,
    lease_duration: Option<Duration>,
}

impl Observed {
    /// Records the Lease as read at `now`; the clock restarts only when the record changed.
    pub(super) fn see(&mut self, lease: &Lease, now: Instant) {
        let version = lease.metadata.resource_version.clone();
        if version != self.version || self.changed_at.is_none() {
            self.version = version;
            self.changed_at = Some(now);
        }
        self.lease_duration = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs);
    }

    /// Whether the holder has let the Lease lapse: unchanged for its lease duration (the
    /// record's own, else ours).
    pub(super) fn expired(&self, default_duration: Duration, now: Instant) -> bool {
        let duration = self.lease_duration.unwrap_or(default_duration);
        self.changed_at
            .is_some_and(|at| now.saturating_duration_since(at) >= duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(version: &str, holder: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn expiry_is_timed_from_the_last_change_seen() {
        let t0 = Instant::now();
        let mut o = Observed::default();
        o.see(&lease("1", "a"), t0);
        o.see(&lease("1", "a"), t0 + Duration::from_secs(10));
        assert!(!o.expired(Duration::from_secs(15), t0 + Duration::from_secs(14)));
        assert!(o.expired(Duration::from_secs(15), t0 + Duration::from_secs(15)));
        // A renewal (new resourceVersion) restarts the clock.
        o.see(&lease("2", "a"), t0 + Duration::from_secs(15));
        assert!(!o.expired(Duration::from_secs(15), t0 + Duration::from_secs(20)));
    }

    #[test]
    fn empty_holder_is_no_holder() {
        assert_eq!(holder(&lease("1", "")), None);
        assert_eq!(holder(&lease("1", "a")), Some("a"));
    }

    #[test]
    fn takeover_counts_a_transition_and_keeps_the_version() {
        let election = Election {
            namespace: "kube-system".into(),
            name: "l".into(),
            identity: "b".into(),
            timing: super::super::Timing::default(),
        };
        let mut old = lease("7", "a");
        if let Some(spec) = old.spec.as_mut() {
            spec.lease_transitions = Some(3);
        }
        let next = taken_over(old, &election);
        assert_eq!(next.metadata.resource_version.as_deref(), Some("7"));
        let spec = next.spec.expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(4));
    }
}
