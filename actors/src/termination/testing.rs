//! Fixtures for the termination drainer's unit tests: pods built from defaults plus
//! overrides, and timestamps relative to a fixed instant.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kerf::pods::LeanPod;
use serde_json::{Value, json};

pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).expect("valid")
}

/// A Running pod `name` in `default` on node `n1`, with `extra` merged in.
pub fn pod(name: &str, extra: Value) -> Arc<LeanPod> {
    let mut base = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}
    });
    merge(&mut base, extra);
    Arc::new(LeanPod::from(
        serde_json::from_value::<Pod>(base).expect("valid pod"),
    ))
}

/// `extra` merged into `base`, objects key by key.
pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}
