//! A create that panics answers its caller with an error and is reported to the
//! supervision scope, as the actor's own panics are.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

use kerf::scheduling::{InstanceTypeOptions, Resources};
use serde_json::json;

use super::*;
use crate::supervisor::{self, Supervision};

/// Stands for a bug anywhere in the create's body: the API answer's future panics there.
fn a_bug() -> http::Response<kube::client::Body> {
    panic!("a bug while creating the NodeClaim")
}

fn panicking_client() -> Client {
    let answer = tower::service_fn(|_: http::Request<kube::client::Body>| async {
        Ok::<_, Infallible>(a_bug())
    });
    Client::new(answer, "default")
}

fn create() -> CreateNodeClaim {
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        }}}
    }))
    .expect("a valid NodePool");
    CreateNodeClaim {
        claim: PlannedNodeClaim {
            node_pool: "default".to_owned(),
            instance_types: InstanceTypeOptions(Arc::from(Vec::new())),
            instance_type_min_values: None,
            min_values_relaxed: false,
            requirements: Vec::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            requests: Resources::default(),
            pods: Vec::new(),
            launch: None,
        },
        pool: Arc::new(pool),
        reason: CREATED_REASON_PROVISIONING,
    }
}

#[test]
fn a_panicking_create_answers_an_error_and_is_reported_to_the_scope() {
    let scope = Supervision::with_backoff(Duration::from_millis(1));
    let run = scope.clone();
    supervisor::system(1)
        .expect("runtime builds")
        .block_on(run.scope(async {
            let depth = MailboxDepth::new("nodeclaim-creator-panic-test", 8);
            let creator = NodeClaimCreator::new(panicking_client(), depth.clone());
            let actor = supervisor::start_here(NAME, depth, supervisor::once(creator));
            let answer = actor.addr().send(create()).await;
            assert!(
                matches!(
                    &answer,
                    Ok(Err(CreateError::Panicked(message)))
                        if message == "a bug while creating the NodeClaim"
                ),
                "{answer:?}"
            );
        }));
    assert_eq!(scope.recent_restarts(NAME), 1, "counted against the budget");
}
