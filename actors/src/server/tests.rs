//! A connection whose answer panics is reported to the supervision scope, with its message;
//! the client sees the connection close.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Stands for a bug anywhere in an endpoint's answer.
fn a_bug() -> Response<Body> {
    panic!("a bug while answering")
}

#[tokio::test]
async fn a_connection_whose_answer_panics_is_reported_to_the_scope() {
    let scope = Supervision::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("bound");
    let served = {
        let scope = scope.clone();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accepts");
            connection("server-test", scope, stream, |_| async {
                Ok::<_, Infallible>(a_bug())
            })
            .await;
        })
    };
    let mut client = TcpStream::connect(addr).await.expect("connects");
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("sends");
    let mut answer = Vec::new();
    // The connection ends without an answer; a reset is an end too.
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer)).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the connection ends")
        .expect("the panic is caught inside the connection's task");
    assert_eq!(scope.recent_restarts("server-test"), 1);
}

/// Cluster state with `count` Nodes, each with a few resources: its exposition is many
/// chunks long.
fn state_with_nodes(count: usize) -> Arc<ClusterState> {
    let (state, mut writers) = ClusterState::new();
    for i in 0..count {
        let name = format!("node-{i:04}");
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"}}
        }))
        .expect("valid node");
        writers
            .nodes
            .apply(crate::state::ObjectKey::new(None, &name), node);
    }
    state
}

fn served(state: Arc<ClusterState>) -> Served {
    Served {
        state,
        explain: Arc::new(ExplainSources::default()),
        observability: true,
        instance_types: Arc::new(std::sync::OnceLock::new()),
    }
}

/// The body of a chunked HTTP/1.1 response, and how many chunks it came in.
fn dechunk(mut rest: &[u8]) -> (String, usize) {
    let (mut body, mut chunks) = (Vec::new(), 0);
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size line");
        let size = std::str::from_utf8(&rest[..line_end]).expect("ascii size");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex size");
        rest = &rest[line_end + 2..];
        if size == 0 {
            return (String::from_utf8(body).expect("utf-8 text"), chunks);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
        chunks += 1;
    }
}

#[tokio::test]
async fn metrics_are_streamed_in_chunks_with_every_series() {
    let (_stop, shutdown) = watch::channel(false);
    let (addr, _task) = serve_metrics(
        "127.0.0.1:0".parse().expect("address"),
        served(state_with_nodes(600)),
        shutdown,
    )
    .await
    .expect("binds");
    let mut client = TcpStream::connect(addr).await.expect("connects");
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
        .await
        .expect("sends");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut answer))
        .await
        .expect("answers")
        .expect("reads");
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&answer[..head_end]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let (text, chunks) = dechunk(&answer[head_end + 4..]);
    assert!(chunks > 3, "{chunks} chunks");
    for i in [0, 299, 599] {
        let series = format!(
            "karpenter_nodes_allocatable{{node_name=\"node-{i:04}\",phase=\"\",managed=\"true\",nodepool=\"default\""
        );
        assert!(text.contains(&series), "{series} missing");
    }
    assert_eq!(
        text.matches("# TYPE karpenter_nodes_allocatable gauge\n")
            .count(),
        1
    );
    assert!(text.contains("karpenter_cluster_state_node_count 600\n"));
}

/// Renders `served` on a thread of its own into a queue nobody reads yet, giving up after
/// `stall`; the queue and the thread, whose answer is whether all the text went.
fn rendering(
    served: Served,
    stall: Duration,
) -> (
    tokio::sync::mpsc::Receiver<Bytes>,
    std::thread::JoinHandle<bool>,
) {
    let (chunks, queued) = tokio::sync::mpsc::channel(metrics::CHUNKS_AHEAD);
    let runtime = tokio::runtime::Handle::current();
    let renderer = std::thread::spawn(move || metrics::render(&served, &runtime, &chunks, stall));
    (queued, renderer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_renderer_waits_for_the_scraper() {
    let (mut queued, renderer) = rendering(served(state_with_nodes(600)), metrics::SCRAPER_STALL);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !renderer.is_finished(),
        "the whole text was rendered with no one reading it"
    );
    assert_eq!(queued.len(), metrics::CHUNKS_AHEAD);
    let mut taken = 0;
    while queued.recv().await.is_some() {
        taken += 1;
    }
    assert!(taken > metrics::CHUNKS_AHEAD, "{taken} chunks");
    assert!(renderer.join().expect("no panic"), "all the text went");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scraper_that_takes_nothing_is_given_up_on() {
    let stall = Duration::from_millis(200);
    let (mut queued, renderer) = rendering(served(state_with_nodes(600)), stall);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !renderer.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the renderer still waits"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !renderer.join().expect("no panic"),
        "reported as incomplete"
    );
    let mut taken = 0;
    while queued.recv().await.is_some() {
        taken += 1;
    }
    assert_eq!(
        taken,
        metrics::CHUNKS_AHEAD,
        "nothing past the queue was sent"
    );
}
