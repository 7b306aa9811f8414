//! The operators a node selector requirement may use: the Kubernetes set operators (In,
//! NotIn, Exists, DoesNotExist), the integer comparisons Gt and Lt, and Karpenter v1's
//! inclusive Gte and Lte. Parsing is strict and case-sensitive, as the API server's is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A node selector operator. A [`super::Requirement`] reports only the four set operators
/// back, because bounds are stored as integer limits rather than as operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    pub const ALL: [Operator; 8] = [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }

    /// Whether the operator compares one integer value rather than matching a set.
    pub fn is_bound(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator name that is none of [`Operator::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown operator {0:?}, expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"
)]
pub struct UnknownOperator(pub String);

impl FromStr for Operator {
    type Err = UnknownOperator;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operator::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| UnknownOperator(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for op in Operator::ALL {
            assert_eq!(op.as_str().parse::<Operator>(), Ok(op));
            assert_eq!(op.to_string(), op.as_str());
        }
    }

    #[test]
    fn parsing_is_case_sensitive() {
        assert_eq!(
            "in".parse::<Operator>(),
            Err(UnknownOperator("in".to_owned()))
        );
        assert!("".parse::<Operator>().is_err());
    }

    #[test]
    fn serde_uses_the_kubernetes_names() {
        let json = serde_json::to_string(&Operator::DoesNotExist).expect("serialises");
        assert_eq!(json, "\"DoesNotExist\"");
        let op: Operator = serde_json::from_str("\"Gte\"").expect("parses");
        assert_eq!(op, Operator::Gte);
        assert!(serde_json::from_str::<Operator>("\"Equal\"").is_err());
    }
}
