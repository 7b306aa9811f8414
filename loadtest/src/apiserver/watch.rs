//! Watches: a stream of `{"type":...,"object":...}` lines read from a type's history
//! ring. Each watcher keeps a position (resourceVersion) and, when woken, copies the
//! already-serialised object bytes of every newer record that passes its filters into one
//! chunk, so N watchers cost N memcpys and no re-serialisation. Covers the semantics
//! controllers rely on: start from a resourceVersion (410 Expired once compacted), initial
//! state for `resourceVersion=0`/unset and `sendInitialEvents`, selector transitions
//! (ADDED/DELETED when an object starts/stops matching), periodic and initial-events-end
//! BOOKMARKs, `timeoutSeconds`, and being cut off by fault injection.

use std::sync::Arc;
use std::time::Duration;

use super::clock::Clock;
use super::resources::ResourceType;
use super::table::{self, Include};

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::error::{ApiError, ApiResult};
use super::registry::Target;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{Attrs, EventType, Record, Store, StoredObject, TypeStore, read};

/// Parameters of one watch request.
#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    /// `labelSelector`
    pub labels: LabelSelector,
    /// `fieldSelector`
    pub fields: FieldSelector,
    /// `resourceVersion` (absent or `"0"`: start with the current state).
    pub resource_version: Option<String>,
    /// `sendInitialEvents=true`
    pub send_initial_events: bool,
    /// `allowWatchBookmarks=true`
    pub bookmarks: bool,
    /// `timeoutSeconds`
    pub timeout: Option<Duration>,
    /// Events carry Table rows instead of objects (`kubectl get --watch` asks for them).
    pub(crate) table: Option<TableRows>,
}

/// How a watch asked for Tables renders them.
#[derive(Clone)]
pub(crate) struct TableRows {
    pub include: Include,
    /// For the ages in the cells.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for TableRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableRows")
            .field("include", &self.include)
            .finish_non_exhaustive()
    }
}

/// Why a watch stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEnd {
    /// `timeoutSeconds` elapsed.
    Timeout,
    /// The client went away.
    ClientGone,
    /// Fault injection or shutdown cut the stream.
    Dropped,
    /// The watcher fell behind the retained history (410 sent).
    Expired,
    /// The resource stopped being served (CRD deleted).
    ResourceGone,
}

struct Filter {
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    /// Whether a version with `attrs` passes; a selected field the attributes do not carry
    /// is read from `object`, the record's own version (the history keeps no earlier
    /// object, so such a field's change is judged on its latest value: the fields in
    /// question are an event's involved object and reporter, which do not change, and a
    /// pod's IP, nomination and few fixed spec fields).
    fn matches(&self, attrs: &Attrs, object: &[u8]) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| ns == attrs.namespace)
            && self.labels.matches(&attrs.labels)
            && self.fields.matches_stored(attrs, object)
    }

    /// The event type this watcher sees for a record, if any.
    fn event_for(&self, record: &Record) -> Option<EventType> {
        let now = self.matches(&record.attrs, &record.object);
        let before = record
            .prev
            .as_deref()
            .map(|p| self.matches(p, &record.object));
        match (record.kind, before, now) {
            (EventType::Added, _, true) => Some(EventType::Added),
            (EventType::Modified, Some(true), true) => Some(EventType::Modified),
            (EventType::Modified, _, true) => Some(EventType::Added),
            (EventType::Modified, Some(true), false) => Some(EventType::Deleted),
            (EventType::Deleted, _, true) => Some(EventType::Deleted),
            _ => None,
        }
    }
}

/// A validated watch, ready to stream.
pub struct Watch {
    target: Target,
    params: WatchParams,
    filter: Filter,
    start: Start,
}

enum Start {
    /// Send the current state, then changes.
    Snapshot,
    /// Send changes after this resourceVersion.
    After(u64),
}

/// Validates the request (400 for a malformed resourceVersion).
pub fn prepare(target: Target, params: WatchParams) -> ApiResult<Watch> {
    let start = match params.resource_version.as_deref() {
        None | Some("") | Some("0") => Start::Snapshot,
        Some(_) if params.send_initial_events => Start::Snapshot,
        Some(rv) => Start::After(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
        ),
    };
    let filter = Filter {
        namespace: target.namespace.clone(),
        labels: params.labels.clone(),
        fields: params.fields.clone(),
    };
    Ok(Watch {
        target,
        params,
        filter,
        start,
    })
}

/// The most a watch encodes from the history before handing the chunk to its connection:
/// a watcher that fell behind gets what it missed a chunk at a time, as its connection
/// takes them, so what waits for it is a few chunks (the connection's channel holds 16)
/// rather than a copy of every event it missed (which the history holds anyway).
const WATCH_CHUNK_BYTES: usize = 256 * 1024;

