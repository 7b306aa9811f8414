//! Consolidation's core test, shared by the multi-node and single-node methods: remove the
//! candidates, reschedule their pods, and accept the result when every pod finds a place and
//! at most one new node is needed, strictly cheaper than the candidates together at its
//! worst launch price — upstream's `WorstLaunchPrice`: the dearest allowed offering of the
//! capacity type that would launch, by precedence reserved, spot, on-demand. A replacement
//! priced by its reserved offerings is pinned to `reserved` (it moves into a free
//! reservation); an on-demand node replaced by a node that may be spot or on-demand is
//! pinned to spot (the price filter assumed spot may launch, so on-demand must not); spot replacing spot needs the `SpotToSpotConsolidation` gate and, for one node, at
//! least 15 cheaper types, of which only the 15 cheapest (more if `minValues` needs more)
//! are launched, so the next pass does not replace the replacement again. The Balanced
//! policy further requires the move's share of the pool's savings to be at least half its
//! share of the pool's disruption.

use std::collections::{BTreeSet, HashMap};

use super::candidate::Candidate;
use super::report::ReplacementReport;
use super::simulate::{Simulation, simulate};
use super::state::State;
use crate::api::{ConsolidationPolicy, Operator};
use crate::catalog::{CapacityType, InstanceType, Offering};
use crate::labels;
use crate::report::{Launch, RequirementReport};
use crate::requirements::Requirements;
use crate::scheduling::{InstanceTypeOption, InstanceTypeOptions, LaunchChoice, PlannedNodeClaim};

/// Spot-to-spot single-node consolidation needs this many cheaper types (upstream's number).
pub const MIN_SPOT_TO_SPOT_TYPES: usize = 15;
/// Balanced consolidation approves a move whose score reaches 1 / this (upstream default).
pub const BALANCED_THRESHOLD: f64 = 2.0;

pub const NO_CHEAPER: &str = "no cheaper replacement";

/// A node to launch in place of candidates.
#[derive(Clone, Debug)]
pub struct Replacement {
    /// Options filtered by price, cheapest first; requirements as launched.
    pub claim: PlannedNodeClaim,
    pub launch: LaunchChoice,
}

/// An accepted consolidation (or drift) move.
#[derive(Debug)]
pub struct Proposal {
    pub nodes: Vec<String>,
    pub replacements: Vec<Replacement>,
    pub savings: f64,
    pub simulation: Simulation,
}

/// Tests consolidating `candidates` together; `Err` says why not.
pub fn compute(state: &mut State, candidates: &[&Candidate]) -> Result<Proposal, String> {
    let simulation = simulate(state, candidates).map_err(|e| format!("simulation failed: {e}"))?;
    if let Some(why) = &simulation.unplaced {
        return Err(why.clone());
    }
    let price = candidates_price(candidates)?;
    let nodes = candidates.iter().map(|c| c.name.clone()).collect();
    let claim = match simulation.new_claims.as_slice() {
        [] => {
            return Ok(Proposal {
                nodes,
                replacements: Vec::new(),
                savings: price,
                simulation,
            });
        }
        [claim] => claim.clone(),
        many => return Err(format!("removing it would need {} new nodes", many.len())),
    };
    let all_spot = candidates.iter().all(|c| c.is_spot());
    let replacement = cheaper_replacement(state, claim, price, all_spot, candidates.len() == 1)?;
    let savings = price - replacement.launch.price;
    Ok(Proposal {
        nodes,
        replacements: vec![replacement],
        savings,
        simulation,
    })
}

pub fn candidates_price(candidates: &[&Candidate]) -> Result<f64, String> {
    candidates.iter().try_fold(0.0, |sum, c| {
        c.price.map(|p| sum + p).ok_or_else(|| {
            format!(
                "no offering of {} in {} ({}) has a price",
                c.instance_type, c.zone, c.capacity_type
            )
        })
    })
}

