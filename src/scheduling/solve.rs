//! The solve loop. Pods are taken in queue order; each tries existing nodes (initialized
//! first), then the NodeClaims planned so far (fewest pods first), then a new NodeClaim per
//! NodePool by weight, relaxing one preference at a time while it fails. A pod that still
//! fails goes to the back of the queue, and the loop ends when a full pass places nothing.
//!
//! Performance rests on three facts: a NodeClaim only ever gets fuller (requests grow,
//! requirements and instance types narrow, topology counts grow), so some failures are
//! permanent for a pod class and the pair is never tried again; instance-type filtering is a
//! bitset AND per changed requirement key plus one resource comparison per candidate type;
//! and requirement changes are computed as a small delta instead of cloning a NodeClaim's
//! requirements per attempt.

use std::collections::VecDeque;

use super::class::{Class, ClassId};
use super::intern::{Bits, FxHashMap, SYNTHETIC_BASE, Sym};
use super::pod::HostPort;
use super::pool::Pool;
use super::prepare::{NodeState, Prepared};
use super::req::{Conflict, Op, Req, ReqSet, Vocab, negative};
use super::resvec;
use super::topology::Topology;

/// A NodeClaim planned in this solve.
#[derive(Clone, Debug)]
pub struct Claim {
    pub pool: usize,
    pub host: Sym,
    pub reqs: ReqSet,
    pub its: Bits,
    /// Componentwise maximum room over `its` (a quick necessary condition for fitting).
    room: Vec<i64>,
    pub requests: Vec<i64>,
    pub pods: Vec<u32>,
    ports: Vec<HostPort>,
    created: u32,
}

/// A failed placement attempt.
struct Fail {
    /// The target can never take a pod of this class later in the solve.
    permanent: bool,
    /// The reason, built only when the caller will report it.
    msg: Option<String>,
}

impl Fail {
    fn new(permanent: bool, explain: bool, msg: impl FnOnce() -> String) -> Fail {
        Fail { permanent, msg: explain.then(msg) }
    }
}

/// A successful placement attempt, ready to commit.
struct Placement {
    delta: ReqSet,
    its: Option<Bits>,
    total: Vec<i64>,
}

/// What one solve (of one component) produced.
#[derive(Debug, Default)]
pub struct Outcome {
    pub claims: Vec<Claim>,
    /// (node index, pods placed there).
    pub nodes: Vec<(usize, Vec<u32>)>,
    pub errors: Vec<(u32, String)>,
    /// Final state of the component's pools (for instance-type data and limits).
    pub pools: Vec<(usize, Pool)>,
}

/// Solver state for one component: the pools, nodes and topology it owns.
pub struct Solver<'a> {
    prep: &'a Prepared,
    vocab: &'a Vocab,
    pools: Vec<Option<Pool>>,
    nodes: Vec<Option<NodeState>>,
    node_order: Vec<usize>,
    topology: Topology,
    claims: Vec<Claim>,
    /// Claim ids by (pod count, creation).
    order: Vec<u32>,
    dead_claims: FxHashMap<ClassId, Vec<u64>>,
    dead_nodes: FxHashMap<ClassId, Vec<u64>>,
}

fn bit(map: &FxHashMap<ClassId, Vec<u64>>, c: ClassId, i: usize) -> bool {
    map.get(&c).is_some_and(|b| b.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0))
}

fn set_bit(map: &mut FxHashMap<ClassId, Vec<u64>>, c: ClassId, i: usize) {
    let b = map.entry(c).or_default();
    if b.len() <= i / 64 {
        b.resize(i / 64 + 1, 0);
    }
    b[i / 64] |= 1 << (i % 64);
}

fn view<'r>(base: &'r ReqSet, delta: &'r ReqSet, key: Sym) -> Option<&'r Req> {
    delta.get(key).or_else(|| base.get(key))
}

