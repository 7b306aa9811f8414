//! A pod's status as decisions read it. The API's `PodStatus` is some 450 bytes inline, most
//! of it room for fields no decision reads (addresses, QoS class, resize and resource-claim
//! state), and each of its conditions spells its type, status and reason out in strings of
//! their own: kept for every pod in the stores, it was half of a lean pod. [`LeanStatus`]
//! keeps what is read — the phase, start time, nomination, conditions and container
//! statuses — with the words Kubernetes and kerf use (condition types, statuses, reasons,
//! phases) held as `&'static str` rather than copies.
//!
//! Readers go through [`PodStatusView`], which either form gives ([`super::PodLike::status`]).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The words a pod's status repeats from pod to pod: kept once, here, rather than in a
/// string of every pod's own.
const KNOWN_WORDS: &[&str] = &[
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Unknown",
    "True",
    "False",
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
    "DisruptionTarget",
    "Unschedulable",
    "SchedulerError",
    "ContainersNotReady",
    "PodCompleted",
    super::NOMINATION_CONDITION,
    super::NOMINATION_REASON,
];

/// A status word: one of [`KNOWN_WORDS`] borrowed, any other owned.
type Word = Cow<'static, str>;

fn word(text: String) -> Word {
    match KNOWN_WORDS.iter().find(|known| **known == text) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(text),
    }
}

/// A pod's status as the stores keep it (see the module doc).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LeanStatus {
    phase: Option<Word>,
    start_time: Option<Timestamp>,
    nominated_node_name: Option<Box<str>>,
    conditions: Box<[LeanCondition]>,
    container_statuses: Box<[ContainerStatus]>,
}

/// A pod condition as [`LeanStatus`] keeps it: `lastProbeTime` and `observedGeneration`,
/// which nothing reads, are not kept.
#[derive(Debug, Clone, PartialEq)]
struct LeanCondition {
    type_: Word,
    status: Word,
    reason: Option<Word>,
    message: Option<Box<str>>,
    last_transition_time: Option<Timestamp>,
}

impl From<PodCondition> for LeanCondition {
    fn from(condition: PodCondition) -> Self {
        Self {
            type_: word(condition.type_),
            status: word(condition.status),
            reason: condition.reason.map(word),
            message: condition.message.map(String::into_boxed_str),
            last_transition_time: condition.last_transition_time.map(|t| t.0),
        }
    }
}

impl From<PodStatus> for LeanStatus {
    fn from(status: PodStatus) -> Self {
        Self {
            phase: status.phase.map(word),
            start_time: status.start_time.map(|t| t.0),
            nominated_node_name: status.nominated_node_name.map(String::into_boxed_str),
            conditions: status
                .conditions
                .into_iter()
                .flatten()
                .map(LeanCondition::from)
                .collect(),
            container_statuses: status.container_statuses.unwrap_or_default().into(),
        }
    }
}

impl LeanStatus {
    pub fn view(&self) -> PodStatusView<'_> {
        PodStatusView {
            phase: self.phase.as_deref(),
            start_time: self.start_time,
            nominated_node_name: self.nominated_node_name.as_deref(),
            container_statuses: &self.container_statuses,
            conditions: Conditions::Lean(&self.conditions),
        }
    }

    /// The API's form of what is kept.
    pub fn to_status(&self) -> PodStatus {
        let conditions = self.conditions.iter().map(|c| PodCondition {
            type_: c.type_.to_string(),
            status: c.status.to_string(),
            reason: c.reason.as_deref().map(str::to_owned),
            message: c.message.as_deref().map(str::to_owned),
            last_transition_time: c.last_transition_time.map(Time),
            ..PodCondition::default()
        });
        PodStatus {
            phase: self.phase.as_deref().map(str::to_owned),
            start_time: self.start_time.map(Time),
            nominated_node_name: self.nominated_node_name.as_deref().map(str::to_owned),
            conditions: (!self.conditions.is_empty()).then(|| conditions.collect()),
            container_statuses: (!self.container_statuses.is_empty())
                .then(|| self.container_statuses.to_vec()),
            ..PodStatus::default()
        }
    }
}

