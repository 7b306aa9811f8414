//! Why a requirement could not be built from a node selector requirement. The wording
//! follows upstream Karpenter's so users' searches and runbooks still match.

use super::operator::{Operator, UnknownOperator};

/// A node selector requirement that cannot be turned into a
/// [`Requirement`](super::Requirement).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("requirement on key {key:?}: {source}")]
    ParseOperator {
        key: String,
        #[source]
        source: UnknownOperator,
    },
    #[error("requirement on key {key:?}: operator {operator} takes exactly one value, got {count}")]
    BoundValueCount {
        key: String,
        operator: Operator,
        count: usize,
    },
    #[error(
        "requirement on key {key:?}: operator {operator} takes an integer value, got {value:?}"
    )]
    ParseBound {
        key: String,
        operator: Operator,
        value: String,
    },
}
