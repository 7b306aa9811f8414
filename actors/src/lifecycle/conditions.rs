//! A NodeClaim's status conditions as upstream's condition set keeps them: `Launched`,
//! `Registered` and `Initialized` are the dependents of the root `Ready`, missing ones read
//! `Unknown` (reason `AwaitingReconciliation`), setting one restamps its transition time and
//! observed generation only when something about it changes, the list stays sorted by type,
//! and every change to a dependent recomputes `Ready`: `True` when all dependents are,
//! `False` (`UnhealthyDependents`) when one is `False`, else `Unknown`
//! (`ReconcilingDependents`), with a message listing the dependents that are not `True`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::types;
use kerf::api::{Condition, ConditionStatus};

/// The conditions `Ready` summarises.
pub const DEPENDENTS: [&str; 3] = [types::LAUNCHED, types::REGISTERED, types::INITIALIZED];

/// Reason of a condition nobody has evaluated yet.
pub const AWAITING_RECONCILIATION: &str = "AwaitingReconciliation";

/// The conditions of one NodeClaim being edited at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionSet {
    conditions: Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
}

impl ConditionSet {
    /// The set over `conditions`, with every known condition present (missing ones
    /// `Unknown`).
    pub fn new(conditions: &[Condition], generation: Option<i64>, now: Timestamp) -> Self {
        let mut set = Self {
            conditions: conditions.to_vec(),
            generation,
            now,
        };
        for type_ in DEPENDENTS.into_iter().chain([types::READY]) {
            if set.get(type_).is_none() {
                set.set(
                    type_,
                    ConditionStatus::Unknown,
                    AWAITING_RECONCILIATION,
                    "object is awaiting reconciliation",
                );
            }
        }
        set
    }

    pub fn get(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    pub fn is_true(&self, type_: &str) -> bool {
        self.get(type_).is_some_and(Condition::is_true)
    }

    pub fn into_vec(self) -> Vec<Condition> {
        self.conditions
    }

    /// Marks `type_` True with itself as the reason.
    pub fn set_true(&mut self, type_: &str) {
        self.set(type_, ConditionStatus::True, type_, "");
    }

    pub fn set_unknown(&mut self, type_: &str, reason: &str, message: &str) {
        self.set(type_, ConditionStatus::Unknown, reason, message);
    }

    pub fn set_false(&mut self, type_: &str, reason: &str, message: &str) {
        self.set(type_, ConditionStatus::False, reason, message);
    }

    /// Removes a condition that is not one of [`DEPENDENTS`] or `Ready` (upstream's `Clear`:
    /// `Drifted`, `Consolidatable`, ...); returns whether it was there.
    pub fn clear(&mut self, type_: &str) -> bool {
        if DEPENDENTS.contains(&type_) || type_ == types::READY {
            return false;
        }
        let before = self.conditions.len();
        self.conditions.retain(|c| c.type_ != type_);
        self.conditions.len() != before
    }

    /// Sets one condition; returns whether anything changed.
    pub fn set(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> bool {
        let unchanged = self.get(type_).is_some_and(|c| {
            c.status == status
                && c.reason == reason
                && c.message == message
                && c.observed_generation == self.generation
        });
        if unchanged {
            return false;
        }
        self.conditions.retain(|c| c.type_ != type_);
        self.conditions.push(Condition {
            type_: type_.to_owned(),
            status,
            observed_generation: self.generation,
            last_transition_time: Time(self.now),
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
        self.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        if type_ != types::READY {
            self.recompute_ready();
        }
        true
    }

    fn recompute_ready(&mut self) {
        let mut unhealthy: Vec<Condition> = self
            .conditions
            .iter()
            .filter(|c| DEPENDENTS.contains(&c.type_.as_str()))
            .filter(|c| !c.is_true() || c.observed_generation != self.generation)
            .cloned()
            .collect();
        if unhealthy.is_empty() {
            self.set_true(types::READY);
            return;
        }
        let failed = unhealthy.iter().any(|c| {
            c.status == ConditionStatus::False && c.observed_generation == self.generation
        });
        // Latest transitions first, as upstream lists them.
        unhealthy.sort_by_key(|c| std::cmp::Reverse(c.last_transition_time.0));
        let message = unhealthy
            .iter()
            .map(|c| format!("{}={}", c.type_, status_name(c.status)))
            .collect::<Vec<_>>()
            .join(", ");
        if failed {
            self.set_false(types::READY, "UnhealthyDependents", &message);
        } else {
            self.set_unknown(types::READY, "ReconcilingDependents", &message);
        }
    }
}

pub fn status_name(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).expect("valid")
    }

    fn launched() -> Vec<Condition> {
        let mut set = ConditionSet::new(&[], Some(1), at(0));
        set.set_true(types::LAUNCHED);
        set.into_vec()
    }

    #[test]
    fn missing_conditions_read_unknown_and_ready_waits_for_them() {
        let set = ConditionSet::new(&launched(), Some(1), at(5));
        let listed: Vec<String> = set
            .clone()
            .into_vec()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(listed, ["Initialized", "Launched", "Ready", "Registered"]);
        let ready = set.get(types::READY).expect("ready");
        assert_eq!(ready.status, ConditionStatus::Unknown);
        assert_eq!(ready.reason, "ReconcilingDependents");
        assert!(ready.message.contains("Registered=Unknown"), "{ready:?}");
        assert!(ready.message.contains("Initialized=Unknown"), "{ready:?}");
        assert!(!ready.message.contains("Launched"), "{ready:?}");
    }

    #[test]
    fn ready_turns_true_once_every_dependent_is() {
        let mut set = ConditionSet::new(&launched(), Some(1), at(5));
        set.set_true(types::REGISTERED);
        assert!(!set.is_true(types::READY));
        set.set_true(types::INITIALIZED);
        let ready = set.get(types::READY).expect("ready");
        assert!(ready.is_true());
        assert_eq!(ready.reason, "Ready");
        assert_eq!(ready.last_transition_time.0, at(5));
    }

    #[test]
    fn a_false_dependent_makes_ready_false() {
        let mut set = ConditionSet::new(&launched(), Some(1), at(5));
        set.set_false(
            types::REGISTERED,
            "MultipleNodesFound",
            "Invariant violated, matched multiple nodes",
        );
        let ready = set.get(types::READY).expect("ready");
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "UnhealthyDependents");
        assert!(
            ready.message.starts_with("Registered=False"),
            "latest first: {ready:?}"
        );
    }

    #[test]
    fn setting_the_same_condition_keeps_its_transition_time() {
        let mut set = ConditionSet::new(&launched(), Some(1), at(5));
        set.set_unknown(types::REGISTERED, "NodeNotFound", "Node not registered");
        let first = set.clone().into_vec();
        let mut later = ConditionSet::new(&first, Some(1), at(60));
        assert!(!later.set(
            types::REGISTERED,
            ConditionStatus::Unknown,
            "NodeNotFound",
            "Node not registered"
        ));
        assert_eq!(later.into_vec(), first);
    }

    #[test]
    fn a_new_reason_restamps_the_condition() {
        let mut set = ConditionSet::new(&launched(), Some(1), at(5));
        set.set_unknown(
            types::INITIALIZED,
            "NodeNotReady",
            "Node status is NotReady",
        );
        let mut later = ConditionSet::new(&set.into_vec(), Some(1), at(9));
        assert!(later.set(
            types::INITIALIZED,
            ConditionStatus::Unknown,
            "StartupTaintsExist",
            "x"
        ));
        assert_eq!(
            later
                .get(types::INITIALIZED)
                .expect("set")
                .last_transition_time
                .0,
            at(9)
        );
    }
}
