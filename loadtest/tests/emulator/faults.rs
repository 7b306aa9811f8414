//! Fault injection seen from a client: injected 429s with Retry-After, 500s, latency.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kerf_loadtest::apiserver::InjectedError;
use kube::api::{Api, ListParams};

use crate::support::{code, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_errors_reach_the_client() {
    let h = start().await;
    let maps: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    h.server.faults().fail_requests(
        1.0,
        InjectedError::TooManyRequests {
            retry_after_secs: 1,
        },
    );
    let err = maps
        .list(&ListParams::default())
        .await
        .expect_err("throttled");
    assert_eq!(code(&err), 429);
    h.server
        .faults()
        .fail_requests(1.0, InjectedError::ServerError);
    assert_eq!(code(&maps.get("x").await.expect_err("failing")), 500);
    h.server.faults().clear();
    h.server.faults().set_latency(Duration::from_millis(50));
    let started = std::time::Instant::now();
    maps.list(&ListParams::default())
        .await
        .expect("slow but fine");
    assert!(started.elapsed() >= Duration::from_millis(50));
    h.server.faults().clear();
    assert_eq!(h.server.faults().injected_failures(), 2);
    h.stop().await;
}