fn cheaper_replacement(
    state: &State,
    mut claim: PlannedNodeClaim,
    price: f64,
    all_spot: bool,
    single: bool,
) -> Result<Replacement, String> {
    let pool = state
        .pool(&claim.node_pool)
        .ok_or_else(|| format!("NodePool {} not found", claim.node_pool))?;
    let mut options: Vec<&InstanceType> = claim
        .instance_types
        .iter()
        .filter_map(|o| pool.types.get(o.name.as_str()).copied())
        .collect();
    let reqs = requirements(&claim)?;
    let capacity = reqs.get(labels::CAPACITY_TYPE);
    let allows = |ct: &str| capacity.is_none_or(|r| r.has(ct));
    if all_spot && allows(labels::CAPACITY_TYPE_SPOT) {
        if !state.options.feature_gates.spot_to_spot_consolidation {
            return Err(
                "replacing spot with spot needs the SpotToSpotConsolidation feature gate".into(),
            );
        }
        pin_spot(&mut claim);
        let reqs = requirements(&claim)?;
        options.retain(|it| allowed_offerings(it, &reqs).next().is_some());
        options.retain(|it| worst_price(it, &reqs).is_some_and(|p| p < price));
        if options.is_empty() || !min_values_met(&claim, &options) {
            return Err(NO_CHEAPER.into());
        }
        if single {
            if options.len() < MIN_SPOT_TO_SPOT_TYPES {
                return Err(format!(
                    "spot-to-spot consolidation needs {MIN_SPOT_TO_SPOT_TYPES} cheaper instance types, found {}",
                    options.len()
                ));
            }
            let keep = MIN_SPOT_TO_SPOT_TYPES.max(min_values_prefix(&claim, &options));
            options.truncate(keep);
        }
        return finish(claim, options, &reqs);
    }
    options.retain(|it| worst_price(it, &reqs).is_some_and(|p| p < price));
    if options.is_empty() || !min_values_met(&claim, &options) {
        return Err(NO_CHEAPER.into());
    }
    let reserved: Vec<&InstanceType> = options
        .iter()
        .copied()
        .filter(|it| launch_capacity_type(it, &reqs) == Some(CapacityType::Reserved))
        .collect();
    if !reserved.is_empty() && min_values_met(&claim, &reserved) {
        // Priced as a move into a reservation: it launches there or not at all.
        pin(&mut claim, labels::CAPACITY_TYPE_RESERVED);
        let reqs = requirements(&claim)?;
        return finish(claim, reserved, &reqs);
    }
    if allows(labels::CAPACITY_TYPE_SPOT) && allows(labels::CAPACITY_TYPE_ON_DEMAND) {
        pin_spot(&mut claim);
    }
    let reqs = requirements(&claim)?;
    finish(claim, options, &reqs)
}

/// Keeps only options whose worst-case price is below `max_price` (multi-node's same-type
/// rule), failing when none or too few for `minValues` remain.
pub fn keep_below(
    state: &State,
    replacement: &mut Replacement,
    max_price: f64,
) -> Result<(), String> {
    let pool = state
        .pool(&replacement.claim.node_pool)
        .ok_or_else(|| format!("NodePool {} not found", replacement.claim.node_pool))?;
    let reqs = requirements(&replacement.claim)?;
    let options: Vec<&InstanceType> = replacement
        .claim
        .instance_types
        .iter()
        .filter_map(|o| pool.types.get(o.name.as_str()).copied())
        .filter(|it| worst_price(it, &reqs).is_some_and(|p| p < max_price))
        .collect();
    if options.is_empty() || !min_values_met(&replacement.claim, &options) {
        return Err(NO_CHEAPER.into());
    }
    *replacement = finish(replacement.claim.clone(), options, &reqs)?;
    Ok(())
}

