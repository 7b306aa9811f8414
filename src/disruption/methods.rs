//! The disruption methods in upstream's order, each turning the current candidates into at
//! most one command: expiration (every node past `expireAfter`, regardless of budgets and
//! blocking pods), emptiness (every empty consolidatable node the `Empty` budget allows, in
//! one command), drift (all empty drifted nodes at once, else the earliest drifted node whose
//! pods all find a place, with as many replacements as they need), multi-node consolidation
//! (a binary search for the longest prefix of at most 100 budget-allowed non-empty
//! candidates, at least two, that consolidates into nothing or one cheaper node; where none
//! does, the same candidates taken around those that block every prefix) and single-node
//! consolidation (candidates round-robin across NodePools, the first that can be deleted or
//! replaced with a cheaper node). Each method notes in `blocks` why a node it considered was
//! left alone.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::budget::UNLIMITED;
use super::candidate::{self, Blocks, Candidate};
use super::consolidation::{self, PoolTotals, Proposal, Replacement};
use super::report::{Method, Reason};
use super::simulate::{Simulation, simulate};
use super::state::{Deadline, State};
use crate::api::DisruptionReason;

/// Upstream considers at most this many candidates in one multi-node consolidation.
pub const MAX_MULTI_NODE_CANDIDATES: usize = 100;

/// Disruptions still allowed per NodePool and reason in this pass.
pub type Budgets = HashMap<(String, DisruptionReason), usize>;

/// One decision of the disruption loop.
#[derive(Debug)]
pub struct Command {
    pub method: Method,
    pub reason: Reason,
    pub nodes: Vec<String>,
    pub replacements: Vec<Replacement>,
    pub savings: f64,
    /// Where the nodes' pods go; `None` when they have none to move or (expiration) are
    /// simply evicted to pending.
    pub simulation: Option<Simulation>,
}

fn budget_left(budgets: &Budgets, pool: &str, reason: DisruptionReason) -> usize {
    budgets
        .get(&(pool.to_string(), reason))
        .copied()
        .unwrap_or(UNLIMITED)
}

fn budget_block(pool: &str, reason: DisruptionReason) -> String {
    format!("disruption budget of NodePool {pool} allows no more {reason:?} disruptions now")
}

/// Every managed node past its `expireAfter`.
pub fn expiration(state: &State) -> Option<Command> {
    let now = state.options.now.as_second();
    let nodes: Vec<String> = state
        .managed
        .iter()
        .filter(|m| !m.deleting)
        .filter(|m| match (m.created, m.expire_after) {
            (Some(created), Some(after)) => created.as_second() + after.as_secs() as i64 <= now,
            _ => false,
        })
        .map(|m| m.name.clone())
        .collect();
    (!nodes.is_empty()).then(|| Command {
        method: Method::Expiration,
        reason: Reason::Expired,
        savings: nodes.iter().filter_map(|n| state.node_price(n)).sum(),
        nodes,
        replacements: Vec::new(),
        simulation: None,
    })
}

/// Whether graceful methods may disrupt `c`; notes why not.
fn graceful(c: &Candidate, blocks: &mut Blocks) -> bool {
    match &c.graceful_block {
        Some(why) => {
            blocks.note(&c.name, || why.clone());
            false
        }
        None => true,
    }
}

pub fn emptiness(
    candidates: &[Candidate],
    budgets: &Budgets,
    blocks: &mut Blocks,
) -> Option<Command> {
    let mut left = budgets.clone();
    let mut chosen: Vec<&Candidate> = Vec::new();
    for c in candidates.iter().filter(|c| c.is_empty()) {
        if let Err(why) = &c.consolidatable {
            blocks.note(&c.name, || why.clone());
            continue;
        }
        if !graceful(c, blocks) {
            continue;
        }
        let key = (c.pool.clone(), DisruptionReason::Empty);
        let allowed = left.get(&key).copied().unwrap_or(UNLIMITED);
        if allowed == 0 {
            blocks.note(&c.name, || budget_block(&c.pool, DisruptionReason::Empty));
            continue;
        }
        left.insert(key, allowed - 1);
        chosen.push(c);
    }
    (!chosen.is_empty()).then(|| Command {
        method: Method::Emptiness,
        reason: Reason::Empty,
        nodes: chosen.iter().map(|c| c.name.clone()).collect(),
        replacements: Vec::new(),
        savings: chosen.iter().filter_map(|c| c.price).sum(),
        simulation: None,
    })
}

