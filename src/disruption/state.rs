//! The cluster as the disruption loop has changed it so far ([`State`]): the scheduling
//! input with every applied command's pods moved and replacements added, the managed nodes
//! and their index, each NodePool's instance types, and the PDBs. The candidates, the
//! simulation and the methods read it; [`super::run`] drives it from pass to pass. Also the
//! consolidation timeouts ([`Timeouts`], [`Deadline`]) the methods stop by.

use std::collections::HashMap;
use std::sync::Arc;

use super::DisruptionError;
use super::blockers::Blockers;
use super::cluster::{Cluster, ManagedNode, Options};
use super::pods;
use super::report::Method;
use crate::api::NodePool;
use crate::catalog::InstanceType;
use crate::labels;
use crate::pods::LeanPod;
use crate::requirements::Requirements;
use crate::scheduling::{ExistingNode, NodeForms, PodForms, SchedulingInput};

/// A NodePool with what methods look up on it.
pub struct PoolInfo<'c> {
    pub pool: &'c NodePool,
    pub types: HashMap<&'c str, &'c InstanceType>,
    pub requirements: Requirements,
}

/// How long the consolidation methods may search before they stop, as upstream's
/// (`MultiNodeConsolidationTimeoutDuration`, `SingleNodeConsolidationTimeoutDuration`):
/// multi-node keeps the best command found so far, single-node gives up the pass. The clock
/// is a plain function so tests can move time; offline plays use [`Timeouts::NONE`], so the
/// same cluster always prints the same plan.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub multi_node: Option<std::time::Duration>,
    /// Multi-node's search around the candidates that block every prefix, kerf's own, within
    /// `multi_node`: where most candidates fail (in a cluster still scaling out) the search
    /// would otherwise try group after group for the rest of the minute.
    pub around_blockers: Option<std::time::Duration>,
    pub single_node: Option<std::time::Duration>,
    pub clock: fn() -> std::time::Instant,
}

impl Timeouts {
    /// Upstream's: one minute for multi-node, three for single-node consolidation; ten
    /// seconds for the search around blockers (the bound upstream's proposed pairwise search
    /// has, kubernetes-sigs/karpenter#3064).
    pub const UPSTREAM: Timeouts = Timeouts {
        multi_node: Some(std::time::Duration::from_secs(60)),
        around_blockers: Some(std::time::Duration::from_secs(10)),
        single_node: Some(std::time::Duration::from_secs(3 * 60)),
        clock: std::time::Instant::now,
    };
    /// No limit.
    pub const NONE: Timeouts = Timeouts {
        multi_node: None,
        around_blockers: None,
        single_node: None,
        clock: std::time::Instant::now,
    };

    /// Every search limited to `left`, measured on `clock`: a decision's remaining time.
    pub fn within(left: std::time::Duration, clock: fn() -> std::time::Instant) -> Timeouts {
        Timeouts {
            multi_node: Some(left),
            around_blockers: Some(left),
            single_node: Some(left),
            clock,
        }
    }

    /// When a method given `limit` and starting now must stop.
    pub fn deadline(&self, limit: Option<std::time::Duration>) -> Deadline {
        Deadline {
            at: limit.map(|l| (self.clock)() + l),
            clock: self.clock,
        }
    }
}

/// A method's stopping time.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Option<std::time::Instant>,
    clock: fn() -> std::time::Instant,
}

impl Deadline {
    pub fn passed(&self) -> bool {
        self.at.is_some_and(|at| (self.clock)() > at)
    }
}

/// The cluster as the loop has changed it so far.
pub struct State<'c> {
    pub cluster: &'c Cluster,
    pub input: SchedulingInput,
    pub managed: Vec<ManagedNode>,
    pub options: Options,
    pub pdbs: pods::PdbIndex<'c>,
    pub(super) pools: HashMap<&'c str, PoolInfo<'c>>,
    pub(super) managed_index: HashMap<String, usize>,
    pub(super) replacements: usize,
    pub timeouts: Timeouts,
    /// Methods that ran out of time, in order.
    pub timed_out: Vec<Method>,
    pub(super) forms: Forms,
}

/// What the simulations prepared of the pods and nodes, kept for the next one: a pass
/// simulates many candidates over the same thousands of nodes, each simulation changing
/// only the few nodes it removes or closes, and passes a few seconds apart see mostly the
/// same nodes holding the same pods. Exact: a kept form is used only while it was built from
/// the very node and pods it is asked for ([`NodeForms`]), and holds no pod alive.
#[derive(Debug, Default)]
pub struct Forms {
    pub(super) pods: PodForms,
    pub(super) nodes: NodeForms,
    /// The candidates multi-node consolidation found blocking, for the next passes.
    pub(super) blockers: Blockers,
}

impl Forms {
    /// Node forms reused instead of built, since these forms were made.
    pub fn nodes_reused(&self) -> u64 {
        self.nodes.reused()
    }
}

