//! Taints and tolerations matched as the kube-scheduler matches them (Exists and Equal, an
//! empty key with Exists tolerating every taint, an empty effect matching every effect, and
//! the numeric Gt/Lt toleration operators Karpenter enables), plus the taints Karpenter
//! expects on a node while it initialises and therefore ignores until it has.

use std::fmt;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::labels;

pub const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
pub const EFFECT_PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
pub const EFFECT_NO_EXECUTE: &str = "NoExecute";

/// Whether PreferNoSchedule taints must be tolerated. The kube-scheduler's filter ignores
/// them; Karpenter first treats them as binding and relaxes that when a pod cannot schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreferNoSchedule {
    Ignore,
    Consider,
}

/// Taints (key and effect) that other controllers put on a new node and remove once it is
/// ready, upstream's `KnownEphemeralTaints`. The cloud provider's uninitialized taint
/// carries the value `true` upstream, but matching compares key and effect only.
pub const KNOWN_EPHEMERAL_TAINTS: &[(&str, &str)] = &[
    (labels::TAINT_NODE_NOT_READY, EFFECT_NO_SCHEDULE),
    (labels::TAINT_NODE_NOT_READY, EFFECT_NO_EXECUTE),
    (labels::TAINT_NODE_UNREACHABLE, EFFECT_NO_SCHEDULE),
    (labels::TAINT_EXTERNAL_CLOUD_PROVIDER, EFFECT_NO_SCHEDULE),
    (labels::UNREGISTERED_TAINT, EFFECT_NO_EXECUTE),
];

/// The taint Karpenter puts on a Node it is disrupting or terminating
/// (`karpenter.sh/disrupted:NoSchedule`), so no new pod lands there. Built here, once, for
/// the disruption orchestrator, the termination drainer and the scheduler's view of it.
pub fn disrupted_taint() -> Taint {
    Taint {
        key: labels::DISRUPTED_TAINT.to_owned(),
        effect: EFFECT_NO_SCHEDULE.to_owned(),
        ..Taint::default()
    }
}

/// Key prefixes of taint families that are ephemeral whatever their suffix.
pub const KNOWN_EPHEMERAL_TAINT_KEY_PREFIXES: &[&str] = &[labels::TAINT_NODE_READINESS_PREFIX];

/// Whether a node still initialising may be expected to lose this taint.
pub fn is_known_ephemeral_taint(taint: &Taint) -> bool {
    KNOWN_EPHEMERAL_TAINTS
        .iter()
        .any(|(key, effect)| taint.key == *key && taint.effect == *effect)
        || KNOWN_EPHEMERAL_TAINT_KEY_PREFIXES
            .iter()
            .any(|prefix| taint.key.starts_with(prefix))
}

/// Whether two taints are the same taint for Kubernetes: same key and effect.
pub fn taints_match(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// `base` followed by the taints of `extra` that match none already present.
pub fn merge_taints(base: &[Taint], extra: &[Taint]) -> Vec<Taint> {
    let mut merged = base.to_vec();
    for taint in extra {
        if !merged.iter().any(|t| taints_match(t, taint)) {
            merged.push(taint.clone());
        }
    }
    merged
}

/// Whether `toleration` tolerates `taint`, by the kube-scheduler's rules.
pub fn toleration_tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    let value = toleration.value.as_deref().unwrap_or("");
    let taint_value = taint.value.as_deref().unwrap_or("");
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => value == taint_value,
        "Exists" => true,
        "Gt" => compare_integers(value, taint_value).is_some_and(|(tol, t)| t > tol),
        "Lt" => compare_integers(value, taint_value).is_some_and(|(tol, t)| t < tol),
        _ => false,
    }
}

/// Both values as integers, when both are canonical decimal integers (no sign but a
/// leading minus, no leading zeros), as the API server's comparison operators require.
fn compare_integers(toleration: &str, taint: &str) -> Option<(i64, i64)> {
    Some((canonical_integer(toleration)?, canonical_integer(taint)?))
}

fn canonical_integer(value: &str) -> Option<i64> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    let canonical = match digits.as_bytes() {
        [b'0'] => digits.len() == value.len(),
        [first, rest @ ..] => (b'1'..=b'9').contains(first) && rest.iter().all(u8::is_ascii_digit),
        [] => false,
    };
    if canonical { value.parse().ok() } else { None }
}

fn counts(taint: &Taint, prefer: PreferNoSchedule) -> bool {
    prefer == PreferNoSchedule::Consider || taint.effect != EFFECT_PREFER_NO_SCHEDULE
}