/// Merges `incoming` into `delta` (changes over `base`), failing like upstream `Compatible`
/// (undefined well-known labels allowed unless `strict`).
fn merge(base: &ReqSet, delta: &mut ReqSet, incoming: &ReqSet, vocab: &Vocab, strict: bool) -> Result<(), Conflict> {
    let interner = &vocab.interner;
    for (k, r) in &incoming.0 {
        let existing = view(base, delta, *k);
        match existing {
            None => {
                if !(negative(r) || (!strict && vocab.is_well_known(*k))) {
                    return Err(Conflict::Undefined(*k));
                }
            }
            Some(e) => {
                if !e.has_intersection(r, interner) && !(negative(r) && negative(e)) {
                    return Err(Conflict::Disjoint(*k, r.clone(), e.clone()));
                }
            }
        }
    }
    for (k, r) in &incoming.0 {
        let merged = match view(base, delta, *k) {
            Some(e) if e == r => continue,
            Some(e) => r.intersection(e, interner),
            None => r.clone(),
        };
        if base.get(*k) != Some(&merged) {
            delta.set(*k, merged);
        }
    }
    Ok(())
}

fn render_full(base: &ReqSet, delta: &ReqSet, vocab: &Vocab) -> String {
    let mut full = base.clone();
    for (k, r) in &delta.0 {
        full.set(*k, r.clone());
    }
    full.0.retain(|(k, _)| *k != vocab.hostname);
    full.render(&vocab.interner)
}

/// The requirements topology adds for a pod of `class` on a node with `base`+`delta`.
fn topology_requirements(topology: &Topology, class: &Class, base: &ReqSet, delta: &ReqSet, vocab: &Vocab, explain: bool) -> Result<ReqSet, Fail> {
    let exists = Req::exists();
    let mut out = ReqSet::default();
    let owned = class.owned.iter().map(|g| (&topology.groups[*g as usize], class.selected_by.binary_search(g).is_ok()));
    let inverse = class.inverse_selected_by.iter().map(|g| (&topology.inverse[*g as usize], true));
    for (group, self_selecting) in owned.chain(inverse) {
        let key = group.spec.key;
        let pod = class.strict.get(key).unwrap_or(&exists);
        let node = view(base, delta, key).unwrap_or(&exists);
        let domains = group.next_domains(self_selecting, pod, node, &vocab.interner);
        if domains.op() == Op::DoesNotExist {
            let permanent = group.spec.kind == super::topology::Kind::AntiAffinity
                || (group.spec.kind == super::topology::Kind::Spread && group.is_hostname);
            return Err(Fail::new(permanent, explain, || group.describe_failure(pod, node, &vocab.interner)));
        }
        out.add(key, domains, &vocab.interner);
    }
    Ok(out)
}

/// Records a placed pod in every group that counts it.
fn record(topology: &mut Topology, class: &Class, taints: &[k8s_openapi::api::core::v1::Taint], reqs: &ReqSet, vocab: &Vocab, strict: bool) {
    for g in &class.selected_by {
        let group = &mut topology.groups[*g as usize];
        if !group.spec.filter.as_ref().is_none_or(|f| f.matches(taints, reqs, vocab, strict)) {
            continue;
        }
        let Some(r) = reqs.get(group.spec.key) else { continue };
        if group.spec.kind == super::topology::Kind::AntiAffinity {
            if !r.complement {
                for v in r.values.clone() {
                    group.record(v, &vocab.interner);
                }
            }
        } else if let Some(v) = r.single_value() {
            group.record(v, &vocab.interner);
        }
    }
    for g in &class.inverse_owned {
        let group = &mut topology.inverse[*g as usize];
        if let Some(r) = reqs.get(group.spec.key).filter(|r| !r.complement) {
            for v in r.values.clone() {
                group.record(v, &vocab.interner);
            }
        }
    }
}

