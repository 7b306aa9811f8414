//! Object storage: one [`TypeStore`] per resource (objects by namespace/name behind a
//! `RwLock`), one global resourceVersion counter, and per type a bounded history of change
//! [`Record`]s that watches read from, kept as kube-apiserver's watch cache keeps it
//! ([`Retention`]): the last 75 s, at least 100 changes, at most a capacity; a watch resuming
//! from older gets 410 Gone and lists again. Old records hold copies of objects only a lagging
//! watcher could want, so the history is bounded rather than kept for the whole run.
//!
//! Each write serialises the object once; the bytes are shared by GET, LIST and every watcher
//! and are the only copy kept (a parsed tree is several times their size). The fields that
//! selectors, indexes and controllers read are extracted once per write ([`Attrs`]) and shared
//! with the previous version where unchanged. The store also keeps the uid and ownerReference
//! indexes for garbage collection; API semantics live in `registry`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use super::clock::Clock;
use super::resources::{GroupResource, ResourceType};

/// Namespace (`""` for cluster-scoped) and name.
pub type ObjKey = (String, String);

/// Reads a lock, ignoring poisoning: every critical section leaves the data consistent.
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes a lock, ignoring poisoning (see [`read`]).
pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Locks a mutex, ignoring poisoning (see [`read`]).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// Owner kind.
    pub kind: String,
    /// Owner name.
    pub name: String,
    /// Owner uid.
    pub uid: String,
    /// `controller: true`
    pub controller: bool,
}

/// The parts of an object selectors, indexes and controllers look at, extracted once per write.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attrs {
    /// Namespace (`""` when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// uid.
    pub uid: String,
    /// Labels, shared with the object's earlier versions that have the same.
    pub labels: Arc<BTreeMap<String, String>>,
    /// `spec.nodeName`
    pub node_name: String,
    /// `status.phase`
    pub phase: String,
    /// `metadata.ownerReferences`, shared like the labels.
    pub owners: Arc<Vec<OwnerRef>>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `apiVersion`
    pub api_version: String,
    /// A condition `Ready` with status `True` (a pod's, a node's).
    pub ready: bool,
    /// `spec.unschedulable` (a cordoned node's).
    pub unschedulable: bool,
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Attrs {
    /// Extracts the attributes of an object.
    pub fn of(object: &Value) -> Self {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let owners = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .map(|r| OwnerRef {
                        kind: str_at(r, "/kind").to_string(),
                        name: str_at(r, "/name").to_string(),
                        uid: str_at(r, "/uid").to_string(),
                        controller: r
                            .get("controller")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            namespace: str_at(object, "/metadata/namespace").to_string(),
            name: str_at(object, "/metadata/name").to_string(),
            uid: str_at(object, "/metadata/uid").to_string(),
            labels: Arc::new(labels),
            node_name: str_at(object, "/spec/nodeName").to_string(),
            phase: str_at(object, "/status/phase").to_string(),
            owners: Arc::new(owners),
            deleting: object
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|v| !v.is_null()),
            api_version: str_at(object, "/apiVersion").to_string(),
            ready: object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                }),
            unschedulable: object
                .pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }

    /// These attributes, sharing what they have in common with `previous` (the object's
    /// version before this write): all of it when the write moved none of them (most writes
    /// are status writes: a pod's unschedulable report, its nomination), else its labels and
    /// owners when those are unchanged. Every version of an object the history keeps holds
    /// its attributes, so without this a pod's half-dozen versions each held a copy of its
    /// labels and owners.
    pub fn shared_with(self, previous: Option<&Arc<Attrs>>) -> Arc<Attrs> {
        let Some(previous) = previous else {
            return Arc::new(self);
        };
        if self == **previous {
            return Arc::clone(previous);
        }
        let mut attrs = self;
        if attrs.labels == previous.labels {
            attrs.labels = Arc::clone(&previous.labels);
        }
        if attrs.owners == previous.owners {
            attrs.owners = Arc::clone(&previous.owners);
        }
        Arc::new(attrs)
    }

    /// The value of a selectable field these attributes carry (see
    /// `selectors::selectable_fields`); `None` for a field only the object has.
    pub fn field(&self, field: &str) -> Option<String> {
        Some(match field {
            "metadata.name" => self.name.clone(),
            "metadata.namespace" => self.namespace.clone(),
            "spec.nodeName" => self.node_name.clone(),
            "status.phase" => self.phase.clone(),
            "spec.unschedulable" => self.unschedulable.to_string(),
            _ => return None,
        })
    }

    /// The owner with `controller: true`, if any.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owners.iter().find(|o| o.controller)
    }

    /// Storage key.
    pub fn key(&self) -> ObjKey {
        (self.namespace.clone(), self.name.clone())
    }
}

