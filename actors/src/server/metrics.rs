//! The `/metrics` body, streamed: the recorder's metrics, then those computed from cluster
//! state ([`crate::cluster_metrics`]), rendered on a blocking thread into an
//! [`Exposition`] whose chunks go to the response as hyper asks for them. hyper stops
//! asking while its write buffer is full (a slow scraper), the renderer then waits on the
//! bounded queue, so a scrape holds a few chunks of text however large the cluster is,
//! where the whole text is over a hundred megabytes at 100,000 pods.

use std::panic::AssertUnwindSafe;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::mpsc;

use super::{Body, BodyError, Served};
use crate::cluster_metrics::Exposition;
use crate::supervisor::Supervision;

/// Chunks rendered ahead of what hyper has taken: enough that the renderer rarely waits on a
/// scraper reading at the pace of its network; each is [`crate::cluster_metrics::CHUNK_BYTES`].
pub const CHUNKS_AHEAD: usize = 4;

/// What a failed render sends in place of the rest of the text: hyper ends the response
/// with an error, so the scraper sees a failed scrape rather than part of the text.
const RENDER_PANICKED: &str = "rendering /metrics panicked";

/// The streamed `/metrics` body of `served`. A panic while rendering is reported as
/// `name`'s in `supervision`, and ends the response with an error.
pub fn body(served: Served, name: &'static str, supervision: Supervision) -> Body {
    let (chunks, queued) = mpsc::channel::<Result<Bytes, BodyError>>(CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        let rendered = std::panic::catch_unwind(AssertUnwindSafe(|| render(&served, &chunks)));
        if let Err(panic) = rendered {
            supervision.report_panic(name, &*panic);
            // The scraper may have gone; then there is no one to tell.
            let _ = chunks.blocking_send(Err(RENDER_PANICKED.into()));
        }
    });
    let frames = futures::stream::unfold(queued, |mut queued| async move {
        let chunk = queued.recv().await?;
        Some((chunk.map(Frame::data), queued))
    });
    StreamBody::new(frames).boxed_unsync()
}

/// Writes the whole exposition into `chunks`, waiting while the queue is full; once the
/// scraper has gone, the rest is rendered and dropped (rendering has no side effects).
pub(super) fn render(served: &Served, chunks: &mpsc::Sender<Result<Bytes, BodyError>>) {
    let mut gone = false;
    let mut sink = |chunk: String| {
        if !gone {
            gone = chunks.blocking_send(Ok(Bytes::from(chunk))).is_err();
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
}
