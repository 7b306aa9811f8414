//! The cluster as kerf reads it, whether from manifests (`kerf plan`) or from the
//! controller's stores: the [`inventory`] of objects, checked the way the API server would
//! check them; workload controllers expanded into the pods they would create
//! ([`workloads`]); the scheduling [`snapshot`] the scheduler solves; the disruption view of
//! it ([`disruption`]); and the [`ControllerSettings`] that shape them. Every problem names
//! the object and field at fault. Pure: the callers do the reading.

mod adoption;
mod checks;
mod decode;
pub mod disruption;
pub mod inventory;
pub mod nodeclass;
mod quantity;
pub mod readiness;
pub mod snapshot;
pub mod workloads;

use std::fmt;

pub use nodeclass::ControllerSettings;

/// An object the inventory's checks let through but the snapshot could not use.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{kind}/{name}: {error}")]
    InvalidObject {
        kind: &'static str,
        name: String,
        error: FieldError,
    },
}

impl SnapshotError {
    pub(crate) fn node(kind: &'static str, name: &str, error: FieldError) -> Self {
        Self::InvalidObject {
            kind,
            name: name.to_string(),
            error,
        }
    }
}

/// A problem with one field of one object: `path` is the dotted field path
/// (`spec.template.spec.containers[0].resources.requests.cpu`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }

    pub fn required(path: impl Into<String>) -> Self {
        Self::new(path, "required field is missing")
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A problem with one input object, located as `FILE: KIND/NAME: field.path: what is wrong`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectProblem {
    pub file: String,
    /// `KIND/NAME`.
    pub object: String,
    /// Dotted field path; empty when the problem is with the object as a whole.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ObjectProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: ", self.file, self.object)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}
