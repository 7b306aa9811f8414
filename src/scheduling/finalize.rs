//! Turns planned NodeClaims into the public result: instance types ordered by price and
//! truncated (checking minValues again on what is kept), the NodeClaim's requirements,
//! labels and requests, and the offering a launch would pick, following the AWS provider:
//! reserved, then spot, then on-demand; non-exotic types first; no spot dearer than the
//! cheapest on-demand; the 60 cheapest types; the cheapest offering among them. Prices per
//! instance type depend only on a NodeClaim's zone and capacity-type requirements, so they
//! are computed once per distinct pair and shared by every NodeClaim with that pair.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::intern::{Bits, FxHashMap};
use super::pool::{OfferKey, OfferReqs, Pool, offer_allowed};
use super::prepare::Prepared;
use super::req::{Req, ReqSet, Vocab};
use super::resvec;
use super::solve::Claim;
use super::types::{
    InstanceTypeOption, InstanceTypeOptions, LaunchChoice, MinValuesPolicy, PlannedNodeClaim,
};
use crate::labels;

/// Capacity types in launch preference order.
const CAPACITY_TYPES: [&str; 3] = [
    labels::CAPACITY_TYPE_RESERVED,
    labels::CAPACITY_TYPE_SPOT,
    labels::CAPACITY_TYPE_ON_DEMAND,
];

/// Prices of a pool's instance types under one zone/capacity-type requirement pair.
pub struct PriceTable {
    /// Cheapest allowed available offering per instance type (`f64::MAX`: none).
    cheapest: Vec<f64>,
    /// Instance types by (cheapest price, name).
    order: Vec<usize>,
    /// Per capacity type in `CAPACITY_TYPES` order: cheapest price per instance type.
    by_capacity_type: [Vec<f64>; 3],
}

/// Price tables keyed by pool and requirement pair, and the option lists built from them.
#[derive(Default)]
pub struct PriceCache {
    tables: FxHashMap<(usize, OfferKey), Rc<PriceTable>>,
    lists: FxHashMap<(usize, Bits), InstanceTypeOptions>,
}

impl PriceCache {
    fn table(
        &mut self,
        pool_index: usize,
        pool: &Pool,
        reqs: &ReqSet,
        vocab: &Vocab,
    ) -> Rc<PriceTable> {
        let offers = OfferReqs::from(|k| reqs.get(k), vocab);
        let key = (pool_index, offers.key());
        if let Some(t) = self.tables.get(&key) {
            return t.clone();
        }
        let n = pool.its.len();
        let mut cheapest = vec![f64::MAX; n];
        let mut by_capacity_type = [vec![f64::MAX; n], vec![f64::MAX; n], vec![f64::MAX; n]];
        let ct_index: Vec<Option<usize>> = CAPACITY_TYPES
            .iter()
            .map(|c| vocab.interner.get(c).map(|s| s as usize))
            .collect();
        for (i, it) in pool.its.iter().enumerate() {
            for o in it
                .offers
                .iter()
                .filter(|o| o.available && offer_allowed(o, offers, vocab))
            {
                cheapest[i] = cheapest[i].min(o.price);
                if let Some(k) = ct_index
                    .iter()
                    .position(|c| *c == Some(o.capacity_type as usize))
                {
                    by_capacity_type[k][i] = by_capacity_type[k][i].min(o.price);
                }
            }
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|a, b| {
            cheapest[*a]
                .total_cmp(&cheapest[*b])
                .then_with(|| pool.its[*a].name.cmp(&pool.its[*b].name))
        });
        let table = Rc::new(PriceTable {
            cheapest,
            order,
            by_capacity_type,
        });
        self.tables.insert(key, table.clone());
        table
    }
}

