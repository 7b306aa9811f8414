//! Why two sets of requirements do not fit together. Incompatibility is the scheduler's
//! everyday answer, so its error keeps the conflicting requirements (cheap shared clones)
//! and formats the text only when displayed; the wording follows upstream Karpenter's so
//! users' searches and runbooks still match.

use std::fmt;

use super::requirement::Requirement;

/// One key on which two sets of requirements allow no common value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyConflict {
    pub key: String,
    /// The requirement of the set being checked (the argument of `compatible`/`intersects`).
    pub incoming: Requirement,
    /// The requirement of the set it is checked against (the receiver).
    pub existing: Requirement,
}

impl fmt::Display for KeyConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {}, {} not in {}",
            self.key, self.incoming, self.existing
        )
    }
}

/// Why requirements are not compatible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incompatible {
    /// The incoming side requires a label the receiver does not define and that is not
    /// allowed to be undefined; `typo_of` names a known label the key may misspell.
    #[error("label {key:?} does not have known values{}", typo_hint(typo_of))]
    UndefinedLabel {
        key: String,
        typo_of: Option<String>,
    },
    /// Keys both sides define with no value in common, in alphabetical key order (never empty).
    #[error("{}", join_conflicts(.0))]
    Conflicts(Vec<KeyConflict>),
}

fn typo_hint(typo_of: &Option<String>) -> String {
    typo_of
        .as_ref()
        .map(|label| format!(" (typo of {label:?}?)"))
        .unwrap_or_default()
}

fn join_conflicts(conflicts: &[KeyConflict]) -> String {
    conflicts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