/// Encodes into `out` the events `filter` lets through of `records` (the history after the
/// watcher's position), stopping once `out` holds [`WATCH_CHUNK_BYTES`]; returns the
/// position reached (the last record looked at, or `pos`) and whether records are left.
fn encode_records<'a>(
    encoder: &Encoder,
    filter: &Filter,
    records: impl Iterator<Item = &'a Record>,
    mut pos: u64,
    out: &mut BytesMut,
) -> (u64, bool) {
    for record in records {
        if out.len() >= WATCH_CHUNK_BYTES {
            return (pos, true);
        }
        pos = record.rv;
        if let Some(kind) = filter.event_for(record) {
            encoder.event(out, kind.as_str(), &record.object);
        }
    }
    (pos, false)
}

struct Encoder {
    /// `Some(apiVersion)` when the requested version differs from the stored one.
    rewrite: Option<String>,
    kind: String,
    api_version: String,
    /// Tables of one row instead of objects, with the resource and version they describe.
    table: Option<(TableRows, Arc<ResourceType>, String)>,
}

impl Encoder {
    fn event(&self, out: &mut BytesMut, kind: &str, object: &Bytes) {
        out.put_slice(b"{\"type\":\"");
        out.put_slice(kind.as_bytes());
        out.put_slice(b"\",\"object\":");
        match (&self.table, &self.rewrite) {
            (Some((rows, rt, version)), _) => {
                let value: Value = serde_json::from_slice(object).unwrap_or(Value::Null);
                let rv = value
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let one = table::table(rt, version, &[&value], rows.clock.now(), rv, rows.include);
                out.put_slice(
                    &serde_json::to_vec(&one).expect("a serde_json::Value always serialises"),
                );
            }
            (None, None) => out.put_slice(object),
            (None, Some(api_version)) => {
                let mut value: Value = serde_json::from_slice(object).unwrap_or(Value::Null);
                value["apiVersion"] = json!(api_version);
                out.put_slice(
                    &serde_json::to_vec(&value).expect("a serde_json::Value always serialises"),
                );
            }
        }
        out.put_slice(b"}\n");
    }

    fn bookmark(&self, out: &mut BytesMut, rv: u64, initial_end: bool) {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let line = json!({"type": "BOOKMARK", "object": {"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata}});
        out.put_slice(&serde_json::to_vec(&line).expect("a serde_json::Value always serialises"));
        out.put_slice(b"\n");
    }

    fn error(&self, out: &mut BytesMut, err: &ApiError) {
        let line = json!({"type": "ERROR", "object": err.to_status()});
        out.put_slice(&serde_json::to_vec(&line).expect("a serde_json::Value always serialises"));
        out.put_slice(b"\n");
    }
}

fn expired(rv: u64, floor: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {rv} ({floor})"))
}

impl Watch {
    /// Streams events into `tx` until the client leaves, the timeout passes, or `stop` changes.
    pub async fn run(
        self,
        store: &Store,
        tx: mpsc::Sender<Bytes>,
        mut stop: watch::Receiver<u64>,
        bookmark_every: Duration,
    ) -> WatchEnd {
        let ts = self.target.ts.clone();
        let rt = self.target.rt.clone();
        let api_version = rt.api_version(&self.target.version);
        let encoder = Encoder {
            rewrite: (self.target.version != rt.storage_version()).then(|| api_version.clone()),
            kind: rt.kind.clone(),
            api_version,
            table: self
                .params
                .table
                .clone()
                .map(|rows| (rows, rt.clone(), self.target.version.clone())),
        };
        let mut changes = ts.subscribe();
        changes.borrow_and_update();
        stop.borrow_and_update();
        let deadline = tokio::time::sleep(self.params.timeout.unwrap_or(Duration::from_secs(1800)));
        tokio::pin!(deadline);
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + bookmark_every, bookmark_every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut bookmark_due = false;
        let mut out = BytesMut::new();
        let mut pos = match self.start {
            Start::After(rv) => rv,
            Start::Snapshot => {
                let state = read(&ts.state);
                for obj in state.range(self.filter.namespace.as_deref(), None) {
                    if self.filter.matches(&obj.attrs, &obj.bytes) {
                        encoder.event(&mut out, "ADDED", &obj.bytes);
                    }
                }
                let rv = store.current_rv();
                drop(state);
                if self.params.send_initial_events && self.params.bookmarks {
                    encoder.bookmark(&mut out, rv, true);
                }
                rv
            }
        };
        loop {
            let mut bookmark_rv = None;
            let mut too_old = None;
            let more;
            {
                let state = read(&ts.state);
                if pos < state.floor {
                    too_old = Some(expired(pos, state.floor));
                }
                let start = if too_old.is_some() {
                    state.history.len()
                } else {
                    state.history.partition_point(|r| r.rv <= pos)
                };
                let records = state.history.range(start..);
                (pos, more) = encode_records(&encoder, &self.filter, records, pos, &mut out);
                if bookmark_due && !more && self.params.bookmarks {
                    bookmark_rv = Some(store.current_rv());
                }
            }
            bookmark_due &= more;
            if let Some(err) = too_old {
                encoder.error(&mut out, &err);
                let _gone = tx.send(out.freeze()).await;
                return WatchEnd::Expired;
            }
            if let Some(rv) = bookmark_rv {
                pos = pos.max(rv);
                encoder.bookmark(&mut out, pos, false);
            }
            if !out.is_empty() && tx.send(out.split().freeze()).await.is_err() {
                return WatchEnd::ClientGone;
            }
            if more {
                continue;
            }
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return WatchEnd::ResourceGone;
                    }
                    // Let writers that are already running land, so a burst goes out as one chunk.
                    tokio::task::yield_now().await;
                }
                _ = ticker.tick() => bookmark_due = true,
                () = &mut deadline => return WatchEnd::Timeout,
                _ = stop.changed() => return WatchEnd::Dropped,
                () = tx.closed() => return WatchEnd::ClientGone,
            }
        }
    }
}

