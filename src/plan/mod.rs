//! `kerf plan`'s core: from parsed Kubernetes manifests to the scheduling snapshot the
//! scheduler solves, and from its result to the report users read. Workload controllers
//! are expanded into the pods they would create, inputs are checked the way the API server
//! would check them, and every problem is reported with the object and field at fault.

mod checks;
mod decode;
pub mod inventory;
pub mod nodeclass;
mod quantity;
pub mod report;
pub mod workloads;

use std::fmt;

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
