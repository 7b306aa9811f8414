//! Kubernetes Events, written as upstream Karpenter writes them: core/v1 Events from the
//! `karpenter` component, with upstream's reasons and messages ([`upstream`]). Actors
//! publish through an [`EventRecorder`], a cheap handle on a bounded queue that never
//! waits: events are best-effort, so a full queue drops the event (counted as a mailbox
//! drop) rather than slowing a solve or a launch. One task owns the queue and the API writes.
//! It applies upstream Karpenter's de-duplication (an event with the same reason and dedupe
//! values within its timeout is dropped), the shared rate limit on pod nominations, and
//! client-go's correlation: an event identical to one written within
//! [`CORRELATION_WINDOW`] raises that Event's `count` and `lastTimestamp` instead of adding
//! an object.

mod cache;
pub mod disruption;
pub mod upstream;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::TokenBucket;
use crate::mailbox::MailboxDepth;
use cache::{Correlator, Deduper, Series};

/// One solve can publish an event per pending pod (a scale-up of thousands of replicas)
/// plus a nomination per placed pod. Most are de-duplicated away in microseconds, but the
/// API writes behind the rest take milliseconds each, so the queue absorbs a large round's
/// burst; beyond it events are dropped and counted, as client-go's broadcaster drops when
/// its (1000-event) queue is full.
pub const EVENTS_MAILBOX_CAPACITY: usize = 4096;

/// Identical events within this time of the last one count on one Event object: client-go
/// correlates over ten minutes.
pub const CORRELATION_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The source component of every event: upstream's, so dashboards, alerts and
/// `kubectl get events --field-selector source=karpenter` keep working after the swap.
pub const COMPONENT: &str = "karpenter";

/// Upstream limits pod nominations across all pods to 5 per second, bursts of 10: a large
/// scale-up would otherwise write one event per pod at once.
const NOMINATION_QPS: u32 = 5;
const NOMINATION_BURST: u32 = 10;

/// How long a stopping recorder keeps writing the events already queued.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);

/// `Normal` or `Warning`, as core/v1 Events type them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Upstream Karpenter's de-duplication of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedupe {
    /// With the reason, what makes two events the same (usually the object's UID).
    pub values: Vec<String>,
    pub timeout: Duration,
}

/// A rate limit shared by a class of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttle {
    /// Upstream's pod nomination limiter.
    PodNomination,
}

/// One event to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The object the event is about.
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
    pub dedupe: Option<Dedupe>,
    pub throttle: Option<Throttle>,
}

impl Event {
    /// Upstream's de-duplication key: the lower-cased reason and the dedupe values.
    pub fn dedupe_key(&self) -> Option<String> {
        let dedupe = self.dedupe.as_ref()?;
        Some(format!(
            "{}-{}",
            self.reason.to_lowercase(),
            dedupe.values.join("-")
        ))
    }
}

/// Publishes events without waiting; cheap to clone.
#[derive(Clone, Debug)]
pub struct EventRecorder {
    queue: mpsc::Sender<Event>,
    depth: MailboxDepth,
}

impl EventRecorder {
    /// Queues `event`; a full queue drops it (counted), a stopped recorder ignores it.
    pub fn publish(&self, event: Event) {
        if self.queue.is_closed() {
            return;
        }
        if self.depth.try_admit().is_err() {
            tracing::debug!(reason = event.reason, "event queue full; event dropped");
            return;
        }
        // The channel holds as many as the permits: with one, there is room.
        if self.queue.try_send(event).is_err() {
            self.depth.taken();
        }
    }

    /// A recorder that writes nothing, for actors run without an API server to write to.
    pub fn disabled() -> Self {
        let (queue, _) = mpsc::channel(1);
        Self {
            queue,
            depth: MailboxDepth::new("events", 1),
        }
    }
}

/// Starts the task writing events as `identity` (the reporting instance) until `shutdown`
/// turns true; it then writes what is already queued, for at most a few seconds.
pub fn spawn(
    client: Client,
    identity: String,
    shutdown: watch::Receiver<bool>,
) -> (EventRecorder, JoinHandle<()>) {
    let (queue, rx) = mpsc::channel(EVENTS_MAILBOX_CAPACITY);
    let depth = MailboxDepth::new("events", EVENTS_MAILBOX_CAPACITY);
    let writer = Writer {
        client,
        identity,
        dedupe: Deduper::default(),
        series: Correlator::new(CORRELATION_WINDOW),
        nominations: TokenBucket::new(NOMINATION_QPS, NOMINATION_BURST, Instant::now()),
    };
    // The writer's memory (dedupe, series, rate) and the queue outlive a panicking writer.
    let carried = Arc::new(tokio::sync::Mutex::new((writer, rx)));
    let mailbox = depth.clone();
    let task = crate::supervisor::task("events", move || {
        run(Arc::clone(&carried), mailbox.clone(), shutdown.clone())
    });
    (EventRecorder { queue, depth }, task)
}

async fn run(
    carried: Arc<tokio::sync::Mutex<(Writer, mpsc::Receiver<Event>)>>,
    depth: MailboxDepth,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut carried = carried.lock().await;
    let (writer, queue) = &mut *carried;
    loop {
        let event = tokio::select! {
            event = queue.recv() => event,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let Some(event) = event else { return };
        depth.taken();
        writer.record(event).await;
    }
    let flush = async {
        while let Ok(event) = queue.try_recv() {
            depth.taken();
            writer.record(event).await;
        }
    };
    if tokio::time::timeout(SHUTDOWN_FLUSH, flush).await.is_err() {
        tracing::warn!("stopped before every queued event was written");
    }
}

/// What makes two events identical for correlation (client-go's event key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    type_: EventType,
    reason: &'static str,
    message: String,
}

