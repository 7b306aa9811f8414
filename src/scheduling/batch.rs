//! A solve in three steps, so a caller may run its independent parts wherever it likes (the
//! controller gives each NodePool its own thread): [`Batch::prepare`] interns the input once
//! and partitions it into [`Part`]s that share no pool, node, pod class or topology group;
//! [`Batch::solve_part`] solves one part; [`Batch::assemble`] merges the parts' outcomes
//! into the [`SchedulingResult`] in a canonical order. Because parts are independent and
//! the merge order is canonical, any split of the work gives exactly the sequential result.
//! [`super::solve`] is these three steps on scoped threads.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::SchedulingError;
use super::finalize;
use super::forms::PodForms;
use super::node_forms::NodeForms;
use super::pool::Pool;
use super::prepare::{self, Prepared};
use super::reservations::Reservations;
use super::solve::{Outcome, Solver};
use super::types::{ExistingNodePlacement, SchedulingInput, SchedulingResult};
use crate::taints::PreferNoSchedule;

/// A prepared solve: the interned input, shared read-only by every part (cloning a batch
/// clones an `Arc`, so it can be sent to other threads).
#[derive(Clone)]
pub struct Batch {
    prep: Arc<Prepared>,
    parts: Arc<[Part]>,
    /// The pools offering reserved capacity, whose reservations bound the result.
    reserved: Reservations,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("pods", &self.prep.pods.len())
            .field("parts", &self.parts)
            .finish()
    }
}

/// A set of pods with the pools and nodes they may use, solvable apart from the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    index: usize,
    /// Names of the part's NodePools, in the order the solver tries them (weight, name).
    pool_names: Vec<String>,
    pools: Vec<usize>,
    nodes: Vec<usize>,
    pods: Vec<u32>,
}

impl Part {
    /// Position of the part in [`Batch::parts`].
    pub fn index(&self) -> usize {
        self.index
    }

    /// The NodePools the part's pods may use (possibly none: pods that fit no pool, which
    /// can only go to existing nodes or stay unschedulable).
    pub fn node_pools(&self) -> &[String] {
        &self.pool_names
    }

    /// Number of pending pods the part places.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}

/// What solving one part produced; opaque until [`Batch::assemble`] merges it.
#[derive(Debug)]
pub struct PartOutcome {
    index: usize,
    outcome: Outcome,
}

impl PartOutcome {
    /// The part this outcome belongs to.
    pub fn part_index(&self) -> usize {
        self.index
    }
}

impl Batch {
    /// Interns `input` and splits it into independent parts; with
    /// `input.options.parallel` off, into a single part holding everything.
    pub fn prepare(input: &SchedulingInput) -> Result<Batch, SchedulingError> {
        Self::split(input, prepare::prepare(input)?)
    }

    /// [`Batch::prepare`] for one round of many: the pending pods' forms come from `forms`
    /// and the existing nodes' from `nodes`, which keep them for the next round
    /// ([`PodForms`], [`NodeForms`]). The batch is exactly [`Batch::prepare`]'s.
    pub fn prepare_with(
        input: &SchedulingInput,
        forms: &mut PodForms,
        nodes: &mut NodeForms,
    ) -> Result<Batch, SchedulingError> {
        forms.start_round();
        nodes.start_round();
        let prep = prepare::prepare_with(input, Some(&mut *forms), Some(&mut *nodes));
        forms.finish_round();
        nodes.finish_round();
        Self::split(input, prep?)
    }

    fn split(input: &SchedulingInput, prep: Prepared) -> Result<Batch, SchedulingError> {
        let groups = if input.options.parallel {
            components(&prep)
        } else {
            vec![everything(&prep)]
        };
        let parts = groups
            .into_iter()
            .enumerate()
            .map(|(index, g)| Part {
                index,
                pool_names: g
                    .pools
                    .iter()
                    .map(|p| prep.pools[*p].name.clone())
                    .collect(),
                pools: g.pools,
                nodes: g.nodes,
                pods: g.pods,
            })
            .collect();
        Ok(Batch {
            prep: Arc::new(prep),
            parts,
            reserved: Reservations::of(input),
        })
    }

    /// The independent parts, each with at least one pod.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Solves one part. Pure and independent of every other part, so parts may be solved
    /// concurrently, in any order, on any thread.
    pub fn solve_part(&self, part: &Part) -> PartOutcome {
        let outcome = Solver::new(&self.prep, &part.pools, &part.nodes).run(&part.pods);
        PartOutcome {
            index: part.index,
            outcome,
        }
    }

