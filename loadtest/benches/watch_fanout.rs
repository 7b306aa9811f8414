//! Load figure for the API emulator: 10,000 pods created over HTTP (kube-rs, 32 in flight)
//! and delivered to 5 concurrent kube-rs watchers, then the store filled to 50,000 objects
//! and listed. Run with `cargo bench -p kerf-loadtest --bench watch_fanout`; prints the
//! figures (a plain binary rather than criterion: one end-to-end run is the measurement).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kerf_loadtest::apiserver::{ApiServer, ServerConfig};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const PODS: usize = 10_000;
const WATCHERS: usize = 5;
const IN_FLIGHT: usize = 32;
const TOTAL_OBJECTS: usize = 50_000;

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("load-{i:05}"), "namespace": "default",
            "labels": {"app": format!("app-{}", i % 50), "karpenter.sh/capacity-type": "spot"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("rs-{}", i % 50), "uid": format!("00000000-0000-4000-8000-{:012}", i % 50), "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "public.ecr.aws/nginx/nginx:1.27",
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}}],
            "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"kubernetes.io/arch": "amd64"}}
    }))
    .expect("bench pod is valid")
}

async fn client_for(server: &kerf_loadtest::apiserver::RunningServer) -> kube::Client {
    let path = std::env::temp_dir().join(format!("kerf-bench-{}.kubeconfig", std::process::id()));
    server.write_kubeconfig(&path).expect("kubeconfig");
    let kc = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig parses");
    let _ = std::fs::remove_file(&path);
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
    kube::Client::try_from(config).expect("client")
}

async fn watch_until(api: Api<Pod>, from: String, expected: usize) -> Duration {
    let started = Instant::now();
    let mut stream = api
        .watch(&WatchParams::default().timeout(290), &from)
        .await
        .expect("watch")
        .boxed();
    let mut added = 0;
    while added < expected {
        match stream.try_next().await.expect("watch stream") {
            Some(WatchEvent::Added(_)) => added += 1,
            Some(_) => {}
            None => panic!("watch ended after {added} events"),
        }
    }
    started.elapsed()
}

/// A bare HTTP/1.1 watcher (no JSON decoding): counts ADDED events, to isolate the
/// server's fan-out cost from client-side deserialisation.
async fn raw_watch_until(addr: std::net::SocketAddr, from: String, expected: usize) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET /api/v1/namespaces/raw/pods?watch=true&resourceVersion={from} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n"
    );
    let mut sent = 0;
    while sent < request.len() {
        stream.writable().await.expect("writable");
        match stream.try_write(&request.as_bytes()[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("send: {e}"),
        }
    }
    let needle = b"{\"type\":\"ADDED\"";
    let (mut seen, mut carry) = (0, Vec::new());
    let mut buf = vec![0u8; 1 << 16];
    while seen < expected {
        stream.readable().await.expect("readable");
        let n = match stream.try_read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => panic!("read: {e}"),
        };
        assert!(n > 0, "watch closed after {seen} events");
        carry.extend_from_slice(&buf[..n]);
        seen += carry.windows(needle.len()).filter(|w| *w == needle).count();
        let keep = carry.len().saturating_sub(needle.len() - 1);
        carry.drain(..keep);
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let server = ApiServer::start(ServerConfig::default())
        .await
        .expect("emulator starts");
    let client = client_for(&server).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let from = pods
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let watchers: Vec<_> = (0..WATCHERS)
        .map(|_| {
            tokio::spawn(watch_until(
                Api::namespaced(client.clone(), "default"),
                from.clone(),
                PODS,
            ))
        })
        .collect();

    let started = Instant::now();
    futures::stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &pod(i))
                    .await
                    .expect("create")
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .for_each(|_| async {})
        .await;
    let created = started.elapsed();
    for watcher in watchers {
        watcher.await.expect("watcher");
    }
    let delivered = started.elapsed();
    println!(
        "create+deliver: {PODS} pods created over HTTP in {:.3} s ({:.0}/s); delivered to {WATCHERS} watchers in {:.3} s",
        created.as_secs_f64(),
        PODS as f64 / created.as_secs_f64(),
        delivered.as_secs_f64()
    );

    let cluster = server.cluster();
    cluster
        .create("v1", "namespaces", json!({"metadata": {"name": "raw"}}))
        .expect("namespace");
    let from = cluster.resource_version().to_string();
    let raw: Vec<_> = (0..WATCHERS)
        .map(|_| tokio::spawn(raw_watch_until(server.addr(), from.clone(), PODS)))
        .collect();
    let raw_start = Instant::now();
    for i in 0..PODS {
        let mut object = serde_json::to_value(pod(i)).expect("pod json");
        object["metadata"]["namespace"] = json!("raw");
        cluster
            .create("v1", "pods", object)
            .expect("in-process create");
    }
    let raw_created = raw_start.elapsed();
    for watcher in raw {
        watcher.await.expect("raw watcher");
    }
    println!(
        "server fan-out: {PODS} pods created in process in {:.3} s; delivered to {WATCHERS} raw HTTP watchers in {:.3} s",
        raw_created.as_secs_f64(),
        raw_start.elapsed().as_secs_f64()
    );

    let fill_start = Instant::now();
    for i in 2 * PODS..TOTAL_OBJECTS {
        let object = serde_json::to_value(pod(i)).expect("pod json");
        cluster
            .create("v1", "pods", object)
            .expect("in-process create");
    }
    println!(
        "fill: {} more pods in process in {:.3} s; store holds {TOTAL_OBJECTS} pods",
        TOTAL_OBJECTS - 2 * PODS,
        fill_start.elapsed().as_secs_f64()
    );
    let list_start = Instant::now();
    let everywhere: Api<Pod> = Api::all(client.clone());
    let all = everywhere
        .list(&ListParams::default())
        .await
        .expect("list all");
    println!(
        "list: {} pods over HTTP (typed) in {:.3} s",
        all.items.len(),
        list_start.elapsed().as_secs_f64()
    );
    let page_start = Instant::now();
    let mut params = ListParams::default().limit(500);
    let mut count = 0;
    loop {
        let page = everywhere.list(&params).await.expect("page");
        count += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    println!(
        "paged list: {count} pods in pages of 500 in {:.3} s",
        page_start.elapsed().as_secs_f64()
    );
    let selective = Instant::now();
    let one_app = everywhere
        .list(&ListParams::default().labels("app=app-7"))
        .await
        .expect("selector list");
    println!(
        "selector list: {} of {TOTAL_OBJECTS} pods matched app=app-7 in {:.3} s",
        one_app.items.len(),
        selective.elapsed().as_secs_f64()
    );
    server.shutdown().await;
}
