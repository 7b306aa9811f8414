//! The disruption decision's input from cluster state, built by the code `kerf plan
//! --disruption` uses (the Provisioner's inventory of the store, `kerf::plan::snapshot`,
//! `kerf::plan::disruption::cluster`), so the controller decides on what the plan would
//! print for the same objects. Nodes held by commands in flight count as deleting: they are
//! no candidates, and they count against their NodePools' budgets, as upstream's
//! `MarkedForDeletion` nodes do. Replacements carry at most the Provisioner's
//! [`MAX_INSTANCE_TYPES`], as every NodeClaim kerf creates.

use kerf::catalog::Catalog;
use kerf::disruption::Cluster;
use kerf::plan::ControllerSettings;
use kerf::plan::snapshot;

use crate::orchestrator::InQueue;
use crate::provisioner::MAX_INSTANCE_TYPES;
use crate::provisioner::inventory;
use crate::state::ClusterState;

/// The cluster as the decision sees it now; `Err` names why a snapshot cannot be built.
pub fn build(
    state: &ClusterState,
    catalog: &Catalog,
    controller: ControllerSettings,
    in_queue: &InQueue,
) -> Result<Cluster, String> {
    let inventory = inventory::of(state, Vec::new());
    let snapshot = snapshot::build(&inventory, catalog, controller).map_err(|e| e.to_string())?;
    let mut cluster = kerf::plan::disruption::cluster(&inventory, snapshot);
    cluster.scheduling.options.max_instance_types = MAX_INSTANCE_TYPES;
    for node in &mut cluster.nodes {
        if in_queue.holds_node(&node.name) {
            node.deleting = true;
        }
    }
    Ok(cluster)
}