/// A pod's status as decisions read it, borrowed from either form (the API's `PodStatus` or
/// a [`LeanStatus`]); fields keep `PodStatus`'s names, lists are empty where the API leaves
/// them out.
#[derive(Debug, Clone, Copy)]
pub struct PodStatusView<'a> {
    pub phase: Option<&'a str>,
    pub start_time: Option<Timestamp>,
    pub nominated_node_name: Option<&'a str>,
    pub container_statuses: &'a [ContainerStatus],
    conditions: Conditions<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Conditions<'a> {
    Api(&'a [PodCondition]),
    Lean(&'a [LeanCondition]),
}

/// One pod condition, borrowed from either form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConditionView<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: Option<&'a str>,
    pub message: Option<&'a str>,
    pub last_transition_time: Option<Timestamp>,
}

impl<'a> From<&'a PodStatus> for PodStatusView<'a> {
    fn from(status: &'a PodStatus) -> Self {
        Self {
            phase: status.phase.as_deref(),
            start_time: status.start_time.as_ref().map(|t| t.0),
            nominated_node_name: status.nominated_node_name.as_deref(),
            container_statuses: status.container_statuses.as_deref().unwrap_or_default(),
            conditions: Conditions::Api(status.conditions.as_deref().unwrap_or_default()),
        }
    }
}

impl<'a> PodStatusView<'a> {
    /// The pod's conditions, in the order the API gave them.
    pub fn conditions(&self) -> impl Iterator<Item = ConditionView<'a>> + use<'a> {
        let (api, lean) = match self.conditions {
            Conditions::Api(api) => (api, &[][..]),
            Conditions::Lean(lean) => (&[][..], lean),
        };
        let api = api.iter().map(|c| ConditionView {
            type_: &c.type_,
            status: &c.status,
            reason: c.reason.as_deref(),
            message: c.message.as_deref(),
            last_transition_time: c.last_transition_time.as_ref().map(|t| t.0),
        });
        let lean = lean.iter().map(|c| ConditionView {
            type_: &c.type_,
            status: &c.status,
            reason: c.reason.as_deref(),
            message: c.message.as_deref(),
            last_transition_time: c.last_transition_time,
        });
        api.chain(lean)
    }

    /// The condition of `type_` (a pod has at most one of each type).
    pub fn condition(&self, type_: &str) -> Option<ConditionView<'a>> {
        self.conditions().find(|c| c.type_ == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn running() -> PodStatus {
        serde_json::from_value(json!({
            "phase": "Running",
            "startTime": "2026-01-01T00:00:02Z",
            "qosClass": "Burstable",
            "podIP": "10.0.3.4",
            "conditions": [
                {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                 "message": "containers with unready status: [app]",
                 "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:03Z"}
            ],
            "containerStatuses": [{"name": "app", "image": "app:1", "imageID": "",
                "ready": false, "restartCount": 2}]
        }))
        .expect("a valid status")
    }

    #[test]
    fn either_form_reads_the_same_status() {
        let api = running();
        let lean = LeanStatus::from(api.clone());
        let (a, l) = (PodStatusView::from(&api), lean.view());
        assert_eq!((a.phase, l.phase), (Some("Running"), Some("Running")));
        assert_eq!(a.start_time, l.start_time);
        assert_eq!(a.container_statuses, l.container_statuses);
        assert!(a.conditions().eq(l.conditions()));
        let ready = l.condition("Ready").expect("a Ready condition");
        assert_eq!(ready.reason, Some("ContainersNotReady"));
        assert_eq!(ready.message, Some("containers with unready status: [app]"));
        assert_eq!(l.condition("Initialized"), None);
    }

    #[test]
    fn the_api_form_comes_back_with_what_is_read() {
        let mut api = running();
        let back = LeanStatus::from(api.clone()).to_status();
        api.qos_class = None;
        api.pod_ip = None;
        assert_eq!(back, api);
    }

    #[test]
    fn known_words_are_not_copied_and_others_are_kept() {
        let mut api = running();
        api.phase = Some("Ghostly".to_owned());
        let lean = LeanStatus::from(api);
        assert!(matches!(lean.phase, Some(Cow::Owned(_))));
        assert_eq!(lean.view().phase, Some("Ghostly"));
        let scheduled = &lean.conditions[0];
        assert!(matches!(scheduled.type_, Cow::Borrowed(_)));
        assert!(matches!(scheduled.status, Cow::Borrowed(_)));
    }

    #[test]
    fn a_lean_status_is_a_fraction_of_the_apis() {
        assert!(size_of::<Option<LeanStatus>>() <= 96);
        assert!(size_of::<LeanCondition>() <= 112);
        assert!(size_of::<Option<PodStatus>>() > 4 * 96);
    }
}
