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

use std::borrow::Cow;
use std::collections::VecDeque;

use super::class::{Class, ClassId};
use super::intern::{Bits, FxHashMap, SYNTHETIC_BASE, Sym};
use super::pod::HostPort;
use super::pool::{OfferReqs, Pool};
use super::prepare::{NodeState, Prepared};
use super::req::{Conflict, Op, Req, ReqSet, Vocab, negative};
use super::resvec;
use super::topology::GroupId;
use super::topology::Topology;
use super::volumes;

/// A NodeClaim planned in this solve.
#[derive(Clone, Debug)]
pub struct Claim {
    pub pool: usize,
    pub reqs: ReqSet,
    pub its: Bits,
    /// Componentwise maximum room over `its` (a quick necessary condition for fitting).
    room: Vec<i64>,
    /// Number of instance types `room` was computed over.
    room_count: usize,
    pub requests: Vec<i64>,
    pub pods: Vec<u32>,
    ports: Vec<HostPort>,
    created: u32,
    /// Bumped on every pod added, invalidating memoized failures.
    version: u32,
}

/// A failed placement attempt.
struct Fail {
    /// The target can never take a pod of this class later in the solve.
    permanent: bool,
    /// The reason, built only when the caller will report it.
    msg: Option<String>,
    /// For a topology failure: the regular group (or inverse group, flagged) and its stamp,
    /// which stays a failure while neither the group's stamp nor the target changes.
    topology: Option<(bool, GroupId, u32)>,
}

impl Fail {
    fn new(permanent: bool, explain: bool, msg: impl FnOnce() -> String) -> Fail {
        Fail {
            permanent,
            msg: explain.then(msg),
            topology: None,
        }
    }
}

/// Per-class memory of targets: ones that can never take the class, and ones that failed on
/// topology at a known state.
#[derive(Default)]
struct ClassMemo {
    dead_claims: Vec<u64>,
    /// Number of bits set in `dead_claims`: when every claim is dead the scan is skipped.
    dead_claim_count: usize,
    dead_nodes: Vec<u64>,
    /// Per claim: (claim version << 32 | group stamp) of the last topology failure, and the
    /// failing group (high bit: inverse).
    claim_topology: Vec<(u64, u32)>,
}

impl ClassMemo {
    fn is_dead(bits: &[u64], i: usize) -> bool {
        bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Sets bit `i`; true when it was not set before.
    fn kill(bits: &mut Vec<u64>, i: usize) -> bool {
        if bits.len() <= i / 64 {
            bits.resize(i / 64 + 1, 0);
        }
        let was = bits[i / 64] & (1 << (i % 64)) != 0;
        bits[i / 64] |= 1 << (i % 64);
        !was
    }

    fn kill_claim(&mut self, cid: usize) {
        if ClassMemo::kill(&mut self.dead_claims, cid) {
            self.dead_claim_count += 1;
        }
    }
}

/// The topology domains one pod failed on while it scans the existing nodes. Nothing changes
/// until the pod is placed, and a group's verdict on a node depends only on the node's value
/// for the group's key, so every other node with that value fails the same group and is not
/// tried: a pod whose zone spread rules out a zone of thousands of nodes merges with one of
/// them, not all. Hostname groups are left out (each node is its own domain), and the list
/// is bounded, as a key with a value per node would make it a second scan.
#[derive(Default)]
struct FailedDomains(Vec<(Sym, Option<Req>)>);

impl FailedDomains {
    /// More failed domains than this are not remembered: the check runs for every node.
    const CAPACITY: usize = 16;

    fn add(&mut self, topology: &Topology, inverse: bool, g: GroupId, node: &ReqSet) {
        let group = if inverse {
            &topology.inverse[g as usize]
        } else {
            &topology.groups[g as usize]
        };
        if group.is_hostname || self.0.len() >= Self::CAPACITY {
            return;
        }
        let key = group.spec.key;
        self.0.push((key, node.get(key).cloned()));
    }

