//! Demotion of NodeClaims and Nodes that left their capacity reservation, as upstream's
//! `capacityreservation.capacitytype` controller: when an On-Demand Capacity Reservation
//! ends, EC2 keeps its instances running as plain on-demand ones, and the cloud provider
//! then lists them as `on-demand`. Every [`PERIOD`] the leader lists the cloud's machines
//! and relabels each live NodeClaim labelled `karpenter.sh/capacity-type=reserved` whose
//! machine the cloud now calls `on-demand`, and its registered Node: capacity type
//! `on-demand`, the `karpenter.k8s.aws/capacity-reservation-*` labels removed. Only that
//! direction is synced, as upstream (an on-demand instance never becomes reserved). Pricing
//! and consolidation then see the node at its on-demand price.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kerf::api::NodeClaim;
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kerf::labels;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use crate::periodic::Pass;
use crate::state::ClusterState;

/// Upstream's controller name (reconcile metrics).
pub const CONTROLLER: &str = "capacityreservation.capacitytype";
/// How often the machines are listed: upstream requeues the controller every minute.
pub const PERIOD: Duration = Duration::from_secs(60);

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoteError {
    #[error("listing the cloud provider's machines: {0}")]
    List(#[source] CloudProviderError),
    #[error("relabelling {kind} {name} on-demand: {source}")]
    Patch {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What one pass relabelled.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Demoted {
    pub node_claims: Vec<String>,
    pub nodes: Vec<String>,
}

fn is_reserved(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(labels::CAPACITY_TYPE))
        .is_some_and(|c| c == labels::CAPACITY_TYPE_RESERVED)
}

/// The merge patch relabelling an object on-demand.
pub fn demotion_patch() -> serde_json::Value {
    serde_json::json!({"metadata": {"labels": {
        labels::CAPACITY_TYPE: labels::CAPACITY_TYPE_ON_DEMAND,
        labels::CAPACITY_RESERVATION_ID: null,
        labels::CAPACITY_RESERVATION_TYPE: null,
        labels::CAPACITY_RESERVATION_INTERRUPTIBLE: null,
    }}})
}

/// One pass.
pub async fn demote(
    client: &Client,
    state: &ClusterState,
    cloud: &dyn CloudProvider,
) -> Result<Demoted, DemoteError> {
    let listed = cloud.list().await.map_err(DemoteError::List)?;
    let on_demand: HashMap<&str, ()> = listed
        .iter()
        .filter(|m| {
            m.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::CAPACITY_TYPE))
                .is_some_and(|c| c == labels::CAPACITY_TYPE_ON_DEMAND)
        })
        .filter_map(|m| m.provider_id().map(|p| (p, ())))
        .collect();
    let mut demoted = Demoted::default();
    let patch = Patch::Merge(demotion_patch());
    let claims: Api<NodeClaim> = Api::all(client.clone());
    for claim in state.nodeclaims.snapshot().iter().filter(|c| {
        c.metadata.deletion_timestamp.is_none()
            && is_reserved(c.metadata.labels.as_ref())
            && c.provider_id().is_some_and(|p| on_demand.contains_key(p))
    }) {
        let name = claim.name().to_owned();
        match claims.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => demoted.node_claims.push(name),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(DemoteError::Patch {
                    kind: "NodeClaim",
                    name,
                    source,
                });
            }
        }
    }
    // Nodes on their own: one whose NodeClaim was demoted before it registered.
    let nodes: Api<Node> = Api::all(client.clone());
    for node in state.nodes.snapshot().iter().filter(|n| {
        n.metadata.deletion_timestamp.is_none()
            && is_reserved(n.metadata.labels.as_ref())
            && n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::REGISTERED))
                .is_some_and(|v| v == "true")
            && n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| on_demand.contains_key(p))
    }) {
        let name = node.metadata.name.clone().unwrap_or_default();
        match nodes.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => demoted.nodes.push(name),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(DemoteError::Patch {
                    kind: "Node",
                    name,
                    source,
                });
            }
        }
    }
    Ok(demoted)
}

/// Runs the passes while leading until `shutdown` ([`crate::periodic`]).
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    cloud: Arc<dyn CloudProvider>,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let pass = Pass {
        controller: CONTROLLER,
        what: "capacity type",
    };
    let st = Arc::clone(&state);
    crate::periodic::run(
        pass,
        state,
        leader,
        shutdown,
        |_| PERIOD,
        || {
            let (client, state, cloud) = (client.clone(), Arc::clone(&st), Arc::clone(&cloud));
            async move {
                let demoted = demote(&client, &state, &*cloud).await?;
                if demoted != Demoted::default() {
                    tracing::info!(
                        nodeclaims = demoted.node_claims.join(", "),
                        nodes = demoted.nodes.join(", "),
                        "relabelled on-demand: their capacity reservation ended"
                    );
                }
                Ok::<(), DemoteError>(())
            }
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_sets_on_demand_and_removes_every_reservation_label() {
        let patch = demotion_patch();
        let labels = &patch["metadata"]["labels"];
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
        for key in [
            "karpenter.k8s.aws/capacity-reservation-id",
            "karpenter.k8s.aws/capacity-reservation-type",
            "karpenter.k8s.aws/capacity-reservation-interruptible",
        ] {
            assert!(labels[key].is_null(), "{key}");
        }
    }
}
