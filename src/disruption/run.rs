//! The disruption loop, played out offline: each pass computes the budgets and candidates of
//! the current state and asks the methods in order for a command; the first command found is
//! applied as if it completed (its nodes gone, their pods where the simulation put them,
//! replacements present and initialized) and the next pass starts, until a pass finds
//! nothing. The final pass's notes say why each remaining node stays.

use crate::pods::LeanPod;
use std::collections::HashMap;
use std::sync::Arc;

use super::DisruptionError;
use super::budget::{self, BudgetError};
use super::candidate::{self, Blocks};
use super::cluster::{Cluster, ManagedNode, Options};
use super::consolidation::{self, Replacement};
use super::methods::{self, Budgets, Command};
use super::pods;
use super::report::{BudgetReport, Method};
use super::simulate;
use super::state::{Forms, State};
use crate::api::DisruptionReason;
use crate::scheduling::SchedulingInput;

/// The methods in the order the disruption loop tries them.
pub const METHODS: [Method; 5] = [
    Method::Expiration,
    Method::Emptiness,
    Method::Drift,
    Method::MultiNodeConsolidation,
    Method::SingleNodeConsolidation,
];

impl<'c> State<'c> {
    /// The state of `cluster`, on a copy of its scheduling input.
    pub fn new(cluster: &'c Cluster, options: Options) -> Result<State<'c>, DisruptionError> {
        Self::with_input(cluster, cluster.scheduling.clone(), options)
    }

    /// The state of `cluster` on `input`, which [`take_input`] took out of it, with the pods
    /// waiting for a place placed ([`simulate::place_waiting`]).
    pub fn with_input(
        cluster: &'c Cluster,
        input: SchedulingInput,
        options: Options,
    ) -> Result<State<'c>, DisruptionError> {
        let mut state = Self::unplaced(cluster, input, options)?;
        simulate::place_waiting(&mut state);
        Ok(state)
    }

