//! A NodePool prepared for solving: its requirements, its instance types as dense arrays
//! (effective allocatable after the daemonset overhead of each type's daemonset group,
//! capacity, offerings), and caches mapping a requirement to the bitset of instance types
//! compatible with it. A NodeClaim's candidate instance types are a bitset that only ever
//! shrinks, narrowed per changed requirement key through these caches.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Taint;

use super::intern::{Bits, FxHashMap, Sym};
use super::pod::HostPort;
use super::req::{Req, ReqSet, Vocab};
use super::resvec::{self, ResNames};
use super::types::MinValuesPolicy;

/// An offering of an instance type.
#[derive(Clone, Debug)]
pub struct Offer {
    pub zone: Sym,
    pub zone_id: Option<Sym>,
    pub capacity_type: Sym,
    pub price: f64,
    pub available: bool,
}

/// An instance type of a pool.
#[derive(Clone, Debug)]
pub struct ItInfo {
    pub name: String,
    pub reqs: ReqSet,
    pub offers: Vec<Offer>,
    pub capacity: Vec<i64>,
    pub allocatable: Vec<i64>,
    /// GPU, accelerator or bare-metal types, which launches avoid unless nothing else fits.
    pub exotic: bool,
}

/// Instance types sharing one set of compatible daemonsets.
#[derive(Clone, Debug)]
pub struct DaemonGroup {
    pub overhead: Vec<i64>,
    pub ports: Vec<HostPort>,
    pub members: Bits,
}

/// Why no instance type was left, in upstream's terms.
#[derive(Clone, Debug, Default)]
pub struct FilterFailure {
    pub requirements_met: bool,
    pub fits: bool,
    pub has_offering: bool,
    pub requirements_and_fits: bool,
    pub requirements_and_offering: bool,
    pub fits_and_offering: bool,
    pub min_values: Option<String>,
    pub cpu_typo: bool,
}

impl FilterFailure {
    /// Upstream's `FailureReason` wording.
    pub fn reason(&self) -> String {
        if let Some(m) = &self.min_values {
            return m.clone();
        }
        let (r, f, o) = (self.requirements_met, self.fits, self.has_offering);
        let s = match (r, f, o) {
            (false, false, false) => {
                "no instance type met the scheduling requirements or had enough resources or had a required offering"
            }
            (false, false, true) => {
                "no instance type met the scheduling requirements or had enough resources"
            }
            (false, true, false) => {
                "no instance type met the scheduling requirements or had a required offering"
            }
            (true, false, false) => {
                "no instance type had enough resources or had a required offering"
            }
            (false, true, true) => "no instance type met all requirements",
            (true, false, true) => {
                return if self.cpu_typo {
                    "no instance type has enough resources (CPU request >= 1 Million, m vs M typo?)"
                        .into()
                } else {
                    "no instance type has enough resources".into()
                };
            }
            (true, true, false) => "no instance type has the required offering",
            (true, true, true) if self.requirements_and_fits => {
                "no instance type which met the scheduling requirements and had enough resources, had a required offering"
            }
            (true, true, true) if self.fits_and_offering => {
                "no instance type which had enough resources and the required offering met the scheduling requirements"
            }
            (true, true, true) if self.requirements_and_offering => {
                "no instance type which met the scheduling requirements and the required offering had the required resources"
            }
            (true, true, true) => "no instance type met the requirements/resources/offering tuple",
        };
        s.to_string()
    }
}

/// A prepared NodePool and its solve-time state (remaining limits, caches).
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub reqs: ReqSet,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Shared by every clone: a solver clones the pools it owns for their solve-time state,
    /// and the types (a thousand or more, with their requirements) are read-only.
    pub its: Arc<[ItInfo]>,
    pub groups: Vec<DaemonGroup>,
    /// Allocatable minus the instance type's daemonset overhead, `its.len() * stride`.
    pub effective: Vec<i64>,
    pub stride: usize,
    /// Instance types usable at all: compatible with the pool and with an offering.
    pub base: Bits,
    /// Remaining limit per resource (`None`: unlimited); `nodes` is tracked separately.
    pub remaining: Vec<Option<i64>>,
    pub remaining_nodes: Option<i64>,
    limit_bits: Option<Bits>,
    limit_room: Option<Vec<i64>>,
    key_cache: FxHashMap<(Sym, Req), Bits>,
    offer_cache: FxHashMap<OfferKey, Bits>,
}

