//! The Batcher: gathers pending-pod triggers into one provisioning batch. A window opens on
//! the first trigger and closes once `BATCH_IDLE_DURATION` passes without a new distinct pod,
//! or at the latest `BATCH_MAX_DURATION` after it opened, as upstream's batcher does; repeated
//! triggers for a pod already in the window do not extend it. A closed window is handed to the
//! Provisioner with a waiting send, one at a time: while the Provisioner works on a batch,
//! windows that close meanwhile coalesce into one pending batch (their pods merged), handed
//! over when the round ends. A busy Provisioner therefore has at most one batch waiting for
//! it, however long its round, and nothing is lost; the Batcher keeps collecting the next
//! window meanwhile.

pub mod triggers;
mod window;

use std::collections::HashSet;
use std::time::Duration;

use actix::prelude::*;
use tokio::time::Instant;

use crate::mailbox::{MailboxDepth, Outbox};
use crate::metrics::{BATCH_SIZE, BATCH_WINDOW_DURATION, SCHEDULER_QUEUE_DEPTH};
pub use window::Window;

/// One trigger per pending-pod event reaches the Batcher; a scale-up of a thousand replicas
/// arrives as a burst of that many, each handled in microseconds, so this absorbs a burst
/// without drops. A drop is still harmless: the Provisioner solves for every pending pod in
/// cluster state, not for the pods named in the batch, and [`triggers::retrigger`] triggers
/// pending pods again periodically (waiting for room, never dropping).
pub const BATCHER_MAILBOX_CAPACITY: usize = 1024;

/// The `controller` label of the queue depth: upstream's provisioner reports it.
const QUEUE_CONTROLLER: &str = "provisioner";

/// A provisionable pod was seen (sent with `try_deliver`, see [`BATCHER_MAILBOX_CAPACITY`]).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct Trigger {
    /// The pod's UID: the window extends only for pods it has not seen.
    pub pod_uid: String,
}

/// A closed batching window.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct BatchReady {
    /// Distinct pods that triggered the window, in arrival order.
    pub pods: Vec<String>,
    /// How long the window was open.
    pub window: Duration,
    /// When the window closed (the start of the round's latency).
    pub closed: Instant,
}

/// The batching window limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    pub idle: Duration,
    pub max: Duration,
}

/// The actor.
pub struct Batcher {
    limits: BatchLimits,
    open: Option<OpenWindow>,
    timer: Option<SpawnHandle>,
    out: Outbox<BatchReady>,
    depth: MailboxDepth,
    /// A batch is with the Provisioner (queued or in its round).
    handing_over: bool,
    /// Windows closed while one was with the Provisioner, merged.
    pending: Option<BatchReady>,
}

struct OpenWindow {
    window: Window,
    pods: Vec<String>,
    seen: HashSet<String>,
}

impl Batcher {
    pub fn new(limits: BatchLimits, out: Outbox<BatchReady>, depth: MailboxDepth) -> Self {
        Self {
            limits,
            open: None,
            timer: None,
            out,
            depth,
            handing_over: false,
            pending: None,
        }
    }

    fn arm(&mut self, ctx: &mut Context<Self>) {
        let Some(open) = &self.open else { return };
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        let wait = open
            .window
            .closes_at(self.limits)
            .saturating_duration_since(Instant::now());
        self.timer = Some(ctx.run_later(wait, Self::on_timer));
    }

    fn on_timer(&mut self, ctx: &mut Context<Self>) {
        self.timer = None;
        let Some(open) = &self.open else { return };
        let now = Instant::now();
        if now < open.window.closes_at(self.limits) {
            self.arm(ctx);
            return;
        }
        let Some(open) = self.open.take() else { return };
        let batch = BatchReady {
            window: now.saturating_duration_since(open.window.opened()),
            pods: open.pods,
            closed: now,
        };
        metrics::gauge!(SCHEDULER_QUEUE_DEPTH, "controller" => QUEUE_CONTROLLER).set(0.0);
        metrics::histogram!(BATCH_WINDOW_DURATION).record(batch.window.as_secs_f64());
        #[allow(clippy::cast_precision_loss, reason = "batch sizes are far below 2^52")]
        metrics::histogram!(BATCH_SIZE).record(batch.pods.len() as f64);
        tracing::debug!(
            pods = batch.pods.len(),
            window_ms = batch.window.as_millis() as u64,
            "batch closed"
        );
        match self.pending.take() {
            Some(earlier) => self.pending = Some(merge(earlier, batch)),
            None => self.pending = Some(batch),
        }
        self.hand_over(ctx);
    }

    /// Hands the pending batch to the Provisioner unless one is with it already; the next
    /// goes when that one's round ends.
    fn hand_over(&mut self, ctx: &mut Context<Self>) {
        if self.handing_over {
            return;
        }
        let Some(batch) = self.pending.take() else {
            return;
        };
        self.handing_over = true;
        let out = self.out.clone();
        // Spawned rather than awaited in place: the Batcher keeps taking triggers for the
        // next window while the Provisioner is busy.
        ctx.spawn(
            async move {
                if let Err(err) = out.deliver(batch).await {
                    tracing::error!(error = %err, "handing a batch to the provisioner");
                }
            }
            .into_actor(self)
            .map(|(), act, ctx| {
                act.handing_over = false;
                act.hand_over(ctx);
            }),
        );
    }
}

/// One batch of two closed windows: the pods of both (first seen first), timed from the
/// earlier close, so the round's latency counts the wait of the oldest pod.
fn merge(earlier: BatchReady, later: BatchReady) -> BatchReady {
    let mut pods = earlier.pods;
    let mut seen: HashSet<String> = pods.iter().cloned().collect();
    pods.extend(later.pods.into_iter().filter(|p| seen.insert(p.clone())));
    BatchReady {
        pods,
        window: earlier.window.max(later.window),
        closed: earlier.closed.min(later.closed),
    }
}

impl Actor for Batcher {
    type Context = Context<Self>;
}

impl Handler<Trigger> for Batcher {
    type Result = ();

    fn handle(&mut self, msg: Trigger, ctx: &mut Context<Self>) {
        self.depth.taken();
        let now = Instant::now();
        let open = self.open.get_or_insert_with(|| OpenWindow {
            window: Window::open(now),
            pods: Vec::new(),
            seen: HashSet::new(),
        });
        if !open.seen.insert(msg.pod_uid.clone()) {
            return;
        }
        open.pods.push(msg.pod_uid);
        open.window.extend(now);
        #[allow(
            clippy::cast_precision_loss,
            reason = "window sizes are far below 2^52"
        )]
        metrics::gauge!(SCHEDULER_QUEUE_DEPTH, "controller" => QUEUE_CONTROLLER)
            .set(open.pods.len() as f64);
        self.arm(ctx);
    }
}
