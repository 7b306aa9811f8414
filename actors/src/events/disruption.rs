//! The events upstream Karpenter's disruption controller and orchestration queue publish,
//! with its reasons, messages and de-duplication: `DisruptionLaunching` and
//! `DisruptionWaitingReadiness` on a replacement NodeClaim, `DisruptionTerminating` on the
//! candidate's Node and NodeClaim, `Unconsolidatable` on a node consolidation cannot take
//! (de-duplicated for 15 minutes, as the condition rarely changes faster), and
//! `DisruptionBlocked` on a node a budget, a blocking pod or a nomination for pending pods
//! holds — except when the block is
//! the `karpenter.sh/do-not-disrupt` annotation, an intentional user action upstream stays
//! quiet about.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kerf::labels;

use super::upstream::DEFAULT_DEDUPE;
use super::{Dedupe, Event, EventType};

pub const DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
pub const DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
pub const DISRUPTION_TERMINATING: &str = "DisruptionTerminating";
pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";
pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";

/// Upstream's de-duplication of `Unconsolidatable`.
pub const UNCONSOLIDATABLE_DEDUPE: Duration = Duration::from_secs(15 * 60);

/// An object an event is about: kind, name and UID (cluster-scoped, as Nodes and
/// NodeClaims are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub kind: Kind,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Node,
    NodeClaim,
}

impl Subject {
    fn reference(&self) -> ObjectReference {
        let (api_version, kind) = match self.kind {
            Kind::Node => ("v1".to_owned(), "Node"),
            Kind::NodeClaim => (format!("{}/v1", labels::GROUP), "NodeClaim"),
        };
        ObjectReference {
            api_version: Some(api_version),
            kind: Some(kind.to_owned()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()).filter(|u| !u.is_empty()),
            ..ObjectReference::default()
        }
    }
}

fn event(subject: &Subject, reason: &'static str, message: String, dedupe: Dedupe) -> Event {
    Event {
        regarding: subject.reference(),
        type_: EventType::Normal,
        reason,
        message,
        dedupe: Some(dedupe),
        throttle: None,
    }
}

/// Upstream titles the reason in messages (`underutilized` → `Underutilized`).
fn title(reason: &str) -> String {
    let mut chars = reason.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// A replacement NodeClaim for a `reason` disruption is launching.
pub fn launching(claim: &Subject, reason: &str) -> Event {
    event(
        claim,
        DISRUPTION_LAUNCHING,
        format!("Launching NodeClaim: {}", title(reason)),
        Dedupe {
            values: vec![claim.uid.clone(), reason.to_owned()],
            timeout: DEFAULT_DEDUPE,
        },
    )
}

/// The disruption waits for a replacement NodeClaim to initialize.
pub fn waiting_on_readiness(claim: &Subject) -> Event {
    event(
        claim,
        DISRUPTION_WAITING_READINESS,
        "Waiting on readiness to continue disruption".to_owned(),
        Dedupe {
            values: vec![claim.uid.clone()],
            timeout: DEFAULT_DEDUPE,
        },
    )
}

/// A candidate's Node or NodeClaim is being deleted for `reason`.
pub fn terminating(subject: &Subject, reason: &str) -> Event {
    let what = match subject.kind {
        Kind::Node => "Node",
        Kind::NodeClaim => "NodeClaim",
    };
    event(
        subject,
        DISRUPTION_TERMINATING,
        format!("Disrupting {what}: {}", title(reason)),
        Dedupe {
            values: vec![subject.uid.clone(), reason.to_owned()],
            timeout: DEFAULT_DEDUPE,
        },
    )
}

/// Consolidation cannot take the node, for `why`.
pub fn unconsolidatable(subject: &Subject, why: &str) -> Event {
    event(
        subject,
        UNCONSOLIDATABLE,
        why.to_owned(),
        Dedupe {
            values: vec![subject.uid.clone()],
            timeout: UNCONSOLIDATABLE_DEDUPE,
        },
    )
}

/// Disruption of the node is blocked, for `why`; `None` when `why` is the do-not-disrupt
/// annotation.
pub fn blocked(subject: &Subject, why: &str) -> Option<Event> {
    (!why.contains(labels::DO_NOT_DISRUPT)).then(|| {
        event(
            subject,
            DISRUPTION_BLOCKED,
            why.to_owned(),
            Dedupe {
                values: vec![subject.uid.clone()],
                timeout: DEFAULT_DEDUPE,
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Subject {
        Subject {
            kind: Kind::Node,
            name: "n".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn messages_title_the_reason_as_upstream() {
        assert_eq!(
            terminating(&node(), "underutilized").message,
            "Disrupting Node: Underutilized"
        );
        let claim = Subject {
            kind: Kind::NodeClaim,
            ..node()
        };
        assert_eq!(
            launching(&claim, "drifted").message,
            "Launching NodeClaim: Drifted"
        );
        assert_eq!(
            launching(&claim, "drifted").regarding.kind.as_deref(),
            Some("NodeClaim")
        );
    }

    #[test]
    fn do_not_disrupt_blocks_are_not_published() {
        assert!(blocked(&node(), "pod default/p has karpenter.sh/do-not-disrupt").is_none());
        let budget = blocked(&node(), "disruption budget allows no more").expect("published");
        assert_eq!(budget.reason, DISRUPTION_BLOCKED);
        assert_eq!(
            unconsolidatable(&node(), "x").dedupe.map(|d| d.timeout),
            Some(UNCONSOLIDATABLE_DEDUPE)
        );
    }
}
