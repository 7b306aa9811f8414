//! Garbage collection between the cloud and the cluster, generic over [`CloudProvider`]:
//! - machines this cluster launched that no NodeClaim accounts for, older than
//!   [`MIN_MACHINE_AGE`], are deleted with their Node if one registered (upstream's AWS
//!   garbage collection). A NodeClaim accounts for a machine by its providerID or, while it
//!   has none, by the machine's NodeClaim tag, so a launch whose answer was not recorded is
//!   adopted by the next launch step rather than collected;
//! - launched NodeClaims whose machine is gone and whose Node is not Ready are deleted
//!   (upstream's core garbage collection), one that never registered first getting
//!   `Registered=False` saying so rather than waiting out the registration timeout.
//!
//! It runs once cluster state has synced, every [`EARLY_PERIOD`] for its first
//! [`EARLY_RUNS`] passes (leaks from before a restart), then every [`PERIOD`]. Machines are
//! listed before cluster state is read, so a NodeClaim written meanwhile is seen. Only the
//! leader collects.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use kerf::api::NodeClaim;
use kerf::api::condition::types;
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use tokio::sync::watch;

use crate::lifecycle::conditions::ConditionSet;
use crate::periodic::Pass;
use crate::state::ClusterState;

/// Upstream's controller name: the `controller` label of the cloud provider metrics of
/// the calls garbage collection makes.
pub const CONTROLLER: &str = "nodeclaim.garbagecollection";

/// Machines younger than this are never collected: their NodeClaim may not record them yet.
pub const MIN_MACHINE_AGE: Duration = Duration::from_secs(30);
/// The period of the first passes.
pub const EARLY_PERIOD: Duration = Duration::from_secs(10);
/// Passes run at [`EARLY_PERIOD`] before slowing down to [`PERIOD`].
pub const EARLY_RUNS: u32 = 20;
/// The period afterwards.
pub const PERIOD: Duration = Duration::from_secs(120);

/// What one pass removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    /// providerIDs of the machines deleted.
    pub machines: Vec<String>,
    /// Names of the NodeClaims deleted.
    pub node_claims: Vec<String>,
}

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("listing the cloud provider's machines: {0}")]
    List(#[source] CloudProviderError),
    #[error("deleting machine {provider_id}: {source}")]
    DeleteMachine {
        provider_id: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("checking machine {provider_id} of nodeclaim {node_claim}: {source}")]
    GetMachine {
        node_claim: String,
        provider_id: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("deleting {kind} {name}: {source}")]
    DeleteObject {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
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
        controller: crate::metrics::controller::NODECLAIM_GARBAGE_COLLECTION,
        what: "garbage collection",
    };
    let period = |completed| {
        if completed < EARLY_RUNS {
            EARLY_PERIOD
        } else {
            PERIOD
        }
    };
    let st = Arc::clone(&state);
    crate::periodic::run(pass, state, leader, shutdown, period, || {
        let (client, state, cloud) = (client.clone(), Arc::clone(&st), Arc::clone(&cloud));
        async move {
            let collected = collect(&client, &state, &*cloud).await?;
            if collected != Collected::default() {
                tracing::info!(
                    machines = collected.machines.join(", "),
                    nodeclaims = collected.node_claims.join(", "),
                    "garbage collected"
                );
            }
            Ok::<(), CollectError>(())
        }
    })
    .await;
}

/// One pass.
pub async fn collect(
    client: &Client,
    state: &ClusterState,
    cloud: &dyn CloudProvider,
) -> Result<Collected, CollectError> {
    let listed = cloud.list().await.map_err(CollectError::List)?;
    let now = SystemTime::now();
    let claims = state.nodeclaims.snapshot();
    let owners = Owners::of(&claims);
    let mut collected = Collected::default();
    for machine in listed.iter().filter(|m| is_leaked(m, &owners, now)) {
        let provider_id = machine.provider_id().unwrap_or_default().to_owned();
        match cloud.delete(machine).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => continue,
            Err(source) => {
                return Err(CollectError::DeleteMachine {
                    provider_id,
                    source,
                });
            }
        }
        tracing::info!(provider_id, "deleted machine with no nodeclaim");
        delete_nodes_of(client, state, &provider_id).await?;
        collected.machines.push(provider_id);
    }

    let live: HashSet<&str> = listed
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter_map(|m| m.provider_id())
        .collect();
    for claim in claims.iter().filter(|c| lost_machine(c, &live)) {
        if node_is_ready(state, claim) {
            continue;
        }
        let Some(gone) = machine_gone(cloud, claim).await? else {
            continue;
        };
        let name = claim.name().to_owned();
        if !claim.is_condition_true(types::REGISTERED) {
            record_never_registered(client, claim, &gone).await;
        }
        match Api::<NodeClaim>::all(client.clone())
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(source) => {
                return Err(CollectError::DeleteObject {
                    kind: "NodeClaim",
                    name,
                    source,
                });
            }
        }
        tracing::info!(
            nodeclaim = name,
            provider_id = claim.provider_id().unwrap_or_default(),
            "deleted nodeclaim whose machine is gone"
        );
        collected.node_claims.push(name);
    }
    Ok(collected)
}