fn tolerated(taint: &Taint, tolerations: &[Toleration]) -> bool {
    tolerations.iter().any(|t| toleration_tolerates(t, taint))
}

/// Whether `tolerations` tolerate every taint that counts under `prefer`. Allocation-free.
pub fn is_tolerated(
    taints: &[Taint],
    tolerations: &[Toleration],
    prefer: PreferNoSchedule,
) -> bool {
    taints
        .iter()
        .all(|taint| !counts(taint, prefer) || tolerated(taint, tolerations))
}

/// Whether `tolerations` tolerate every NoSchedule and NoExecute taint, as the
/// kube-scheduler's filter decides; the error names each taint that is not tolerated.
pub fn tolerates(taints: &[Taint], tolerations: &[Toleration]) -> Result<(), Untolerated> {
    tolerates_with(taints, tolerations, PreferNoSchedule::Ignore)
}

/// [`tolerates`] with PreferNoSchedule taints counted or not.
pub fn tolerates_with(
    taints: &[Taint],
    tolerations: &[Toleration],
    prefer: PreferNoSchedule,
) -> Result<(), Untolerated> {
    if is_tolerated(taints, tolerations, prefer) {
        return Ok(());
    }
    let untolerated = taints
        .iter()
        .filter(|taint| counts(taint, prefer) && !tolerated(taint, tolerations))
        .cloned()
        .collect();
    Err(Untolerated {
        taints: untolerated,
    })
}

/// Taints a pod does not tolerate (never empty).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct Untolerated {
    pub taints: Vec<Taint>,
}

impl fmt::Display for Untolerated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, taint) in self.taints.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "did not tolerate taint (taint={})", format_taint(taint))?;
        }
        Ok(())
    }
}

