//! Nominations to a Node that no NodeClaim of this process lists: ones a predecessor wrote
//! (a restarted process has no list of its pods), or that outlived their own NodeClaim.
//! Each Node's are withdrawn once, past its window ([`super::nominate::withdraw_expired`]),
//! and finding them takes a scan of every pod. Through a large scale-out thousands of Nodes
//! pass their window within minutes, so one scan, grouped by Node, serves every Node that
//! looks within [`SCAN_MAX_AGE`] of it, rather than each Node scanning a hundred thousand
//! pods for its own few.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashSet;
use kerf::pods::{self, PodLike};
use kerf::scheduling::PodRef;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::state::ClusterState;

/// How old a scan may be and still serve a Node's look. Nominations are written before a
/// Node is initialized and looked for only once its window has passed, so a scan this
/// young holds all of them; one withdrawn since is checked against the store by the
/// caller before it is withdrawn again.
pub const SCAN_MAX_AGE: Duration = Duration::from_secs(2);

/// The Nodes whose unlisted nominations are withdrawn, and the latest scan.
#[derive(Default)]
pub struct Unlisted {
    withdrawn: DashSet<String>,
    scan: Mutex<Option<Scan>>,
}

struct Scan {
    at: Instant,
    /// Unbound pods nominated by kerf, by the Node they are nominated to.
    by_node: Arc<HashMap<String, Vec<PodRef>>>,
}

impl Unlisted {
    /// Whether `node`'s unlisted nominations are withdrawn.
    pub fn is_withdrawn(&self, node: &str) -> bool {
        self.withdrawn.contains(node)
    }

    /// Records that `node`'s unlisted nominations are withdrawn, forgetting Nodes that are
    /// gone so the set stays as large as the cluster.
    pub fn withdrawn(&self, state: &ClusterState, node: &str) {
        self.withdrawn.retain(|known| state.node(known).is_some());
        self.withdrawn.insert(node.to_owned());
    }

    /// The unbound pods with kerf's nomination to `node`, as of a scan at most
    /// [`SCAN_MAX_AGE`] old (taken now if the last is older). Looks that come during a scan
    /// wait for it without holding their runtime thread: a scan reads every pod, and many
    /// Nodes pass their window at once.
    pub async fn nominated_to(&self, state: &ClusterState, node: &str) -> Vec<PodRef> {
        let by_node = {
            let mut scan = self.scan.lock().await;
            match scan.as_ref() {
                Some(fresh) if fresh.at.elapsed() < SCAN_MAX_AGE => Arc::clone(&fresh.by_node),
                _ => {
                    let by_node = Arc::new(scan_pods(state));
                    *scan = Some(Scan {
                        at: Instant::now(),
                        by_node: Arc::clone(&by_node),
                    });
                    by_node
                }
            }
        };
        by_node.get(node).cloned().unwrap_or_default()
    }
}

fn scan_pods(state: &ClusterState) -> HashMap<String, Vec<PodRef>> {
    let mut by_node: HashMap<String, Vec<PodRef>> = HashMap::new();
    for pod in state.pods.snapshot() {
        if pods::is_bound(&pod) {
            continue;
        }
        if let Some(node) = pods::kerf_nominated_node(&pod) {
            by_node
                .entry(node.to_owned())
                .or_default()
                .push(pod.pod_ref());
        }
    }
    by_node
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::nominate::tests::nominated_pod;
    use crate::state::ObjectKey;

    fn names(pods: &[PodRef]) -> Vec<&str> {
        let mut names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        names
    }

    #[tokio::test(start_paused = true)]
    async fn one_scan_serves_every_node_until_it_is_older_than_its_age() {
        let (state, mut writers) = ClusterState::new();
        for (name, node) in [("a1", "node-a"), ("a2", "node-a"), ("b1", "node-b")] {
            writers.pods.apply(
                ObjectKey::new(Some("default"), name),
                nominated_pod(name, node, None),
            );
        }
        let unlisted = Unlisted::default();
        assert_eq!(
            names(&unlisted.nominated_to(&state, "node-a").await),
            ["a1", "a2"]
        );

        writers.pods.apply(
            ObjectKey::new(Some("default"), "b2"),
            nominated_pod("b2", "node-b", None),
        );
        assert_eq!(
            names(&unlisted.nominated_to(&state, "node-b").await),
            ["b1"],
            "the scan is shared while it is young"
        );
        tokio::time::advance(SCAN_MAX_AGE).await;
        assert_eq!(
            names(&unlisted.nominated_to(&state, "node-b").await),
            ["b1", "b2"],
            "an older scan is taken again"
        );
        assert!(unlisted.nominated_to(&state, "node-c").await.is_empty());
    }
}
