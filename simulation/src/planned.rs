//! The yardstick for what a simulation launched: the NodeClaims `kerf plan` computes for the
//! same objects (the applied NodePools, node classes and workload, nothing running yet),
//! with the same core code — snapshot, then one solve. A controller that provisions across
//! several rounds while capacity is in flight should end close to this count; the summary
//! reports both and their ratio.

use kerf::catalog::Catalog;
use kerf::cluster::inventory::Inventory;
use kerf::cluster::{ControllerSettings, snapshot};
use kerf::scheduling;

use super::defaults::REGION;

/// How many NodeClaims `kerf plan` would create for `inventory`, or why it cannot say.
pub fn node_claims(inventory: &Inventory) -> Result<usize, String> {
    let catalog = Catalog::embedded(REGION).map_err(|e| e.to_string())?;
    let mut snapshot = snapshot::build(inventory, &catalog, ControllerSettings::default())
        .map_err(|e| e.to_string())?;
    // A static pool's NodeClaims are its replicas, never planned for pods.
    let statics: Vec<&str> = inventory
        .node_pools
        .iter()
        .filter(|p| p.is_static())
        .map(|p| p.name())
        .collect();
    snapshot
        .input
        .node_pools
        .retain(|p| !statics.contains(&p.name.as_str()));
    let result = scheduling::solve(&snapshot.input).map_err(|e| e.to_string())?;
    Ok(result.new_node_claims.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{Sources, read};

    #[test]
    fn the_default_workload_plans_as_kerf_plan_does() {
        let inputs = read(&Sources {
            pods: 40,
            nodepools: Vec::new(),
            workload: Vec::new(),
        })
        .expect("defaults read");
        let objects: Vec<_> = inputs
            .setup
            .iter()
            .chain(&inputs.workload)
            .cloned()
            .collect();
        let plan = kerf::plan::plan(&objects, &kerf::plan::PlanOptions::default())
            .expect("kerf plan runs");
        assert_eq!(
            node_claims(&inputs.inventory),
            Ok(plan.report.node_claims.len())
        );
        assert!(
            plan.report.node_claims.len() >= 2,
            "the cache pods need a host each"
        );
    }
}