/// A change seen by an in-process controller.
#[derive(Debug, Clone)]
pub struct Change {
    /// Attributes after the change.
    pub attrs: Arc<Attrs>,
    /// Attributes before it, for updates.
    pub prev: Option<Arc<Attrs>>,
    /// What happened: a deletion's `attrs` are the object's last.
    pub kind: EventType,
}

/// An in-process follower of one type's history, for the built-in controllers.
pub struct Cursor {
    ts: Arc<TypeStore>,
    changes: watch::Receiver<u64>,
    pos: u64,
}

impl Cursor {
    /// Starts following `ts`, returning the cursor and the current objects.
    pub fn start(store: &Store, ts: Arc<TypeStore>) -> (Self, Vec<Arc<StoredObject>>) {
        let mut changes = ts.subscribe();
        changes.borrow_and_update();
        let state = read(&ts.state);
        let objects: Vec<Arc<StoredObject>> = state.objects.values().cloned().collect();
        let pos = store.current_rv();
        drop(state);
        (Self { ts, changes, pos }, objects)
    }

    /// Waits for changes; after falling behind the history, reports every live object.
    /// `None` when the resource is no longer served.
    pub async fn next(&mut self) -> Option<Vec<Change>> {
        loop {
            {
                let state = read(&self.ts.state);
                if self.pos < state.floor {
                    self.pos = state.history.back().map_or(state.floor, |r| r.rv);
                    return Some(
                        state
                            .objects
                            .values()
                            .map(|o| Change {
                                attrs: o.attrs.clone(),
                                prev: None,
                                kind: EventType::Added,
                            })
                            .collect(),
                    );
                }
                let start = state.history.partition_point(|r| r.rv <= self.pos);
                let batch: Vec<Change> = state
                    .history
                    .range(start..)
                    .map(|r| Change {
                        attrs: r.attrs.clone(),
                        prev: r.prev.clone(),
                        kind: r.kind,
                    })
                    .collect();
                if let Some(last) = state.history.back() {
                    self.pos = self.pos.max(last.rv);
                }
                if !batch.is_empty() {
                    return Some(batch);
                }
            }
            self.changes.changed().await.ok()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added(rv: u64, bytes: usize) -> Record {
        Record {
            rv,
            kind: EventType::Added,
            object: Bytes::from(format!("{{\"pad\":\"{}\"}}", "x".repeat(bytes))),
            attrs: Arc::new(Attrs::default()),
            prev: None,
            at: std::time::SystemTime::now(),
        }
    }

    #[test]
    fn a_watcher_behind_gets_the_history_a_bounded_chunk_at_a_time_and_all_of_it() {
        let encoder = Encoder {
            rewrite: None,
            kind: "Pod".to_owned(),
            api_version: "v1".to_owned(),
            table: None,
        };
        let filter = Filter {
            namespace: None,
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
        };
        let history: Vec<Record> = (1..=100).map(|rv| added(rv, 10 * 1024)).collect();
        let (mut pos, mut sent, mut chunks) = (0, 0, 0);
        loop {
            let mut out = BytesMut::new();
            let left = history.iter().filter(|r| r.rv > pos);
            let (reached, more) = encode_records(&encoder, &filter, left, pos, &mut out);
            assert!(
                out.len() < WATCH_CHUNK_BYTES + 11 * 1024,
                "a chunk of {} bytes",
                out.len()
            );
            sent += out.iter().filter(|b| **b == b'\n').count();
            chunks += 1;
            pos = reached;
            if !more {
                break;
            }
        }
        assert_eq!((pos, sent), (100, 100), "every event, once");
        assert!(chunks >= 4, "{chunks} chunks for a megabyte");
    }
}