/// `cluster`'s scheduling input for a [`State`] to edit, its pods and nodes moved out rather
/// than copied: a [`State`] reads those from its own input alone, and the rest of `cluster`
/// (the NodePools' instance types, which the State borrows) is left in place.
pub fn take_input(cluster: &mut Cluster) -> SchedulingInput {
    SchedulingInput {
        pods: std::mem::take(&mut cluster.scheduling.pods),
        existing_nodes: std::mem::take(&mut cluster.scheduling.existing_nodes),
        ..cluster.scheduling.clone()
    }
}

impl<'c> State<'c> {
    pub(super) fn unplaced(
        cluster: &'c Cluster,
        mut input: SchedulingInput,
        options: Options,
    ) -> Result<State<'c>, DisruptionError> {
        // Rescheduling never plans a NodeClaim of a static pool: its size is its replicas.
        let statics: Vec<&str> = cluster
            .node_pools
            .iter()
            .filter(|p| p.is_static())
            .map(|p| p.name())
            .collect();
        input
            .node_pools
            .retain(|p| !statics.contains(&p.name.as_str()));
        let mut pools = HashMap::new();
        for pool in &cluster.node_pools {
            let requirements = Requirements::from_requirements_with_min_values(pool.requirements())
                .map_err(|e| DisruptionError::Requirements {
                    pool: pool.name().to_string(),
                    error: e.to_string(),
                })?;
            let types = cluster
                .scheduling
                .node_pools
                .iter()
                .find(|p| p.name == pool.name())
                .map(|p| {
                    p.instance_types
                        .iter()
                        .map(|it| (it.name.as_str(), it))
                        .collect()
                })
                .unwrap_or_default();
            pools.insert(
                pool.name(),
                PoolInfo {
                    pool,
                    types,
                    requirements,
                },
            );
        }
        let mut state = State {
            cluster,
            input,
            managed: cluster.nodes.clone(),
            options,
            pdbs: pods::PdbIndex::new(&cluster.pdbs),
            pools,
            managed_index: HashMap::new(),
            replacements: 0,
            timeouts: Timeouts::NONE,
            timed_out: Vec::new(),
            forms: Default::default(),
        };
        state.reindex();
        Ok(state)
    }

    pub(super) fn reindex(&mut self) {
        self.managed_index = self
            .managed
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
    }

    pub fn pool(&self, name: &str) -> Option<&PoolInfo<'c>> {
        self.pools.get(name)
    }

    pub fn managed_node(&self, name: &str) -> Option<&ManagedNode> {
        self.managed_index.get(name).map(|i| &self.managed[*i])
    }

    /// The hourly price of a managed node's offering, when known.
    pub fn node_price(&self, name: &str) -> Option<f64> {
        let node = self.input.existing_nodes.iter().find(|n| n.name == name)?;
        self.price_of(node)
    }

    fn price_of(&self, node: &ExistingNode) -> Option<f64> {
        let managed = self.managed_node(&node.name)?;
        let it = self
            .pool(&managed.node_pool)?
            .types
            .get(node.labels.get(labels::INSTANCE_TYPE)?.as_str())?;
        let zone = node.labels.get(labels::ZONE).map_or("", String::as_str);
        let capacity = node
            .labels
            .get(labels::CAPACITY_TYPE)
            .map_or(labels::CAPACITY_TYPE_ON_DEMAND, String::as_str);
        offering_price(it, zone, capacity)
    }

    /// Binds the `moved` pods each placement names (`namespace/name`) to its existing node,
    /// taking them out of `moved`.
    pub fn bind(
        &mut self,
        placements: &[(String, Vec<String>)],
        moved: &mut HashMap<String, Arc<LeanPod>>,
    ) {
        for (node_name, keys) in placements {
            let pods: Vec<Arc<LeanPod>> = keys.iter().filter_map(|k| moved.remove(k)).collect();
            if let Some(node) = self
                .input
                .existing_nodes
                .iter_mut()
                .find(|n| &n.name == node_name)
            {
                node.pods.extend(
                    pods.into_iter()
                        .map(|p| crate::pods::bound_to(&p, node_name)),
                );
            }
        }
    }

    /// Managed nodes that are not being deleted, and their total hourly price.
    pub fn fleet(&self) -> (usize, f64) {
        let live = self.managed.iter().filter(|m| !m.deleting).count();
        let cost = self
            .input
            .existing_nodes
            .iter()
            .filter(|n| self.managed_node(&n.name).is_some_and(|m| !m.deleting))
            .filter_map(|n| self.price_of(n))
            .sum();
        (live, cost)
    }
}

/// The price of the offering a node runs on; the cheapest of its type if its labels do not
/// say which.
pub fn offering_price(
    instance_type: &InstanceType,
    zone: &str,
    capacity_type: &str,
) -> Option<f64> {
    let exact = instance_type
        .offerings
        .iter()
        .filter(|o| o.zone == zone && o.capacity_type.as_str() == capacity_type)
        .map(|o| o.price)
        .reduce(f64::min);
    exact.or_else(|| {
        (zone.is_empty())
            .then(|| {
                instance_type
                    .offerings
                    .iter()
                    .filter(|o| o.capacity_type.as_str() == capacity_type)
                    .map(|o| o.price)
                    .reduce(f64::min)
            })
            .flatten()
    })
}
