//! Metrics computed from cluster state when `/metrics` is scraped, under upstream's names
//! and labels so its capacity dashboard charts kerf: pod states, NodePool limits and usage,
//! node allocatable and requests. Computing them at scrape time (as a Prometheus collector
//! does) keeps them exact — no writer to fall behind, and a deleted pod, node or NodePool
//! simply has no series in the next scrape. The pod startup summary is the one exception:
//! it needs to see pods turn ready, so the PodWatcher feeds a [`StartupTracker`].

mod exposition;
mod nodepools;
mod nodes;
mod pods;

pub use exposition::Family;
pub use nodepools::machines_by_pool;
pub use pods::StartupTracker;

use crate::state::ClusterState;

/// Every family computed from `state`, in the Prometheus text format.
pub fn render(state: &ClusterState) -> String {
    let mut out = String::new();
    pods::state_family(state).render_into(&mut out);
    for family in nodepools::families(state) {
        family.render_into(&mut out);
    }
    for family in nodes::families(state) {
        family.render_into(&mut out);
    }
    out
}