impl Pool {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        reqs: ReqSet,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
        startup_taints: Vec<Taint>,
        its: Vec<ItInfo>,
        groups: Vec<DaemonGroup>,
        it_group: Vec<usize>,
        stride: usize,
        remaining: Vec<Option<i64>>,
        remaining_nodes: Option<i64>,
        vocab: &Vocab,
    ) -> Pool {
        let mut effective = vec![0; its.len() * stride];
        for (i, it) in its.iter().enumerate() {
            let row = &mut effective[i * stride..(i + 1) * stride];
            row.copy_from_slice(&it.allocatable);
            resvec::sub_assign(row, &groups[it_group[i]].overhead);
        }
        let n = its.len();
        let mut pool = Pool {
            name,
            reqs,
            labels,
            taints,
            startup_taints,
            its: its.into(),
            groups,
            effective,
            stride,
            base: Bits::empty(n),
            remaining,
            remaining_nodes,
            limit_bits: None,
            limit_room: None,
            key_cache: FxHashMap::default(),
            offer_cache: FxHashMap::default(),
        };
        let mut base = Bits::full(n);
        let reqs = pool.reqs.clone();
        for (k, r) in &reqs.0 {
            base.and_assign(&pool.key_bits(*k, r, vocab));
        }
        base.and_assign(&pool.offer_bits(OfferReqs::from(|k| reqs.get(k), vocab), vocab));
        let zero = vec![0; stride];
        for i in 0..n {
            if !resvec::fits(&zero, pool.effective_row(i)) {
                base.clear(i);
            }
        }
        pool.base = base;
        pool
    }

    #[inline]
    pub fn effective_row(&self, it: usize) -> &[i64] {
        &self.effective[it * self.stride..(it + 1) * self.stride]
    }

    /// Instance types whose requirement for `key` intersects `req`.
    pub fn key_bits(&mut self, key: Sym, req: &Req, vocab: &Vocab) -> Bits {
        if let Some(b) = self.key_cache.get(&(key, req.clone())) {
            return b.clone();
        }
        let mut bits = Bits::empty(self.its.len());
        for (i, it) in self.its.iter().enumerate() {
            let ok = match it.reqs.get(key) {
                None => true,
                Some(own) => {
                    own.has_intersection(req, &vocab.interner)
                        || (is_negative(own) && is_negative(req))
                }
            };
            if ok {
                bits.set(i);
            }
        }
        self.key_cache.insert((key, req.clone()), bits.clone());
        bits
    }

    /// Instance types with an available offering the zone and capacity-type requirements allow.
    pub fn offer_bits(&mut self, reqs: OfferReqs<'_>, vocab: &Vocab) -> Bits {
        let cache_key = reqs.key();
        if let Some(b) = self.offer_cache.get(&cache_key) {
            return b.clone();
        }
        let mut bits = Bits::empty(self.its.len());
        for (i, it) in self.its.iter().enumerate() {
            if it
                .offers
                .iter()
                .any(|o| o.available && offer_allowed(o, reqs, vocab))
            {
                bits.set(i);
            }
        }
        self.offer_cache.insert(cache_key, bits.clone());
        bits
    }

    /// Instance types that do not exceed the pool's remaining limits.
    pub fn within_limits(&mut self) -> Bits {
        if let Some(b) = &self.limit_bits {
            return b.clone();
        }
        let mut bits = self.base.clone();
        for i in self.base.iter() {
            let cap = &self.its[i].capacity;
            let exceeds = self
                .remaining
                .iter()
                .enumerate()
                .any(|(r, rem)| rem.is_some_and(|rem| cap[r] > rem));
            if exceeds {
                bits.clear(i);
            }
        }
        self.limit_bits = Some(bits.clone());
        bits
    }

    /// Charges a new NodeClaim against the limits: one node, and for every limited resource
    /// the largest capacity among its instance types (we do not know which will launch).
    pub fn charge(&mut self, its: &Bits) {
        if let Some(n) = self.remaining_nodes.as_mut() {
            *n -= 1;
        }
        if self.remaining.iter().all(Option::is_none) {
            return;
        }
        for (r, rem) in self.remaining.iter_mut().enumerate() {
            if let Some(rem) = rem.as_mut() {
                let max = its
                    .iter()
                    .map(|i| self.its[i].capacity[r])
                    .max()
                    .unwrap_or(0);
                *rem -= max;
            }
        }
        self.limit_bits = None;
        self.limit_room = None;
    }

    /// `max_room` of `within_limits`, cached alongside it.
    pub fn limit_room(&mut self) -> Vec<i64> {
        if let Some(r) = &self.limit_room {
            return r.clone();
        }
        let its = self.within_limits();
        let room = self.max_room(&its);
        self.limit_room = Some(room.clone());
        room
    }

    /// Narrows `current` (all compatible with the NodeClaim's requirements before `changes`)
    /// to the instance types compatible with the changed keys, with an offering allowed by
    /// the resulting `offers` requirements, free of daemonset host-port conflicts with
    /// `ports`, and with room for `total` plus their daemonset overhead.
    #[allow(clippy::too_many_arguments)]
    pub fn narrow(
        &mut self,
        current: &Bits,
        changes: &ReqSet,
        offers: OfferReqs<'_>,
        total: &[i64],
        ports: &[HostPort],
        vocab: &Vocab,
    ) -> Bits {
        let mut cand = current.clone();
        let mut offers_changed = false;
        for (k, r) in &changes.0 {
            if *k == vocab.hostname {
                continue; // instance types never define hostnames
            }
            if *k == vocab.zone || *k == vocab.capacity_type || *k == vocab.zone_id {
                offers_changed = true;
            }
            cand.and_assign(&self.key_bits(*k, r, vocab));
        }
        if offers_changed {
            cand.and_assign(&self.offer_bits(offers, vocab));
        }
        if !ports.is_empty() {
            for g in &self.groups {
                if g.ports.iter().any(|p| ports.iter().any(|q| p.conflicts(q))) {
                    for i in g.members.iter() {
                        cand.clear(i);
                    }
                }
            }
        }
        let stride = self.stride;
        for (wi, word) in cand.0.iter_mut().enumerate() {
            let mut w = *word;
            while w != 0 {
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                let i = wi * 64 + bit;
                if !resvec::fits(total, &self.effective[i * stride..(i + 1) * stride]) {
                    *word &= !(1u64 << bit);
                }
            }
        }
        cand
    }

    /// Componentwise maximum effective allocatable over `its`: a quick upper bound on room.
    pub fn max_room(&self, its: &Bits) -> Vec<i64> {
        let mut out = vec![i64::MIN; self.stride];
        for i in its.iter() {
            for (o, v) in out.iter_mut().zip(self.effective_row(i)) {
                *o = (*o).max(*v);
            }
        }
        out
    }

    /// Checks minValues on `its`. Under BestEffort lowers the requirements' minValues to what
    /// is achievable; under Strict returns upstream's error text.
    pub fn check_min_values(
        &self,
        its: &Bits,
        reqs: &mut ReqSet,
        policy: MinValuesPolicy,
        vocab: &Vocab,
    ) -> Result<(), String> {
        if !reqs.has_min_values() {
            return Ok(());
        }
        let mut failing = Vec::new();
        for (k, r) in reqs.0.iter_mut() {
            let Some(min) = r.min_values else { continue };
            let mut values: Vec<Sym> = Vec::new();
            for i in its.iter() {
                if let Some(own) = self.its[i].reqs.get(*k) {
                    values.extend(own.values.iter().copied());
                }
            }
            values.sort_unstable();
            values.dedup();
            let have = u32::try_from(values.len()).unwrap_or(u32::MAX);
            if have < min {
                match policy {
                    MinValuesPolicy::BestEffort => r.min_values = Some(have),
                    MinValuesPolicy::Strict => failing.push(vocab.interner.name(*k).into_owned()),
                }
            }
        }
        if failing.is_empty() {
            Ok(())
        } else {
            failing.sort();
            Err(format!(
                "minValues requirement is not met for label(s) {}",
                failing.join(", ")
            ))
        }
    }

    /// Recomputes, for an error message, which criteria the instance types of `current` met.
    pub fn explain(
        &mut self,
        current: &Bits,
        reqs: &ReqSet,
        total: &[i64],
        pod_requests: &[i64],
        cpu: usize,
        vocab: &Vocab,
    ) -> FilterFailure {
        let offers = self.offer_bits(OfferReqs::from(|k| reqs.get(k), vocab), vocab);
        let mut f = FilterFailure::default();
        for i in current.iter() {
            let compat = self.its[i].reqs.intersects(reqs, &vocab.interner).is_ok();
            let fits = resvec::fits(total, self.effective_row(i));
            let offer = offers.has(i);
            f.requirements_met |= compat;
            f.fits |= fits;
            f.has_offering |= offer;
            f.requirements_and_fits |= compat && fits && !offer;
            f.requirements_and_offering |= compat && offer && !fits;
            f.fits_and_offering |= fits && offer && !compat;
        }
        f.cpu_typo = pod_requests.get(cpu).is_some_and(|c| *c >= 1_000_000_000);
        f
    }

    /// The smallest daemonset overhead among groups that still have one of `its`.
    pub fn min_overhead(&self, its: &Bits, stride: usize) -> Vec<i64> {
        let mut out: Option<Vec<i64>> = None;
        for g in &self.groups {
            if !g.members.iter().any(|i| its.has(i)) {
                continue;
            }
            out = Some(match out {
                None => g.overhead.clone(),
                Some(o) => o.iter().zip(&g.overhead).map(|(a, b)| *a.min(b)).collect(),
            });
        }
        out.unwrap_or_else(|| vec![0; stride])
    }

    /// The overhead shown in errors: the smallest across all groups.
    pub fn overhead_for_errors(&self, names: &ResNames) -> String {
        let all = Bits::full(self.its.len());
        names.render(&self.min_overhead(&all, self.stride))
    }
}

