//! What a thousand replicas of one ReplicaSet cost as [`LeanPod`]s, counted by the
//! accounting allocator (`kerf-heap`), which this test binary installs as its global
//! allocator: each pod pays for its inline form and what names and concerns it alone, and
//! the spec and metadata replicas hold alike are paid once. The test fails the day either
//! stops being shared.
//!
//! Measured with `cargo test -p kerf --test lean_pod_memory` (debug build): when a lean pod
//! held a whole `ObjectMeta`, 2,835,857 bytes for the thousand (792 inline and 2,044 on the
//! heap per pod); with the metadata split into its own and its shared part, 1,069,553 bytes
//! (624 inline and 446 on the heap per pod).

use k8s_openapi::api::core::v1::Pod;
use kerf::pods::{LeanPod, PodInterner};
use kerf_heap::{Accounting, Owner, set_current, usage};
use serde_json::json;

#[global_allocator]
static GLOBAL: Accounting = Accounting;

const REPLICAS: usize = 1000;

/// Replica `i` of ReplicaSet `web-7d4b9c8f6d` as the API server gives it, trimmed as the
/// store trims it (of `managedFields`, the kube-scheduler's status write): its own name,
/// uid, resourceVersion, node and status; its template's labels and annotation, its
/// owner's reference, and its spec, alike for all.
fn replica(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("web-7d4b9c8f6d-{i:05}"), "generateName": "web-7d4b9c8f6d-",
            "namespace": "shop", "uid": format!("0b9c6a1e-4f2d-4c1b-9e7a-{i:012}"),
            "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6d"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d4b9c8f6d", "uid": "5f0e2b7c-8a3d-4e6f-b1c2-d3e4f5a6b7c8",
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-scheduler", "subresource": "status",
                "time": "2026-01-01T00:00:01Z"}]
        },
        "spec": {
            "nodeName": format!("ip-10-0-{}-{}.ec2.internal", i / 250, i % 250),
            "containers": [{"name": "app",
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]
        },
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:02Z",
            "conditions": [
                {"type": "PodScheduled", "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}
            ]}
    }))
    .expect("a valid pod")
}

/// The heap bytes `pod` holds that are its own, and so a lean pod keeps for it alone: its
/// name, uid, resourceVersion and node name, and its status's phase and conditions.
fn own_heap(pod: &Pod) -> usize {
    let meta = &pod.metadata;
    let strings = [
        meta.name.as_ref(),
        meta.uid.as_ref(),
        meta.resource_version.as_ref(),
        pod.spec.as_ref().and_then(|s| s.node_name.as_ref()),
    ];
    let status = pod.status.as_ref().expect("status");
    let conditions = status.conditions.as_ref().expect("conditions");
    strings
        .iter()
        .flatten()
        .map(|s| s.capacity())
        .sum::<usize>()
        + status.phase.as_ref().map_or(0, String::capacity)
        + conditions.capacity() * size_of_val(&conditions[0])
        + conditions
            .iter()
            .map(|c| c.type_.capacity() + c.status.capacity())
            .sum::<usize>()
}

/// Bytes the thousand pods may hold once between them: one spec, one shared metadata, the
/// interner's two entries. Each is well under 4 KiB (a trimmed spec of one container is
/// about 2 KiB, the shared metadata with its two B-tree leaves under 2 KiB); were either
/// held per pod again, the thousand would pay over a megabyte more.
const SHARED_ONCE: usize = 16 * 1024;

#[test]
fn replicas_pay_for_their_own_parts_alone() {
    let owner = Owner::new(6);
    let (measured, own) = std::thread::spawn(move || {
        set_current(Some(owner));
        let before = usage(owner).live_bytes;
        let mut interner = PodInterner::default();
        let mut kept = Vec::with_capacity(REPLICAS);
        let mut own = 0;
        for i in 0..REPLICAS {
            let pod = replica(i);
            own += own_heap(&pod);
            kept.push(LeanPod::new(pod, &mut interner));
        }
        let measured = usage(owner).live_bytes - before;
        assert_eq!((interner.live_specs(), interner.live_metas()), (1, 1));
        drop(kept);
        (measured, own)
    })
    .join()
    .expect("the measuring thread does not panic");
    let inline = REPLICAS * size_of::<LeanPod>();
    let bound = inline + own + SHARED_ONCE;
    assert!(
        measured <= bound as u64,
        "{measured} bytes for {REPLICAS} replicas; at most {bound}: {inline} inline, {own} \
         their own parts, {SHARED_ONCE} shared"
    );
}