impl SeriesKey {
    fn of(event: &Event) -> Self {
        let r = &event.regarding;
        Self {
            regarding: (
                r.kind.clone(),
                r.namespace.clone(),
                r.name.clone(),
                r.uid.clone(),
            ),
            type_: event.type_,
            reason: event.reason,
            message: event.message.clone(),
        }
    }
}

/// Why an event could not be written (logged: events are best-effort).
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("creating event {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("counting event {namespace}/{name}: {source}")]
    Count {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

struct Writer {
    client: Client,
    identity: String,
    dedupe: Deduper,
    series: Correlator<SeriesKey>,
    nominations: TokenBucket,
}

impl Writer {
    async fn record(&mut self, event: Event) {
        let now = Instant::now();
        if !self.admit(&event, now) {
            return;
        }
        let key = SeriesKey::of(&event);
        let written = match self.series.repeat(&key, now) {
            Some(series) => match self.count(&series).await {
                Err(WriteError::Count { source, .. }) if is_not_found(&source) => {
                    // The Event expired on the server (its TTL); start it again.
                    self.create(&event, series.count).await
                }
                counted => counted.map(|()| series),
            },
            None => self.create(&event, 1).await,
        };
        match written {
            Ok(series) => self.series.written(key, series, now),
            Err(error) => {
                self.series.forget(&key);
                if crate::leader::is_fenced(&error) {
                    // Counted by the fence; a replica that stopped leading has nothing to say.
                    tracing::debug!(%error, reason = event.reason, "writing event");
                } else {
                    tracing::warn!(%error, reason = event.reason, "writing event");
                }
            }
        }
    }

    /// Upstream's de-duplication, then its rate limit, in upstream's order.
    fn admit(&mut self, event: &Event, now: Instant) -> bool {
        if let (Some(key), Some(dedupe)) = (event.dedupe_key(), &event.dedupe)
            && !self.dedupe.admit(&key, dedupe.timeout, now)
        {
            return false;
        }
        match event.throttle {
            Some(Throttle::PodNomination) => self.nominations.try_take(now),
            None => true,
        }
    }

    async fn create(&self, event: &Event, count: i32) -> Result<Series, WriteError> {
        let namespace = event_namespace(&event.regarding);
        let name = event_name(&event.regarding);
        let object = self.core_event(event, &namespace, &name, count);
        Api::<CoreEvent>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &object)
            .await
            .map_err(|source| WriteError::Create {
                namespace: namespace.clone(),
                name: name.clone(),
                source,
            })?;
        Ok(Series {
            namespace,
            name,
            count,
        })
    }

    async fn count(&self, series: &Series) -> Result<(), WriteError> {
        let patch = json!({"count": series.count, "lastTimestamp": Time(Timestamp::now())});
        Api::<CoreEvent>::namespaced(self.client.clone(), &series.namespace)
            .patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| WriteError::Count {
                namespace: series.namespace.clone(),
                name: series.name.clone(),
                source,
            })?;
        Ok(())
    }

    fn core_event(&self, event: &Event, namespace: &str, name: &str, count: i32) -> CoreEvent {
        let now = Time(Timestamp::now());
        CoreEvent {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            involved_object: event.regarding.clone(),
            type_: Some(event.type_.as_str().to_owned()),
            reason: Some(event.reason.to_owned()),
            message: Some(event.message.clone()),
            source: Some(EventSource {
                component: Some(COMPONENT.to_owned()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.to_owned()),
            reporting_instance: Some(self.identity.clone()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(count),
            ..CoreEvent::default()
        }
    }
}

/// Events live in their object's namespace; those about cluster-scoped objects (NodeClaims,
/// Nodes) in `default`, as client-go puts them.
fn event_namespace(regarding: &ObjectReference) -> String {
    regarding
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// client-go's naming: the object's name and the time in hex nanoseconds.
fn event_name(regarding: &ObjectReference) -> String {
    let nanos = Timestamp::now().as_nanosecond();
    format!(
        "{}.{nanos:x}",
        regarding.name.as_deref().unwrap_or("unnamed")
    )
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(message: &str) -> Event {
        upstream::pod_failed_to_schedule(
            &kerf::scheduling::PodRef::new("apps", "web-1", "uid-1"),
            message,
        )
    }

    #[test]
    fn events_live_with_their_object_or_in_default() {
        assert_eq!(event_namespace(&event("x").regarding), "apps");
        assert_eq!(event_namespace(&ObjectReference::default()), "default");
        let name = event_name(&event("x").regarding);
        let (object, suffix) = name.split_once('.').expect("name.hex");
        assert_eq!(object, "web-1");
        assert!(u128::from_str_radix(suffix, 16).is_ok(), "{name}");
    }

    #[test]
    fn only_identical_events_share_a_series() {
        assert_eq!(SeriesKey::of(&event("a")), SeriesKey::of(&event("a")));
        assert_ne!(SeriesKey::of(&event("a")), SeriesKey::of(&event("b")));
    }

    #[tokio::test]
    async fn a_full_queue_drops_instead_of_waiting() {
        let (queue, mut rx) = mpsc::channel(1);
        let recorder = EventRecorder {
            queue,
            depth: MailboxDepth::new("events-test", 1),
        };
        recorder.publish(event("first"));
        recorder.publish(event("second"));
        assert_eq!(
            rx.recv().await.map(|e| e.message),
            Some(event("first").message)
        );
        assert!(rx.try_recv().is_err(), "the second was dropped");
        EventRecorder::disabled().publish(event("ignored"));
    }
}
