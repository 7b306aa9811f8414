//! Karpenter's node selector requirement: a core `NodeSelectorRequirement` plus `minValues`,
//! the flexibility floor the scheduler must keep (at least that many distinct values).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a requirement's key relates to its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
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
        Operator::Gte,
        Operator::Lte,
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
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

    /// The numeric comparisons, whose single value is an integer bound.
    pub fn is_numeric(self) -> bool {
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

/// `{key, operator, values, minValues}` as in NodePool and NodeClaim requirements.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

impl NodeSelectorRequirementWithMinValues {
    pub fn new(key: impl Into<String>, operator: Operator, values: &[&str]) -> Self {
        Self {
            key: key.into(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
            min_values: None,
        }
    }

    pub fn with_min_values(mut self, min_values: i64) -> Self {
        self.min_values = Some(min_values);
        self
    }
}
