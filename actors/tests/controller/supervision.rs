//! Actors panic in a running controller: pods still get nodes after the NodeClaimCreator, the
//! lifecycle, the Provisioner and the Batcher each panicked on their next messages, with no
//! instance launched twice and `/healthz` still answering; an actor that panics past its
//! restart budget fails `/healthz` over HTTP; every loop panicked where it waits is built
//! again; the Tagger, the LaunchTemplateCache and the event recorder are counted restarted
//! and do their work after a panic. Each daemon runs in a supervision scope of its own, so
//! the faults armed here reach no other test's daemon.

use std::sync::Arc;
use std::time::Duration;

use kerf_actors::events;
use kerf_actors::supervisor::{FAULT_ACTORS, LOOP_FAULTS, RESTART_BUDGET, Supervision};
use kerf_actors::{Daemon, instance_health};
use kerf_loadtest::apiserver::PatchKind;
use kerf_loadtest::ec2::subnet_id;
use serde_json::json;

use crate::cloud_loops;
use crate::events::marker;
use crate::support::*;

/// Restarts a few milliseconds apart: the test is about what happens, not the backoff.
const BACKOFF: Duration = Duration::from_millis(20);

/// The feature gates whose loops are off by default.
const EVERY_GATED_LOOP: &str = "StaticCapacity=true,NodeOverlay=true,CapacityBuffer=true";

async fn pod_node(cluster: &kerf_loadtest::apiserver::Cluster, name: &str) -> Option<String> {
    let pod = cluster.get("v1", "pods", Some("default"), name).ok()?;
    pod["spec"]["nodeName"].as_str().map(str::to_owned)
}

fn nodeclaim_names(cluster: &kerf_loadtest::apiserver::Cluster) -> Vec<String> {
    cluster
        .list("karpenter.sh/v1", "nodeclaims", None, "")
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn pods_get_nodes_after_the_nodeclaim_creator_lifecycle_provisioner_and_batcher_panicked() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (provider, cloud) = simulated_cloud();
        let scope = Supervision::with_backoff(BACKOFF);
        let daemon: Daemon = scope.scope(start_provisioner(&h, cloud)).await;
        let _simulators = node_simulators(&h, provider.clone());
        let faults = daemon.supervision().faults();
        for (actor, count) in [
            ("batcher", 1),
            ("provisioner", 1),
            ("nodeclaim_creator", 1),
            ("lifecycle", 2),
        ] {
            faults.arm(actor, count).expect("a known actor");
        }

        create_pending_pods(&cluster, "web", 6, "1", "1Gi");
        let names: Vec<String> = (0..6).map(|i| format!("web-{i}")).collect();
        let deadline = tokio::time::Instant::now() + PATIENCE * 3;
        loop {
            let mut bound = 0;
            for name in &names {
                bound += usize::from(pod_node(&cluster, name).await.is_some());
            }
            if bound == names.len() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{bound} of {} pods bound; faults left: batcher {}, provisioner {}, nodeclaim_creator {}, lifecycle {}",
                names.len(),
                faults.remaining("batcher"),
                faults.remaining("provisioner"),
                faults.remaining("nodeclaim_creator"),
                faults.remaining("lifecycle"),
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for actor in ["batcher", "provisioner", "nodeclaim_creator", "lifecycle"] {
            assert_eq!(faults.remaining(actor), 0, "{actor} panicked as armed");
        }
        // One instance per NodeClaim: a restarted lifecycle launched nothing twice.
        let claims = nodeclaims(&h.client).await;
        let instances = provider.ec2().instances();
        assert!(!claims.is_empty());
        assert_eq!(instances.len(), claims.len(), "{instances:#?}\n{claims:#?}");
        let (status, body) = http_get(daemon.probes_addr, "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok"), "within the budget");
        daemon.stop_within(STALLED_DRAIN).await;
        h.stop().await;
    });
}