    /// Merges the parts' outcomes into the result, in a canonical order: NodeClaims by the
    /// queue position of their first pod, existing nodes initialized first then by name.
    /// Outcomes may come in any order. The pods of a part without an outcome (its solve was
    /// lost) are reported as errors rather than silently left out.
    pub fn assemble(&self, mut outcomes: Vec<PartOutcome>) -> SchedulingResult {
        outcomes.sort_by_key(|o| o.index);
        outcomes.dedup_by_key(|o| o.index);
        let mut missing: Vec<&Part> = self.parts.iter().collect();
        missing.retain(|p| {
            outcomes
                .binary_search_by_key(&p.index, |o| o.index)
                .is_err()
        });
        let mut result = assemble(&self.prep, outcomes.into_iter().map(|o| o.outcome));
        for part in missing {
            for p in &part.pods {
                result.errors.insert(
                    self.prep.pods[*p as usize].form.pod_ref.clone(),
                    UNSOLVED_PART.to_owned(),
                );
            }
        }
        self.reserved.bound(&mut result);
        result
    }
}

/// The error of pods whose part's outcome never reached [`Batch::assemble`].
pub const UNSOLVED_PART: &str = "the solve of this pod's NodePools did not complete";

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// The pools, nodes and pods of one part, by index into [`Prepared`].
struct Group {
    pools: Vec<usize>,
    nodes: Vec<usize>,
    pods: Vec<u32>,
}

fn everything(prep: &Prepared) -> Group {
    Group {
        pools: (0..prep.pools.len()).collect(),
        nodes: (0..prep.nodes.len()).collect(),
        pods: (0..prep.pods.len() as u32).collect(),
    }
}

/// Partitions the solve into independent parts: a class joins every pool and node it could
/// ever use (taints and requirements at class level), its relaxed classes, and every topology
/// group it owns or is counted by. Parts share no state, so solving them apart gives the
/// sequential result.
fn components(prep: &Prepared) -> Vec<Group> {
    let nc = prep.classes.len();
    let np = prep.pools.len();
    let nn = prep.nodes.len();
    let ng = prep.topology.groups.len();
    let ni = prep.topology.inverse.len();
    let (pool_at, node_at, group_at, inv_at) = (nc, nc + np, nc + np + nn, nc + np + nn + ng);
    let mut uf = UnionFind((0..inv_at + ni).collect());
    for (c, class) in prep.classes.iter().enumerate() {
        if let Some(next) = class.next {
            uf.union(c, next as usize);
        }
        for (pi, pool) in prep.pools.iter().enumerate() {
            if class.pool_taint[pi].is_none()
                && pool.reqs.compatible(&class.reqs, &prep.vocab).is_ok()
            {
                uf.union(c, pool_at + pi);
            }
        }
        for (n, node) in prep.nodes.iter().enumerate() {
            let tolerated = crate::taints::tolerates_with(
                &node.taints,
                &class.tolerations,
                PreferNoSchedule::Consider,
            )
            .is_ok();
            if tolerated
                && node
                    .reqs
                    .compatible_strict(&class.reqs, &prep.vocab.interner)
                    .is_ok()
            {
                uf.union(c, node_at + n);
            }
        }
        for g in class.owned.iter().chain(&class.selected_by) {
            uf.union(c, group_at + *g as usize);
        }
        for g in class.inverse_owned.iter().chain(&class.inverse_selected_by) {
            uf.union(c, inv_at + *g as usize);
        }
    }
    let mut by_root: BTreeMap<usize, Group> = BTreeMap::new();
    fn slot<'m>(
        by_root: &'m mut BTreeMap<usize, Group>,
        uf: &mut UnionFind,
        x: usize,
    ) -> &'m mut Group {
        by_root.entry(uf.find(x)).or_insert_with(|| Group {
            pools: Vec::new(),
            nodes: Vec::new(),
            pods: Vec::new(),
        })
    }
    for (p, info) in prep.pods.iter().enumerate() {
        slot(&mut by_root, &mut uf, info.class as usize)
            .pods
            .push(p as u32);
    }
    for pi in 0..np {
        slot(&mut by_root, &mut uf, pool_at + pi).pools.push(pi);
    }
    for n in 0..nn {
        slot(&mut by_root, &mut uf, node_at + n).nodes.push(n);
    }
    by_root
        .into_values()
        .filter(|c| !c.pods.is_empty())
        .collect()
}

fn assemble(prep: &Prepared, outcomes: impl Iterator<Item = Outcome>) -> SchedulingResult {
    let mut result = SchedulingResult::default();
    let mut claims = Vec::new();
    let mut nodes = Vec::new();
    let mut prices = finalize::PriceCache::default();
    for outcome in outcomes {
        let pools: BTreeMap<usize, Pool> = outcome.pools.into_iter().collect();
        for (p, e) in outcome.errors {
            result
                .errors
                .insert(prep.pods[p as usize].form.pod_ref.clone(), e);
        }
        for claim in outcome.claims {
            let first = claim.pods.iter().copied().min().unwrap_or(u32::MAX);
            let pool = pools.get(&claim.pool).unwrap_or(&prep.pools[claim.pool]);
            match finalize::planned(&claim, pool, prep, &mut prices) {
                Ok(planned) => claims.push((first, planned)),
                Err(e) => {
                    for p in &claim.pods {
                        result
                            .errors
                            .insert(prep.pods[*p as usize].form.pod_ref.clone(), e.clone());
                    }
                }
            }
        }
        nodes.extend(outcome.nodes);
    }
    claims.sort_by_key(|(first, _)| *first);
    result.new_node_claims = claims.into_iter().map(|(_, c)| c).collect();
    nodes.sort_by(|(a, _), (b, _)| {
        let (na, nb) = (&prep.nodes[*a], &prep.nodes[*b]);
        nb.initialized
            .cmp(&na.initialized)
            .then_with(|| na.name.cmp(&nb.name))
    });
    result.existing_nodes = nodes
        .into_iter()
        .map(|(n, pods)| ExistingNodePlacement {
            name: prep.nodes[n].name.clone(),
            pods: pods
                .iter()
                .map(|p| prep.pods[*p as usize].form.pod_ref.clone())
                .collect(),
        })
        .collect();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches and outcomes travel to and from other threads (the controller's NodePool
    /// schedulers); this stops compiling if a field ever makes them thread-bound.
    #[test]
    fn batches_parts_and_outcomes_cross_threads() {
        fn sendable<T: Send + Sync + 'static>() {}
        fn movable<T: Send + 'static>() {}
        sendable::<Batch>();
        sendable::<Part>();
        movable::<PartOutcome>();
    }
}