fn finish(
    mut claim: PlannedNodeClaim,
    options: Vec<&InstanceType>,
    reqs: &Requirements,
) -> Result<Replacement, String> {
    let mut launch: Option<(&InstanceType, &Offering)> = None;
    for it in &options {
        for offering in allowed_offerings(it, reqs) {
            if launch.is_none_or(|(_, best)| offering.price < best.price) {
                launch = Some((it, offering));
            }
        }
    }
    let (it, offering) = launch.ok_or_else(|| NO_CHEAPER.to_string())?;
    let launch = LaunchChoice {
        instance_type: it.name.clone(),
        zone: offering.zone.clone(),
        capacity_type: offering.capacity_type.as_str().to_string(),
        price: offering.price,
    };
    let listed: Vec<InstanceTypeOption> = options
        .iter()
        .map(|it| InstanceTypeOption {
            name: it.name.clone(),
            price: allowed_offerings(it, reqs)
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min),
        })
        .collect();
    claim.instance_types = InstanceTypeOptions(listed.into());
    claim.launch = Some(launch.clone());
    Ok(Replacement { claim, launch })
}

fn requirements(claim: &PlannedNodeClaim) -> Result<Requirements, String> {
    Requirements::from_requirements_with_min_values(&claim.requirements)
        .map_err(|e| format!("replacement requirements: {e}"))
}

fn pin_spot(claim: &mut PlannedNodeClaim) {
    pin(claim, labels::CAPACITY_TYPE_SPOT);
}

fn pin(claim: &mut PlannedNodeClaim, capacity_type: &str) {
    claim
        .requirements
        .retain(|r| r.key != labels::CAPACITY_TYPE);
    claim
        .requirements
        .push(crate::api::NodeSelectorRequirementWithMinValues {
            key: labels::CAPACITY_TYPE.to_string(),
            operator: Operator::In,
            values: vec![capacity_type.to_string()],
            min_values: None,
        });
    claim.requirements.sort_by(|a, b| a.key.cmp(&b.key));
}

/// Available offerings the requirements allow (zone, zone id, capacity type).
fn allowed_offerings<'a>(
    it: &'a InstanceType,
    reqs: &'a Requirements,
) -> impl Iterator<Item = &'a Offering> + 'a {
    let allows = move |key: &str, value: &str| reqs.get(key).is_none_or(|r| r.has(value));
    it.offerings.iter().filter(move |o| {
        o.available
            && allows(labels::ZONE, &o.zone)
            && allows(labels::ZONE_ID, &o.zone_id)
            && allows(labels::CAPACITY_TYPE, o.capacity_type.as_str())
    })
}

/// Capacity types in launch precedence (upstream's `WorstLaunchPrice` order).
const LAUNCH_PRECEDENCE: [CapacityType; 3] = [
    CapacityType::Reserved,
    CapacityType::Spot,
    CapacityType::OnDemand,
];

/// The capacity type a launch of `it` under `reqs` would use: the first in precedence with
/// an allowed offering.
fn launch_capacity_type(it: &InstanceType, reqs: &Requirements) -> Option<CapacityType> {
    LAUNCH_PRECEDENCE
        .into_iter()
        .find(|ct| allowed_offerings(it, reqs).any(|o| o.capacity_type == *ct))
}

/// Upstream's `WorstLaunchPrice`: the highest price among the allowed offerings of the
/// capacity type a launch of `it` under `reqs` would use.
fn worst_price(it: &InstanceType, reqs: &Requirements) -> Option<f64> {
    let ct = launch_capacity_type(it, reqs)?;
    allowed_offerings(it, reqs)
        .filter(|o| o.capacity_type == ct)
        .map(|o| o.price)
        .reduce(f64::max)
}

/// `minValues` of every requirement, as distinct values among `options`.
fn min_values_met(claim: &PlannedNodeClaim, options: &[&InstanceType]) -> bool {
    min_values(claim)
        .iter()
        .all(|(key, min)| distinct(key, options) >= *min)
}

/// How many of the cheapest options satisfy every `minValues`.
fn min_values_prefix(claim: &PlannedNodeClaim, options: &[&InstanceType]) -> usize {
    let mins = min_values(claim);
    (1..=options.len())
        .find(|n| {
            mins.iter()
                .all(|(key, min)| distinct(key, &options[..*n]) >= *min)
        })
        .unwrap_or(options.len())
}

fn min_values(claim: &PlannedNodeClaim) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = claim
        .requirements
        .iter()
        .filter_map(|r| Some((r.key.clone(), usize::try_from(r.min_values?).ok()?)))
        .collect();
    if let Some(min) = claim
        .instance_type_min_values
        .and_then(|m| usize::try_from(m).ok())
    {
        out.push((labels::INSTANCE_TYPE.to_string(), min));
    }
    out
}