    /// [`Self::with_input`] for the voluntary methods alone (the controller's pass): the pods
    /// waiting for a place are placed only if some candidate is one a voluntary method may
    /// take ([`candidate::any_voluntary`]). Placing them is a solve of every pending pod,
    /// and through a large scale-up (thousands pending, every node busy or booting) no node
    /// is consolidatable or drifted, so the pass would solve them every 10 s for nothing.
    /// Placing pods only adds pods to nodes, and neither drift nor `consolidateAfter` looks
    /// at a node's pods, so a pass without such a candidate finds no command either way.
    ///
    /// Its simulations start from `forms`, which a caller keeps from pass to pass.
    pub fn for_voluntary_methods(
        cluster: &'c Cluster,
        input: SchedulingInput,
        options: Options,
        forms: Forms,
    ) -> Result<State<'c>, DisruptionError> {
        let mut state = Self::unplaced(cluster, input, options)?;
        state.forms = forms;
        if candidate::any_voluntary(&state) {
            simulate::place_waiting(&mut state);
        }
        Ok(state)
    }

    /// Allowed disruptions per NodePool and reason now.
    pub fn budgets(&self) -> Result<Budgets, BudgetError> {
        let nodes = self.budget_counts();
        let mut out = Budgets::new();
        for pool in &self.cluster.node_pools {
            let (count, disrupting) = nodes.get(pool.name()).copied().unwrap_or_default();
            for reason in DisruptionReason::ALL {
                let allowed = budget::allowed(pool, reason, count, disrupting, self.options.now)?;
                out.insert((pool.name().to_string(), reason), allowed);
            }
        }
        Ok(out)
    }

    /// Per NodePool, its initialized nodes and how many of them are disrupting (deleting or
    /// not ready): what its budgets count.
    fn budget_counts(&self) -> HashMap<&str, (usize, usize)> {
        let mut nodes: HashMap<&str, (usize, usize)> = HashMap::new();
        for m in self.managed.iter().filter(|m| m.initialized) {
            let entry = nodes.entry(m.node_pool.as_str()).or_default();
            entry.0 += 1;
            if m.deleting || !m.ready {
                entry.1 += 1;
            }
        }
        nodes
    }

    /// One pass: the first command the methods find, in upstream's order, if any.
    pub fn next_command(
        &mut self,
        blocks: &mut Blocks,
    ) -> Result<Option<Command>, DisruptionError> {
        self.first_of(&METHODS, blocks)
    }

    /// The first command any of `methods` finds on the current state.
    pub fn first_of(
        &mut self,
        methods: &[Method],
        blocks: &mut Blocks,
    ) -> Result<Option<Command>, DisruptionError> {
        if methods.contains(&Method::Expiration)
            && let Some(command) = methods::expiration(self)
        {
            return Ok(Some(command));
        }
        let budgets = self.budgets()?;
        let candidates = candidate::candidates(self, blocks);
        let totals = consolidation::pool_totals(&candidates);
        for method in methods {
            let command = match method {
                Method::Expiration => None,
                Method::Emptiness => methods::emptiness(&candidates, &budgets, blocks),
                Method::Drift => methods::drift(self, &candidates, &budgets, blocks),
                Method::MultiNodeConsolidation => {
                    methods::multi_node(self, &candidates, &budgets, &totals)
                }
                Method::SingleNodeConsolidation => {
                    methods::single_node(self, &candidates, &budgets, &totals, blocks)
                }
            };
            if command.is_some() {
                return Ok(command);
            }
        }
        Ok(None)
    }

    /// Plays `command` out: its nodes go, their pods land where the simulation put them (or,
    /// for expiration, become pending), replacements join initialized.
    pub fn apply(&mut self, command: &Command) {
        let mut removed = Vec::new();
        self.input.existing_nodes.retain(|n| {
            let gone = command.nodes.contains(&n.name);
            if gone {
                removed.push(n.pods.clone());
            }
            !gone
        });
        self.managed.retain(|m| !command.nodes.contains(&m.name));
        match &command.simulation {
            Some(simulation) => {
                let mut moved: HashMap<String, Arc<LeanPod>> = simulation
                    .moved
                    .iter()
                    .map(|p| (pods::key(p), Arc::clone(p)))
                    .collect();
                self.bind(&simulation.placements, &mut moved);
                for replacement in &command.replacements {
                    self.add_replacement(replacement, &mut moved);
                }
            }
            // Expiration, and a static pool's drift: the pods are evicted to pending (an
            // empty node has none to move) and a static replacement joins empty.
            None => {
                for pods in removed {
                    self.input.pods.extend(
                        pods.iter()
                            .filter(pods::is_reschedulable)
                            .map(|p| bound_to_none(p)),
                    );
                }
                let mut none = HashMap::new();
                for replacement in &command.replacements {
                    self.add_replacement(replacement, &mut none);
                }
            }
        }
        self.reindex();
    }

    fn add_replacement(
        &mut self,
        replacement: &Replacement,
        moved: &mut HashMap<String, Arc<LeanPod>>,
    ) {
        self.replacements += 1;
        let claim = &replacement.claim;
        let name = format!("{}-replacement-{}", claim.node_pool, self.replacements);
        let Some(it) = self.pool(&claim.node_pool).and_then(|p| {
            p.types
                .get(replacement.launch.instance_type.as_str())
                .copied()
        }) else {
            return;
        };
        let mut pods = Vec::new();
        for key in claim
            .pods
            .iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
        {
            if let Some(pod) = moved.remove(&key) {
                pods.push(pod);
            } else if let Some(i) = self.input.pods.iter().position(|p| pods::key(p) == key) {
                pods.push(self.input.pods.remove(i));
            }
        }
        let pool = self.pool(&claim.node_pool).map(|p| p.pool);
        self.input.existing_nodes.push(claim.launched_node(
            &name,
            &replacement.launch,
            it,
            pods,
            true,
        ));
        self.managed.push(ManagedNode {
            name: name.clone(),
            node_claim: name,
            node_pool: claim.node_pool.clone(),
            created: Some(self.options.now),
            last_pod_event: Some(self.options.now),
            initialized: true,
            ready: true,
            expire_after: pool.and_then(|p| p.expire_after().as_std()),
            termination_grace_period: pool
                .and_then(|p| p.termination_grace_period())
                .map(|d| d.as_std()),
            ..ManagedNode::default()
        });
    }

    /// Budgets of every NodePool and reason, in pool order, for the report.
    pub fn budget_report(&self) -> Result<Vec<BudgetReport>, BudgetError> {
        let budgets = self.budgets()?;
        let counts = self.budget_counts();
        let mut out = Vec::new();
        for pool in &self.cluster.node_pools {
            let disrupting = counts.get(pool.name()).map_or(0, |c| c.1);
            for reason in DisruptionReason::ALL {
                out.push(BudgetReport {
                    node_pool: pool.name().to_string(),
                    reason,
                    allowed: budgets[&(pool.name().to_string(), reason)],
                    disrupting,
                });
            }
        }
        Ok(out)
    }
}

fn bound_to_none(pod: &LeanPod) -> Arc<LeanPod> {
    Arc::new(pod.unbound())
}
