//! `kerf plan`'s core: from parsed Kubernetes manifests, read into the cluster's inventory
//! and snapshot ([`crate::cluster`]), to the scheduler's solve (one round or several,
//! [`rounds`]), the advice about the input ([`crate::advice`]), and the report users read
//! ([`report`]), with the disruption loop's decisions when asked.

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod report;
mod rounds;

use crate::advice;
use crate::api::NodePool;
use crate::catalog::{Catalog, CatalogError};
use crate::cluster::{
    ControllerSettings, ObjectProblem, SnapshotError, disruption, inventory, snapshot,
};
use crate::feature_gates::FeatureGates;
use crate::manifest::Object;
use crate::scheduling::{
    ExistingNodePlacement, PlannedNodeClaim, SchedulingError, SchedulingInput, SchedulingResult,
};

pub use report::PlanReport;

/// What a plan depends on besides the manifests.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOptions {
    /// The region whose catalog (instance types, zones, prices) is used.
    pub region: String,
    pub controller: ControllerSettings,
    /// Also decide what the disruption loop would remove or replace (`--disruption`).
    pub disruption: Option<crate::disruption::Options>,
    /// How long the disruption decision may search ([`crate::disruption::decide_within`]);
    /// `None`: until a pass finds nothing to do.
    pub disruption_limit: Option<std::time::Duration>,
    /// Provisioning rounds to run at most (`--rounds`; see [`rounds`]); 1 is one solve.
    pub rounds: usize,
    /// `FEATURE_GATES` as the controller reads them (`StaticCapacity` plans static pools).
    pub feature_gates: FeatureGates,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            region: "us-east-1".into(),
            controller: ControllerSettings::default(),
            disruption: None,
            disruption_limit: None,
            rounds: 1,
            feature_gates: FeatureGates::default(),
        }
    }
}

