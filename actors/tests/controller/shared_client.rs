//! The controller's client is shared by actors each on an arbiter of its own. A connection
//! one arbiter's request opened is lent to the others' requests by the client's pool: those
//! must not depend on that arbiter's thread running (it may be busy, blocked or stopped).

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::Api;

use crate::support::*;

/// How long the arbiter that opened the connection stays blocked: far longer than
/// [`PATIENCE`], so a request that needs its thread cannot finish in time.
const BLOCKED: Duration = Duration::from_secs(120);

/// Reads the `default` namespace through `client` from a task on `arbiter`.
async fn read_from(arbiter: &actix::Arbiter, client: Client) -> Result<Namespace, kube::Error> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let spawned = arbiter.spawn(async move {
        let namespaces: Api<Namespace> = Api::all(client);
        let _ = answer.send(namespaces.get("default").await);
    });
    assert!(spawned, "the arbiter runs");
    answered.await.expect("the arbiter answers")
}

#[test]
fn a_request_is_answered_while_the_arbiter_that_opened_its_connection_is_blocked() {
    run(|| async {
        let harness = start_cluster().await;
        let kubeconfig = std::env::temp_dir().join(format!(
            "kerf-shared-client-{}-{}.kubeconfig",
            std::process::id(),
            harness.server.addr().port()
        ));
        harness
            .server
            .write_kubeconfig(&kubeconfig)
            .expect("kubeconfig written");
        // A client of its own: its pool is empty until the first arbiter's request.
        let config = config_as(&kubeconfig, ADMIN_TOKEN).await;
        let _ = std::fs::remove_file(&kubeconfig);
        let client = kerf_actors::client::build(config, 100_000, 100_000).expect("client");
        let opener = actix::Arbiter::new();
        let borrower = actix::Arbiter::new();
        read_from(&opener, client.clone())
            .await
            .expect("the first request opens the pool's connection");
        // The opener's thread blocks (as an actor busy with a long synchronous step would)...
        let (release, released) = std::sync::mpsc::channel::<()>();
        opener.spawn(async move {
            let _ = released.recv_timeout(BLOCKED);
        });
        // ...while the other arbiter's request borrows the idle connection it opened.
        let answered = tokio::time::timeout(PATIENCE, read_from(&borrower, client.clone())).await;
        let _ = release.send(());
        opener.stop();
        borrower.stop();
        let namespace = answered
            .expect("answered while the arbiter that opened the connection is blocked")
            .expect("read");
        assert_eq!(namespace.metadata.name.as_deref(), Some("default"));
        harness.stop().await;
    });
}