/// What the cluster's NodeClaims account for: the machines they recorded, and the names of
/// those still launching (no providerID yet, not being deleted), which own the machine
/// tagged with their name.
struct Owners<'a> {
    recorded: HashSet<&'a str>,
    launching: HashSet<&'a str>,
}

impl<'a> Owners<'a> {
    fn of(claims: &'a [Arc<NodeClaim>]) -> Self {
        let recorded = claims.iter().filter_map(|c| c.provider_id()).collect();
        let launching = claims
            .iter()
            .filter(|c| c.provider_id().is_none() && c.metadata.deletion_timestamp.is_none())
            .map(|c| c.name())
            .collect();
        Self {
            recorded,
            launching,
        }
    }

    fn own(&self, machine: &NodeClaim, provider_id: &str) -> bool {
        self.recorded.contains(provider_id) || self.launching.contains(machine.name())
    }
}

/// A live machine no NodeClaim accounts for, old enough to be sure none will.
fn is_leaked(machine: &NodeClaim, owners: &Owners<'_>, now: SystemTime) -> bool {
    let Some(provider_id) = machine.provider_id() else {
        return false;
    };
    let old_enough = machine
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| now.duration_since(SystemTime::from(t.0)).ok())
        .is_some_and(|age| age >= MIN_MACHINE_AGE);
    machine.metadata.deletion_timestamp.is_none() && !owners.own(machine, provider_id) && old_enough
}

/// A launched (or registered, which implies it), live NodeClaim whose machine the cloud no
/// longer lists.
fn lost_machine(claim: &NodeClaim, live: &HashSet<&str>) -> bool {
    claim.metadata.deletion_timestamp.is_none()
        && (claim.is_condition_true(types::LAUNCHED) || claim.is_condition_true(types::REGISTERED))
        && claim.provider_id().is_some_and(|p| !live.contains(p))
}

/// The reason `Registered` is false on a NodeClaim whose machine ended before its Node
/// registered.
pub const INSTANCE_TERMINATED_REASON: &str = "InstanceTerminated";