pub fn drift(
    state: &mut State,
    candidates: &[Candidate],
    budgets: &Budgets,
    blocks: &mut Blocks,
) -> Option<Command> {
    let (statics, dynamics): (Vec<&Candidate>, Vec<&Candidate>) = candidates
        .iter()
        .filter(|c| c.drift.is_some())
        .partition(|c| state.pool(&c.pool).is_some_and(|p| p.pool.is_static()));
    let mut drifted: Vec<&Candidate> = dynamics
        .into_iter()
        .filter(|c| c.termination_grace_period || graceful(c, blocks))
        .collect();
    drifted.sort_by(|a, b| {
        let since = |c: &Candidate| {
            c.drift
                .as_ref()
                .and_then(|(_, t)| *t)
                .map(|t| t.as_second())
        };
        since(a).cmp(&since(b)).then_with(|| a.name.cmp(&b.name))
    });
    let mut left = budgets.clone();
    let mut empty = Vec::new();
    for c in drifted.iter().filter(|c| c.is_empty()) {
        let key = (c.pool.clone(), DisruptionReason::Drifted);
        let allowed = left.get(&key).copied().unwrap_or(UNLIMITED);
        if allowed == 0 {
            blocks.note(&c.name, || budget_block(&c.pool, DisruptionReason::Drifted));
            continue;
        }
        left.insert(key, allowed - 1);
        empty.push(*c);
    }
    if !empty.is_empty() {
        return Some(Command {
            method: Method::Drift,
            reason: Reason::Drifted,
            nodes: empty.iter().map(|c| c.name.clone()).collect(),
            replacements: Vec::new(),
            savings: empty.iter().filter_map(|c| c.price).sum(),
            simulation: None,
        });
    }
    for c in drifted.iter().filter(|c| !c.is_empty()) {
        if budget_left(budgets, &c.pool, DisruptionReason::Drifted) == 0 {
            blocks.note(&c.name, || budget_block(&c.pool, DisruptionReason::Drifted));
            continue;
        }
        let simulation = match simulate(state, &[*c]) {
            Ok(s) => s,
            Err(e) => {
                blocks.note(&c.name, || format!("simulation failed: {e}"));
                continue;
            }
        };
        if let Some(why) = &simulation.unplaced {
            blocks.note(&c.name, || {
                format!("drifted ({}), but {why}", drift_reason(c))
            });
            continue;
        }
        let Some(replacements) = planned_replacements(&simulation) else {
            blocks.note(&c.name, || {
                format!(
                    "drifted ({}), but no offering can hold its pods",
                    drift_reason(c)
                )
            });
            continue;
        };
        let launched: f64 = replacements.iter().map(|r| r.launch.price).sum();
        return Some(Command {
            method: Method::Drift,
            reason: Reason::Drifted,
            nodes: vec![c.name.clone()],
            savings: c.price.unwrap_or(0.0) - launched,
            replacements,
            simulation: Some(simulation),
        });
    }
    static_drift(state, statics, budgets, blocks)
}