fn ports_conflict(a: &[HostPort], b: &[HostPort]) -> Option<String> {
    for p in a {
        if let Some(q) = b.iter().find(|q| p.conflicts(q)) {
            return Some(format!(
                "checking host port usage, pod hostport conflicts with existing hostport configuration (port {} {} on {} with {})",
                p.port, p.protocol, p.ip, q.ip
            ));
        }
    }
    None
}

impl<'a> Solver<'a> {
    /// A solver owning the given pools and nodes (by index into the prepared state).
    pub fn new(prep: &'a Prepared, pools: &[usize], nodes: &[usize]) -> Solver<'a> {
        let mut pool_slots: Vec<Option<Pool>> = vec![None; prep.pools.len()];
        for p in pools {
            pool_slots[*p] = Some(prep.pools[*p].clone());
        }
        let mut node_slots: Vec<Option<NodeState>> = vec![None; prep.nodes.len()];
        for n in nodes {
            node_slots[*n] = Some(prep.nodes[*n].clone());
        }
        let mut node_order: Vec<usize> = nodes.to_vec();
        node_order.sort_by(|a, b| {
            let (na, nb) = (&prep.nodes[*a], &prep.nodes[*b]);
            nb.initialized.cmp(&na.initialized).then_with(|| na.name.cmp(&nb.name))
        });
        Solver {
            prep,
            vocab: &prep.vocab,
            pools: pool_slots,
            nodes: node_slots,
            node_order,
            topology: prep.topology.clone(),
            claims: Vec::new(),
            order: Vec::new(),
            dead_claims: FxHashMap::default(),
            dead_nodes: FxHashMap::default(),
        }
    }

    /// Runs the queue over `pods` (indices into the prepared pods, in queue order).
    pub fn run(mut self, pods: &[u32]) -> Outcome {
        let mut errors: FxHashMap<u32, String> = FxHashMap::default();
        let mut queue: VecDeque<u32> = VecDeque::with_capacity(pods.len());
        for &p in pods {
            let info = &self.prep.pods[p as usize];
            let class_error = self.prep.classes[info.class as usize].error.as_ref();
            match info.error.as_ref().or(class_error) {
                Some(e) => {
                    errors.insert(p, e.clone());
                }
                None => queue.push_back(p),
            }
        }
        let mut last_len: FxHashMap<u32, usize> = FxHashMap::default();
        while let Some(&p) = queue.front() {
            if last_len.get(&p) == Some(&queue.len()) {
                break;
            }
            queue.pop_front();
            match self.schedule(p) {
                Ok(()) => {
                    errors.remove(&p);
                }
                Err(e) => {
                    errors.insert(p, e);
                    queue.push_back(p);
                    last_len.insert(p, queue.len());
                }
            }
        }
        let mut errors: Vec<(u32, String)> = errors.into_iter().collect();
        errors.sort_unstable_by_key(|(p, _)| *p);
        Outcome {
            nodes: self
                .nodes
                .iter_mut()
                .enumerate()
                .filter_map(|(i, n)| n.as_mut().map(|n| (i, std::mem::take(&mut n.placed))))
                .filter(|(_, placed)| !placed.is_empty())
                .collect(),
            pools: self.pools.into_iter().enumerate().filter_map(|(i, p)| p.map(|p| (i, p))).collect(),
            claims: self.claims,
            errors,
        }
    }

    /// Tries the pod with each class of its relaxation chain until one places it.
    fn schedule(&mut self, p: u32) -> Result<(), String> {
        let mut class = self.prep.pods[p as usize].class;
        loop {
            match self.add(p, class) {
                Ok(()) => return Ok(()),
                Err(e) => match self.prep.classes[class as usize].next {
                    Some(next) => class = next,
                    None => return Err(e),
                },
            }
        }
    }

    fn add(&mut self, p: u32, c: ClassId) -> Result<(), String> {
        for oi in 0..self.node_order.len() {
            let ni = self.node_order[oi];
            if bit(&self.dead_nodes, c, ni) {
                continue;
            }
            match self.try_node(ni, p, c) {
                Ok(placement) => {
                    self.commit_node(ni, p, c, placement);
                    return Ok(());
                }
                Err(f) if f.permanent => set_bit(&mut self.dead_nodes, c, ni),
                Err(_) => {}
            }
        }
        for oi in 0..self.order.len() {
            let cid = self.order[oi] as usize;
            if bit(&self.dead_claims, c, cid) {
                continue;
            }
            match self.try_claim(cid, p, c, false) {
                Ok(placement) => {
                    self.commit_claim(cid, p, c, placement);
                    self.reorder(cid);
                    return Ok(());
                }
                Err(f) if f.permanent => set_bit(&mut self.dead_claims, c, cid),
                Err(_) => {}
            }
        }
        let mut errors = Vec::new();
        for pi in 0..self.prep.pools.len() {
            if self.prep.pools[pi].base.is_empty() {
                continue;
            }
            match self.try_new(pi, p, c) {
                Ok(()) => return Ok(()),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            return Err("nodepool requirements filtered out all available instance types".into());
        }
        Err(errors.join("; "))
    }

    fn try_node(&self, ni: usize, p: u32, c: ClassId) -> Result<Placement, Fail> {
        let node = self.nodes[ni].as_ref().expect("node order lists owned nodes");
        let class = &self.prep.classes[c as usize];
        let pod = &self.prep.pods[p as usize];
        if super::taint::first_untolerated(&node.taints, &class.tolerations).is_some() {
            return Err(Fail::new(true, false, String::new));
        }
        if ports_conflict(&class.ports, &node.ports).is_some() {
            return Err(Fail::new(true, false, String::new));
        }
        if !resvec::fits(&pod.requests, &node.avail) {
            return Err(Fail::new(false, false, String::new));
        }
        let mut delta = ReqSet::default();
        if merge(&node.reqs, &mut delta, &class.reqs, self.vocab, true).is_err() {
            return Err(Fail::new(true, false, String::new));
        }
        let mut last = Fail::new(false, false, String::new);
        for vol in volume_alternatives(class) {
            let mut d = delta.clone();
            if let Some(v) = vol {
                if merge(&node.reqs, &mut d, v, self.vocab, true).is_err() {
                    last = Fail::new(false, false, String::new);
                    continue;
                }
            }
            let topo = match topology_requirements(&self.topology, class, &node.reqs, &d, self.vocab, false) {
                Ok(t) => t,
                Err(f) => {
                    last = f;
                    continue;
                }
            };
            if merge(&node.reqs, &mut d, &topo, self.vocab, true).is_err() {
                last = Fail::new(false, false, String::new);
                continue;
            }
            return Ok(Placement { delta: d, its: None, total: Vec::new() });
        }
        Err(last)
    }

    fn commit_node(&mut self, ni: usize, p: u32, c: ClassId, placement: Placement) {
        let class = &self.prep.classes[c as usize];
        let node = self.nodes[ni].as_mut().expect("owned node");
        resvec::sub_assign(&mut node.avail, &self.prep.pods[p as usize].requests);
        for (k, r) in placement.delta.0 {
            node.reqs.set(k, r);
        }
        node.ports.extend(class.ports.iter().cloned());
        node.placed.push(p);
        record(&mut self.topology, class, &node.taints, &node.reqs, self.vocab, true);
    }

    fn try_claim(&mut self, cid: usize, p: u32, c: ClassId, explain: bool) -> Result<Placement, Fail> {
        let prep = self.prep;
        let vocab = self.vocab;
        let claim = &self.claims[cid];
        let class = &prep.classes[c as usize];
        let pod = &prep.pods[p as usize];
        if let Some(t) = &class.pool_taint[claim.pool] {
            return Err(Fail::new(true, explain, || t.clone()));
        }
        if let Some(msg) = ports_conflict(&class.ports, &claim.ports) {
            return Err(Fail::new(true, explain, || msg));
        }
        let mut total = claim.requests.clone();
        resvec::add_assign(&mut total, &pod.requests);
        if !explain && !resvec::fits(&total, &claim.room) {
            return Err(Fail::new(false, false, String::new));
        }
        let mut delta = ReqSet::default();
        if let Err(conflict) = merge(&claim.reqs, &mut delta, &class.reqs, vocab, false) {
            return Err(Fail::new(true, explain, || format!("incompatible requirements, {}", conflict.render(&vocab.interner))));
        }
        let pool = self.pools[claim.pool].as_mut().expect("claims belong to owned pools");
        let mut last = Fail::new(false, explain, String::new);
        for vol in volume_alternatives(class) {
            let mut d = delta.clone();
            if let Some(v) = vol {
                if let Err(conflict) = merge(&claim.reqs, &mut d, v, vocab, false) {
                    last = Fail::new(false, explain, || format!("incompatible volume requirements, {}", conflict.render(&vocab.interner)));
                    continue;
                }
            }
            let topo = match topology_requirements(&self.topology, class, &claim.reqs, &d, vocab, explain) {
                Ok(t) => t,
                Err(f) => {
                    last = f;
                    continue;
                }
            };
            if let Err(conflict) = merge(&claim.reqs, &mut d, &topo, vocab, false) {
                last = Fail::new(false, explain, || conflict.render(&vocab.interner));
                continue;
            }
            let zone = view(&claim.reqs, &d, vocab.zone);
            let ct = view(&claim.reqs, &d, vocab.capacity_type);
            let its = pool.narrow(&claim.its, &d, zone, ct, &total, &class.ports, vocab);
            if its.is_empty() {
                last = Fail::new(false, explain, || {
                    let mut full = claim.reqs.clone();
                    for (k, r) in &d.0 {
                        full.set(*k, r.clone());
                    }
                    let failure = pool.explain(&claim.its, &full, &total, &pod.requests, resvec::CPU, vocab);
                    let mut cumulative = pool.min_overhead(&pool.base, pool.stride);
                    resvec::add_assign(&mut cumulative, &pod.requests);
                    format!(
                        "no instance type satisfied resources {} and requirements {} ({})",
                        prep.names.render(&cumulative),
                        render_full(&claim.reqs, &d, vocab),
                        failure.reason()
                    )
                });
                continue;
            }
            let has_min_values = d.has_min_values() || claim.reqs.has_min_values();
            if has_min_values {
                let mut full = claim.reqs.clone();
                for (k, r) in &d.0 {
                    full.set(*k, r.clone());
                }
                match pool.check_min_values(&its, &mut full, prep.options.min_values_policy, vocab) {
                    Ok(()) => {
                        // BestEffort may have lowered minValues; carry them in the delta.
                        for (k, r) in full.0 {
                            if claim.reqs.get(k) != Some(&r) {
                                d.set(k, r);
                            }
                        }
                    }
                    Err(e) => {
                        last = Fail::new(false, explain, || {
                            format!("{e}, requirements={}", render_full(&claim.reqs, &d, vocab))
                        });
                        continue;
                    }
                }
            }
            return Ok(Placement { delta: d, its: Some(its), total });
        }
        Err(last)
    }

    fn commit_claim(&mut self, cid: usize, p: u32, c: ClassId, placement: Placement) {
        let class = &self.prep.classes[c as usize];
        let claim = &mut self.claims[cid];
        let pool = self.pools[claim.pool].as_ref().expect("owned pool");
        for (k, r) in placement.delta.0 {
            claim.reqs.set(k, r);
        }
        if let Some(its) = placement.its {
            if its != claim.its {
                claim.room = pool.max_room(&its);
                claim.its = its;
            }
        }
        claim.requests = placement.total;
        claim.pods.push(p);
        claim.ports.extend(class.ports.iter().cloned());
        record(&mut self.topology, class, &pool.taints, &claim.reqs, self.vocab, false);
    }

    /// Moves a claim that just gained a pod to its place in (pod count, creation) order.
    fn reorder(&mut self, cid: usize) {
        let key = |claims: &[Claim], id: u32| (claims[id as usize].pods.len(), claims[id as usize].created);
        let created = self.claims[cid].created;
        let old = (self.claims[cid].pods.len() - 1, created);
        let claims = &self.claims;
        if let Ok(at) = self.order.binary_search_by(|id| {
            if *id as usize == cid { std::cmp::Ordering::Equal } else { key(claims, *id).cmp(&old) }
        }) {
            self.order.remove(at);
        }
        let new = (self.claims[cid].pods.len(), created);
        let claims = &self.claims;
        let at = self.order.partition_point(|id| key(claims, *id) < new);
        self.order.insert(at, cid as u32);
    }

    /// Static reasons a pool can never take the class (checked before limits so that the
    /// message does not depend on other pods).
    fn pool_incompatibility(&self, pi: usize, c: ClassId) -> Option<String> {
        let class = &self.prep.classes[c as usize];
        if let Some(t) = &class.pool_taint[pi] {
            return Some(t.clone());
        }
        let pool = &self.prep.pools[pi];
        pool.reqs
            .compatible(&class.reqs, self.vocab)
            .err()
            .map(|conflict| format!("incompatible requirements, {}", conflict.render(&self.vocab.interner)))
    }

    fn try_new(&mut self, pi: usize, p: u32, c: ClassId) -> Result<(), String> {
        let name = &self.prep.pools[pi].name;
        let prefix = || {
            format!(
                "incompatible with nodepool {:?}, daemonset overhead={}, ",
                name,
                self.prep.pools[pi].overhead_for_errors(&self.prep.names)
            )
        };
        if let Some(reason) = self.pool_incompatibility(pi, c) {
            return Err(prefix() + &reason);
        }
        let Some(pool) = self.pools[pi].as_mut() else {
            // Only pools the class is statically incompatible with live in other components.
            return Err(prefix() + "incompatible requirements");
        };
        if pool.remaining_nodes.is_some_and(|n| n <= 0) {
            return Err(format!("node limits have been exhausted for nodepool {name:?}"));
        }
        let its = pool.within_limits();
        if its.is_empty() {
            return Err(format!("all available instance types exceed limits for nodepool: {name:?}"));
        }
        let cid = self.claims.len();
        let host = SYNTHETIC_BASE + u32::try_from(cid).expect("fewer than 2^31 NodeClaims");
        let mut reqs = pool.reqs.clone();
        reqs.set(self.vocab.hostname, Req::single(host));
        let room = pool.max_room(&its);
        self.claims.push(Claim {
            pool: pi,
            host,
            reqs,
            its,
            room,
            requests: vec![0; self.prep.names.len()],
            pods: Vec::new(),
            ports: Vec::new(),
            created: u32::try_from(cid).expect("fewer than 2^32 NodeClaims"),
        });
        match self.try_claim(cid, p, c, true) {
            Ok(placement) => {
                self.commit_claim(cid, p, c, placement);
                let claim_its = self.claims[cid].its.clone();
                if let Some(pool) = self.pools[pi].as_mut() {
                    pool.charge(&claim_its);
                }
                let claims = &self.claims;
                let at = self.order.partition_point(|id| (claims[*id as usize].pods.len(), claims[*id as usize].created) < (1, cid as u32));
                self.order.insert(at, cid as u32);
                Ok(())
            }
            Err(f) => {
                self.claims.pop();
                Err(prefix() + &f.msg.unwrap_or_default())
            }
        }
    }
}

fn volume_alternatives(class: &Class) -> Vec<Option<&ReqSet>> {
    if class.volumes.is_empty() { vec![None] } else { class.volumes.iter().map(Some).collect() }
}
