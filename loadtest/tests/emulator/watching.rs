//! kube-runtime's watcher against the emulator: initial list, live events, resuming after
//! a dropped watch, relisting after a 410 from compacted history; raw watch semantics
//! (bookmarks, 410 ERROR events, selector transitions).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kerf_loadtest::apiserver::{DeleteOptions, InjectedError, ManualClock, PatchKind};
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::{PATIENCE, create, start, start_with_clock};

/// What the consumer of a watcher stream observed.
#[derive(Debug)]
enum Seen {
    Init,
    InitDone(BTreeSet<String>),
    Apply(String),
    Delete(String),
    Error(Option<u16>),
}

fn spawn_watcher(api: Api<ConfigMap>) -> mpsc::UnboundedReceiver<Seen> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        let mut pending = BTreeSet::new();
        while let Some(item) = stream.next().await {
            let name = |cm: &ConfigMap| cm.metadata.name.clone().unwrap_or_default();
            let seen = match item {
                Ok(Event::Init) => {
                    pending.clear();
                    Seen::Init
                }
                Ok(Event::InitApply(cm)) => {
                    pending.insert(name(&cm));
                    continue;
                }
                Ok(Event::InitDone) => Seen::InitDone(pending.clone()),
                Ok(Event::Apply(cm)) => Seen::Apply(name(&cm)),
                Ok(Event::Delete(cm)) => Seen::Delete(name(&cm)),
                Err(watcher::Error::WatchError(status)) => Seen::Error(Some(status.code)),
                Err(_) => Seen::Error(None),
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
    rx
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("watcher event in time")
        .expect("watcher alive")
}

fn cm(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_resumes_after_drop_and_relists_after_compaction() {
    let h = start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let cluster = h.server.cluster();
    cluster
        .create("v1", "configmaps", cm("before"))
        .expect("seed");
    let mut rx = spawn_watcher(api.clone());
    assert!(matches!(next(&mut rx).await, Seen::Init));
    match next(&mut rx).await {
        Seen::InitDone(names) => assert_eq!(names, BTreeSet::from(["before".to_string()])),
        other => panic!("expected InitDone, got {other:?}"),
    }
    create(&api, cm("a")).await;
    assert!(matches!(next(&mut rx).await, Seen::Apply(n) if n == "a"));

    // A dropped watch resumes from the last resourceVersion: no relist.
    h.server.faults().drop_watches();
    create(&api, cm("b")).await;
    assert!(matches!(next(&mut rx).await, Seen::Apply(n) if n == "b"));

    // While the client cannot reach the server, changes happen and history is compacted:
    // the resumed watch gets 410 Gone and the watcher relists.
    h.server
        .faults()
        .fail_requests(1.0, InjectedError::ServerError);
    h.server.faults().drop_watches();
    assert!(
        matches!(next(&mut rx).await, Seen::Error(None)),
        "re-watching fails while the server fails requests"
    );
    cluster
        .create("v1", "configmaps", cm("c"))
        .expect("create while partitioned");
    cluster
        .delete(
            "v1",
            "configmaps",
            Some("default"),
            "a",
            &DeleteOptions::default(),
        )
        .expect("delete while partitioned");
    h.server.faults().compact();
    h.server.faults().stop_failing();
    let mut saw_gone = false;
    loop {
        match next(&mut rx).await {
            Seen::Error(Some(410)) => saw_gone = true,
            Seen::Error(_) | Seen::Init => {}
            Seen::InitDone(names) => {
                let expected: BTreeSet<String> =
                    ["b", "before", "c"].iter().map(|s| s.to_string()).collect();
                assert_eq!(names, expected);
                break;
            }
            other => panic!("unexpected {other:?} before relist"),
        }
    }
    assert!(saw_gone, "the watcher must have been told 410 Gone");
    assert!(h.server.faults().injected_failures() > 0);
    cluster
        .patch(
            "v1",
            "configmaps",
            Some("default"),
            "b",
            PatchKind::Merge,
            &json!({"data": {"x": "1"}}),
        )
        .expect("patch");
    assert!(matches!(next(&mut rx).await, Seen::Apply(n) if n == "b"));
    api.delete("b", &Default::default()).await.expect("delete");
    assert!(matches!(next(&mut rx).await, Seen::Delete(n) if n == "b"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_watch_sends_bookmarks_transitions_and_gone() {
    let h = start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let seeded: ConfigMap = create(&api, cm("seed")).await;
    let from = seeded.metadata.resource_version.clone().expect("rv");
    let params = WatchParams::default().labels("app=x").timeout(30);
    let mut stream = api.watch(&params, &from).await.expect("watch").boxed();
    let mut first = cm("labelled");
    first["metadata"]["labels"] = json!({"app": "x"});
    create(&api, first).await;
    let next_event =
        async |s: &mut futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>| {
            loop {
                match tokio::time::timeout(PATIENCE, s.try_next())
                    .await
                    .expect("event in time")
                    .expect("stream ok")
                    .expect("open")
                {
                    WatchEvent::Bookmark(_) => continue,
                    other => return other,
                }
            }
        };
    assert!(
        matches!(next_event(&mut stream).await, WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("labelled"))
    );
    let relabel = |app: &str| Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    api.patch("labelled", &PatchParams::default(), &relabel("y"))
        .await
        .expect("relabel");
    assert!(
        matches!(next_event(&mut stream).await, WatchEvent::Deleted(_)),
        "leaving the selector is a deletion"
    );
    api.patch("labelled", &PatchParams::default(), &relabel("x"))
        .await
        .expect("relabel back");
    assert!(
        matches!(next_event(&mut stream).await, WatchEvent::Added(_)),
        "entering the selector is an addition"
    );
    api.patch(
        "labelled",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .expect("modify");
    assert!(matches!(
        next_event(&mut stream).await,
        WatchEvent::Modified(_)
    ));

    let mut bookmarked = api
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .expect("watch with bookmarks")
        .boxed();
    let mut saw_initial = false;
    loop {
        match tokio::time::timeout(PATIENCE, bookmarked.try_next())
            .await
            .expect("event in time")
            .expect("ok")
            .expect("open")
        {
            WatchEvent::Added(_) => saw_initial = true,
            WatchEvent::Bookmark(b) => {
                assert!(b.metadata.resource_version.parse::<u64>().is_ok());
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        saw_initial,
        "a watch from resourceVersion 0 starts with the current state"
    );

    h.server.faults().compact();
    let mut gone = api
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch starts")
        .boxed();
    match tokio::time::timeout(PATIENCE, gone.try_next())
        .await
        .expect("in time")
        .expect("ok")
        .expect("an event")
    {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected 410, got {other:?}"),
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let h = start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    for name in ["s1", "s2"] {
        create(&api, cm(name)).await;
    }
    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher::watcher(api, config).boxed();
    let mut names = BTreeSet::new();
    loop {
        match tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("in time")
            .expect("open")
            .expect("ok")
        {
            Event::Init => {}
            Event::InitApply(cm) => {
                names.insert(cm.metadata.name.unwrap_or_default());
            }
            Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, BTreeSet::from(["s1".to_string(), "s2".to_string()]));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_asked_for_tables_streams_rows_with_the_columns() {
    let h = start().await;
    h.server
        .cluster()
        .create(
            "v1",
            "pods",
            json!({"metadata": {"name": "web-1", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .expect("pod");
    let request = http::Request::get("/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .expect("request");
    let text = h
        .client
        .request_text(request)
        .await
        .expect("the watch ends on its timeout");
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("an event")).expect("JSON");
    assert_eq!(first["type"], "ADDED");
    let table = &first["object"];
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter(|c| c["priority"] == 0)
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Ready", "Status", "Restarts", "Age"]);
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        (&cells[0], &cells[1], &cells[2]),
        (&json!("web-1"), &json!("0/1"), &json!("Pending"))
    );
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    h.stop().await;
}

/// What a raw watch from `rv` sends until its first `count` events: the names of the objects
/// it adds, or the code of the error it ends with.
async fn resume(api: &Api<ConfigMap>, rv: &str, count: usize) -> Result<Vec<String>, u16> {
    let mut events = api
        .watch(&WatchParams::default(), rv)
        .await
        .expect("watch starts")
        .boxed();
    let mut names = Vec::new();
    while names.len() < count {
        let event = tokio::time::timeout(PATIENCE, events.try_next())
            .await
            .expect("event in time")
            .expect("ok")
            .expect("open");
        match event {
            WatchEvent::Added(cm) => names.push(cm.metadata.name.unwrap_or_default()),
            WatchEvent::Error(status) => return Err(status.code),
            _ => {}
        }
    }
    Ok(names)
}

fn rv_of(cm: &ConfigMap) -> String {
    cm.metadata.resource_version.clone().expect("a version")
}

/// The history is kept as kube-apiserver's watch cache keeps it: a watch resuming from a
/// version of the last 75 s gets every change since; changes older than that leave the
/// history (the newest 100 excepted), and a watch from before them gets 410 Gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_keeps_the_last_75_seconds_and_expires_what_is_older() {
    let clock = Arc::new(ManualClock::new(SystemTime::now()));
    let h = start_with_clock(clock.clone()).await;
    let api: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let mut versions = Vec::new();
    // w0..w50 at 0 s, w51..w100 at 20 s, w101..w150 at 40 s.
    for i in 0..=150 {
        versions.push(rv_of(&create(&api, cm(&format!("w{i}"))).await));
        if i % 50 == 0 && i > 0 {
            clock.advance(Duration::from_secs(20));
        }
    }
    let all: Vec<String> = (1..=150).map(|i| format!("w{i}")).collect();
    assert_eq!(
        resume(&api, &versions[0], 150).await,
        Ok(all),
        "60 s of changes are all kept"
    );

    // At 100 s, the changes of 0 s and 20 s are past the window; of them, those beyond the
    // newest 100 changes go.
    clock.advance(Duration::from_secs(40));
    create(&api, cm("w151")).await;
    assert_eq!(resume(&api, &versions[0], 1).await, Err(410));
    let recent: Vec<String> = (61..=151).map(|i| format!("w{i}")).collect();
    assert_eq!(
        resume(&api, &versions[60], 91).await,
        Ok(recent),
        "the newest 100 changes stay though older than the window"
    );
    h.stop().await;
}
