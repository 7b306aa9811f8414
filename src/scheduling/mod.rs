//! The scheduler: decides which new NodeClaims to create for a batch of pending pods, and
//! which pods fit on existing nodes, with upstream Karpenter v1's semantics (queue order,
//! existing then planned then new capacity, preference relaxation, topology spread and pod
//! (anti-)affinity, daemonset overhead, NodePool limits, minValues, volume topology). It is
//! pure: [`solve`] maps a [`SchedulingInput`] snapshot to a [`SchedulingResult`].
//!
//! Internally the input is interned and densified once ([`prepare`]), pods with identical
//! constraints share one class, and NodePools that no pod class, node or topology group links
//! are solved on separate threads; the result is identical to a sequential solve.

mod class;
mod finalize;
mod intern;
mod pod;
mod pool;
mod prepare;
mod req;
mod resvec;
mod solve;
mod topology;
mod types;
mod volumes;

#[cfg(any(test, feature = "fixtures"))]
pub mod testing;

pub use pod::resource_requests;
pub use types::*;

use crate::taints::PreferNoSchedule;
use prepare::Prepared;
use solve::{Outcome, Solver};

/// Input the scheduler cannot work with, naming the object and field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchedulingError {
    #[error("nodepool {node_pool:?}: {field}: {reason}")]
    InvalidNodePool {
        node_pool: String,
        field: String,
        reason: String,
    },
    #[error("node {node:?}: {field}: {reason}")]
    InvalidNode {
        node: String,
        field: String,
        reason: String,
    },
    #[error("daemonset {daemonset:?}: {reason}")]
    InvalidDaemonSet { daemonset: String, reason: String },
}

/// Solves one scheduling batch.
pub fn solve(input: &SchedulingInput) -> Result<SchedulingResult, SchedulingError> {
    let prep = prepare::prepare(input)?;
    let components = if input.options.parallel {
        components(&prep)
    } else {
        vec![everything(&prep)]
    };
    let outcomes = run_components(&prep, &components, input.options.parallel);
    Ok(assemble(&prep, outcomes))
}

/// A set of pods with the pools and nodes they may use.
struct Component {
    pools: Vec<usize>,
    nodes: Vec<usize>,
    pods: Vec<u32>,
}

fn everything(prep: &Prepared) -> Component {
    Component {
        pools: (0..prep.pools.len()).collect(),
        nodes: (0..prep.nodes.len()).collect(),
        pods: (0..prep.pods.len() as u32).collect(),
    }
}

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

/// Partitions the solve into independent parts: a class joins every pool and node it could
/// ever use (taints and requirements at class level), its relaxed classes, and every topology
/// group it owns or is counted by. Parts share no state, so solving them apart gives the
/// sequential result.
fn components(prep: &Prepared) -> Vec<Component> {
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
    let mut by_root: std::collections::BTreeMap<usize, Component> =
        std::collections::BTreeMap::new();
    fn slot<'m>(
        by_root: &'m mut std::collections::BTreeMap<usize, Component>,
        uf: &mut UnionFind,
        x: usize,
    ) -> &'m mut Component {
        by_root.entry(uf.find(x)).or_insert_with(|| Component {
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

fn run_components(prep: &Prepared, components: &[Component], parallel: bool) -> Vec<Outcome> {
    let solve_one = |c: &Component| Solver::new(prep, &c.pools, &c.nodes).run(&c.pods);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(components.len());
    if !parallel || threads <= 1 {
        return components.iter().map(solve_one).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<Outcome>> = (0..components.len()).map(|_| None).collect();
    let slots = std::sync::Mutex::new(&mut results);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(c) = components.get(i) else { break };
                    let outcome = solve_one(c);
                    if let Ok(mut slots) = slots.lock() {
                        slots[i] = Some(outcome);
                    }
                }
            });
        }
    });
    results.into_iter().flatten().collect()
}

/// Merges component outcomes into the result, in a canonical order: NodeClaims by the queue
/// position of their first pod, existing nodes in solve order.
fn assemble(prep: &Prepared, outcomes: Vec<Outcome>) -> SchedulingResult {
    let mut result = SchedulingResult::default();
    let mut claims = Vec::new();
    let mut nodes = Vec::new();
    let mut prices = finalize::PriceCache::default();
    for outcome in outcomes {
        let pools: std::collections::BTreeMap<usize, pool::Pool> =
            outcome.pools.into_iter().collect();
        for (p, e) in outcome.errors {
            result
                .errors
                .insert(prep.pods[p as usize].pod_ref.clone(), e);
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
                            .insert(prep.pods[*p as usize].pod_ref.clone(), e.clone());
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
                .map(|p| prep.pods[*p as usize].pod_ref.clone())
                .collect(),
        })
        .collect();
    result
}

#[cfg(test)]
mod tests;