/// `key=value:Effect`, or `key:Effect` without a value, as kubectl and upstream print taints.
pub fn format_taint(taint: &Taint) -> String {
    match taint.value.as_deref().filter(|v| !v.is_empty()) {
        Some(value) => format!("{}={}:{}", taint.key, value, taint.effect),
        None => format!("{}:{}", taint.key, taint.effect),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
            time_added: None,
        }
    }

    fn toleration(
        key: Option<&str>,
        operator: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(str::to_owned),
            operator: operator.map(str::to_owned),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
            toleration_seconds: None,
        }
    }

    #[test]
    fn toleration_matching_follows_the_kube_scheduler() {
        let t = taint("team", Some("a"), EFFECT_NO_SCHEDULE);
        let cases = [
            (
                toleration(Some("team"), Some("Equal"), Some("a"), Some("NoSchedule")),
                true,
            ),
            (toleration(Some("team"), None, Some("a"), None), true),
            (
                toleration(Some("team"), Some("Equal"), Some("b"), None),
                false,
            ),
            (toleration(Some("team"), Some("Exists"), None, None), true),
            (
                toleration(Some("team"), Some("Exists"), None, Some("NoExecute")),
                false,
            ),
            (toleration(None, Some("Exists"), None, None), true),
            (
                toleration(None, Some("Exists"), None, Some("NoSchedule")),
                true,
            ),
            (
                toleration(None, Some("Exists"), None, Some("PreferNoSchedule")),
                false,
            ),
            (toleration(Some("other"), Some("Exists"), None, None), false),
            // An empty key with Equal matches every key, but only the empty value.
            (toleration(None, Some("Equal"), Some("a"), None), true),
            (toleration(None, None, None, None), false),
            (
                toleration(Some("team"), Some("Bogus"), Some("a"), None),
                false,
            ),
        ];
        for (tol, expected) in cases {
            assert_eq!(toleration_tolerates(&tol, &t), expected, "{tol:?}");
        }
    }

    #[test]
    fn comparison_operators_need_canonical_integers() {
        let t = taint("gpu-mem", Some("16"), EFFECT_NO_SCHEDULE);
        let tol = |op, v| toleration(Some("gpu-mem"), Some(op), Some(v), None);
        assert!(toleration_tolerates(&tol("Gt", "8"), &t));
        assert!(!toleration_tolerates(&tol("Gt", "16"), &t));
        assert!(toleration_tolerates(&tol("Lt", "32"), &t));
        assert!(!toleration_tolerates(&tol("Lt", "16"), &t));
        assert!(!toleration_tolerates(&tol("Gt", "08"), &t));
        assert!(!toleration_tolerates(&tol("Gt", "+8"), &t));
        assert!(!toleration_tolerates(&tol("Gt", "x"), &t));
        assert!(toleration_tolerates(&tol("Gt", "-3"), &t));
        assert!(!toleration_tolerates(&tol("Gt", "-0"), &t));
        assert!(!toleration_tolerates(
            &tol("Gt", "0"),
            &taint("gpu-mem", Some("007"), EFFECT_NO_SCHEDULE)
        ));
        assert!(toleration_tolerates(
            &tol("Lt", "1"),
            &taint("gpu-mem", Some("0"), EFFECT_NO_SCHEDULE)
        ));
    }

    #[test]
    fn prefer_no_schedule_counts_only_when_asked() {
        let taints = [
            taint("soft", None, EFFECT_PREFER_NO_SCHEDULE),
            taint("hard", Some("x"), EFFECT_NO_SCHEDULE),
        ];
        let hard_only = [toleration(Some("hard"), Some("Exists"), None, None)];
        assert_eq!(tolerates(&taints, &hard_only), Ok(()));
        let err = tolerates_with(&taints, &hard_only, PreferNoSchedule::Consider)
            .expect_err("soft is untolerated");
        assert_eq!(
            err.to_string(),
            "did not tolerate taint (taint=soft:PreferNoSchedule)"
        );
        let err = tolerates(&taints, &[]).expect_err("hard is untolerated");
        assert_eq!(
            err.to_string(),
            "did not tolerate taint (taint=hard=x:NoSchedule)"
        );
        let err =
            tolerates_with(&taints, &[], PreferNoSchedule::Consider).expect_err("both untolerated");
        assert_eq!(err.taints.len(), 2);
        assert_eq!(
            err.to_string(),
            "did not tolerate taint (taint=soft:PreferNoSchedule); did not tolerate taint (taint=hard=x:NoSchedule)"
        );
        assert!(is_tolerated(&[], &[], PreferNoSchedule::Consider));
    }

    #[test]
    fn ephemeral_taints() {
        assert!(is_known_ephemeral_taint(&taint(
            labels::TAINT_NODE_NOT_READY,
            None,
            EFFECT_NO_SCHEDULE
        )));
        assert!(is_known_ephemeral_taint(&taint(
            labels::TAINT_NODE_NOT_READY,
            None,
            EFFECT_NO_EXECUTE
        )));
        assert!(is_known_ephemeral_taint(&taint(
            labels::TAINT_EXTERNAL_CLOUD_PROVIDER,
            Some("true"),
            EFFECT_NO_SCHEDULE
        )));
        assert!(is_known_ephemeral_taint(&taint(
            labels::UNREGISTERED_TAINT,
            None,
            EFFECT_NO_EXECUTE
        )));
        assert!(!is_known_ephemeral_taint(&taint(
            labels::UNREGISTERED_TAINT,
            None,
            EFFECT_NO_SCHEDULE
        )));
        assert!(!is_known_ephemeral_taint(&taint(
            labels::TAINT_NODE_UNREACHABLE,
            None,
            EFFECT_NO_EXECUTE
        )));
        assert!(is_known_ephemeral_taint(&taint(
            "readiness.k8s.io/my-rule",
            None,
            EFFECT_NO_EXECUTE
        )));
        assert!(!is_known_ephemeral_taint(&taint(
            "foo/readiness.k8s.io/bar",
            None,
            EFFECT_NO_SCHEDULE
        )));
        assert!(!is_known_ephemeral_taint(&taint(
            "example.com/some-taint",
            None,
            EFFECT_NO_SCHEDULE
        )));
    }

    #[test]
    fn merging_keeps_the_first_of_matching_taints() {
        let base = [taint("a", Some("1"), EFFECT_NO_SCHEDULE)];
        let extra = [
            taint("a", Some("2"), EFFECT_NO_SCHEDULE),
            taint("a", None, EFFECT_NO_EXECUTE),
        ];
        let merged = merge_taints(&base, &extra);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].value.as_deref(), Some("1"));
        assert_eq!(merged[1].effect, EFFECT_NO_EXECUTE);
    }

    #[test]
    fn taint_formatting() {
        assert_eq!(
            format_taint(&taint("k", Some("v"), "NoSchedule")),
            "k=v:NoSchedule"
        );
        assert_eq!(
            format_taint(&taint("k", Some(""), "NoExecute")),
            "k:NoExecute"
        );
    }
}