/// Builds the public NodeClaim, or returns the minValues error that drops it.
pub fn planned(
    claim: &Claim,
    pool: &Pool,
    prep: &Prepared,
    prices: &mut PriceCache,
) -> Result<PlannedNodeClaim, String> {
    let vocab = &prep.vocab;
    let mut reqs = claim.reqs.clone();
    reqs.0.retain(|(k, _)| *k != vocab.hostname);
    let table = prices.table(claim.pool, pool, &reqs, vocab);
    let ordered: Vec<usize> = table
        .order
        .iter()
        .copied()
        .filter(|i| claim.its.has(*i))
        .take(prep.options.max_instance_types)
        .collect();
    let mut kept = Bits::empty(pool.its.len());
    for i in &ordered {
        kept.set(*i);
    }
    match prep.options.min_values_policy {
        MinValuesPolicy::Strict => {
            let mut check = reqs.clone();
            pool.check_min_values(&kept, &mut check, MinValuesPolicy::Strict, vocab).map_err(|e| {
                format!(
                    "pod didn’t schedule because NodePool {:?} couldn’t meet minValues requirements, validating minValues, {e}",
                    pool.name
                )
            })?;
        }
        // Truncation to the cheapest types may leave fewer values than the solve kept: lower
        // minValues to what is left, as upstream relaxes them when it truncates.
        MinValuesPolicy::BestEffort => {
            pool.check_min_values(&kept, &mut reqs, MinValuesPolicy::BestEffort, vocab)?;
        }
    }
    let min_values_relaxed = reqs.0.iter().any(|(k, r)| {
        let asked = pool.reqs.get(*k).and_then(|p| p.min_values);
        matches!((r.min_values, asked), (Some(now), Some(asked)) if now < asked)
    });
    let instance_type_min_values = reqs
        .get(vocab.instance_type)
        .and_then(|r| r.min_values)
        .map(i64::from);
    // The instance-type list lives in `instance_types`; `requirements` carries the rest.
    reqs.0.retain(|(k, _)| *k != vocab.instance_type);
    let mut cts = Vec::new();
    for (k, c) in CAPACITY_TYPES.iter().enumerate() {
        if ordered
            .iter()
            .any(|i| table.by_capacity_type[k][*i] < f64::MAX)
            && let Some(sym) = vocab.interner.get(c)
        {
            cts.push(sym);
        }
    }
    if !cts.is_empty() {
        let mut ct_req = Req::is_in(cts);
        ct_req.min_values = reqs.get(vocab.capacity_type).and_then(|r| r.min_values);
        reqs.set(vocab.capacity_type, ct_req);
    }
    let mut requests = claim.requests.clone();
    resvec::add_assign(&mut requests, &pool.min_overhead(&kept, pool.stride));
    let launch = launch_choice(pool, &ordered, &table, &claim.reqs, vocab);
    Ok(PlannedNodeClaim {
        node_pool: pool.name.clone(),
        instance_types: prices
            .lists
            .entry((Rc::as_ptr(&table) as usize, kept))
            .or_insert_with(|| {
                InstanceTypeOptions(
                    ordered
                        .iter()
                        .map(|i| InstanceTypeOption {
                            name: pool.its[*i].name.clone(),
                            price: table.cheapest[*i],
                        })
                        .collect(),
                )
            })
            .clone(),
        instance_type_min_values,
        min_values_relaxed,
        requirements: reqs
            .0
            .iter()
            .flat_map(|(k, r)| r.to_public(*k, &vocab.interner))
            .collect(),
        labels: labels_of(pool, &reqs, vocab),
        taints: pool.taints.clone(),
        startup_taints: pool.startup_taints.clone(),
        requests: prep.names.to_resources(&requests),
        pods: claim
            .pods
            .iter()
            .map(|p| prep.pods[*p as usize].form.pod_ref.clone())
            .collect(),
        launch,
    })
}

/// Template labels, the NodePool label, and custom labels the requirements pin to one value.
fn labels_of(pool: &Pool, reqs: &ReqSet, vocab: &Vocab) -> BTreeMap<String, String> {
    let mut out = pool.labels.clone();
    out.insert(labels::NODEPOOL.to_string(), pool.name.clone());
    for (k, r) in &reqs.0 {
        if vocab.is_well_known(*k) || *k == vocab.hostname || r.complement {
            continue;
        }
        if let Some(v) = r.values.iter().map(|v| vocab.interner.name(*v)).min() {
            out.entry(vocab.interner.name(*k).into_owned())
                .or_insert_with(|| v.into_owned());
        }
    }
    out
}

/// The offering a launch of `ordered` (cheapest first) would pick now. The provider keeps
/// the 60 cheapest candidates and launches the cheapest offering among them, which is the
/// cheapest candidate overall, so one pass finds it.
fn launch_choice(
    pool: &Pool,
    ordered: &[usize],
    table: &PriceTable,
    reqs: &ReqSet,
    vocab: &Vocab,
) -> Option<LaunchChoice> {
    let k = (0..CAPACITY_TYPES.len()).find(|k| {
        ordered
            .iter()
            .any(|i| table.by_capacity_type[*k][*i] < f64::MAX)
    })?;
    let price = |i: usize| table.by_capacity_type[k][i];
    let offered = || ordered.iter().copied().filter(|i| price(*i) < f64::MAX);
    let any_plain = offered().any(|i| !pool.its[i].exotic);
    let plain = |i: &usize| !any_plain || !pool.its[*i].exotic;
    let mut cap = f64::MAX;
    if CAPACITY_TYPES[k] == labels::CAPACITY_TYPE_SPOT {
        // Spot dearer than the cheapest on-demand option is dropped (unless that drops all).
        let cheapest_od = offered()
            .filter(plain)
            .map(|i| table.by_capacity_type[2][i])
            .fold(f64::MAX, f64::min);
        if offered().filter(plain).any(|i| price(i) <= cheapest_od) {
            cap = cheapest_od;
        }
    }
    let mut best: Option<usize> = None;
    for i in offered()
        .filter(plain)
        .filter(|i| cap == f64::MAX || price(*i) <= cap)
    {
        let better = best.is_none_or(|b| {
            price(i)
                .total_cmp(&price(b))
                .then_with(|| pool.its[i].name.cmp(&pool.its[b].name))
                .is_lt()
        });
        if better {
            best = Some(i);
        }
    }
    let best = best?;
    let it = &pool.its[best];
    let offers = OfferReqs::from(|k| reqs.get(k), vocab);
    let zone_name = it
        .offers
        .iter()
        .filter(|o| {
            o.available
                && offer_allowed(o, offers, vocab)
                && vocab.interner.name(o.capacity_type) == CAPACITY_TYPES[k]
                && o.price == price(best)
        })
        .map(|o| vocab.interner.name(o.zone).into_owned())
        .min()?;
    Some(LaunchChoice {
        instance_type: it.name.clone(),
        zone: zone_name,
        capacity_type: CAPACITY_TYPES[k].to_string(),
        price: price(best),
    })
}
