//! The poller and handlers on an in-memory queue with SQS's redelivery: a flood never
//! holds more than the mailbox's capacity and every message ends deleted; a panicking
//! poller or handler is restarted and counted and its messages come back.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use kerf::cloudprovider::BoxFuture;
use kerf::interruption::QueueError;
use kerf_loadtest::ec2::MemoryQueue;

use super::*;
use crate::events::EventRecorder;
use crate::state::ClusterState;
use crate::supervisor::Supervision;
use crate::testing::restarts;

/// A [`MemoryQueue`] whose deletes take `delete_delay` (a slow API server behind the
/// handlers), whose first receive may panic, and whose delete of one body panics once.
struct Queue {
    inner: MemoryQueue,
    delete_delay: Duration,
    panic_on_first_receive: AtomicBool,
    panic_on_delete_of: Mutex<Option<String>>,
}

impl Queue {
    fn new(visibility: Duration, delete_delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryQueue::with_timing("test-queue", visibility, Duration::from_millis(50)),
            delete_delay,
            panic_on_first_receive: AtomicBool::new(false),
            panic_on_delete_of: Mutex::new(None),
        })
    }
}

impl InterruptionQueue for Queue {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, QueueError>> {
        assert!(
            !self.panic_on_first_receive.swap(false, Ordering::SeqCst),
            "a bug in the poller"
        );
        self.inner.receive()
    }

    fn delete<'a>(&'a self, message: &'a QueueMessage) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(async move {
            tokio::time::sleep(self.delete_delay).await;
            let panics = {
                let mut target = self.panic_on_delete_of.lock().unwrap();
                let hit = target.as_deref() == Some(message.body.as_str());
                if hit {
                    *target = None;
                }
                hit
            };
            assert!(!panics, "a bug in the handler");
            self.inner.delete(message).await
        })
    }
}