/// Drift of static pools' nodes (upstream's `StaticDrift`, under `StaticCapacity`): the
/// earliest drifted node the `Drifted` budget allows is replaced one for one by a NodeClaim
/// of the pool's template, its pods left to reschedule as the drain evicts them. Not while
/// the pool is scaling down, and not when `limits.nodes` leaves no room to stage the
/// replacement. Without the gate a static pool's nodes are not drift-disrupted at all.
fn static_drift(
    state: &State,
    mut drifted: Vec<&Candidate>,
    budgets: &Budgets,
    blocks: &mut Blocks,
) -> Option<Command> {
    if !state.options.feature_gates.static_capacity {
        return None;
    }
    drifted.retain(|c| c.termination_grace_period || graceful(c, blocks));
    drifted.sort_by_key(|c| {
        let since = c
            .drift
            .as_ref()
            .and_then(|(_, t)| *t)
            .map(|t| t.as_second());
        (since, c.name.clone())
    });
    for c in drifted {
        let Some(pool) = state.pool(&c.pool).map(|p| p.pool) else {
            continue;
        };
        if budget_left(budgets, &c.pool, DisruptionReason::Drifted) == 0 {
            blocks.note(&c.name, || budget_block(&c.pool, DisruptionReason::Drifted));
            continue;
        }
        let members = state.managed.iter().filter(|m| m.node_pool == c.pool);
        let (live, total) = members.fold((0u64, 0u64), |(live, total), m| {
            (live + u64::from(!m.deleting), total + 1)
        });
        if live > pool.replicas().unwrap_or(0) {
            blocks.note(&c.name, || {
                format!("static NodePool {} is scaling down", c.pool)
            });
            continue;
        }
        if pool.node_limit().is_some_and(|limit| total >= limit) {
            blocks.note(&c.name, || STATIC_AT_LIMIT.to_string());
            continue;
        }
        let template = state
            .cluster
            .scheduling
            .node_pools
            .iter()
            .find(|p| p.name == c.pool)
            .and_then(|p| {
                let max = state.input.options.max_instance_types;
                crate::static_pools::template_claim(p, &state.input.daemonsets, max)
                    .ok()
                    .flatten()
            });
        let Some(replacement) = template.and_then(|claim| {
            Some(Replacement {
                launch: claim.launch.clone()?,
                claim,
            })
        }) else {
            blocks.note(&c.name, || {
                format!(
                    "drifted ({}), but no offering of its NodePool can launch a replacement",
                    drift_reason(c)
                )
            });
            continue;
        };
        return Some(Command {
            method: Method::Drift,
            reason: Reason::Drifted,
            nodes: vec![c.name.clone()],
            savings: c.price.unwrap_or(0.0) - replacement.launch.price,
            replacements: vec![replacement],
            simulation: None,
        });
    }
    None
}

/// Upstream's event message when a static pool's drift cannot stage a replacement.
pub const STATIC_AT_LIMIT: &str =
    "static NodePool is at its node limit and cannot stage a replacement";

fn drift_reason(c: &Candidate) -> &str {
    c.drift.as_ref().map_or("", |(r, _)| r.as_str())
}

/// The simulation's new NodeClaims as launched, if every one has an offering.
fn planned_replacements(simulation: &Simulation) -> Option<Vec<Replacement>> {
    simulation
        .new_claims
        .iter()
        .map(|claim| {
            Some(Replacement {
                launch: claim.launch.clone()?,
                claim: claim.clone(),
            })
        })
        .collect()
}

/// Whether consolidation may consider `c`; notes why not.
fn consolidatable(state: &State, c: &Candidate, blocks: &mut Blocks) -> bool {
    if let Err(why) = &c.consolidatable {
        blocks.note(&c.name, || why.clone());
        return false;
    }
    if !c.is_empty()
        && let Some(pool) = state.pool(&c.pool)
        && let Err(why) = candidate::consolidates_underutilized(pool.pool)
    {
        blocks.note(&c.name, || why);
        return false;
    }
    graceful(c, blocks)
}