#[test]
fn an_actor_past_its_restart_budget_fails_healthz() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (_provider, cloud) = simulated_cloud_with(stalled_launches());
        let scope = Supervision::with_backoff(Duration::from_millis(1));
        let daemon: Daemon = scope.scope(start_provisioner(&h, cloud)).await;
        let (status, _) = http_get(daemon.probes_addr, "/healthz").await;
        assert_eq!(status, 200);
        let budget = u32::try_from(RESTART_BUDGET).expect("small");
        daemon
            .supervision()
            .faults()
            .arm("lifecycle", budget + 1)
            .expect("a known actor");
        create_pending_pods(&cluster, "web", 1, "1", "1Gi");
        let mut claim = None;
        eventually("a NodeClaim", || {
            claim = nodeclaim_names(&cluster).into_iter().next();
            claim.is_some()
        })
        .await;
        let claim = claim.expect("a NodeClaim");
        // Every change of the NodeClaim is a message to the lifecycle.
        let mut unhealthy = daemon.unhealthy();
        for i in 0.. {
            if unhealthy.borrow().is_some() {
                break;
            }
            assert!(i < 400, "the budget never ran out");
            cluster
                .patch(
                    "karpenter.sh/v1",
                    "nodeclaims",
                    None,
                    &claim,
                    PatchKind::Merge,
                    &json!({"metadata": {"annotations": {"test/change": i.to_string()}}}),
                )
                .expect("patched");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::timeout(PATIENCE, unhealthy.wait_for(Option::is_some))
            .await
            .expect("the budget ran out")
            .expect("the daemon holds its supervision");
        let (status, body) = http_get(daemon.probes_addr, "/healthz").await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("actor lifecycle restarted 6 times"), "{body}");
        daemon.stop_within(STALLED_DRAIN).await;
        h.stop().await;
    });
}

#[test]
fn every_loop_panicked_where_it_waits_is_built_again_and_pods_still_get_nodes() {
    run(|| async {
        let h = start_cluster_with(&ALL_CRDS).await;
        let cluster = h.cluster();
        create_nodepool(&cluster, nodepool_with("default", json!({})));
        let (provider, cloud) = simulated_cloud();
        let scope = Supervision::with_backoff(BACKOFF);
        // The gated loops run too, so each of them is shown to be faulted and rebuilt.
        let mut daemon: Daemon = scope
            .scope(start_gated_provisioner(&h, cloud, EVERY_GATED_LOOP))
            .await;
        daemon.repair_nodes();
        daemon.watch_instance_health(Arc::new(provider.ec2().clone()), Duration::from_millis(200));
        let _simulators = node_simulators(&h, provider.clone());
        let supervision = daemon.supervision().clone();
        // Loops register as their supervisor first builds them, on their own task.
        eventually("node repair and instance health started", || {
            let loops = supervision.loops();
            loops.contains_key("node_repair") && loops.contains_key(instance_health::CONTROLLER)
        })
        .await;
        let started = supervision.loops();
        // Every supervised loop can be panicked on purpose: by its own fault point, or where
        // it waits. A loop outside both lists would have no row in the supervision table.
        for name in started.keys() {
            assert!(
                LOOP_FAULTS.contains(name) || FAULT_ACTORS.contains(name),
                "loop {name} cannot be faulted"
            );
        }
        let waiting: Vec<&str> = LOOP_FAULTS
            .iter()
            .copied()
            .filter(|name| started.contains_key(name))
            .collect();
        for name in [
            "pod_watcher",
            "retrigger",
            "garbage_collection",
            "node_repair",
            instance_health::CONTROLLER,
            "static_capacity",
            "nodeoverlay",
            "capacitybuffer",
        ] {
            assert!(waiting.contains(&name), "{name} runs: {started:?}");
        }
        for name in &waiting {
            supervision.faults().arm(name, 1).expect("a loop fault");
        }
        // A name can run several loops (a pod watcher per kind): one of them panics.
        eventually("every loop built again", || {
            let loops = supervision.loops();
            waiting
                .iter()
                .all(|name| loops.get(name) == started.get(name).map(|n| n + 1).as_ref())
        })
        .await;

        // The rebuilt pod watcher, re-trigger and the rest still bring pods to nodes.
        create_pending_pods(&cluster, "web", 3, "1", "1Gi");
        for i in 0..3 {
            let name = format!("web-{i}");
            let mut bound = false;
            for _ in 0..(PATIENCE.as_millis() / 100) {
                if pod_node(&cluster, &name).await.is_some() {
                    bound = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(bound, "{name} bound after the loops restarted");
        }
        let (status, body) = http_get(daemon.probes_addr, "/healthz").await;
        assert_eq!(
            (status, body.as_str()),
            (200, "ok"),
            "one restart each is within the budget"
        );
        daemon.stop_within(STALLED_DRAIN).await;
        h.stop().await;
    });
}

#[test]
fn the_tagger_tags_a_registered_machine_after_it_panicked() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (provider, cloud) = cloud_loops::simulated();
        let scope = Supervision::with_backoff(BACKOFF);
        let daemon = scope.scope(cloud_loops::start(&h, cloud)).await;
        let before = actor_restarts("tagger");
        // The fault is named for the actor's folder; the actor is supervised as `tagger`.
        scope.faults().arm("tagging", 1).expect("a known actor");
        let (pid, id) = cloud_loops::launch(&provider, "default-a").await;
        cloud_loops::create_claim(&cluster, "default-a", json!({"providerID": pid}));
        cloud_loops::register(&cluster, "default-a", "ip-10-0-0-1");
        // The registration's request is the one the panic takes.
        restarted(&scope, "tagger", 1).await;
        assert_eq!(actor_restarts("tagger") - before, 1, "counted");
        assert_eq!(scope.faults().remaining("tagging"), 0);

        // The next change of the NodeClaim reaches the restarted Tagger.
        cluster
            .patch(
                cloud_loops::NODECLAIMS.0,
                cloud_loops::NODECLAIMS.1,
                None,
                "default-a",
                PatchKind::Merge,
                &json!({"metadata": {"labels": {"test/after-panic": "true"}}}),
            )
            .expect("patched");
        eventually("the machine is tagged after the restart", || {
            cloud_loops::get(&cluster, cloud_loops::NODECLAIMS, "default-a").is_some_and(|c| {
                c["metadata"]["annotations"][kerf::labels::INSTANCE_TAGGED] == "true"
            })
        })
        .await;
        let tags = provider.ec2().instance(&id).expect("instance").tags;
        assert_eq!(tags["Name"], "ip-10-0-0-1");
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn the_launch_template_cache_resolves_a_node_class_after_it_panicked() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let (_provider, cloud) = cloud_loops::simulated();
        let scope = Supervision::with_backoff(BACKOFF);
        let daemon = scope.scope(cloud_loops::start(&h, cloud)).await;
        let before = actor_restarts("launch_template_cache");
        scope
            .faults()
            .arm("launch_template_cache", 1)
            .expect("a known actor");
        cloud_loops::create_node_class(&cluster, "default");
        restarted(&scope, "launch_template_cache", 1).await;
        assert_eq!(
            actor_restarts("launch_template_cache") - before,
            1,
            "counted"
        );

        // A spec change is resolved by the restarted cache: one subnet, by id.
        cluster
            .patch(
                cloud_loops::EC2NODECLASSES.0,
                cloud_loops::EC2NODECLASSES.1,
                None,
                "default",
                PatchKind::Merge,
                &json!({"spec": {"subnetSelectorTerms": [{"id": subnet_id("us-east-1b")}]}}),
            )
            .expect("spec patched");
        eventually("the node class is Ready on its new spec", || {
            cloud_loops::get(&cluster, cloud_loops::EC2NODECLASSES, "default").is_some_and(|nc| {
                cloud_loops::is_ready(&nc)
                    && nc["status"]["subnets"]
                        .as_array()
                        .is_some_and(|s| s.len() == 1 && s[0]["zone"] == "us-east-1b")
            })
        })
        .await;
        daemon.stop().await;
        h.stop().await;
    });
}

