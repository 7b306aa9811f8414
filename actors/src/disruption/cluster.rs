//! The disruption decision's input from cluster state, built by the code `kerf plan
//! --disruption` uses (the Provisioner's inventory of the store, `kerf::cluster::snapshot`,
//! `kerf::cluster::disruption::cluster`), so the controller decides on what the plan would
//! print for the same objects. Nodes held by commands in flight count as deleting: they are
//! no candidates, and they count against their NodePools' budgets, as upstream's
//! `MarkedForDeletion` nodes do. So does a Node no NodeClaim names (`status.nodeName`):
//! unlike `kerf plan`'s input, where a labelled Node may stand for its NodeClaim, in the
//! controller that Node's NodeClaim is gone and its termination is under way, and upstream
//! takes only nodes with both objects as candidates. Replacements carry at most the
//! Provisioner's [`MAX_INSTANCE_TYPES`], as every NodeClaim kerf creates, and come from the
//! instance types the Provisioner would use now: offerings the OfferingCache holds as
//! unavailable are neither planned on nor priced, so a consolidation never replaces a node
//! with capacity EC2 just refused.

use std::collections::HashSet;

use kerf::cluster::ControllerSettings;
use kerf::cluster::snapshot::{self, InstanceTypeSource};
use kerf::disruption::Cluster;

use crate::created_claims::Nominated;
use crate::orchestrator::InQueue;
use crate::provisioner::MAX_INSTANCE_TYPES;
use crate::provisioner::inventory;
use crate::state::ClusterState;

/// The cluster as the decision sees it now; `Err` names why a snapshot cannot be built.
pub fn build(
    state: &ClusterState,
    types: &mut dyn InstanceTypeSource,
    controller: ControllerSettings,
    in_queue: &InQueue,
    nominated: &Nominated,
) -> Result<Cluster, String> {
    // Held nodes are read before the store: a command releases its nodes only once the
    // store shows their NodeClaims deleting, so a node released after this read is seen
    // deleting below, and none slips between the two reads into a second command.
    let held = in_queue.nodes();
    let inventory = inventory::of(state, Vec::new());
    let snapshot =
        snapshot::build_with(&inventory, controller, types).map_err(|e| e.to_string())?;
    let mut cluster = kerf::cluster::disruption::cluster(&inventory, snapshot);
    cluster.scheduling.options.max_instance_types = MAX_INSTANCE_TYPES;
    let claimed: HashSet<&str> = inventory
        .node_claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
        .collect();
    for node in &mut cluster.nodes {
        if held.contains(&node.name) || !claimed.contains(node.name.as_str()) {
            node.deleting = true;
        }
        node.nominated = nominated.contains(&node.name, &node.node_claim);
    }
    Ok(cluster)
}