/// The real handler; the messages are not EventBridge JSON, so it only parses, counts and
/// deletes them (the API client is never called).
fn handler(queue: Arc<Queue>) -> Arc<Handler> {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a url"));
    Arc::new(Handler::new(HandlerDeps {
        queue,
        state: ClusterState::new().0,
        client: kube::Client::try_from(config).expect("a client"),
        events: EventRecorder::disabled(),
        offerings: None,
    }))
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_never_holds_more_than_the_capacity_and_every_message_is_deleted() {
    const FLOOD: u64 = 300;
    let queue = Queue::new(Duration::from_secs(60), Duration::from_millis(20));
    for i in 0..FLOOD {
        queue.inner.send(format!("flood message {i}"));
    }
    let depth = MailboxDepth::new("interruption-flood-test", INTERRUPTION_MAILBOX_CAPACITY);
    let (leader_tx, leader) = watch::channel(true);
    let (shutdown_tx, shutdown) = watch::channel(false);
    let tasks = spawn_with(
        queue.clone(),
        handler(queue.clone()),
        depth.clone(),
        leader,
        shutdown,
    );
    let deepest = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (depth, deepest) = (depth.clone(), Arc::clone(&deepest));
        tokio::spawn(async move {
            loop {
                deepest.fetch_max(depth.current(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    until("every message deleted", || queue.inner.deleted() == FLOOD).await;
    sampler.abort();
    let deepest = deepest.load(Ordering::SeqCst);
    let capacity = i64::try_from(INTERRUPTION_MAILBOX_CAPACITY).unwrap();
    assert!(deepest <= capacity, "mailbox held {deepest} > {capacity}");
    assert_eq!(deepest, capacity, "the flood filled the mailbox");
    assert!(queue.inner.is_empty(), "nothing left in the queue");
    assert_eq!(queue.inner.sent(), FLOOD);
    shutdown_tx.send(true).unwrap();
    drop(leader_tx);
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops on shutdown")
            .expect("did not panic");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_poller_or_handler_is_restarted_counted_and_its_message_redelivered() {
    crate::metrics::handle();
    let (pollers, handlers) = (restarts(POLLER), restarts(HANDLER));
    let queue = Queue::new(Duration::from_millis(300), Duration::ZERO);
    queue.panic_on_first_receive.store(true, Ordering::SeqCst);
    *queue.panic_on_delete_of.lock().unwrap() = Some("boom".to_owned());
    queue.inner.send("boom".to_owned());
    queue.inner.send("calm".to_owned());
    let (_leader_tx, leader) = watch::channel(true);
    let (shutdown_tx, shutdown) = watch::channel(false);
    let depth = MailboxDepth::new("interruption-restart-test", INTERRUPTION_MAILBOX_CAPACITY);
    let scope = Supervision::with_backoff(Duration::from_millis(10));
    let tasks = scope.sync_scope(|| {
        spawn_with(
            queue.clone(),
            handler(queue.clone()),
            depth,
            leader,
            shutdown,
        )
    });

    until("both messages deleted", || queue.inner.deleted() == 2).await;
    assert!(queue.inner.is_empty());
    // Other tests in this binary may count restarts of their own; these two are at least
    // this test's.
    assert!(restarts(POLLER) > pollers, "the poller's panic is counted");
    assert!(
        restarts(HANDLER) > handlers,
        "the handler's panic is counted"
    );
    // Both held against the replica's restart budget, the handler's once for its one panic.
    assert_eq!(scope.recent_restarts(POLLER), 1);
    assert_eq!(scope.recent_restarts(HANDLER), 1);
    shutdown_tx.send(true).unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops on shutdown")
            .expect("did not panic");
    }
}

/// The mark a spot interruption leaves lasts upstream's three minutes, on paused time: the
/// offering is unavailable a second before, and available again on the sweep after.
#[test]
fn an_interrupted_spot_offering_is_unavailable_for_three_minutes() {
    use crate::offering_cache::testing::{paused, until_generation};
    use crate::offering_cache::{
        EXPIRY_TICK, OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache, UNAVAILABLE_OFFERINGS_TTL,
    };
    use crate::state::ObjectKey;
    use k8s_openapi::jiff::Timestamp;
    use kerf::api::NodeClaim;
    use kerf::cloudprovider::UnavailableOfferings;
    use kerf::labels;

    paused(|| async {
        let cache = OfferingCache::start(
            UNAVAILABLE_OFFERINGS_TTL,
            MailboxDepth::new("interruption-ttl-test", OFFERING_CACHE_MAILBOX_CAPACITY),
        );
        let (state, mut writers) = ClusterState::new();
        let instance = "i-0123456789abcdef0";
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "spot-1", "uid": "uid-1", "labels": {
                labels::CAPACITY_TYPE: "spot",
                labels::INSTANCE_TYPE: "m5.large",
                labels::ZONE: "us-east-1a",
            }},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            "status": {"providerID": format!("aws:///us-east-1a/{instance}")},
        }))
        .expect("a nodeclaim");
        writers
            .nodeclaims
            .apply(ObjectKey::new(None, "spot-1"), claim);
        let queue = Queue::new(Duration::from_secs(30), Duration::ZERO);
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a url"));
        let handler = Handler::new(HandlerDeps {
            queue,
            state,
            client: kube::Client::try_from(config).expect("a client"),
            events: EventRecorder::disabled(),
            offerings: Some(cache.clone()),
        });
        let body =
            kerf::interruption::spot_interruption("m1", "us-east-1", Timestamp::now(), instance);
        // No API server answers, so the delete fails and the message stays for redelivery;
        // the offering is marked before the delete.
        let handled = handler
            .process(&QueueMessage {
                id: "m1".into(),
                receipt: "r1".into(),
                body,
            })
            .await;
        assert_eq!(handled, Handled::Failed);
        until_generation(&cache, 1).await;
        let unavailable = || cache.is_unavailable("m5.large", "us-east-1a", "spot", &[]);
        assert!(unavailable(), "marked at once");
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", "on-demand", &[]));
        assert_eq!(UNAVAILABLE_OFFERINGS_TTL, Duration::from_secs(180));

        tokio::time::sleep(UNAVAILABLE_OFFERINGS_TTL - Duration::from_secs(1)).await;
        assert!(
            unavailable(),
            "still unavailable just short of three minutes"
        );
        tokio::time::sleep(EXPIRY_TICK + Duration::from_secs(1)).await;
        assert!(!unavailable(), "available again after three minutes");
    });
}