/// An object as stored: its serialised bytes and its attributes.
#[derive(Debug)]
pub struct StoredObject {
    /// The object (with `metadata.resourceVersion` set) serialised as JSON.
    pub bytes: Bytes,
    /// Extracted attributes.
    pub attrs: Arc<Attrs>,
    /// resourceVersion.
    pub rv: u64,
}

impl StoredObject {
    /// The object, parsed from its stored JSON.
    pub fn value(&self) -> Value {
        // The bytes are what `serde_json` serialised from a `Value`; they always parse back.
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
}

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The watch wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in a type's history.
#[derive(Debug, Clone)]
pub struct Record {
    /// resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for deletions: its last state, at the deletion's rv).
    pub object: Bytes,
    /// Attributes after the change.
    pub attrs: Arc<Attrs>,
    /// Attributes before the change (for selector transitions).
    pub prev: Option<Arc<Attrs>>,
    /// When the change was made (the emulator's clock), for the retention window.
    pub at: SystemTime,
}

/// Objects and history of one resource.
#[derive(Debug, Default)]
pub struct TypeState {
    /// Live objects by namespace/name.
    pub objects: BTreeMap<ObjKey, Arc<StoredObject>>,
    /// Recent changes, oldest first, rv ascending.
    pub history: VecDeque<Record>,
    /// rv of the newest change dropped from history: watches must start at or after it.
    pub floor: u64,
    /// rv of the last compaction ([`TypeStore::compact`]): paginated lists from before it
    /// cannot go on.
    pub compacted: u64,
}

impl TypeState {
    /// Live objects of `namespace` (all when `None`), in key order, starting after `after`.
    pub fn range<'a>(
        &'a self,
        namespace: Option<&'a str>,
        after: Option<&ObjKey>,
    ) -> impl Iterator<Item = &'a Arc<StoredObject>> + 'a {
        use std::ops::Bound;
        let lower = match (after, namespace) {
            (Some(key), _) => Bound::Excluded(key.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        self.objects
            .range((lower, Bound::Unbounded))
            .take_while(move |((ns, _), _)| namespace.is_none_or(|want| want == ns))
            .map(|(_, obj)| obj)
    }
}

/// One resource's storage.
#[derive(Debug)]
pub struct TypeStore {
    rt: RwLock<Arc<ResourceType>>,
    /// Objects and history.
    pub state: RwLock<TypeState>,
    changed: watch::Sender<u64>,
}

impl TypeStore {
    /// The resource's current definition.
    pub fn resource_type(&self) -> Arc<ResourceType> {
        read(&self.rt).clone()
    }

    /// Replaces the definition (a CRD was updated).
    pub fn set_resource_type(&self, rt: ResourceType) {
        *write(&self.rt) = Arc::new(rt);
    }

    /// A receiver that changes whenever a record is appended.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Drops all history: watches from before now get 410 Gone.
    pub fn compact(&self) {
        let mut state = write(&self.state);
        if let Some(last) = state.history.back() {
            state.floor = last.rv;
        }
        state.compacted = state.floor;
        state.history.clear();
        drop(state);
        self.changed.send_modify(|_| {});
    }
}

/// Where an object lives: its resource and key.
pub type Location = (GroupResource, ObjKey);

/// uid and owner indexes over all types.
#[derive(Debug, Default)]
struct Index {
    by_uid: HashMap<String, Location>,
    dependents: HashMap<String, HashSet<Location>>,
}

/// kube-apiserver's watch cache keeps events this long (`eventFreshDuration`) when it can.
pub const HISTORY_WINDOW: Duration = Duration::from_secs(75);
/// kube-apiserver's watch cache never keeps fewer events than this per resource
/// (`defaultLowerBoundCapacity`), however old.
pub const HISTORY_FLOOR: usize = 100;

/// How much change history each type keeps for watches to resume from.
#[derive(Clone)]
pub struct Retention {
    /// Most records kept per type, however young.
    pub capacity: usize,
    /// Records older than this (by `clock`) are dropped, the newest [`HISTORY_FLOOR`] excepted;
    /// `None`: kept up to `capacity` whatever their age.
    pub window: Option<Duration>,
    /// Stamps the records.
    pub clock: Arc<dyn Clock>,
}

impl Retention {
    /// Up to `capacity` records per type, whatever their age.
    pub fn capacity(capacity: usize) -> Self {
        Self {
            capacity,
            window: None,
            clock: Arc::new(super::clock::ScaledClock::default()),
        }
    }

    /// Whether the oldest of `history` goes: past the capacity, or past the window and the floor.
    fn drops_oldest(&self, history: &VecDeque<Record>, now: SystemTime) -> bool {
        let Some(oldest) = history.front() else {
            return false;
        };
        let expired = self.window.is_some_and(|window| {
            history.len() > HISTORY_FLOOR
                && now.duration_since(oldest.at).unwrap_or_default() > window
        });
        history.len() > self.capacity || expired
    }
}

impl std::fmt::Debug for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retention")
            .field("capacity", &self.capacity)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// All storage.
#[derive(Debug)]
pub struct Store {
    rv: AtomicU64,
    types: RwLock<HashMap<GroupResource, Arc<TypeStore>>>,
    index: Mutex<Index>,
    retention: Retention,
}

impl Store {
    /// Empty storage keeping up to `history_capacity` changes per type, whatever their age.
    pub fn new(history_capacity: usize) -> Self {
        Self::with_retention(Retention::capacity(history_capacity))
    }

    /// Empty storage keeping the history `retention` says (at least 16 records per type).
    pub fn with_retention(retention: Retention) -> Self {
        Self {
            rv: AtomicU64::new(1),
            types: RwLock::new(HashMap::new()),
            index: Mutex::new(Index::default()),
            retention: Retention {
                capacity: retention.capacity.max(16),
                ..retention
            },
        }
    }

    /// The latest resourceVersion handed out. Read it under a type's state lock to get a
    /// version consistent with that type's history.
    pub fn current_rv(&self) -> u64 {
        self.rv.load(Ordering::SeqCst)
    }

    /// Registers (or redefines) a resource.
    pub fn register(&self, rt: ResourceType) -> Arc<TypeStore> {
        let gr = rt.group_resource();
        let mut types = write(&self.types);
        if let Some(existing) = types.get(&gr) {
            existing.set_resource_type(rt);
            return existing.clone();
        }
        let (changed, _) = watch::channel(0);
        let ts = Arc::new(TypeStore {
            rt: RwLock::new(Arc::new(rt)),
            state: RwLock::new(TypeState::default()),
            changed,
        });
        types.insert(gr, ts.clone());
        ts
    }

    /// Removes a resource and all its objects (its CRD was deleted).
    pub fn unregister(&self, gr: &GroupResource) -> Option<Arc<TypeStore>> {
        let removed = write(&self.types).remove(gr)?;
        let state = read(&removed.state);
        let mut index = lock(&self.index);
        for obj in state.objects.values() {
            index.by_uid.remove(&obj.attrs.uid);
            for owner in obj.attrs.owners.iter() {
                if let Some(set) = index.dependents.get_mut(&owner.uid) {
                    set.remove(&(gr.clone(), obj.attrs.key()));
                }
            }
        }
        drop(index);
        drop(state);
        Some(removed)
    }

    /// The storage of a resource.
    pub fn get(&self, gr: &GroupResource) -> Option<Arc<TypeStore>> {
        read(&self.types).get(gr).cloned()
    }

    /// Every registered resource.
    pub fn all(&self) -> Vec<Arc<TypeStore>> {
        read(&self.types).values().cloned().collect()
    }

    /// Where the object with `uid` lives.
    pub fn locate(&self, uid: &str) -> Option<Location> {
        lock(&self.index).by_uid.get(uid).cloned()
    }

    /// Objects whose ownerReferences name `owner_uid`.
    pub fn dependents(&self, owner_uid: &str) -> Vec<Location> {
        lock(&self.index)
            .dependents
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Writes (or with `new == None`, removes) the object at `key` under the caller's lock,
    /// assigning the next resourceVersion and appending a history record.
    pub fn commit(
        &self,
        ts: &TypeStore,
        state: &mut TypeState,
        key: &ObjKey,
        new: Option<Value>,
    ) -> Arc<StoredObject> {
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        let old = state.objects.get(key).cloned();
        let (mut value, kind) = match (new, &old) {
            (Some(v), None) => (v, EventType::Added),
            (Some(v), Some(_)) => (v, EventType::Modified),
            (None, Some(o)) => (o.value(), EventType::Deleted),
            // Removing an absent object is a caller bug; record it as an empty deletion.
            (None, None) => (Value::Object(serde_json::Map::new()), EventType::Deleted),
        };
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".to_string(), Value::String(rv.to_string()));
        }
        let mut json = serde_json::to_vec(&value).expect("a serde_json::Value always serialises");
        // The buffer grew by doubling; the stored copy (and every history record sharing it)
        // lives for a long time, so it keeps only what it holds.
        json.shrink_to_fit();
        let bytes = Bytes::from(json);
        let attrs = Attrs::of(&value).shared_with(old.as_ref().map(|o| &o.attrs));
        let stored = Arc::new(StoredObject {
            bytes: bytes.clone(),
            attrs: attrs.clone(),
            rv,
        });
        let gr = ts.resource_type().group_resource();
        self.reindex(
            &gr,
            old.as_ref().map(|o| &*o.attrs),
            (kind != EventType::Deleted).then_some(&*attrs),
        );
        if kind == EventType::Deleted {
            state.objects.remove(key);
        } else {
            state.objects.insert(key.clone(), stored.clone());
        }
        let at = self.retention.clock.now();
        state.history.push_back(Record {
            rv,
            kind,
            object: bytes,
            attrs,
            prev: old.map(|o| o.attrs.clone()),
            at,
        });
        while self.retention.drops_oldest(&state.history, at) {
            if let Some(dropped) = state.history.pop_front() {
                state.floor = dropped.rv;
            }
        }
        ts.changed.send_replace(rv);
        stored
    }

    fn reindex(&self, gr: &GroupResource, old: Option<&Attrs>, new: Option<&Attrs>) {
        let mut index = lock(&self.index);
        if let Some(old) = old {
            let loc = (gr.clone(), old.key());
            index.by_uid.remove(&old.uid);
            for owner in old.owners.iter() {
                if let Some(set) = index.dependents.get_mut(&owner.uid) {
                    set.remove(&loc);
                    if set.is_empty() {
                        index.dependents.remove(&owner.uid);
                    }
                }
            }
        }
        if let Some(new) = new {
            let loc = (gr.clone(), new.key());
            index.by_uid.insert(new.uid.clone(), loc.clone());
            for owner in new.owners.iter() {
                index
                    .dependents
                    .entry(owner.uid.clone())
                    .or_default()
                    .insert(loc.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::builtin_types;
    use serde_json::json;

    fn pods(store: &Store) -> Arc<TypeStore> {
        let rt = builtin_types()
            .into_iter()
            .find(|t| t.plural == "pods")
            .expect("pods are built in");
        store.register(rt)
    }

    fn pod(ns: &str, name: &str, owner: Option<&str>) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}")}});
        if let Some(owner) = owner {
            p["metadata"]["ownerReferences"] =
                json!([{"kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": true}]);
        }
        p
    }

    #[test]
    fn commits_assign_increasing_versions_and_record_history() {
        let store = Store::new(16);
        let ts = pods(&store);
        let mut state = write(&ts.state);
        let a = store.commit(
            &ts,
            &mut state,
            &("ns".into(), "a".into()),
            Some(pod("ns", "a", Some("o1"))),
        );
        let b = store.commit(
            &ts,
            &mut state,
            &("ns".into(), "a".into()),
            Some(pod("ns", "a", None)),
        );
        assert!(b.rv > a.rv);
        assert_eq!(b.value()["metadata"]["resourceVersion"], b.rv.to_string());
        let gone = store.commit(&ts, &mut state, &("ns".into(), "a".into()), None);
        let kinds: Vec<EventType> = state.history.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
        assert!(state.objects.is_empty());
        assert_eq!(state.history[2].rv, gone.rv);
    }

    #[test]
    fn only_the_bytes_are_kept_and_readiness_is_read_once_per_write() {
        let store = Store::new(16);
        let ts = pods(&store);
        let mut state = write(&ts.state);
        let key = ("ns".to_string(), "a".to_string());
        let mut ready = pod("ns", "a", None);
        ready["status"] = json!({"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"}
        ]});
        let stored = store.commit(&ts, &mut state, &key, Some(ready.clone()));
        assert!(stored.attrs.ready);
        assert_eq!(stored.attrs.api_version, "v1");
        ready["metadata"]["resourceVersion"] = json!(stored.rv.to_string());
        assert_eq!(stored.value(), ready, "parsed back from the stored JSON");
        ready["status"]["conditions"][1]["status"] = json!("False");
        let stored = store.commit(&ts, &mut state, &key, Some(ready));
        assert!(!stored.attrs.ready);
    }

    #[test]
    fn versions_share_the_attributes_they_have_in_common() {
        let store = Store::new(16);
        let ts = pods(&store);
        let mut state = write(&ts.state);
        let key = ("ns".to_string(), "a".to_string());
        let mut p = pod("ns", "a", Some("o1"));
        p["metadata"]["labels"] = json!({"app": "web"});
        let created = store.commit(&ts, &mut state, &key, Some(p.clone()));

        p["status"] = json!({"nominatedNodeName": "n1"});
        let nominated = store.commit(&ts, &mut state, &key, Some(p.clone()));
        assert!(
            Arc::ptr_eq(&created.attrs, &nominated.attrs),
            "a write that moves no attribute keeps the same ones"
        );

        p["spec"] = json!({"nodeName": "n1"});
        let bound = store.commit(&ts, &mut state, &key, Some(p.clone()));
        assert_eq!(bound.attrs.node_name, "n1");
        assert!(Arc::ptr_eq(&created.attrs.labels, &bound.attrs.labels));
        assert!(Arc::ptr_eq(&created.attrs.owners, &bound.attrs.owners));

        p["metadata"]["labels"] = json!({"app": "api"});
        let relabelled = store.commit(&ts, &mut state, &key, Some(p));
        assert_eq!(
            relabelled.attrs.labels.get("app").map(String::as_str),
            Some("api")
        );
        assert_eq!(
            created.attrs.labels.get("app").map(String::as_str),
            Some("web")
        );
        assert!(Arc::ptr_eq(&created.attrs.owners, &relabelled.attrs.owners));
        let history: Vec<&str> = state
            .history
            .iter()
            .map(|r| r.attrs.node_name.as_str())
            .collect();
        assert_eq!(
            history,
            ["", "", "n1", "n1"],
            "each record keeps its own version's"
        );
    }

    #[test]
    fn history_is_bounded_and_raises_the_floor() {
        let store = Store::new(16);
        let ts = pods(&store);
        let mut state = write(&ts.state);
        for i in 0..20 {
            store.commit(
                &ts,
                &mut state,
                &("ns".into(), format!("p{i}")),
                Some(pod("ns", &format!("p{i}"), None)),
            );
        }
        assert_eq!(state.history.len(), 16);
        assert_eq!(state.floor + 1, state.history[0].rv);
    }

    #[test]
    fn owner_index_tracks_dependents() {
        let store = Store::new(16);
        let ts = pods(&store);
        let mut state = write(&ts.state);
        store.commit(
            &ts,
            &mut state,
            &("ns".into(), "a".into()),
            Some(pod("ns", "a", Some("o1"))),
        );
        store.commit(
            &ts,
            &mut state,
            &("other".into(), "b".into()),
            Some(pod("other", "b", Some("o1"))),
        );
        assert_eq!(store.dependents("o1").len(), 2);
        store.commit(
            &ts,
            &mut state,
            &("ns".into(), "a".into()),
            Some(pod("ns", "a", None)),
        );
        assert_eq!(store.dependents("o1").len(), 1);
        assert!(store.locate("uid-ns-a").is_some());
        let in_ns: Vec<String> = state
            .range(Some("ns"), None)
            .map(|o| o.attrs.name.clone())
            .collect();
        assert_eq!(in_ns, ["a"]);
    }
}