pub fn multi_node(
    state: &mut State,
    candidates: &[Candidate],
    budgets: &Budgets,
    totals: &PoolTotals,
) -> Option<Command> {
    let mut left = budgets.clone();
    let mut allowed: Vec<&Candidate> = Vec::new();
    // The candidates earlier passes found blocking go after all the others, each part in
    // upstream's order: the searches, the 100 candidates they consider and the budgets all
    // reach past the blockers to candidates that may consolidate ([`super::blockers`]).
    let now = (state.timeouts.clock)();
    let (likely, known): (Vec<&Candidate>, Vec<&Candidate>) = candidates
        .iter()
        .partition(|c| !state.forms.blockers.recent(&c.name, now));
    // How many of `allowed` are not known blockers: they come first.
    let mut likely_allowed = 0;
    for (c, is_likely) in likely
        .iter()
        .map(|c| (c, true))
        .chain(known.iter().map(|c| (c, false)))
    {
        // Empty nodes belong to emptiness and its budget (upstream leaves them out too).
        if c.is_empty() || !consolidatable(state, c, &mut Blocks::default()) {
            continue;
        }
        let key = (c.pool.clone(), DisruptionReason::Underutilized);
        let n = left.get(&key).copied().unwrap_or(UNLIMITED);
        if n == 0 {
            continue;
        }
        left.insert(key, n - 1);
        allowed.push(c);
        likely_allowed += usize::from(is_likely);
    }
    if allowed.len() < 2 {
        return None;
    }
    let deadline = state.timeouts.deadline(state.timeouts.multi_node);
    longest_prefix(state, &allowed, totals, &deadline)
        .or_else(|| around_blockers(state, &allowed, likely_allowed, totals, &deadline))
        .map(|p| consolidation_command(Method::MultiNodeConsolidation, p))
}

/// Whether multi-node consolidation's minute is over; records its timeout once however many
/// of its searches find it over.
fn out_of_time(state: &mut State, deadline: &Deadline) -> bool {
    if !deadline.passed() {
        return false;
    }
    if !state.timed_out.contains(&Method::MultiNodeConsolidation) {
        state.timed_out.push(Method::MultiNodeConsolidation);
    }
    true
}

/// Upstream's search: the longest prefix of the candidates, at least two and at most
/// [`MAX_MULTI_NODE_CANDIDATES`] (plus one, as upstream's bounds allow), that consolidates,
/// found by binary search on its length.
fn longest_prefix(
    state: &mut State,
    allowed: &[&Candidate],
    totals: &PoolTotals,
    deadline: &Deadline,
) -> Option<Proposal> {
    let (mut low, mut high) = (1, (allowed.len() - 1).min(MAX_MULTI_NODE_CANDIDATES));
    let mut best: Option<Proposal> = None;
    while low <= high {
        if out_of_time(state, deadline) {
            // Upstream's timeout: the best command found so far, if any.
            break;
        }
        let mid = (low + high) / 2;
        match multi_node_option(state, &allowed[..=mid], totals) {
            Some(proposal) => {
                best = Some(proposal);
                low = mid + 1;
            }
            None => high = mid - 1,
        }
    }
    best
}

/// Where no prefix consolidates, the candidates a prefix cannot get past: one whose pods
/// cannot move, sorted early, fails every prefix that holds it, and upstream's search ends
/// with nothing however many candidates behind it would go (kubernetes-sigs/karpenter#1962).
/// This search takes the first [`MAX_MULTI_NODE_CANDIDATES`] in order, in groups: a group
/// that consolidates together with the candidates already taken joins them; one that does
/// not is halved, down to single candidates, which are left out. Each group taken is
/// simulated with all taken before it, so the last one taken is the command, and it finds
/// `b` blockers among `n` candidates in about `2·b·log2(n/b)` simulations, for at most
/// [`super::Timeouts::around_blockers`]. The candidates earlier passes found blocking, in
/// `allowed` after its first `likely`, are a group of their own tried after all the others
/// ([`super::blockers`]), so a pass whose blockers have not changed finds its command in its
/// first look. At least two candidates, or nothing: a single node is single-node
/// consolidation's to decide.
fn around_blockers(
    state: &mut State,
    allowed: &[&Candidate],
    likely: usize,
    totals: &PoolTotals,
    deadline: &Deadline,
) -> Option<Proposal> {
    let considered = &allowed[..allowed.len().min(MAX_MULTI_NODE_CANDIDATES)];
    let own = state.timeouts.deadline(state.timeouts.around_blockers);
    let (likely, known) = considered.split_at(likely.min(considered.len()));
    let mut taken: Vec<&Candidate> = Vec::new();
    let mut best: Option<Proposal> = None;
    // Groups still to try, the next one last: the candidates that blocked earlier passes
    // after all the others.
    let mut groups: Vec<&[&Candidate]> = [known, likely]
        .into_iter()
        .filter(|g| !g.is_empty())
        .collect();
    while let Some(group) = groups.pop() {
        if out_of_time(state, deadline) || own.passed() {
            break;
        }
        let trial: Vec<&Candidate> = taken.iter().chain(group).copied().collect();
        match multi_node_option(state, &trial, totals) {
            Some(proposal) => {
                taken = trial;
                best = Some(proposal);
            }
            None if group.len() > 1 => {
                let (first, rest) = group.split_at(group.len() / 2);
                groups.push(rest);
                groups.push(first);
            }
            None => {
                let now = (state.timeouts.clock)();
                state.forms.blockers.found(&group[0].name, now);
            }
        }
    }
    best.filter(|p| p.nodes.len() >= 2)
}

