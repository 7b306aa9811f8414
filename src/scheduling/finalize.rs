//! Turns planned NodeClaims into the public result: instance types ordered by price and
//! truncated (checking minValues again on what is kept), the NodeClaim's requirements,
//! labels and requests, and the offering a launch would pick, following the AWS provider:
//! reserved, then spot, then on-demand; non-exotic types first; no spot dearer than the
//! cheapest on-demand; the 60 cheapest types; the cheapest offering among them.

use std::collections::BTreeMap;

use super::intern::Bits;
use super::pool::{ItInfo, Pool, offer_allowed};
use super::prepare::Prepared;
use super::req::{Req, ReqSet, Vocab};
use super::resvec;
use super::solve::Claim;
use super::types::{InstanceTypeOption, LaunchChoice, MinValuesPolicy, PlannedNodeClaim};
use crate::labels;

/// Types a launch considers after filtering (the AWS provider's CreateFleet override cap).
const LAUNCH_CANDIDATES: usize = 60;

/// The cheapest available offering price of `it` that `reqs` allow.
fn cheapest(it: &ItInfo, reqs: &ReqSet, vocab: &Vocab) -> Option<f64> {
    let (zone, ct) = (reqs.get(vocab.zone), reqs.get(vocab.capacity_type));
    it.offers
        .iter()
        .filter(|o| o.available && offer_allowed(o, zone, ct, vocab))
        .map(|o| o.price)
        .min_by(f64::total_cmp)
}

/// Builds the public NodeClaim, or returns the minValues error that drops it.
pub fn planned(claim: &Claim, pool: &Pool, prep: &Prepared) -> Result<PlannedNodeClaim, String> {
    let vocab = &prep.vocab;
    let mut reqs = claim.reqs.clone();
    reqs.0.retain(|(k, _)| *k != vocab.hostname);
    let mut ordered: Vec<(usize, f64)> = claim
        .its
        .iter()
        .map(|i| (i, cheapest(&pool.its[i], &reqs, vocab).unwrap_or(f64::MAX)))
        .collect();
    ordered.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| pool.its[a.0].name.cmp(&pool.its[b.0].name)));
    ordered.truncate(prep.options.max_instance_types);
    let mut kept = Bits::empty(pool.its.len());
    for (i, _) in &ordered {
        kept.set(*i);
    }
    if prep.options.min_values_policy == MinValuesPolicy::Strict {
        let mut check = reqs.clone();
        pool.check_min_values(&kept, &mut check, MinValuesPolicy::Strict, vocab).map_err(|e| {
            format!(
                "pod didn’t schedule because NodePool {:?} couldn’t meet minValues requirements, validating minValues, {e}",
                pool.name
            )
        })?;
    }
    let names: Vec<_> = ordered.iter().map(|(i, _)| vocab.interner.get(&pool.its[*i].name)).collect();
    let min_values = reqs.get(vocab.instance_type).and_then(|r| r.min_values);
    let mut it_req = Req::is_in(names.into_iter().flatten().collect());
    it_req.min_values = min_values;
    reqs.set(vocab.instance_type, it_req);
    let mut cts = Vec::new();
    for (i, _) in &ordered {
        let it = &pool.its[*i];
        for o in &it.offers {
            if o.available && offer_allowed(o, reqs.get(vocab.zone), reqs.get(vocab.capacity_type), vocab) {
                cts.push(o.capacity_type);
            }
        }
    }
    if !cts.is_empty() {
        let existing_min = reqs.get(vocab.capacity_type).and_then(|r| r.min_values);
        let mut ct_req = Req::is_in(cts);
        ct_req.min_values = existing_min;
        reqs.set(vocab.capacity_type, ct_req);
    }
    let mut requests = claim.requests.clone();
    resvec::add_assign(&mut requests, &pool.min_overhead(&kept, pool.stride));
    Ok(PlannedNodeClaim {
        node_pool: pool.name.clone(),
        instance_types: ordered
            .iter()
            .map(|(i, price)| InstanceTypeOption { name: pool.its[*i].name.clone(), price: *price })
            .collect(),
        requirements: reqs.0.iter().flat_map(|(k, r)| r.to_public(*k, &vocab.interner)).collect(),
        labels: labels_of(pool, &reqs, vocab),
        taints: pool.taints.clone(),
        startup_taints: pool.startup_taints.clone(),
        requests: prep.names.to_resources(&requests),
        pods: claim.pods.iter().map(|p| prep.pods[*p as usize].pod_ref.clone()).collect(),
        launch: launch_choice(pool, &ordered, &reqs, vocab),
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
            out.entry(vocab.interner.name(*k).into_owned()).or_insert_with(|| v.into_owned());
        }
    }
    out
}

/// The offering a launch of these instance types would pick now.
pub fn launch_choice(pool: &Pool, ordered: &[(usize, f64)], reqs: &ReqSet, vocab: &Vocab) -> Option<LaunchChoice> {
    let (zone, ct) = (reqs.get(vocab.zone), reqs.get(vocab.capacity_type));
    let allowed = |it: &ItInfo, want: &str| -> Vec<(f64, usize)> {
        it.offers
            .iter()
            .enumerate()
            .filter(|(_, o)| o.available && offer_allowed(o, zone, ct, vocab) && vocab.interner.name(o.capacity_type) == want)
            .map(|(oi, o)| (o.price, oi))
            .collect()
    };
    let chosen_ct = [labels::CAPACITY_TYPE_RESERVED, labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND]
        .into_iter()
        .find(|want| ordered.iter().any(|(i, _)| !allowed(&pool.its[*i], want).is_empty()))?;
    let mut candidates: Vec<usize> = ordered
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| !allowed(&pool.its[*i], chosen_ct).is_empty())
        .collect();
    if candidates.iter().any(|i| !pool.its[*i].exotic) {
        candidates.retain(|i| !pool.its[*i].exotic);
    }
    let best = |i: usize, want: &str| allowed(&pool.its[i], want).into_iter().map(|(p, _)| p).min_by(f64::total_cmp);
    if chosen_ct == labels::CAPACITY_TYPE_SPOT {
        let cheapest_od = candidates
            .iter()
            .filter_map(|i| best(*i, labels::CAPACITY_TYPE_ON_DEMAND))
            .min_by(f64::total_cmp);
        if let Some(limit) = cheapest_od {
            let cheaper: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|i| best(*i, chosen_ct).is_some_and(|p| p <= limit))
                .collect();
            if !cheaper.is_empty() {
                candidates = cheaper;
            }
        }
    }
    candidates.sort_by(|a, b| {
        let (pa, pb) = (best(*a, chosen_ct).unwrap_or(f64::MAX), best(*b, chosen_ct).unwrap_or(f64::MAX));
        pa.total_cmp(&pb).then_with(|| pool.its[*a].name.cmp(&pool.its[*b].name))
    });
    candidates.truncate(LAUNCH_CANDIDATES);
    let mut offers: Vec<(f64, &str, String, usize)> = Vec::new();
    for i in &candidates {
        let it = &pool.its[*i];
        for (price, oi) in allowed(it, chosen_ct) {
            offers.push((price, it.name.as_str(), vocab.interner.name(it.offers[oi].zone).into_owned(), oi));
        }
    }
    offers.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)).then_with(|| a.2.cmp(&b.2)));
    offers.first().map(|(price, name, zone, _)| LaunchChoice {
        instance_type: (*name).to_string(),
        zone: zone.clone(),
        capacity_type: chosen_ct.to_string(),
        price: *price,
    })
}