/// Says on the NodeClaim why it goes: its machine ended before registering (`why` is the
/// cloud's account of it). Best effort: the deletion follows either way.
async fn record_never_registered(client: &Client, claim: &NodeClaim, why: &str) {
    let message = format!(
        "instance {} ended before its Node registered ({why}); if every launch ends so, check the EC2NodeClass's block device mappings and their KMS key (the node role and the EBS service need kms:CreateGrant and kms:Decrypt)",
        claim.provider_id().unwrap_or_default()
    );
    tracing::warn!(nodeclaim = claim.name(), "{message}");
    let mut set = ConditionSet::new(
        claim.conditions(),
        claim.metadata.generation,
        k8s_openapi::jiff::Timestamp::now(),
    );
    set.set_false(types::REGISTERED, INSTANCE_TERMINATED_REASON, &message);
    let body = serde_json::json!({"status": {"conditions": set.into_vec()}});
    if let Err(error) = Api::<NodeClaim>::all(client.clone())
        .patch_status(claim.name(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        tracing::debug!(nodeclaim = claim.name(), %error, "recording a machine that never registered");
    }
}

/// Whether the kubelet still reports the claim's Node Ready (then the machine is alive,
/// whatever the cloud's listing says).
fn node_is_ready(state: &ClusterState, claim: &NodeClaim) -> bool {
    let provider_id = claim.provider_id();
    state.nodes.snapshot().iter().any(|node| {
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == provider_id
            && node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
}

/// Asks the cloud once more, by providerID (a listing can lag behind a launch): the cloud's
/// account of why the machine is gone, or `None` while it lives.
async fn machine_gone(
    cloud: &dyn CloudProvider,
    claim: &NodeClaim,
) -> Result<Option<String>, CollectError> {
    let provider_id = claim.provider_id().unwrap_or_default();
    match cloud.get(provider_id).await {
        Ok(_) => Ok(None),
        Err(CloudProviderError::NodeClaimNotFound { reason, .. }) => Ok(Some(reason)),
        Err(source) => Err(CollectError::GetMachine {
            node_claim: claim.name().to_owned(),
            provider_id: provider_id.to_owned(),
            source,
        }),
    }
}

/// Deletes the Nodes a deleted machine registered, so pods do not wait for the node
/// lifecycle controller to notice.
async fn delete_nodes_of(
    client: &Client,
    state: &ClusterState,
    provider_id: &str,
) -> Result<(), CollectError> {
    let nodes: Api<Node> = Api::all(client.clone());
    for node in state.nodes.snapshot() {
        if node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) != Some(provider_id) {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        match nodes.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(
                node = name,
                provider_id,
                "deleted node of collected machine"
            ),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(CollectError::DeleteObject {
                    kind: "Node",
                    name,
                    source,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(provider_id: &str, created: &str, deleting: bool) -> NodeClaim {
        claim("x", Some(provider_id), created, deleting)
    }

    fn claim(name: &str, provider_id: Option<&str>, created: &str, deleting: bool) -> NodeClaim {
        let mut meta = json!({"name": name, "creationTimestamp": created});
        if deleting {
            meta["deletionTimestamp"] = json!(created);
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta,
            "spec": {"requirements": [], "nodeClassRef":
                {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"providerID": provider_id},
        }))
        .expect("test machine parses")
    }

    fn at(text: &str) -> SystemTime {
        let ts: k8s_openapi::jiff::Timestamp = text.parse().expect("timestamp");
        SystemTime::from(ts)
    }

    #[test]
    fn only_old_unknown_live_machines_are_leaked() {
        let now = at("2024-01-01T00:01:00Z");
        let claims = [Arc::new(machine(
            "aws:///a/i-known",
            "2024-01-01T00:00:00Z",
            false,
        ))];
        let owners = Owners::of(&claims);
        assert!(is_leaked(
            &machine("aws:///a/i-1", "2024-01-01T00:00:00Z", false),
            &owners,
            now
        ));
        // Launched 10 s ago: its NodeClaim may not have recorded it yet.
        assert!(!is_leaked(
            &machine("aws:///a/i-1", "2024-01-01T00:00:50Z", false),
            &owners,
            now
        ));
        assert!(!is_leaked(
            &machine("aws:///a/i-known", "2024-01-01T00:00:00Z", false),
            &owners,
            now
        ));
        assert!(!is_leaked(
            &machine("aws:///a/i-1", "2024-01-01T00:00:00Z", true),
            &owners,
            now
        ));
    }

    #[test]
    fn a_machine_tagged_for_a_claim_still_launching_is_its_claims() {
        let now = at("2024-01-01T00:05:00Z");
        let old = "2024-01-01T00:00:00Z";
        // Launched by a leader that stepped down before recording it: the claim has no
        // providerID, and the next leader's launch step adopts the machine by its tag.
        let launching = [Arc::new(claim("web-abc", None, old, false))];
        let unrecorded = claim("web-abc", Some("aws:///a/i-1"), old, false);
        assert!(!is_leaked(&unrecorded, &Owners::of(&launching), now));
        // A claim being deleted owns nothing more: its machine is collected.
        let deleting = [Arc::new(claim("web-abc", None, old, true))];
        assert!(is_leaked(&unrecorded, &Owners::of(&deleting), now));
        // A claim that recorded another machine does not own this one by name.
        let recorded = [Arc::new(claim("web-abc", Some("aws:///a/i-2"), old, false))];
        assert!(is_leaked(&unrecorded, &Owners::of(&recorded), now));
    }

    #[test]
    fn only_registered_claims_can_have_lost_their_machine() {
        let mut claim = machine("aws:///a/i-1", "2024-01-01T00:00:00Z", false);
        let live = HashSet::new();
        assert!(!lost_machine(&claim, &live));
        claim.status = serde_json::from_value(json!({"providerID": "aws:///a/i-1",
            "conditions": [{"type": "Registered", "status": "True",
                "lastTransitionTime": "2024-01-01T00:00:00Z"}]}))
        .expect("status parses");
        assert!(lost_machine(&claim, &live));
        assert!(!lost_machine(&claim, &HashSet::from(["aws:///a/i-1"])));
    }
}
