//! One kind's store: objects by namespace/name, whether the initial list has completed, and
//! the one writer allowed to change it. A relist (the watch restarting after a 410 or a
//! dropped connection) replaces the contents wholesale at its end, so objects deleted while
//! the watch was down disappear too. Deleted keys are remembered for a while, so a reader
//! can tell an object the watch has not delivered yet from one that came and went. A store
//! may keep one secondary index (e.g. NodeClaims by EC2 instance id), maintained by the same
//! writer on every apply, delete and relist, so a lookup by it is a map read, not a scan.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::ClusterState;
use super::lean::Stored;
use crate::metrics::CLUSTER_STATE_OBJECTS;

/// How long a deleted object's key is remembered ([`Store::recently_deleted`]).
pub const TOMBSTONE_RETENTION: Duration = Duration::from_secs(60);

/// Deletions between two sweeps of expired tombstones: sweeping scans them all.
const TOMBSTONE_SWEEP_EVERY: u32 = 256;

/// `namespace/name`, or `name` for cluster-scoped objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(String);

impl ObjectKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            Some(ns) if !ns.is_empty() => Self(format!("{ns}/{name}")),
            _ => Self(name.to_string()),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The objects of one kind.
pub struct Store<K> {
    kind: &'static str,
    objects: DashMap<ObjectKey, Arc<K>>,
    tombstones: DashMap<ObjectKey, Instant>,
    synced: AtomicBool,
    index: Option<Index<K>>,
}

/// A secondary key of some objects (those for which `key` answers) → their primary key.
struct Index<K> {
    key: fn(&K) -> Option<String>,
    entries: DashMap<String, ObjectKey>,
}

impl<K> Index<K> {
    fn remove(&self, object: &K, primary: &ObjectKey) {
        if let Some(secondary) = (self.key)(object) {
            // Only while it still points here: another object may have taken the key since.
            self.entries.remove_if(&secondary, |_, at| at == primary);
        }
    }

    fn insert(&self, object: &K, primary: &ObjectKey) {
        if let Some(secondary) = (self.key)(object) {
            self.entries.insert(secondary, primary.clone());
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("kind", &self.kind)
            .field("len", &self.objects.len())
            .field("synced", &self.is_synced())
            .finish()
    }
}

impl<K> Store<K> {
    pub(super) fn new(kind: &'static str) -> Self {
        Self {
            kind,
            objects: DashMap::new(),
            tombstones: DashMap::new(),
            synced: AtomicBool::new(false),
            index: None,
        }
    }

    /// A store that also indexes its objects by `key` ([`Self::get_indexed`]).
    pub(super) fn indexed(kind: &'static str, key: fn(&K) -> Option<String>) -> Self {
        Self {
            index: Some(Index {
                key,
                entries: DashMap::new(),
            }),
            ..Self::new(kind)
        }
    }

    /// The object whose index key is `secondary`, if this store is indexed and holds one.
    pub fn get_indexed(&self, secondary: &str) -> Option<Arc<K>> {
        let index = self.index.as_ref()?;
        let primary = index.entries.get(secondary)?.value().clone();
        self.get(&primary)
    }

    pub fn kind(&self) -> &'static str {
        self.kind
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.objects.get(key).map(|o| o.value().clone())
    }

    /// Every object, in no particular order.
    pub fn snapshot(&self) -> Vec<Arc<K>> {
        self.objects.iter().map(|o| o.value().clone()).collect()
    }

    /// The objects `keep` accepts, in no particular order: a [`Self::snapshot`] of the few
    /// a caller wants, without a pointer to every object.
    pub fn filtered(&self, keep: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.objects
            .iter()
            .filter(|o| keep(o.value()))
            .map(|o| o.value().clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Whether an object under `key` was deleted within [`TOMBSTONE_RETENTION`] and not
    /// created again since.
    pub fn recently_deleted(&self, key: &ObjectKey) -> bool {
        self.tombstones
            .get(key)
            .is_some_and(|at| at.elapsed() < TOMBSTONE_RETENTION)
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    fn publish_len(&self) {
        #[allow(
            clippy::cast_precision_loss,
            reason = "object counts are far below 2^52"
        )]
        metrics::gauge!(CLUSTER_STATE_OBJECTS, "kind" => self.kind).set(self.objects.len() as f64);
    }
}

/// The single writer of one store of `K`s, kept in their [`Stored`] form. Not `Clone`: one
/// watch stream owns each kind.
pub struct StoreWriter<K: Stored> {
    state: Arc<ClusterState>,
    store: fn(&ClusterState) -> &Store<K::Form>,
    /// What making each object's stored form needs from the ones before (pods' shared specs).
    context: K::Context,
    relist: Option<HashSet<ObjectKey>>,
    deletions: u32,
}

impl<K: Stored> fmt::Debug for StoreWriter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreWriter")
            .field("kind", &self.store().kind)
            .finish_non_exhaustive()
    }
}

