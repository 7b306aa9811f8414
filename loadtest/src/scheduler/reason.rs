//! Why the simulated kube-scheduler filtered a node out, in kube-scheduler's own wording (the
//! `FailedScheduling` event's `0/N nodes are available: ...` parts). Its own module, below
//! the filter plugins in [`super::cluster`] and [`super::topology`] that both return it.

use std::fmt;

/// Why a node was filtered out, rendered with kube-scheduler's wording.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Reason {
    Unschedulable,
    UntoleratedTaint { key: String, value: String },
    NodeAffinity,
    HostPorts,
    Insufficient(String),
    TooManyPods,
    SpreadMissingLabel,
    Spread,
    Affinity,
    AntiAffinity,
    ExistingAntiAffinity,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unschedulable => f.write_str("node(s) were unschedulable"),
            Reason::UntoleratedTaint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Reason::NodeAffinity => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Reason::HostPorts => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Reason::Insufficient(resource) => write!(f, "Insufficient {resource}"),
            Reason::TooManyPods => f.write_str("Too many pods"),
            Reason::SpreadMissingLabel => f.write_str(
                "node(s) didn't match pod topology spread constraints (missing required label)",
            ),
            Reason::Spread => f.write_str("node(s) didn't match pod topology spread constraints"),
            Reason::Affinity => f.write_str("node(s) didn't match pod affinity rules"),
            Reason::AntiAffinity => f.write_str("node(s) didn't match pod anti-affinity rules"),
            Reason::ExistingAntiAffinity => {
                f.write_str("node(s) didn't satisfy existing pods anti-affinity rules")
            }
        }
    }
}