fn is_negative(r: &Req) -> bool {
    matches!(r.op(), super::req::Op::NotIn | super::req::Op::DoesNotExist)
}

/// Whether an offering is allowed by the zone and capacity-type requirements.
/// Owned zone, zone-id and capacity-type requirements: a cache key.
pub type OfferKey = (Option<Req>, Option<Req>, Option<Req>);

/// The requirements an offering is checked against: zone, zone id and capacity type.
#[derive(Clone, Copy, Debug, Default)]
pub struct OfferReqs<'a> {
    pub zone: Option<&'a Req>,
    pub zone_id: Option<&'a Req>,
    pub capacity_type: Option<&'a Req>,
}

impl<'a> OfferReqs<'a> {
    /// The offering-relevant requirements of a set, looked up through `get`.
    pub fn from(get: impl Fn(Sym) -> Option<&'a Req>, vocab: &Vocab) -> OfferReqs<'a> {
        OfferReqs {
            zone: get(vocab.zone),
            zone_id: get(vocab.zone_id),
            capacity_type: get(vocab.capacity_type),
        }
    }

    pub fn key(&self) -> OfferKey {
        (
            self.zone.cloned(),
            self.zone_id.cloned(),
            self.capacity_type.cloned(),
        )
    }
}

/// Whether an offering is allowed by the zone, zone-id and capacity-type requirements.
pub fn offer_allowed(o: &Offer, reqs: OfferReqs<'_>, vocab: &Vocab) -> bool {
    let i = &vocab.interner;
    reqs.zone.is_none_or(|z| z.has(o.zone, i))
        && reqs.capacity_type.is_none_or(|c| c.has(o.capacity_type, i))
        && reqs
            .zone_id
            .is_none_or(|z| o.zone_id.is_some_and(|id| z.has(id, i)))
}