impl<K: Stored> StoreWriter<K> {
    pub(super) fn new(
        state: &Arc<ClusterState>,
        store: fn(&ClusterState) -> &Store<K::Form>,
    ) -> Self {
        Self {
            state: state.clone(),
            store,
            context: K::Context::default(),
            relist: None,
            deletions: 0,
        }
    }

    pub fn store(&self) -> &Store<K::Form> {
        (self.store)(&self.state)
    }

    /// Inserts or replaces an object, in the form the store keeps ([`Stored`]: trimmed to
    /// what decisions read).
    pub fn apply(&mut self, key: ObjectKey, object: K) {
        let object = object.stored(&mut self.context);
        if let Some(seen) = &mut self.relist {
            seen.insert(key.clone());
        }
        let store = self.store();
        store.tombstones.remove(&key);
        if let Some(index) = &store.index {
            if let Some(old) = store.objects.get(&key) {
                index.remove(&old, &key);
            }
            index.insert(&object, &key);
        }
        store.objects.insert(key, Arc::new(object));
        store.publish_len();
    }

    /// Removes an object; returns what was stored.
    pub fn delete(&mut self, key: &ObjectKey) -> Option<Arc<K::Form>> {
        let removed = self.store().objects.remove(key).map(|(_, o)| o);
        if let Some(object) = &removed {
            if let Some(index) = &self.store().index {
                index.remove(object, key);
            }
            self.bury(key.clone());
        }
        self.store().publish_len();
        removed
    }

    /// A (re)list starts: objects not applied before [`Self::finish_relist`] are gone.
    pub fn begin_relist(&mut self) {
        self.relist = Some(HashSet::new());
    }

    /// A (re)list ended: drops what it did not list and marks the store synced.
    pub fn finish_relist(&mut self) {
        if let Some(seen) = self.relist.take() {
            let mut gone = Vec::new();
            let store = self.store();
            store.objects.retain(|k, object| {
                let listed = seen.contains(k);
                if !listed {
                    if let Some(index) = &store.index {
                        index.remove(object, k);
                    }
                    gone.push(k.clone());
                }
                listed
            });
            for key in gone {
                self.bury(key);
            }
        }
        self.store().publish_len();
        self.store().synced.store(true, Ordering::Release);
        self.state.store_synced();
    }

    fn bury(&mut self, key: ObjectKey) {
        self.deletions += 1;
        let sweep = self.deletions >= TOMBSTONE_SWEEP_EVERY;
        if sweep {
            self.deletions = 0;
        }
        let tombstones = &self.store().tombstones;
        tombstones.insert(key, Instant::now());
        if sweep {
            tombstones.retain(|_, at| at.elapsed() < TOMBSTONE_RETENTION);
        }
    }

    /// An object seen during a relist that could not be read: it must not survive the
    /// relist's sweep as a stale copy, nor be applied.
    pub fn forget(&mut self, key: &ObjectKey) {
        if let Some(seen) = &mut self.relist {
            seen.remove(key);
        }
        self.delete(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Writers;
    use k8s_openapi::api::core::v1::Node;
    use kerf::api::NodeClaim;

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.to_string());
        n
    }