fn distinct(key: &str, options: &[&InstanceType]) -> usize {
    if key == labels::INSTANCE_TYPE {
        return options.len();
    }
    options
        .iter()
        .filter_map(|it| it.label(key))
        .collect::<BTreeSet<_>>()
        .len()
}

/// Per pool: total price of its candidates and their total disruption (one per node plus
/// each reschedulable pod's non-negative eviction cost) — Balanced scoring's denominators.
pub type PoolTotals = HashMap<String, (f64, f64)>;

pub fn pool_totals(candidates: &[Candidate]) -> PoolTotals {
    let mut totals = PoolTotals::new();
    // Upstream's graceful candidates exclude blocked nodes; nodes inside consolidateAfter
    // still count.
    for c in candidates.iter().filter(|c| c.graceful_block.is_none()) {
        let Some(price) = c.price.filter(|p| *p > 0.0) else {
            continue;
        };
        let entry = totals.entry(c.pool.clone()).or_default();
        entry.0 += price;
        entry.1 += move_disruption(&[c]);
    }
    totals
}

fn move_disruption(candidates: &[&Candidate]) -> f64 {
    candidates
        .iter()
        .map(|c| {
            1.0 + c
                .reschedulable_costs
                .iter()
                .map(|x| x.max(0.0))
                .sum::<f64>()
        })
        .sum()
}

/// The Balanced policy's verdict on a move: every Balanced pool among the candidates must
/// score at least 1/2 with its share of the savings.
pub fn balanced(
    state: &State,
    proposal: &Proposal,
    candidates: &[&Candidate],
    totals: &PoolTotals,
) -> Result<(), String> {
    let total_price: f64 = candidates.iter().filter_map(|c| c.price).sum();
    let mut by_pool: HashMap<&str, Vec<&Candidate>> = HashMap::new();
    for c in candidates {
        by_pool.entry(c.pool.as_str()).or_default().push(c);
    }
    let mut pools: Vec<_> = by_pool.into_iter().collect();
    pools.sort_by_key(|(name, _)| *name);
    for (name, members) in pools {
        let balanced = state.pool(name).is_some_and(|p| {
            p.pool.disruption().consolidation_policy == ConsolidationPolicy::Balanced
        });
        if !balanced {
            continue;
        }
        let (pool_cost, pool_disruption) = totals.get(name).copied().unwrap_or_default();
        let member_price: f64 = members.iter().filter_map(|c| c.price).sum();
        let savings = if total_price > 0.0 {
            proposal.savings * member_price / total_price
        } else {
            proposal.savings
        };
        let score = if pool_cost <= 0.0 || savings <= 0.0 {
            0.0
        } else if pool_disruption <= 0.0 {
            f64::INFINITY
        } else {
            (savings / pool_cost) / (move_disruption(&members) / pool_disruption)
        };
        if score < 1.0 / BALANCED_THRESHOLD {
            return Err(format!(
                "NodePool {name} (consolidationPolicy: Balanced): savings do not justify the disruption (score {score:.2} < {:.2})",
                1.0 / BALANCED_THRESHOLD
            ));
        }
    }
    Ok(())
}

impl From<&Replacement> for ReplacementReport {
    fn from(r: &Replacement) -> Self {
        ReplacementReport {
            node_pool: r.claim.node_pool.clone(),
            instance_types: r
                .claim
                .instance_types
                .iter()
                .map(|o| o.name.clone())
                .collect(),
            requirements: r
                .claim
                .node_claim_requirements()
                .iter()
                .map(|q| RequirementReport {
                    key: q.key.clone(),
                    operator: q.operator.as_str().to_string(),
                    values: q.values.clone(),
                    min_values: q.min_values,
                })
                .collect(),
            launch: Launch {
                instance_type: r.launch.instance_type.clone(),
                zone: r.launch.zone.clone(),
                capacity_type: r.launch.capacity_type.clone(),
                price: r.launch.price,
            },
        }
    }
}
