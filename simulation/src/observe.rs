//! What happened in the simulated cluster, read from the API emulator's own change history
//! rather than through a watch: every pod and NodeClaim change is seen (a NodeClaim created
//! and deleted again between two looks still counts), in order, with the time this process
//! saw it. Pods made by DaemonSets are left out: they are not the workload. If the history
//! ever moved past what was read (it keeps the changes of the last 75 s, at least 100 and at
//! most 20,000 per resource, see `world`), the tally catches up from the stored objects
//! instead.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kerf::api::condition::types;
use kerf_loadtest::apiserver::Cluster;
use kerf_loadtest::apiserver::resources::GroupResource;
use kerf_loadtest::apiserver::store::{Attrs, EventType, TypeStore, read};
use serde_json::Value;
use tokio::sync::watch;

/// One pod of the workload.
#[derive(Debug, Clone)]
struct PodTrack {
    key: String,
    created: Instant,
    bound: Option<Instant>,
    deleted: bool,
}

/// One NodeClaim.
#[derive(Debug, Clone, Default)]
struct ClaimTrack {
    launched: bool,
    registered: bool,
    ready: bool,
    deleted: bool,
}

/// A resource's history, read up to `cursor`.
struct Feed {
    store: Arc<TypeStore>,
    cursor: u64,
    changes: watch::Receiver<u64>,
}

impl Feed {
    fn new(cluster: &Cluster, group: &str, plural: &str) -> Option<Self> {
        let store = cluster
            .registry()
            .store
            .get(&GroupResource::new(group, plural))?;
        let changes = store.subscribe();
        Some(Self {
            store,
            cursor: 0,
            changes,
        })
    }

    /// Calls `visit` for every change since the last call, oldest first; `object` parses
    /// the changed object on demand. After a gap in the history, every stored object is
    /// visited once as `Modified` (deletions in the gap are lost, which only matters to a
    /// tally more than the history's length behind).
    fn drain(&mut self, mut visit: impl FnMut(EventType, &Attrs, &dyn Fn() -> Value)) {
        self.changes.mark_unchanged();
        let state = read(&self.store.state);
        if state.floor > self.cursor {
            for stored in state.objects.values() {
                visit(EventType::Modified, &stored.attrs, &|| stored.value());
                self.cursor = self.cursor.max(stored.rv);
            }
            self.cursor = self.cursor.max(state.floor);
        }
        let start = state.history.partition_point(|r| r.rv <= self.cursor);
        for record in state.history.range(start..) {
            let bytes = record.object.clone();
            visit(record.kind, &record.attrs, &|| {
                serde_json::from_slice(&bytes).unwrap_or(Value::Null)
            });
            self.cursor = record.rv;
        }
    }
}

/// The running tally of pods and NodeClaims.
pub struct Tally {
    pods: Feed,
    claims: Feed,
    pod_tracks: HashMap<String, PodTrack>,
    claim_tracks: HashMap<String, ClaimTrack>,
}

/// Counts at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Workload pods that exist.
    pub pods: usize,
    pub bound: usize,
    /// NodeClaims ever created, including deleted ones.
    pub claims_created: usize,
    pub claims_launched: usize,
    pub claims_registered: usize,
    pub claims_ready: usize,
    /// Deleted or being deleted.
    pub claims_deleted: usize,
}

