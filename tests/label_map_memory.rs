//! What [`kerf::labels::compact`] saves on a label map as decoding leaves it, counted by
//! the accounting allocator (`kerf-heap`), which this test binary installs as its global
//! allocator. The stores compact every kept object's labels and annotations; the test
//! fails the day compacting stops saving the B-tree's half-empty nodes.

use std::collections::BTreeMap;

use kerf_heap::{Accounting, Owner, set_current, usage};
use serde_json::json;

#[global_allocator]
static GLOBAL: Accounting = Accounting;

/// A launched Node's labels as the API server sends them: the well-known, Karpenter and
/// instance-type labels and one of the user's, thirty keys.
fn node_labels() -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    for (key, value) in [
        ("beta.kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/instance-type", "c6a.xlarge"),
        ("beta.kubernetes.io/os", "linux"),
        ("failure-domain.beta.kubernetes.io/region", "us-east-1"),
        ("failure-domain.beta.kubernetes.io/zone", "us-east-1a"),
        (
            "k8s.io/cloud-provider-aws",
            "a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d1",
        ),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("karpenter.k8s.aws/instance-category", "c"),
        ("karpenter.k8s.aws/instance-cpu", "4"),
        ("karpenter.k8s.aws/instance-cpu-manufacturer", "amd"),
        ("karpenter.k8s.aws/instance-ebs-bandwidth", "10000"),
        (
            "karpenter.k8s.aws/instance-encryption-in-transit-supported",
            "true",
        ),
        ("karpenter.k8s.aws/instance-family", "c6a"),
        ("karpenter.k8s.aws/instance-generation", "6"),
        ("karpenter.k8s.aws/instance-hypervisor", "nitro"),
        ("karpenter.k8s.aws/instance-memory", "8192"),
        ("karpenter.k8s.aws/instance-network-bandwidth", "1562"),
        ("karpenter.k8s.aws/instance-size", "xlarge"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("karpenter.sh/initialized", "true"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/registered", "true"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", "ip-10-0-28-134.ec2.internal"),
        ("kubernetes.io/os", "linux"),
        ("node.kubernetes.io/instance-type", "c6a.xlarge"),
        ("topology.k8s.aws/zone-id", "use1-az1"),
        ("topology.kubernetes.io/region", "us-east-1"),
        ("topology.kubernetes.io/zone", "us-east-1a"),
        ("team", "checkout"),
    ] {
        labels.insert(key.to_owned(), json!(value));
    }
    serde_json::Value::Object(labels)
}

/// Live heap bytes of `make`'s result, measured on a thread of its own owner.
fn held(owner: Owner, make: impl FnOnce() -> BTreeMap<String, String> + Send + 'static) -> u64 {
    std::thread::spawn(move || {
        set_current(Some(owner));
        let before = usage(owner).live_bytes;
        let map = make();
        let held = usage(owner).live_bytes - before;
        drop(map);
        held
    })
    .join()
    .expect("the measuring thread does not panic")
}

fn decoded() -> BTreeMap<String, String> {
    serde_json::from_str(&node_labels().to_string()).expect("a label map")
}

#[test]
fn compacting_a_decoded_label_map_frees_its_half_empty_nodes() {
    let as_decoded = held(Owner::new(6), decoded);
    let compacted = held(Owner::new(7), || {
        let mut labels = decoded();
        kerf::labels::compact(&mut labels);
        labels
    });
    let strings: usize = decoded().iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(
        compacted + 512 <= as_decoded,
        "{compacted} bytes compacted, {as_decoded} as decoded ({strings} of them the strings)"
    );
}
