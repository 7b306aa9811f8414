//! The scheduling requirements algebra, as upstream Karpenter's `pkg/scheduling`: a
//! [`Requirement`] is the set of values one label key may take (In, NotIn, Exists,
//! DoesNotExist, Gt, Lt, Gte, Lte, with NodePool `minValues`), and [`Requirements`] holds one
//! per key for a pod, NodePool, NodeClaim or instance type. Intersecting narrows them;
//! `compatible` decides whether a pod fits a NodePool or node under upstream's rules for
//! undefined and well-known labels, and says why not in upstream's words.

mod convert;
mod error;
mod incompatible;
mod key;
mod operator;
mod requirement;
mod set;
mod values;

#[cfg(test)]
mod tests;

pub use convert::{
    NodeSelectorRequirementWithMinValues, PodRequirementScope, has_preferred_node_affinity,
    heaviest_preferred_term,
};
pub use error::RequirementError;
pub use incompatible::{Incompatible, KeyConflict};
pub use operator::{Operator, UnknownOperator};
pub use requirement::Requirement;
pub use set::{AllowUndefined, Requirements};