    /// Whether a node with requirements `node` is in a domain that already failed.
    fn holds(&self, node: &ReqSet) -> bool {
        self.0
            .iter()
            .any(|(key, domain)| node.get(*key) == domain.as_ref())
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
    /// The owned nodes, borrowed from the prepared state until a pod is placed on one: a
    /// round places its few pods on few of thousands of nodes.
    nodes: Vec<Option<Cow<'a, NodeState>>>,
    node_order: Vec<usize>,
    topology: Topology,
    claims: Vec<Claim>,
    /// Claim ids by (pod count, creation).
    order: Vec<u32>,
    memos: Vec<ClassMemo>,
    /// Per hostname anti-affinity group (regular, then inverse offset by the regular count):
    /// the classes a recorded pod in it shuts out of that NodeClaim for good.
    shut_out: Vec<Vec<ClassId>>,
    /// (class, claim) pairs to mark dead once the class memos are back in place.
    deaths: Vec<(ClassId, usize)>,
}

fn view<'r>(base: &'r ReqSet, delta: &'r ReqSet, key: Sym) -> Option<&'r Req> {
    delta.get(key).or_else(|| base.get(key))
}

/// Merges `incoming` into `delta` (changes over `base`), failing like upstream `Compatible`
/// (undefined well-known labels allowed unless `strict`).
fn merge(
    base: &ReqSet,
    delta: &mut ReqSet,
    incoming: &ReqSet,
    vocab: &Vocab,
    strict: bool,
) -> Result<(), Conflict> {
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
                if !e.has_intersection(r, interner) && (!negative(r) || !negative(e)) {
                    return Err(Conflict::Disjoint(*k, Box::new((r.clone(), e.clone()))));
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
fn topology_requirements(
    topology: &Topology,
    class: &Class,
    base: &ReqSet,
    delta: &ReqSet,
    vocab: &Vocab,
    explain: bool,
) -> Result<ReqSet, Fail> {
    let exists = Req::exists();
    let mut out = ReqSet::default();
    let owned = class.owned.iter().map(|g| {
        (
            &topology.groups[*g as usize],
            class.selected_by.binary_search(g).is_ok(),
        )
    });
    let inverse = class
        .inverse_selected_by
        .iter()
        .map(|g| (&topology.inverse[*g as usize], true));
    let owned_ids = class.owned.iter().map(|g| (false, *g));
    let inverse_ids = class.inverse_selected_by.iter().map(|g| (true, *g));
    for ((group, self_selecting), (is_inverse, gid)) in
        owned.chain(inverse).zip(owned_ids.chain(inverse_ids))
    {
        let key = group.spec.key;
        let pod = class.strict.get(key).unwrap_or(&exists);
        let node = view(base, delta, key).unwrap_or(&exists);
        let domains = group.next_domains(self_selecting, pod, node, &vocab.interner);
        if domains.op() == Op::DoesNotExist {
            let permanent = group.spec.kind == super::topology::Kind::AntiAffinity
                || (group.spec.kind == super::topology::Kind::Spread && group.is_hostname);
            let mut fail = Fail::new(permanent, explain, || {
                group.describe_failure(pod, node, &vocab.interner)
            });
            fail.topology = Some((is_inverse, gid, group.stamp()));
            return Err(fail);
        }
        out.add(key, domains, &vocab.interner);
    }
    Ok(out)
}

/// Records a placed pod in every group that counts it.
fn record(
    topology: &mut Topology,
    class: &Class,
    taints: &[k8s_openapi::api::core::v1::Taint],
    reqs: &ReqSet,
    vocab: &Vocab,
    strict: bool,
) {
    for g in &class.selected_by {
        let group = &mut topology.groups[*g as usize];
        if !group
            .spec
            .filter
            .as_ref()
            .is_none_or(|f| f.matches(taints, reqs, vocab, strict))
        {
            continue;
        }
        let Some(r) = reqs.get(group.spec.key) else {
            continue;
        };
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
        let mut node_slots: Vec<Option<Cow<'a, NodeState>>> = vec![None; prep.nodes.len()];
        for n in nodes {
            node_slots[*n] = Some(Cow::Borrowed(&prep.nodes[*n]));
        }
        let mut node_order: Vec<usize> = nodes.to_vec();
        node_order.sort_by(|a, b| {
            let (na, nb) = (&prep.nodes[*a], &prep.nodes[*b]);
            nb.initialized
                .cmp(&na.initialized)
                .then_with(|| na.name.cmp(&nb.name))
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
            memos: (0..prep.classes.len())
                .map(|_| ClassMemo::default())
                .collect(),
            shut_out: shut_out(prep),
            deaths: Vec::new(),
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
            // Only a node a pod was placed on was copied.
            nodes: self
                .nodes
                .iter_mut()
                .enumerate()
                .filter_map(|(i, n)| match n {
                    Some(Cow::Owned(n)) => Some((i, std::mem::take(&mut n.placed))),
                    _ => None,
                })
                .filter(|(_, placed)| !placed.is_empty())
                .collect(),
            pools: self
                .pools
                .into_iter()
                .enumerate()
                .filter_map(|(i, p)| p.map(|p| (i, p)))
                .collect(),
            claims: self.claims,
            errors,
        }
    }

    /// Tries the pod with each class of its relaxation chain until one places it.
    fn schedule(&mut self, p: u32) -> Result<(), String> {
        let mut class = self.prep.pods[p as usize].class;
        loop {
            if self.add(p, class).is_ok() {
                return Ok(());
            }
            match self.prep.classes[class as usize].next {
                Some(next) => class = next,
                // Failed attempts change nothing, so the reasons are rebuilt only now, for
                // the most relaxed form of the pod, as upstream reports them.
                None => return Err(self.new_claim_errors(p, class)),
            }
        }
    }

    /// Why no NodePool could take the pod (every attempt fails; nothing is committed).
    fn new_claim_errors(&mut self, p: u32, c: ClassId) -> String {
        let mut errors = Vec::new();
        for pi in 0..self.prep.pools.len() {
            if self.prep.pools[pi].base.is_empty() {
                continue;
            }
            if let Err(e) = self.try_new(pi, p, c, true) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            return "nodepool requirements filtered out all available instance types".into();
        }
        errors.join("; ")
    }

    fn add(&mut self, p: u32, c: ClassId) -> Result<(), ()> {
        let mut memo = std::mem::take(&mut self.memos[c as usize]);
        let placed = self.add_existing(p, c, &mut memo);
        self.memos[c as usize] = memo;
        self.apply_deaths();
        if placed {
            return Ok(());
        }
        for pi in 0..self.prep.pools.len() {
            if !self.prep.pools[pi].base.is_empty() && self.try_new(pi, p, c, false).is_ok() {
                self.apply_deaths();
                return Ok(());
            }
        }
        Err(())
    }

    /// Tries existing nodes, then planned NodeClaims; true when the pod was placed.
    fn add_existing(&mut self, p: u32, c: ClassId, memo: &mut ClassMemo) -> bool {
        let mut failed = FailedDomains::default();
        let single_alternative = self.prep.classes[c as usize].volumes.len() <= 1;
        for oi in 0..self.node_order.len() {
            let ni = self.node_order[oi];
            if ClassMemo::is_dead(&memo.dead_nodes, ni) {
                continue;
            }
            let node = self.nodes[ni]
                .as_deref()
                .expect("node order lists owned nodes");
            if failed.holds(&node.reqs) {
                continue;
            }
            match self.try_node(ni, p, c) {
                Ok(placement) => {
                    self.commit_node(ni, p, c, placement);
                    return true;
                }
                Err(f) if f.permanent => {
                    ClassMemo::kill(&mut memo.dead_nodes, ni);
                }
                Err(Fail {
                    topology: Some((inverse, g, _)),
                    ..
                }) if single_alternative => {
                    failed.add(&self.topology, inverse, g, &node.reqs);
                }
                Err(_) => {}
            }
        }
        if memo.dead_claim_count >= self.claims.len() {
            return false; // no planned NodeClaim can ever take this class
        }
        if memo.claim_topology.len() < self.claims.len() {
            memo.claim_topology.resize(self.claims.len(), (u64::MAX, 0));
        }
        for oi in 0..self.order.len() {
            let cid = self.order[oi] as usize;
            if ClassMemo::is_dead(&memo.dead_claims, cid) {
                continue;
            }
            let (stamp, group) = memo.claim_topology[cid];
            if stamp >> 32 == u64::from(self.claims[cid].version) {
                let g = if group & (1 << 31) != 0 {
                    &self.topology.inverse[(group & !(1 << 31)) as usize]
                } else {
                    &self.topology.groups[group as usize]
                };
                if stamp & 0xffff_ffff == u64::from(g.stamp()) {
                    continue; // nothing this failure depended on has changed
                }
            }
            match self.try_claim(cid, p, c, false) {
                Ok(placement) => {
                    self.commit_claim(cid, p, c, placement);
                    self.reorder(cid);
                    return true;
                }
                Err(f) if f.permanent => memo.kill_claim(cid),
                Err(Fail {
                    topology: Some((inverse, g, stamp)),
                    ..
                }) if self.prep.classes[c as usize].volumes.len() <= 1 => {
                    let version = u64::from(self.claims[cid].version);
                    memo.claim_topology[cid] = (
                        version << 32 | u64::from(stamp),
                        g | if inverse { 1 << 31 } else { 0 },
                    );
                }
                Err(_) => {}
            }
        }
        false
    }

    fn try_node(&self, ni: usize, p: u32, c: ClassId) -> Result<Placement, Fail> {
        let node = self.nodes[ni]
            .as_deref()
            .expect("node order lists owned nodes");
        let class = &self.prep.classes[c as usize];
        let pod = &self.prep.pods[p as usize];
        if crate::taints::tolerates_with(
            &node.taints,
            &class.tolerations,
            crate::taints::PreferNoSchedule::Consider,
        )
        .is_err()
        {
            return Err(Fail::new(true, false, String::new));
        }
        if ports_conflict(&class.ports, &node.ports).is_some() {
            return Err(Fail::new(true, false, String::new));
        }
        // A node only gains volumes during a solve: past its limit, it is past it for good.
        if !class.attaches.is_empty()
            && volumes::exceeds_limits(&node.attach_limits, &node.attached, &class.attaches)
        {
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
        let alternatives = class.volumes.len().max(1);
        for alt in 0..alternatives {
            let vol = class.volumes.get(alt);
            let mut d = if alt + 1 == alternatives {
                std::mem::take(&mut delta)
            } else {
                delta.clone()
            };
            if let Some(v) = vol
                && merge(&node.reqs, &mut d, v, self.vocab, true).is_err()
            {
                last = Fail::new(false, false, String::new);
                continue;
            }
            let topo = match topology_requirements(
                &self.topology,
                class,
                &node.reqs,
                &d,
                self.vocab,
                false,
            ) {
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
            return Ok(Placement {
                delta: d,
                its: None,
                total: Vec::new(),
            });
        }
        Err(last)
    }

    fn commit_node(&mut self, ni: usize, p: u32, c: ClassId, placement: Placement) {
        let class = &self.prep.classes[c as usize];
        let node = self.nodes[ni].as_mut().expect("owned node").to_mut();
        resvec::sub_assign(&mut node.avail, &self.prep.pods[p as usize].requests);
        for (k, r) in placement.delta.0 {
            node.reqs.set(k, r);
        }
        node.ports.extend(class.ports.iter().cloned());
        if !node.attach_limits.is_empty() {
            for volume in &class.attaches {
                if !node.attached.contains(volume) {
                    node.attached.push(*volume);
                }
            }
        }
        node.placed.push(p);
        record(
            &mut self.topology,
            class,
            &node.taints,
            &node.reqs,
            self.vocab,
            true,
        );
    }

    fn try_claim(
        &mut self,
        cid: usize,
        p: u32,
        c: ClassId,
        explain: bool,
    ) -> Result<Placement, Fail> {
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
        let room_ok = claim
            .requests
            .iter()
            .zip(&pod.requests)
            .zip(&claim.room)
            .all(|((a, b), r)| a + b <= *r);
        if !explain && !room_ok {
            return Err(Fail::new(false, false, String::new));
        }
        let mut delta = ReqSet::default();
        if let Err(conflict) = merge(&claim.reqs, &mut delta, &class.reqs, vocab, false) {
            return Err(Fail::new(true, explain, || {
                format!(
                    "incompatible requirements, {}",
                    conflict.render(&vocab.interner)
                )
            }));
        }
        let pool = self.pools[claim.pool]
            .as_mut()
            .expect("claims belong to owned pools");
        let mut last = Fail::new(false, explain, String::new);
        let alternatives = class.volumes.len().max(1);
        for alt in 0..alternatives {
            let vol = class.volumes.get(alt);
            let mut d = if alt + 1 == alternatives {
                std::mem::take(&mut delta)
            } else {
                delta.clone()
            };
            if let Some(v) = vol
                && let Err(conflict) = merge(&claim.reqs, &mut d, v, vocab, false)
            {
                last = Fail::new(false, explain, || {
                    format!(
                        "incompatible volume requirements, {}",
                        conflict.render(&vocab.interner)
                    )
                });
                continue;
            }
            let topo =
                match topology_requirements(&self.topology, class, &claim.reqs, &d, vocab, explain)
                {
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
            let mut total = claim.requests.clone();
            resvec::add_assign(&mut total, &pod.requests);
            let offers = OfferReqs::from(|k| view(&claim.reqs, &d, k), vocab);
            let its = pool.narrow(&claim.its, &d, offers, &total, &class.ports, vocab);
            if its.is_empty() {
                last = Fail::new(false, explain, || {
                    let mut full = claim.reqs.clone();
                    for (k, r) in &d.0 {
                        full.set(*k, r.clone());
                    }
                    let failure =
                        pool.explain(&claim.its, &full, &total, &pod.requests, resvec::CPU, vocab);
                    let shortfall = pool
                        .shortfall(&claim.its, &full, &total, &prep.names, vocab)
                        .map(|s| format!("; {s}"))
                        .unwrap_or_default();
                    let mut cumulative = pool.min_overhead(&pool.base, pool.stride);
                    resvec::add_assign(&mut cumulative, &pod.requests);
                    format!(
                        "no instance type satisfied resources {} and requirements {} ({}{shortfall})",
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
                match pool.check_min_values(&its, &mut full, prep.options.min_values_policy, vocab)
                {
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
            return Ok(Placement {
                delta: d,
                its: Some(its),
                total,
            });
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
        if let Some(its) = placement.its
            && its != claim.its
        {
            // A stale room over-estimates, which only weakens the quick check; refresh
            // it once a quarter of the types are gone.
            let count = its.count();
            if count * 4 <= claim.room_count * 3 {
                claim.room = pool.max_room(&its);
                claim.room_count = count;
            }
            claim.its = its;
        }
        claim.requests = placement.total;
        claim.version += 1;
        claim.pods.push(p);
        claim.ports.extend(class.ports.iter().cloned());
        record(
            &mut self.topology,
            class,
            &pool.taints,
            &claim.reqs,
            self.vocab,
            false,
        );
        // A pod counted by a hostname anti-affinity group closes this NodeClaim to the pods
        // that group keeps apart, whatever else happens; note it now instead of rediscovering
        // it by trying.
        let regular = self.topology.groups.len();
        let groups = class.selected_by.iter().map(|g| *g as usize);
        let inverse = class.inverse_owned.iter().map(|g| regular + *g as usize);
        for g in groups.chain(inverse) {
            for o in &self.shut_out[g] {
                self.deaths.push((*o, cid));
            }
        }
    }

    fn apply_deaths(&mut self) {
        for (c, cid) in std::mem::take(&mut self.deaths) {
            self.memos[c as usize].kill_claim(cid);
        }
    }

    /// Moves a claim that just gained a pod to its place in (pod count, creation) order.
    fn reorder(&mut self, cid: usize) {
        let key = |claims: &[Claim], id: u32| {
            (claims[id as usize].pods.len(), claims[id as usize].created)
        };
        let created = self.claims[cid].created;
        let old = (self.claims[cid].pods.len() - 1, created);
        let claims = &self.claims;
        if let Ok(at) = self.order.binary_search_by(|id| {
            if *id as usize == cid {
                std::cmp::Ordering::Equal
            } else {
                key(claims, *id).cmp(&old)
            }
        }) {
            // The key only grows, so the claim moves right past the claims now below it.
            let new = (self.claims[cid].pods.len(), created);
            let passed = self.order[at + 1..].partition_point(|id| key(claims, *id) < new);
            self.order[at..=at + passed].rotate_left(1);
        }
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
            .map(|conflict| {
                format!(
                    "incompatible requirements, {}",
                    conflict.render(&self.vocab.interner)
                )
            })
    }

    fn try_new(&mut self, pi: usize, p: u32, c: ClassId, explain: bool) -> Result<(), String> {
        let name = &self.prep.pools[pi].name;
        let prefix = || {
            if !explain {
                return String::new();
            }
            format!(
                "incompatible with nodepool {:?}, daemonset overhead={}, ",
                name,
                self.prep.pools[pi].overhead_for_errors(&self.prep.names)
            )
        };
        if explain {
            if let Some(reason) = self.pool_incompatibility(pi, c) {
                return Err(prefix() + &reason);
            }
        } else if self.prep.classes[c as usize].pool_taint[pi].is_some() {
            return Err(String::new());
        }
        let Some(pool) = self.pools[pi].as_mut() else {
            // Only pools the class is statically incompatible with live in other components.
            return Err(prefix() + "incompatible requirements");
        };
        if pool.remaining_nodes.is_some_and(|n| n <= 0) {
            return Err(format!(
                "node limits have been exhausted for nodepool {name:?}"
            ));
        }
        let its = pool.within_limits();
        if its.is_empty() {
            return Err(format!(
                "all available instance types exceed limits for nodepool: {name:?}"
            ));
        }
        let cid = self.claims.len();
        let host = SYNTHETIC_BASE + u32::try_from(cid).expect("fewer than 2^31 NodeClaims");
        let mut reqs = pool.reqs.clone();
        reqs.set(self.vocab.hostname, Req::single(host));
        let room = pool.limit_room();
        let room_count = its.count();
        self.claims.push(Claim {
            pool: pi,
            reqs,
            its,
            room_count,
            room,
            requests: vec![0; self.prep.names.len()],
            pods: Vec::new(),
            ports: Vec::new(),
            created: u32::try_from(cid).expect("fewer than 2^32 NodeClaims"),
            version: 0,
        });
        match self.try_claim(cid, p, c, explain) {
            Ok(placement) => {
                self.commit_claim(cid, p, c, placement);
                let claim_its = self.claims[cid].its.clone();
                if let Some(pool) = self.pools[pi].as_mut() {
                    pool.charge(&claim_its);
                }
                let claims = &self.claims;
                let at = self.order.partition_point(|id| {
                    (
                        claims[*id as usize].pods.len(),
                        claims[*id as usize].created,
                    ) < (1, cid as u32)
                });
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

/// For each hostname anti-affinity group, the classes a pod counted in it keeps off the same
/// node: owners of a regular group, and classes selected by an inverse group.
fn shut_out(prep: &Prepared) -> Vec<Vec<ClassId>> {
    let topology = &prep.topology;
    let regular = topology.groups.len();
    let mut out = vec![Vec::new(); regular + topology.inverse.len()];
    let is_host_anti = |g: &super::topology::Group| {
        g.is_hostname && g.spec.kind == super::topology::Kind::AntiAffinity
    };
    for (c, class) in prep.classes.iter().enumerate() {
        for g in &class.owned {
            if is_host_anti(&topology.groups[*g as usize]) {
                out[*g as usize].push(c as ClassId);
            }
        }
        for g in &class.inverse_selected_by {
            if is_host_anti(&topology.inverse[*g as usize]) {
                out[regular + *g as usize].push(c as ClassId);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::topology::{Group, GroupSpec, Kind, Namespaces};

    fn topology_over(keys: &[(Sym, bool)]) -> Topology {
        let mut topology = Topology::default();
        for &(key, hostname) in keys {
            let spec = GroupSpec {
                kind: Kind::Spread,
                key,
                max_skew: 1,
                min_domains: None,
                namespaces: Namespaces::All,
                selector: None,
                filter: None,
            };
            topology.get_or_create(spec, false, |spec| Group::new(spec, hostname));
        }
        topology
    }

    #[test]
    fn failed_domains_match_nodes_of_the_failed_value_only() {
        let mut vocab = Vocab::new();
        let (zone, a, b) = (vocab.zone, vocab.intern("a"), vocab.intern("b"));
        let topology = topology_over(&[(zone, false)]);
        let in_zone = |z: Sym| {
            let mut reqs = ReqSet::default();
            reqs.set(zone, Req::single(z));
            reqs
        };
        let mut failed = FailedDomains::default();
        failed.add(&topology, false, 0, &in_zone(a));
        assert!(failed.holds(&in_zone(a)));
        assert!(!failed.holds(&in_zone(b)));
        assert!(!failed.holds(&ReqSet::default()), "a node without the key");
    }

    #[test]
    fn failed_domains_leave_out_hostnames_and_stay_within_capacity() {
        let mut vocab = Vocab::new();
        let (zone, hostname) = (vocab.zone, vocab.hostname);
        let topology = topology_over(&[(zone, false), (hostname, true)]);
        let mut failed = FailedDomains::default();
        let node = |key: Sym, value: Sym| {
            let mut reqs = ReqSet::default();
            reqs.set(key, Req::single(value));
            reqs
        };
        let host = vocab.intern("node-1");
        failed.add(&topology, false, 1, &node(hostname, host));
        assert!(
            !failed.holds(&node(hostname, host)),
            "hostname groups are not kept"
        );
        for i in 0..FailedDomains::CAPACITY + 4 {
            let value = vocab.intern(&format!("zone-{i}"));
            failed.add(&topology, false, 0, &node(zone, value));
        }
        assert_eq!(failed.0.len(), FailedDomains::CAPACITY);
    }
}