#[test]
fn the_event_recorder_writes_and_counts_events_after_it_panicked() {
    run(|| async {
        let h = start_cluster().await;
        let cluster = h.cluster();
        let scope = Supervision::with_backoff(BACKOFF);
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let (recorder, _task) =
            scope.sync_scope(|| events::spawn(h.client.clone(), "test".into(), shutdown));
        let markers = |message: &str| {
            events_about(&cluster, "marker", "Marker")
                .into_iter()
                .filter(|e| e["message"] == message)
                .collect::<Vec<_>>()
        };
        recorder.publish(marker("before"));
        eventually("the first event is written", || {
            !markers("before").is_empty()
        })
        .await;

        let before = actor_restarts("events");
        scope.faults().arm("events", 1).expect("a known actor");
        // The event the panic takes is lost: events are best-effort.
        recorder.publish(marker("lost"));
        restarted(&scope, "events", 1).await;
        assert_eq!(actor_restarts("events") - before, 1, "counted");

        // The restarted writer writes, and remembers what it wrote before: the repeat counts
        // on the same Event.
        recorder.publish(marker("after"));
        recorder.publish(marker("before"));
        eventually("the repeat is counted on the first Event", || {
            !markers("after").is_empty()
                && markers("before").first().is_some_and(|e| e["count"] == 2)
        })
        .await;
        assert_eq!(markers("before").len(), 1, "no second object");
        assert!(markers("lost").is_empty());
        h.stop().await;
    });
}
