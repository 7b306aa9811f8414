//! The `/metrics` body, streamed: the recorder's metrics, then those computed from cluster
//! state ([`crate::cluster_metrics`]), rendered on a blocking thread into an
//! [`Exposition`] whose chunks go to the response as hyper asks for them. hyper stops
//! asking while its write buffer is full (a slow scraper), the renderer then waits on the
//! bounded queue, so a scrape holds a few chunks of text however large the cluster is,
//! where the whole text grows with every pod and Node. A scraper that takes
//! nothing for [`SCRAPER_STALL`] is given up on, so it cannot hold the thread for good.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::{Body, BodyError, Served};
use crate::cluster_metrics::Exposition;
use crate::supervisor::Supervision;

/// Chunks rendered ahead of what hyper has taken: enough that the renderer rarely waits on a
/// scraper reading at the pace of its network; each is [`crate::cluster_metrics::CHUNK_BYTES`].
pub const CHUNKS_AHEAD: usize = 4;

/// How long the renderer waits for the scraper to take a chunk before it stops: well past
/// any scrape timeout Prometheus is given, so a scraper this slow has given up itself.
pub const SCRAPER_STALL: Duration = Duration::from_secs(60);

/// How a response whose text was not all rendered ends: with an error, so the scraper sees
/// a failed scrape rather than part of the text.
const INCOMPLETE: &str = "the /metrics text was not rendered whole";

/// The streamed `/metrics` body of `served`. A panic while rendering is reported as
/// `name`'s in `supervision`; it, like a scraper given up on, ends the response with an
/// error.
pub fn body(served: Served, name: &'static str, supervision: Supervision) -> Body {
    let (chunks, queued) = mpsc::channel::<Bytes>(CHUNKS_AHEAD);
    let whole = Arc::new(AtomicBool::new(false));
    let rendered_whole = Arc::clone(&whole);
    let runtime = Handle::current();
    tokio::task::spawn_blocking(move || {
        // `chunks` is dropped when this closure ends, after the flag is stored: the body
        // reads the flag only once the queue has closed, so it sees the renderer's answer.
        let render = || render(&served, &runtime, &chunks, SCRAPER_STALL);
        match std::panic::catch_unwind(AssertUnwindSafe(render)) {
            Ok(complete) => rendered_whole.store(complete, Ordering::Release),
            Err(panic) => supervision.report_panic(name, &*panic),
        }
    });
    let frames = futures::stream::unfold(Some(queued), move |queued| {
        let whole = Arc::clone(&whole);
        async move {
            let mut queued = queued?;
            match queued.recv().await {
                Some(chunk) => Some((Ok(Frame::data(chunk)), Some(queued))),
                // The renderer has dropped its end: finished, given up or panicked.
                None if whole.load(Ordering::Acquire) => None,
                None => Some((Err(BodyError::from(INCOMPLETE)), None)),
            }
        }
    });
    StreamBody::new(frames).boxed_unsync()
}

/// Writes the whole exposition into `chunks`, waiting up to `stall` for room for each
/// chunk; whether it all went. Once the scraper has gone or stalled, the rest is rendered
/// and dropped (rendering has no side effects).
pub(super) fn render(
    served: &Served,
    runtime: &Handle,
    chunks: &mpsc::Sender<Bytes>,
    stall: Duration,
) -> bool {
    let mut gone = false;
    let mut sink = |chunk: String| {
        if !gone {
            // The timer is made inside `block_on`, where the runtime's context is entered.
            let send = async { tokio::time::timeout(stall, chunks.send(Bytes::from(chunk))).await };
            let sent = runtime.block_on(send);
            gone = !matches!(sent, Ok(Ok(())));
        }
    };
    let mut out = Exposition::new(&mut sink);
    out.push_text(&crate::metrics::render());
    let instance_types = served
        .instance_types
        .get()
        .map(crate::instance_types::InstanceTypeCache::resolved)
        .unwrap_or_default();
    crate::cluster_metrics::write(
        &mut out,
        &served.state,
        &instance_types,
        served.observability,
    );
    out.finish();
    !gone
}
