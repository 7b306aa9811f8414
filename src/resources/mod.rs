//! Kubernetes resource quantities and resource lists with exact, integer-only arithmetic.
//! [`Quantity`] parses and prints exactly like apimachinery's `resource.Quantity` (suffixes,
//! exponents, rounding to `1n`, canonical form that keeps the input's format) and holds an
//! `i128` of nano-units, so comparisons in the scheduler's hot path are single integer
//! compares. [`Resources`] is a resource list with Karpenter's merge/subtract/fits semantics.

mod canonical;
mod gofloat;
mod list;
mod parse;
mod quantity;
mod serde;

pub use gofloat::quantity_from_go_float;
pub use list::Resources;
pub use parse::QuantityError;
pub use quantity::{Format, Quantity};

#[cfg(test)]
mod tests;