/// Why the tally cannot watch the emulator.
#[derive(Debug, thiserror::Error)]
#[error("the API emulator does not serve {0}")]
pub struct NotServed(&'static str);

impl Tally {
    /// Starts from an empty history position: every change so far is read at the first
    /// [`Tally::update`].
    pub fn new(cluster: &Cluster) -> Result<Self, NotServed> {
        Ok(Self {
            pods: Feed::new(cluster, "", "pods").ok_or(NotServed("pods"))?,
            claims: Feed::new(cluster, "karpenter.sh", "nodeclaims")
                .ok_or(NotServed("karpenter.sh NodeClaims"))?,
            pod_tracks: HashMap::new(),
            claim_tracks: HashMap::new(),
        })
    }

    /// Completes when pods or NodeClaims changed since the last update.
    pub async fn changed(&mut self) {
        tokio::select! {
            _ = self.pods.changes.changed() => {}
            _ = self.claims.changes.changed() => {}
        }
    }

    /// Reads every change since the last update, stamping new facts with `now`. The tracks
    /// are the observers' heap ([`kerf_heap::Owner::OBSERVERS`]), whoever calls.
    pub fn update(&mut self, now: Instant) {
        kerf_heap::with_owner(Some(kerf_heap::Owner::OBSERVERS), || {
            let pods = &mut self.pod_tracks;
            self.pods
                .drain(|kind, attrs, _| observe_pod(pods, kind, attrs, now));
            let claims = &mut self.claim_tracks;
            self.claims
                .drain(|kind, attrs, object| observe_claim(claims, kind, attrs, object));
        });
    }

    pub fn counts(&self) -> Counts {
        let live = || self.pod_tracks.values().filter(|p| !p.deleted);
        let claims = || self.claim_tracks.values();
        Counts {
            pods: live().count(),
            bound: live().filter(|p| p.bound.is_some()).count(),
            claims_created: self.claim_tracks.len(),
            claims_launched: claims().filter(|c| c.launched).count(),
            claims_registered: claims().filter(|c| c.registered).count(),
            claims_ready: claims().filter(|c| c.ready).count(),
            claims_deleted: claims().filter(|c| c.deleted).count(),
        }
    }

    /// `namespace/name` of the workload pods not bound, sorted.
    pub fn pending(&self) -> Vec<String> {
        let mut pending: Vec<String> = self
            .pod_tracks
            .values()
            .filter(|p| !p.deleted && p.bound.is_none())
            .map(|p| p.key.clone())
            .collect();
        pending.sort();
        pending
    }

    /// When each bound pod was created and how long it waited to be bound.
    pub fn bindings(&self) -> Vec<(Instant, Duration)> {
        self.pod_tracks
            .values()
            .filter_map(|p| {
                p.bound
                    .map(|bound| (p.created, bound.saturating_duration_since(p.created)))
            })
            .collect()
    }

    /// Time from creation to binding of every bound pod.
    pub fn latencies(&self) -> Vec<Duration> {
        self.pod_tracks
            .values()
            .filter_map(|p| {
                p.bound
                    .map(|bound| bound.saturating_duration_since(p.created))
            })
            .collect()
    }
}

/// The mean size in bytes of the stored pods' JSON, `None` when there are none.
pub fn average_pod_bytes(cluster: &Cluster) -> Option<u64> {
    let store = cluster
        .registry()
        .store
        .get(&GroupResource::new("", "pods"))?;
    let state = read(&store.state);
    let sizes = state.objects.values().map(|o| o.bytes.len() as u64);
    let (count, total) = sizes.fold((0, 0), |(n, sum), size| (n + 1, sum + size));
    (count > 0).then(|| total / count)
}

fn observe_pod(pods: &mut HashMap<String, PodTrack>, kind: EventType, attrs: &Attrs, now: Instant) {
    if attrs.owners.iter().any(|o| o.kind == "DaemonSet") {
        return;
    }
    let track = pods.entry(attrs.uid.clone()).or_insert_with(|| PodTrack {
        key: format!("{}/{}", attrs.namespace, attrs.name),
        created: now,
        bound: None,
        deleted: false,
    });
    if track.bound.is_none() && !attrs.node_name.is_empty() {
        track.bound = Some(now);
    }
    if kind == EventType::Deleted {
        track.deleted = true;
    }
}

fn observe_claim(
    claims: &mut HashMap<String, ClaimTrack>,
    kind: EventType,
    attrs: &Attrs,
    object: &dyn Fn() -> Value,
) {
    let track = claims.entry(attrs.uid.clone()).or_default();
    // A NodeClaim holds the termination finalizer, so "deleted" starts at its deletion
    // timestamp: from then on it is no longer capacity.
    if kind == EventType::Deleted || attrs.deleting {
        track.deleted = true;
        return;
    }
    let claim = object();
    let condition = |name: &str| {
        claim["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == name && c["status"] == "True")
    };
    // Conditions only move forward in a NodeClaim's life: once seen, a fact stays.
    track.launched |= condition(types::LAUNCHED);
    track.registered |= condition(types::REGISTERED);
    track.ready |= condition(types::READY);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_loadtest::apiserver::{ApiServer, PatchKind, ServerConfig};
    use serde_json::json;

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}})
    }

    fn claim_named(name: &str) -> Value {
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}})
    }

    #[test]
    fn counts_pods_bound_and_claims_even_when_already_deleted() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let server = ApiServer::start(ServerConfig::default())
                .await
                .expect("emulator");
            let cluster = server.cluster();
            cluster
                .apply_crd_yaml(super::super::world::NODECLAIM_CRD)
                .expect("CRD");
            let mut tally = Tally::new(&cluster).expect("served");
            cluster.create("v1", "pods", pod("a")).expect("a");
            cluster.create("v1", "pods", pod("b")).expect("b");
            cluster
                .create(
                    "v1",
                    "nodes",
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
                )
                .expect("node");
            cluster.bind("default", "a", "n1").expect("bound");
            cluster
                .create("karpenter.sh/v1", "nodeclaims", claim_named("c1"))
                .expect("claim");
            cluster
                .patch_status(
                    "karpenter.sh/v1",
                    "nodeclaims",
                    None,
                    "c1",
                    PatchKind::Merge,
                    &json!({"status": {"conditions": [{"type": "Launched", "status": "True",
                        "reason": "Launched", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}}),
                )
                .expect("launched");
            cluster
                .delete(
                    "karpenter.sh/v1",
                    "nodeclaims",
                    None,
                    "c1",
                    &Default::default(),
                )
                .expect("deleted");

            let mut held = claim_named("c2");
            held["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
            cluster
                .create("karpenter.sh/v1", "nodeclaims", held)
                .expect("claim");
            cluster
                .delete(
                    "karpenter.sh/v1",
                    "nodeclaims",
                    None,
                    "c2",
                    &Default::default(),
                )
                .expect("deletion started");

            tally.update(Instant::now());
            let counts = tally.counts();
            assert_eq!(counts.pods, 2);
            assert_eq!(counts.bound, 1);
            assert_eq!(counts.claims_created, 2);
            assert_eq!(counts.claims_launched, 1);
            assert_eq!(counts.claims_deleted, 2, "one gone, one held by its finalizer");
            assert_eq!(tally.pending(), ["default/b"]);
            assert_eq!(tally.latencies().len(), 1);
            let stored: Vec<usize> = ["a", "b"]
                .iter()
                .map(|name| {
                    let pod = cluster.get("v1", "pods", Some("default"), name).expect("pod");
                    serde_json::to_vec(&pod).expect("JSON").len()
                })
                .collect();
            let mean = (stored[0] + stored[1]) as u64 / 2;
            let measured = average_pod_bytes(&cluster).expect("pods stored");
            assert!(measured.abs_diff(mean) <= 2, "{measured} vs {mean}");
            server.shutdown().await;
        });
    }
}
