//! Parsing the operators a node selector requirement may use (the API type
//! [`crate::api::Operator`]): the Kubernetes set operators (In, NotIn, Exists,
//! DoesNotExist), the integer comparisons Gt and Lt, and Karpenter v1's inclusive Gte and
//! Lte. Parsing is strict and case-sensitive, as the API server's is.

use std::str::FromStr;

pub use crate::api::Operator;

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