    #[test]
    fn filtered_holds_only_the_objects_kept() {
        let (state, mut w) = ClusterState::new();
        for name in ["a", "b", "ab"] {
            w.nodes.apply(ObjectKey::new(None, name), node(name));
        }
        let mut names: Vec<String> = state
            .nodes
            .filtered(|n| n.metadata.name.as_deref().is_some_and(|n| n.contains('a')))
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "ab"]);
    }

    #[test]
    fn relist_drops_objects_it_does_not_list_and_marks_synced() {
        let (state, mut w) = ClusterState::new();
        w.nodes.apply(ObjectKey::new(None, "a"), node("a"));
        w.nodes.apply(ObjectKey::new(None, "b"), node("b"));
        assert!(!state.nodes.is_synced());
        w.nodes.begin_relist();
        w.nodes.apply(ObjectKey::new(None, "b"), node("b"));
        w.nodes.finish_relist();
        assert!(state.nodes.is_synced());
        assert!(state.nodes.get(&ObjectKey::new(None, "a")).is_none());
        assert!(state.nodes.get(&ObjectKey::new(None, "b")).is_some());
        assert!(!state.synced(), "other kinds have not listed yet");
    }

    #[test]
    fn state_is_synced_only_when_every_kind_is() {
        let (state, w) = ClusterState::new();
        let Writers {
            mut pods,
            mut nodes,
            mut nodeclaims,
            mut nodepools,
            mut nodeclasses,
            mut daemonsets,
            mut pdbs,
            mut persistent_volumes,
            mut persistent_volume_claims,
            mut storage_classes,
            mut csi_nodes,
            mut node_overlays,
            mut capacity_buffers,
        } = w;
        node_overlays.finish_relist();
        capacity_buffers.finish_relist();
        pods.finish_relist();
        nodes.finish_relist();
        nodeclaims.finish_relist();
        nodepools.finish_relist();
        nodeclasses.finish_relist();
        daemonsets.finish_relist();
        pdbs.finish_relist();
        persistent_volumes.finish_relist();
        persistent_volume_claims.finish_relist();
        storage_classes.finish_relist();
        assert!(!state.synced());
        csi_nodes.finish_relist();
        assert!(state.synced());
    }

    #[test]
    fn deleted_keys_are_remembered_until_created_again() {
        let (state, mut w) = ClusterState::new();
        let a = ObjectKey::new(None, "a");
        assert!(!state.nodes.recently_deleted(&a), "never seen");
        w.nodes.apply(a.clone(), node("a"));
        assert!(!state.nodes.recently_deleted(&a));
        w.nodes.delete(&a);
        assert!(state.nodes.recently_deleted(&a));
        w.nodes.apply(a.clone(), node("a"));
        assert!(!state.nodes.recently_deleted(&a), "created again");
        w.nodes.begin_relist();
        w.nodes.finish_relist();
        assert!(
            state.nodes.recently_deleted(&a),
            "a relist that no longer lists it deleted it"
        );
    }

    fn claim(name: &str, provider_id: Option<&str>) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            "status": {"providerID": provider_id},
        }))
        .expect("a valid NodeClaim")
    }

    #[test]
    fn nodeclaims_are_found_by_instance_id_through_apply_delete_and_relist() {
        let (state, mut w) = ClusterState::new();
        let (a, b) = (ObjectKey::new(None, "a"), ObjectKey::new(None, "b"));
        w.nodeclaims.apply(a.clone(), claim("a", None));
        assert!(
            state.nodeclaims.get_indexed("i-0a").is_none(),
            "not launched"
        );
        w.nodeclaims
            .apply(a.clone(), claim("a", Some("aws:///us-east-1a/i-0a")));
        let found = state.nodeclaims.get_indexed("i-0a").expect("indexed");
        assert_eq!(found.metadata.name.as_deref(), Some("a"));
        w.nodeclaims
            .apply(b.clone(), claim("b", Some("aws:///us-east-1b/i-0b")));
        w.nodeclaims.delete(&a);
        assert!(state.nodeclaims.get_indexed("i-0a").is_none(), "deleted");
        w.nodeclaims.begin_relist();
        w.nodeclaims.finish_relist();
        assert!(
            state.nodeclaims.get_indexed("i-0b").is_none(),
            "not relisted"
        );
        assert!(state.nodes.get_indexed("i-0b").is_none());
    }

    #[test]
    fn the_store_keeps_objects_lean() {
        let (state, mut w) = ClusterState::new();
        let mut full = node("a");
        full.metadata.managed_fields = Some(vec![Default::default()]);
        w.nodes.apply(ObjectKey::new(None, "a"), full);
        let stored = state.nodes.get(&ObjectKey::new(None, "a")).expect("stored");
        assert!(stored.metadata.managed_fields.is_none());
        assert_eq!(stored.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn namespaced_and_cluster_keys() {
        assert_eq!(ObjectKey::new(Some("ns"), "p").to_string(), "ns/p");
        assert_eq!(ObjectKey::new(None, "n").to_string(), "n");
        assert_eq!(ObjectKey::new(Some(""), "n").to_string(), "n");
    }
}