fn multi_node_option(
    state: &mut State,
    prefix: &[&Candidate],
    totals: &PoolTotals,
) -> Option<Proposal> {
    let mut proposal = consolidation::compute(state, prefix).ok()?;
    if let Some(replacement) = proposal.replacements.first_mut() {
        // Replacing several nodes with one of their own types costs no less than keeping
        // that node and deleting the others: only types cheaper than it may replace them.
        let mut own: BTreeMap<&str, f64> = BTreeMap::new();
        for c in prefix {
            let price = c.price.unwrap_or(f64::INFINITY);
            let entry = own.entry(c.instance_type.as_str()).or_insert(f64::INFINITY);
            *entry = entry.min(price);
        }
        let ceiling = replacement
            .claim
            .instance_types
            .iter()
            .filter_map(|o| own.get(o.name.as_str()).copied())
            .fold(f64::INFINITY, f64::min);
        if ceiling.is_finite() {
            consolidation::keep_below(state, replacement, ceiling).ok()?;
            let price = consolidation::candidates_price(prefix).ok()?;
            proposal.savings = price - replacement.launch.price;
        }
    }
    consolidation::balanced(state, &proposal, prefix, totals).ok()?;
    Some(proposal)
}

pub fn single_node(
    state: &mut State,
    candidates: &[Candidate],
    budgets: &Budgets,
    totals: &PoolTotals,
    blocks: &mut Blocks,
) -> Option<Command> {
    let deadline = state.timeouts.deadline(state.timeouts.single_node);
    for c in round_robin(candidates) {
        if deadline.passed() {
            // Upstream's timeout gives up the pass; the next one starts afresh.
            state.timed_out.push(Method::SingleNodeConsolidation);
            return None;
        }
        if !consolidatable(state, c, blocks) {
            continue;
        }
        if budget_left(budgets, &c.pool, DisruptionReason::Underutilized) == 0 {
            blocks.note(&c.name, || {
                budget_block(&c.pool, DisruptionReason::Underutilized)
            });
            continue;
        }
        // Empty nodes belong to emptiness and its budget.
        if c.is_empty() {
            continue;
        }
        let proposal = consolidation::compute(state, &[c]).and_then(|p| {
            consolidation::balanced(state, &p, &[c], totals)?;
            Ok(p)
        });
        match proposal {
            Ok(p) => return Some(consolidation_command(Method::SingleNodeConsolidation, p)),
            Err(why) => blocks.note(&c.name, || why),
        }
    }
    None
}

/// Candidates interleaved across NodePools (pools by name), each pool's in order.
fn round_robin(candidates: &[Candidate]) -> Vec<&Candidate> {
    let mut by_pool: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in candidates {
        by_pool.entry(c.pool.as_str()).or_default().push(c);
    }
    let longest = by_pool.values().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(candidates.len());
    let mut seen = HashSet::new();
    for i in 0..longest {
        for list in by_pool.values() {
            if let Some(c) = list.get(i)
                && seen.insert(c.name.as_str())
            {
                out.push(*c);
            }
        }
    }
    out
}

fn consolidation_command(method: Method, proposal: Proposal) -> Command {
    Command {
        method,
        reason: Reason::Underutilized,
        nodes: proposal.nodes,
        replacements: proposal.replacements,
        savings: proposal.savings,
        simulation: Some(proposal.simulation),
    }
}
