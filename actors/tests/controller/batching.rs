//! Pending pods become batches: the window arithmetic under paused time, and unschedulable
//! pods in the emulator producing exactly one provisioning round.

use std::time::Duration;

use actix::prelude::*;
use kerf_actors::batcher::{BATCHER_MAILBOX_CAPACITY, BatchLimits, BatchReady, Batcher, Trigger};
use kerf_actors::mailbox::{MailboxDepth, Outbox};
use kerf_actors::provisioner::PROVISIONER_MAILBOX_CAPACITY;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::support::{
    PATIENCE, create_pod, create_unschedulable_pod, mark_unschedulable, run, settings,
    start_cluster, start_daemon,
};

/// Stands in for the Provisioner: forwards every batch with the (paused) time it arrived,
/// and answers after `busy` (a round's length).
struct Collector {
    batches: mpsc::UnboundedSender<(Instant, BatchReady)>,
    depth: MailboxDepth,
    busy: Duration,
}

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<BatchReady> for Collector {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, batch: BatchReady, _: &mut Context<Self>) -> Self::Result {
        self.depth.taken();
        let _ = self.batches.send((Instant::now(), batch));
        Box::pin(tokio::time::sleep(self.busy))
    }
}

/// Runs `test` in an actix system on a paused current-thread runtime.
fn paused<F, Fut>(test: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime builds")
    });
    system.block_on(test());
}

/// A Batcher (1 s idle, 10 s max) on the test's paused clock, handing batches to a
/// Collector busy `busy` per batch behind a one-batch mailbox, as the Provisioner's.
fn batcher(
    busy: Duration,
) -> (
    Outbox<Trigger>,
    mpsc::UnboundedReceiver<(Instant, BatchReady)>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let collected = MailboxDepth::new("collector-test", PROVISIONER_MAILBOX_CAPACITY);
    let collector = Collector {
        batches: tx,
        depth: collected.clone(),
        busy,
    }
    .start();
    let depth = MailboxDepth::new("batcher-test", BATCHER_MAILBOX_CAPACITY);
    let addr = Batcher::new(
        BatchLimits {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        },
        Outbox::to_addr(&collector, collected),
        depth.clone(),
    )
    .start();
    (Outbox::to_addr(&addr, depth), rx)
}

fn trigger(out: &Outbox<Trigger>, uid: &str) {
    out.try_deliver(Trigger {
        pod_uid: uid.into(),
    })
    .expect("mailbox has room");
}

#[test]
fn window_closes_after_idle_and_repeats_do_not_extend_it() {
    paused(|| async {
        let (out, mut batches) = batcher(Duration::ZERO);
        let t0 = Instant::now();
        trigger(&out, "a");
        tokio::time::sleep(Duration::from_millis(600)).await;
        trigger(&out, "b");
        tokio::time::sleep(Duration::from_millis(600)).await;
        // Already in the window: must not push the close past b + 1 s.
        trigger(&out, "a");
        let (at, batch) = batches.recv().await.expect("a batch");
        assert_eq!(at - t0, Duration::from_millis(1600));
        assert_eq!(batch.pods, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(batch.window, Duration::from_millis(1600));

        // The next trigger opens a fresh window.
        let t1 = Instant::now();
        trigger(&out, "c");
        let (at, batch) = batches.recv().await.expect("a second batch");
        assert_eq!(at - t1, Duration::from_secs(1));
        assert_eq!(batch.pods, vec!["c".to_string()]);
    });
}

#[test]
fn window_never_outlasts_max_duration() {
    paused(|| async {
        let (out, mut batches) = batcher(Duration::ZERO);
        let t0 = Instant::now();
        let feeder = out.clone();
        let feed = actix::spawn(async move {
            for i in 0..30 {
                trigger(&feeder, &format!("pod-{i}"));
                tokio::time::sleep(Duration::from_millis(900)).await;
            }
        });
        let (at, batch) = batches.recv().await.expect("a batch");
        assert_eq!(at - t0, Duration::from_secs(10));
        // Pods at 0, 0.9, …, 9.9 s: twelve of them.
        assert_eq!(batch.pods.len(), 12);
        feed.abort();
    });
}

#[test]
fn windows_closing_during_a_round_coalesce_into_one_pending_batch() {
    paused(|| async {
        let (out, mut batches) = batcher(Duration::from_secs(30));
        let t0 = Instant::now();
        trigger(&out, "a");
        let (_, first) = batches.recv().await.expect("a first batch");
        assert_eq!(first.pods, vec!["a".to_string()]);
        // The round takes 30 s; three windows close meanwhile.
        for (at, pods) in [(2, &["b"][..]), (5, &["c"]), (10, &["d", "b"])] {
            tokio::time::sleep_until(t0 + Duration::from_secs(at)).await;
            for pod in pods {
                trigger(&out, pod);
            }
        }
        let (at, merged) = batches.recv().await.expect("the pending batch");
        assert_eq!(
            at - t0,
            Duration::from_secs(31),
            "handed over when the round ends"
        );
        assert_eq!(merged.pods, vec!["b", "c", "d"]);
        assert_eq!(
            merged.closed - t0,
            Duration::from_secs(3),
            "timed from the first close"
        );
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(
            batches.try_recv().is_err(),
            "one pending batch, not a queue"
        );
    });
}

#[test]
fn unschedulable_pods_produce_one_round() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let daemon = start_daemon(
            &h,
            settings(&[
                "--disable-leader-election",
                "true",
                "--batch-idle-duration",
                "500ms",
                "--batch-max-duration",
                "5s",
            ]),
            "a",
        )
        .await;
        tokio::time::timeout(PATIENCE, daemon.state.wait_synced())
            .await
            .expect("cluster state syncs");
        for name in ["web-1", "web-2", "web-3"] {
            create_unschedulable_pod(&cluster, name);
        }
        // Neither a daemonset pod nor a pod the scheduler has not judged is provisionable.
        create_pod(
            &cluster,
            "ds-1",
            json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": "ds", "uid": "ds-uid"}]}),
        );
        mark_unschedulable(&cluster, "ds-1");
        create_pod(&cluster, "fresh", json!({}));

        let mut rounds = daemon.rounds.clone();
        let round = tokio::time::timeout(
            PATIENCE,
            rounds.wait_for(|r| r.as_ref().is_some_and(|r| r.pending.len() == 3)),
        )
        .await
        .expect("a round in time")
        .expect("provisioner alive")
        .clone()
        .expect("a round");
        assert_eq!(
            round.number, 1,
            "the three pods came in one batch: {round:?}"
        );
        assert_eq!(round.triggered, 3);
        let pending: Vec<String> = round.pending.iter().map(ToString::to_string).collect();
        assert_eq!(pending, ["default/web-1", "default/web-2", "default/web-3"]);
        assert!(round.window >= Duration::from_millis(500));
        daemon.stop().await;
        h.stop().await;
    });
}