/// A plan and what the user should hear about the input besides it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOutcome {
    pub report: PlanReport,
    /// `FILE: KIND/NAME` of each object of a kind a plan does not read.
    pub ignored: Vec<String>,
    pub warnings: Vec<String>,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Objects the API server (or upstream's controller) would refuse; all of them.
    #[error("{}", lines(.0))]
    InvalidInput(Vec<ObjectProblem>),
    /// A field the inventory's checks let through but the snapshot could not use.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("--region: {0}")]
    Region(#[source] CatalogError),
    #[error("scheduling: {0}")]
    Scheduling(#[from] SchedulingError),
    #[error("disruption: {0}")]
    Disruption(#[from] crate::disruption::DisruptionError),
}

fn lines(problems: &[ObjectProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Plans the manifests' pending pods: reads and checks every object, builds the cluster
/// snapshot, runs the scheduler (once, or `options.rounds` rounds) and reports its decisions; with `options.disruption`,
/// also what the disruption loop would remove or replace.
pub fn plan(objects: &[Object], options: &PlanOptions) -> Result<PlanOutcome, PlanError> {
    let inventory = inventory::inventory(objects).map_err(PlanError::InvalidInput)?;
    plan_inventory(inventory, options)
}

/// Plans an inventory already read (see [`inventory::Builder`], which reads a manifest
/// stream without holding it).
pub fn plan_inventory(
    inventory: inventory::Inventory,
    options: &PlanOptions,
) -> Result<PlanOutcome, PlanError> {
    plan_live(inventory, options, &Controller::default())
}

/// What only a running controller knows and a plan of a live cluster takes into account
/// (`kerf explain` reads it from the controller's `/explain` endpoint).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Controller {
    /// Offerings whose launch recently failed (the unavailable-offerings cache): planned
    /// around, as the controller's rounds do.
    pub unavailable: Vec<crate::cloudprovider::OfferingRef>,
    /// Whole capacity types marked unavailable (spot without its service-linked role).
    pub unavailable_capacity_types: std::collections::BTreeSet<String>,
    /// Nodes (or their NodeClaims) a recent round nominated for pending pods: no
    /// disruption candidates while the nomination lasts.
    pub nominated: std::collections::BTreeSet<String>,
}

/// The catalog, with the reservations in each class's status, and the offerings `controller`
/// knows unavailable marked so.
struct WithUnavailable<'a> {
    catalog: &'a Catalog,
    controller: &'a Controller,
}

impl Controller {
    fn marks_any(&self) -> bool {
        !self.unavailable.is_empty() || !self.unavailable_capacity_types.is_empty()
    }
}

impl snapshot::InstanceTypeSource for WithUnavailable<'_> {
    fn resolve(
        &mut self,
        _class_name: &str,
        class: Option<&crate::api::EC2NodeClass>,
        settings: &crate::catalog::AllocatableSettings,
    ) -> std::sync::Arc<[crate::catalog::InstanceType]> {
        let mut types = snapshot::catalog_types(self.catalog, class, settings);
        if self.controller.marks_any() {
            for it in &mut types {
                for offering in &mut it.offerings {
                    let capacity_type = offering.capacity_type.as_str();
                    if self
                        .controller
                        .unavailable_capacity_types
                        .contains(capacity_type)
                        || self.controller.unavailable.iter().any(|u| {
                            u.instance_type == it.name
                                && u.zone == offering.zone
                                && u.capacity_type == capacity_type
                        })
                    {
                        offering.available = false;
                    }
                }
            }
        }
        types.into()
    }
}

/// [`plan_inventory`] of a live cluster, with what its `controller` knows.
pub fn plan_live(
    mut inventory: inventory::Inventory,
    options: &PlanOptions,
    controller: &Controller,
) -> Result<PlanOutcome, PlanError> {
    let catalog = Catalog::embedded(&options.region).map_err(PlanError::Region)?;
    if !options.feature_gates.reserved_capacity {
        // As the controller: with the gate off no reservation is resolved or launched into.
        for class in &mut inventory.node_classes {
            if let Some(status) = class.status.as_mut() {
                status.capacity_reservations.clear();
            }
        }
    }
    let pod_facts = advice::PodFacts::of(&inventory.pods);
    // The pods are most of a plan's memory: the snapshot takes them unless disruption reads
    // them from the inventory too.
    let mut source = WithUnavailable {
        catalog: &catalog,
        controller,
    };
    let mut snapshot = if options.disruption.is_some() || controller.marks_any() {
        snapshot::build_with(&inventory, options.controller, &mut source)?
    } else {
        snapshot::build_taking_pods(&mut inventory, &catalog, options.controller)?
    };
    let ignored = std::mem::take(&mut inventory.ignored);
    let mut warnings = std::mem::take(&mut inventory.warnings);
    warnings.append(&mut snapshot.warnings);
    warnings.extend(
        inventory
            .node_classes
            .iter()
            .filter_map(snapshot::reservation_count_warning),
    );
    warnings.extend(advice::warnings(
        &inventory,
        &pod_facts,
        &snapshot.input,
        &catalog,
        options.controller.reserved_enis,
    ));
    // The snapshot holds what the solve reads: unless disruption reads the inventory too, the
    // inputs' memory goes before the solve runs.
    let statics: Vec<String> = inventory
        .node_pools
        .iter()
        .filter(|p| p.is_static())
        .map(|p| p.name().to_owned())
        .collect();
    let held = StaticPlan::hold(
        &mut snapshot.input,
        &inventory.node_pools,
        options.feature_gates,
        &mut warnings,
    )?;
    let disruption_input = options.disruption.map(|o| (o, inventory));
    let solved = rounds::solve(&snapshot.input, options.rounds);
    let (result, rounds) = held.release(&mut snapshot.input, solved)?;
    let mut report = PlanReport::from_result(&result, &snapshot.input.pods);
    for claim in &mut report.node_claims {
        claim.replica = statics.contains(&claim.node_pool);
    }
    report.summary.rounds = rounds;
    if let Some((disruption_options, inventory)) = disruption_input {
        let mut cluster = disruption::cluster(&inventory, snapshot);
        for node in &mut cluster.nodes {
            node.nominated = controller.nominated.contains(&node.name)
                || controller.nominated.contains(&node.node_claim);
        }
        report.disruption = Some(match options.disruption_limit {
            Some(limit) => crate::disruption::decide_within(&cluster, disruption_options, limit)?,
            None => crate::disruption::decide(&cluster, disruption_options)?,
        });
    }
    Ok(PlanOutcome {
        report,
        ignored,
        warnings,
    })
}

/// Static NodePools in a plan. They leave the solve (their size is their replicas, as in the
/// controller); under `StaticCapacity` each is planned up to its replicas (`limits.nodes`
/// permitting) with NodeClaims of its template, which join the solve as launched nodes the
/// pending pods may use and appear in the report with the pods placed on them. Without the
/// gate upstream neither provisions nor scales a static pool, and the plan says so.
struct StaticPlan {
    /// The static pools' inputs, taken out of the solve's.
    pools: Vec<crate::scheduling::NodePoolInput>,
    /// Existing nodes before the planned replicas were added.
    existing: usize,
    /// Each planned replica: its node's name in the solve and its NodeClaim.
    replicas: Vec<(String, PlannedNodeClaim)>,
}

impl StaticPlan {
    fn hold(
        input: &mut SchedulingInput,
        pools: &[NodePool],
        gates: FeatureGates,
        warnings: &mut Vec<String>,
    ) -> Result<Self, PlanError> {
        let is_static = |name: &str| pools.iter().any(|p| p.name() == name && p.is_static());
        let (statics, dynamic) = std::mem::take(&mut input.node_pools)
            .into_iter()
            .partition(|p| is_static(&p.name));
        input.node_pools = dynamic;
        let mut plan = StaticPlan {
            pools: statics,
            existing: input.existing_nodes.len(),
            replicas: Vec::new(),
        };
        for pool_input in &plan.pools {
            let Some(pool) = pools.iter().find(|p| p.name() == pool_input.name) else {
                continue;
            };
            if !gates.static_capacity {
                warnings.push(format!(
                    "NodePool {}: spec.replicas is ignored with the StaticCapacity feature gate off, as upstream ignores it (--feature-gates StaticCapacity=true)",
                    pool.name()
                ));
                continue;
            }
            let have = input
                .existing_nodes
                .iter()
                .filter(|n| n.node_pool.as_deref() == Some(pool.name()))
                .count() as u64;
            let replicas = pool.replicas().unwrap_or(0);
            let count = crate::static_pools::to_create(replicas, have, 0, pool.node_limit());
            if count < replicas.saturating_sub(have) {
                warnings.push(format!(
                    "NodePool {}: limits.nodes holds it at {} of its {replicas} replicas",
                    pool.name(),
                    have + count
                ));
            }
            if count == 0 {
                continue;
            }
            let max = input.options.max_instance_types;
            let template = crate::static_pools::template_claim(pool_input, &input.daemonsets, max)?;
            let launched = template.and_then(|claim| {
                let launch = claim.launch.clone()?;
                let it = pool_input
                    .instance_types
                    .iter()
                    .find(|it| it.name == launch.instance_type)?
                    .clone();
                Some((claim, launch, it))
            });
            let Some((claim, launch, it)) = launched else {
                warnings.push(format!(
                    "NodePool {}: no instance type can launch its replicas",
                    pool.name()
                ));
                continue;
            };
            for i in 0..count {
                let name = format!("{}-replica-{}", pool.name(), have + i + 1);
                input.existing_nodes.push(claim.launched_node(
                    &name,
                    &launch,
                    &it,
                    Vec::new(),
                    true,
                ));
                plan.replicas.push((name, claim.clone()));
            }
        }
        Ok(plan)
    }

    /// Puts the input back as it was and the planned replicas into `solved`'s NodeClaims,
    /// each with the pods the solve placed on it.
    fn release(
        self,
        input: &mut SchedulingInput,
        solved: Result<(SchedulingResult, usize), SchedulingError>,
    ) -> Result<(SchedulingResult, usize), PlanError> {
        input.existing_nodes.truncate(self.existing);
        input.node_pools.extend(self.pools);
        let (mut result, rounds) = solved?;
        if self.replicas.is_empty() {
            return Ok((result, rounds));
        }
        let mut on_replicas: Vec<ExistingNodePlacement> = Vec::new();
        result.existing_nodes.retain(|p| {
            let replica = self.replicas.iter().any(|(name, _)| *name == p.name);
            if replica {
                on_replicas.push(p.clone());
            }
            !replica
        });
        let mut replicas = Vec::new();
        for (name, mut claim) in self.replicas {
            if let Some(placed) = on_replicas.iter().find(|p| p.name == name) {
                claim.pods = placed.pods.clone();
                add_requests(&mut claim, &input.pods);
            }
            replicas.push(claim);
        }
        replicas.append(&mut result.new_node_claims);
        result.new_node_claims = replicas;
        Ok((result, rounds))
    }
}

/// Adds the requests of `claim`'s pods (found among `pods`), one pod slot each, to its
/// requests, which held the DaemonSets' alone.
fn add_requests(claim: &mut PlannedNodeClaim, pods: &[std::sync::Arc<crate::pods::LeanPod>]) {
    use crate::pods::PodLike;
    for placed in &claim.pods {
        let pod = pods.iter().find(|p| {
            let meta = p.meta();
            meta.namespace == Some(placed.namespace.as_str())
                && meta.name == Some(placed.name.as_str())
        });
        if let Some(Ok(requests)) = pod.map(|p| crate::scheduling::resource_requests(&**p)) {
            claim.requests.add_assign(&requests);
        }
    }
    let slots = crate::resources::Quantity::new(
        claim.pods.len() as i64,
        crate::resources::Format::DecimalSI,
    );
    let pods = claim
        .requests
        .get("pods")
        .unwrap_or(crate::resources::Quantity::ZERO);
    claim.requests.insert("pods", pods.saturating_add(slots));
}
