//! `kerf plan`'s core: from parsed Kubernetes manifests, read into the cluster's inventory
//! and snapshot ([`crate::cluster`]), to the scheduler's solve (one round or several,
//! [`rounds`]), the advice about the input, and the report users read ([`report`]), with the
//! disruption loop's decisions when asked.

pub mod advice;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod report;
mod rounds;

use crate::catalog::{Catalog, CatalogError};
use crate::cluster::{
    ControllerSettings, ObjectProblem, SnapshotError, disruption, inventory, snapshot,
};
use crate::manifest::Object;
use crate::scheduling::SchedulingError;

pub use report::PlanReport;

/// What a plan depends on besides the manifests.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOptions {
    /// The region whose catalog (instance types, zones, prices) is used.
    pub region: String,
    pub controller: ControllerSettings,
    /// Also decide what the disruption loop would remove or replace (`--disruption`).
    pub disruption: Option<crate::disruption::Options>,
    /// Provisioning rounds to run at most (`--rounds`; see [`rounds`]); 1 is one solve.
    pub rounds: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            region: "us-east-1".into(),
            controller: ControllerSettings::default(),
            disruption: None,
            rounds: 1,
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

/// The catalog with the offerings `controller` knows unavailable marked so.
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
        _class: Option<&crate::api::EC2NodeClass>,
        settings: &crate::catalog::AllocatableSettings,
    ) -> std::sync::Arc<[crate::catalog::InstanceType]> {
        let mut types = self.catalog.instance_types(settings);
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
    let disruption_input = options.disruption.map(|o| (o, inventory));
    let (result, rounds) = rounds::solve(&snapshot.input, options.rounds)?;
    let mut report = PlanReport::from_result(&result, &snapshot.input.pods);
    report.summary.rounds = rounds;
    if let Some((disruption_options, inventory)) = disruption_input {
        let mut cluster = disruption::cluster(&inventory, snapshot);
        for node in &mut cluster.nodes {
            node.nominated = controller.nominated.contains(&node.name)
                || controller.nominated.contains(&node.node_claim);
        }
        report.disruption = Some(crate::disruption::decide(&cluster, disruption_options)?);
    }
    Ok(PlanOutcome {
        report,
        ignored,
        warnings,
    })
}
