//! Topology bookkeeping: one group per distinct topology spread constraint, pod affinity term
//! and pod anti-affinity term, each counting matching pods per domain of its key; plus the
//! inverse anti-affinity groups that keep pods out of domains where a pod with required
//! anti-affinity against them runs. Counts only grow during a solve, which is what lets the
//! solver treat some topology failures as permanent.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::intern::{FxHashMap, Interner, Sym};
use super::req::{Req, ReqSet, Vocab};
use crate::taints::{self, PreferNoSchedule};

/// Index of a group within its list (regular or inverse).
pub type GroupId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Spread,
    Affinity,
    AntiAffinity,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Spread => "topology spread",
            Kind::Affinity => "pod affinity",
            Kind::AntiAffinity => "pod anti-affinity",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SelOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A compiled label selector. `None` in a group means the term had no selector and so
/// selects nothing, as `LabelSelectorAsSelector(nil)` does upstream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    exprs: Vec<(Sym, SelOp, Vec<Sym>)>,
}

impl Selector {
    /// Compiles a selector; an invalid operator makes it select nothing (upstream behaviour).
    pub fn compile(
        sel: &LabelSelector,
        extra: &[(Sym, Sym)],
        vocab: &mut Vocab,
    ) -> Option<Selector> {
        let mut exprs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            exprs.push((vocab.intern(k), SelOp::In, vec![vocab.intern(v)]));
        }
        for e in sel.match_expressions.iter().flatten() {
            let op = match e.operator.as_str() {
                "In" => SelOp::In,
                "NotIn" => SelOp::NotIn,
                "Exists" => SelOp::Exists,
                "DoesNotExist" => SelOp::DoesNotExist,
                _ => return None,
            };
            let mut values: Vec<Sym> = e.values.iter().flatten().map(|v| vocab.intern(v)).collect();
            values.sort_unstable();
            exprs.push((vocab.intern(&e.key), op, values));
        }
        for (k, v) in extra {
            exprs.push((*k, SelOp::In, vec![*v]));
        }
        exprs.sort();
        exprs.dedup();
        Some(Selector { exprs })
    }

    /// Whether pod labels (sorted by key) match.
    pub fn matches(&self, labels: &[(Sym, Sym)]) -> bool {
        self.exprs.iter().all(|(k, op, values)| {
            let value = labels
                .binary_search_by_key(k, |(lk, _)| *lk)
                .ok()
                .map(|i| labels[i].1);
            match op {
                SelOp::In => value.is_some_and(|v| values.binary_search(&v).is_ok()),
                SelOp::NotIn => value.is_none_or(|v| values.binary_search(&v).is_err()),
                SelOp::Exists => value.is_some(),
                SelOp::DoesNotExist => value.is_none(),
            }
        })
    }
}

impl PartialOrd for SelOp {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SelOp {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (*self as u8).cmp(&(*other as u8))
    }
}

/// Namespaces a term applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Namespaces {
    All,
    Set(Vec<Sym>),
}

impl Namespaces {
    pub fn has(&self, ns: Sym) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Set(s) => s.binary_search(&ns).is_ok(),
        }
    }
}

/// Which nodes count for a topology spread constraint (nodeAffinityPolicy/nodeTaintsPolicy).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct NodeFilter {
    /// OR of (nodeSelector + one required node-affinity term); empty matches every node.
    pub terms: Vec<ReqSet>,
    pub honor_affinity: bool,
    pub honor_taints: bool,
    pub tolerations: Vec<TolerationKey>,
}

/// A hashable copy of a toleration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TolerationKey(
    pub Option<String>,
    pub Option<String>,
    pub Option<String>,
    pub Option<String>,
);

impl TolerationKey {
    pub fn of(t: &Toleration) -> TolerationKey {
        TolerationKey(
            t.key.clone(),
            t.operator.clone(),
            t.value.clone(),
            t.effect.clone(),
        )
    }

    fn toleration(&self) -> Toleration {
        Toleration {
            key: self.0.clone(),
            operator: self.1.clone(),
            value: self.2.clone(),
            effect: self.3.clone(),
            toleration_seconds: None,
        }
    }
}

impl NodeFilter {
    /// Whether a node with these taints and requirements counts. `strict` compares labels
    /// the way existing nodes are compared (no undefined well-known labels).
    pub fn matches(&self, taints: &[Taint], reqs: &ReqSet, vocab: &Vocab, strict: bool) -> bool {
        let affinity_ok = !self.honor_affinity
            || self.terms.is_empty()
            || self.terms.iter().any(|t| {
                if strict {
                    reqs.compatible_strict(t, &vocab.interner).is_ok()
                } else {
                    reqs.compatible(t, vocab).is_ok()
                }
            });
        affinity_ok && (!self.honor_taints || self.tolerates(taints))
    }

    fn tolerates(&self, taints: &[Taint]) -> bool {
        let tols: Vec<Toleration> = self
            .tolerations
            .iter()
            .map(TolerationKey::toleration)
            .collect();
        taints::tolerates_with(taints, &tols, PreferNoSchedule::Consider).is_ok()
    }
}

/// The identity of a group: pods sharing all of it share one set of counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupSpec {
    pub kind: Kind,
    pub key: Sym,
    pub max_skew: u32,
    pub min_domains: Option<u32>,
    pub namespaces: Namespaces,
    pub selector: Option<Selector>,
    pub filter: Option<NodeFilter>,
}

/// A topology group with its per-domain counts.
#[derive(Clone, Debug)]
pub struct Group {
    pub spec: GroupSpec,
    pub is_hostname: bool,
    /// Domain to matching-pod count; known domains with no pods are present with zero.
    counts: FxHashMap<Sym, u32>,
    /// Known domains sorted by name (not kept for hostname groups, which have one per node).
    domains: Vec<Sym>,
    nonzero: u32,
    records: u32,
}

impl Group {
    pub fn new(spec: GroupSpec, is_hostname: bool) -> Group {
        Group {
            spec,
            is_hostname,
            counts: FxHashMap::default(),
            domains: Vec::new(),
            nonzero: 0,
            records: 0,
        }
    }

    pub fn selects(&self, ns: Sym, labels: &[(Sym, Sym)]) -> bool {
        self.spec.namespaces.has(ns)
            && self
                .spec
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(labels))
    }

    /// Makes a domain known (with zero pods if new).
    pub fn register(&mut self, domain: Sym, interner: &Interner) {
        if self.counts.contains_key(&domain) {
            return;
        }
        self.counts.insert(domain, 0);
        if !self.is_hostname {
            let name = interner.name(domain);
            let at = self.domains.partition_point(|d| interner.name(*d) < name);
            self.domains.insert(at, domain);
        }
    }

    pub fn record(&mut self, domain: Sym, interner: &Interner) {
        self.record_n(domain, 1, interner);
    }

    /// `n` pods in `domain`: the same counts and stamp as `n` calls of [`Self::record`].
    pub fn record_n(&mut self, domain: Sym, n: u32, interner: &Interner) {
        if n == 0 {
            return;
        }
        self.records = self.records.wrapping_add(n);
        self.register(domain, interner);
        let c = self.counts.entry(domain).or_insert(0);
        if *c == 0 {
            self.nonzero += 1;
        }
        *c += n;
    }

    /// A value that changes whenever a failed `next_domains` answer could change (node side
    /// held fixed): the set of non-empty domains for affinity, any count for spreads.
    #[inline]
    pub fn stamp(&self) -> u32 {
        match self.spec.kind {
            Kind::Affinity => self.nonzero,
            Kind::Spread | Kind::AntiAffinity => self.records,
        }
    }

    #[inline]
    pub fn count(&self, domain: Sym) -> u32 {
        self.counts.get(&domain).copied().unwrap_or(0)
    }

    /// The domains the pod may use on a node whose requirement for the key is `node`, given
    /// the pod's own (strict) requirement `pod`. An empty `In` means none.
    pub fn next_domains(
        &self,
        self_selecting: bool,
        pod: &Req,
        node: &Req,
        interner: &Interner,
    ) -> Req {
        match self.spec.kind {
            Kind::Spread => self.next_spread(self_selecting, pod, node, interner),
            Kind::Affinity => self.next_affinity(self_selecting, pod, node, interner),
            Kind::AntiAffinity => self.next_anti_affinity(pod, node, interner),
        }
    }

    fn next_spread(&self, self_selecting: bool, pod: &Req, node: &Req, interner: &Interner) -> Req {
        let own = u32::from(self_selecting);
        if self.is_hostname
            && let Some(host) = node.single_value()
        {
            // A hostname domain can always be created empty, so the global minimum is zero.
            return if self.count(host) + own <= self.spec.max_skew {
                Req::single(host)
            } else {
                Req::does_not_exist()
            };
        }
        let min = self.min_count(pod, interner);
        let mut best: Option<(i64, Sym)> = None;
        for &d in &self.domains {
            if !node.has(d, interner) {
                continue;
            }
            let count = i64::from(self.count(d) + own);
            if count - min <= i64::from(self.spec.max_skew) && best.is_none_or(|(c, _)| count < c) {
                best = Some((count, d));
            }
        }
        best.map_or_else(Req::does_not_exist, |(_, d)| Req::single(d))
    }

    /// The smallest count among domains the pod may use (zero below minDomains).
    fn min_count(&self, pod: &Req, interner: &Interner) -> i64 {
        if self.is_hostname {
            return 0;
        }
        let mut min = i64::from(i32::MAX);
        let mut supported = 0u32;
        for &d in &self.domains {
            if pod.has(d, interner) {
                supported += 1;
                min = min.min(i64::from(self.count(d)));
            }
        }
        if self.spec.min_domains.is_some_and(|m| supported < m) {
            min = 0;
        }
        min
    }

    fn any_compatible_pod_domain(&self, pod: &Req, interner: &Interner) -> bool {
        if pod.complement && pod.values.is_empty() && !pod.is_bounded() {
            return self.nonzero > 0;
        }
        self.counts
            .iter()
            .any(|(d, c)| *c > 0 && pod.has(*d, interner))
    }

    fn next_affinity(
        &self,
        self_selecting: bool,
        pod: &Req,
        node: &Req,
        interner: &Interner,
    ) -> Req {
        let bootstrap = || {
            self_selecting && (self.nonzero == 0 || !self.any_compatible_pod_domain(pod, interner))
        };
        if self.is_hostname
            && let Some(host) = node.single_value()
        {
            if !pod.has(host, interner) {
                return Req::does_not_exist();
            }
            return if self.count(host) > 0 || bootstrap() {
                Req::single(host)
            } else {
                Req::does_not_exist()
            };
        }
        let options: Vec<Sym> = self
            .domains
            .iter()
            .copied()
            .filter(|d| self.count(*d) > 0 && pod.has(*d, interner) && node.has(*d, interner))
            .collect();
        if !options.is_empty() {
            return Req::is_in(options);
        }
        if !bootstrap() {
            return Req::does_not_exist();
        }
        // The first pod of a self-selecting group picks a domain, preferring one the node
        // already offers so an in-flight node keeps its domain.
        let mut picks = Vec::new();
        if let Some(d) = self
            .domains
            .iter()
            .find(|d| pod.has(**d, interner) && node.has(**d, interner))
        {
            picks.push(*d);
        }
        if let Some(d) = self.domains.iter().find(|d| pod.has(**d, interner)) {
            picks.push(*d);
        }
        if picks.is_empty() {
            Req::does_not_exist()
        } else {
            Req::is_in(picks)
        }
    }

    fn next_anti_affinity(&self, pod: &Req, node: &Req, interner: &Interner) -> Req {
        if self.is_hostname
            && let Some(host) = node.single_value()
        {
            return if self.count(host) == 0 {
                Req::single(host)
            } else {
                Req::does_not_exist()
            };
        }
        let options: Vec<Sym> = self
            .domains
            .iter()
            .copied()
            .filter(|d| self.count(*d) == 0 && pod.has(*d, interner) && node.has(*d, interner))
            .collect();
        Req::is_in(options)
    }

    /// Upstream's description of an unsatisfiable group for error messages.
    pub fn describe_failure(&self, pod: &Req, node: &Req, interner: &Interner) -> String {
        let key = self.spec.key;
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for (d, c) in &self.counts {
            counts.insert(interner.name(*d).into_owned(), *c);
        }
        let shown: Vec<String> = counts
            .iter()
            .take(25)
            .map(|(d, c)| format!("{d}: {c}"))
            .collect();
        format!(
            "unsatisfiable topology constraint for {}, key={} (counts = {{{}}}, podDomains = {}, nodeDomains = {})",
            self.spec.kind.describe(),
            interner.name(key),
            shown.join(", "),
            pod.render(key, interner),
            node.render(key, interner),
        )
    }
}

/// Every domain of every key that NodePools and their instance types can produce, with the
/// taints of the pools producing it (for nodeTaintsPolicy: Honor).
#[derive(Clone, Debug, Default)]
pub struct DomainUniverse {
    pub taint_sets: Vec<Vec<Taint>>,
    /// key -> domain -> indices into `taint_sets`.
    pub domains: FxHashMap<Sym, BTreeMap<Sym, Vec<usize>>>,
}

impl DomainUniverse {
    pub fn insert(&mut self, key: Sym, domain: Sym, taint_set: usize) {
        let sets = self
            .domains
            .entry(key)
            .or_default()
            .entry(domain)
            .or_default();
        if !sets.contains(&taint_set) {
            sets.push(taint_set);
        }
    }

    /// Domains of `key`, restricted to those some tolerated pool produces when `tolerations`
    /// is given.
    pub fn domains_for(&self, key: Sym, tolerations: Option<&[Toleration]>) -> Vec<Sym> {
        let Some(domains) = self.domains.get(&key) else {
            return Vec::new();
        };
        domains
            .iter()
            .filter(|(_, sets)| {
                tolerations.is_none_or(|tols| {
                    sets.iter().any(|s| {
                        taints::tolerates_with(
                            &self.taint_sets[*s],
                            tols,
                            PreferNoSchedule::Consider,
                        )
                        .is_ok()
                    })
                })
            })
            .map(|(d, _)| *d)
            .collect()
    }
}

/// All groups of a solve. Regular groups are owned by the classes whose terms produced them;
/// inverse groups come from required anti-affinity terms of pending and existing pods.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    pub groups: Vec<Group>,
    pub inverse: Vec<Group>,
    index: FxHashMap<GroupSpec, GroupId>,
    inverse_index: FxHashMap<GroupSpec, GroupId>,
}

impl Topology {
    /// Returns the group with this spec, creating it with `init` when new.
    pub fn get_or_create(
        &mut self,
        spec: GroupSpec,
        inverse: bool,
        init: impl FnOnce(GroupSpec) -> Group,
    ) -> (GroupId, bool) {
        let (index, list) = if inverse {
            (&mut self.inverse_index, &mut self.inverse)
        } else {
            (&mut self.index, &mut self.groups)
        };
        if let Some(id) = index.get(&spec) {
            return (*id, false);
        }
        let id = GroupId::try_from(list.len()).expect("fewer than 2^32 topology groups");
        index.insert(spec.clone(), id);
        list.push(init(spec));
        (id, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(kind: Kind, key: Sym, skew: u32, hostname: bool) -> Group {
        Group::new(
            GroupSpec {
                kind,
                key,
                max_skew: skew,
                min_domains: None,
                namespaces: Namespaces::All,
                selector: Some(Selector { exprs: Vec::new() }),
                filter: None,
            },
            hostname,
        )
    }

    #[test]
    fn spread_picks_the_least_loaded_domain_within_skew() {
        let mut v = Vocab::new();
        let zone = v.zone;
        let (a, b, c) = (v.intern("a"), v.intern("b"), v.intern("c"));
        let i = &v.interner;
        let mut g = group(Kind::Spread, zone, 1, false);
        for d in [a, b, c] {
            g.register(d, i);
        }
        g.record(a, i);
        g.record(b, i);
        let any = Req::exists();
        assert_eq!(g.next_domains(true, &any, &any, i), Req::single(c));
        // A node limited to a and b cannot take a fourth pod while c is empty.
        let ab = Req::is_in(vec![a, b]);
        assert_eq!(
            g.next_domains(true, &any, &ab, i).op(),
            super::super::req::Op::DoesNotExist
        );
        // But a pod restricted to a and b only sees those domains, so skew allows it.
        assert_eq!(g.next_domains(true, &ab, &ab, i).len(), 1);
    }

    #[test]
    fn min_domains_forces_zero_minimum() {
        let mut v = Vocab::new();
        let zone = v.zone;
        let a = v.intern("a");
        let i = &v.interner;
        let mut g = group(Kind::Spread, zone, 1, false);
        g.spec.min_domains = Some(2);
        g.register(a, i);
        g.record(a, i);
        let any = Req::exists();
        // Only one domain exists but two are required: the minimum is 0 so a second pod in a
        // would be skew 2.
        assert_eq!(
            g.next_domains(true, &any, &any, i).op(),
            super::super::req::Op::DoesNotExist
        );
    }

    #[test]
    fn hostname_anti_affinity_needs_an_empty_host() {
        let mut v = Vocab::new();
        let host = v.hostname;
        let (h1, h2) = (v.intern("h1"), v.intern("h2"));
        let i = &v.interner;
        let mut g = group(Kind::AntiAffinity, host, u32::MAX, true);
        g.record(h1, i);
        assert_eq!(
            g.next_domains(true, &Req::exists(), &Req::single(h1), i)
                .len(),
            0
        );
        assert_eq!(
            g.next_domains(true, &Req::exists(), &Req::single(h2), i),
            Req::single(h2)
        );
    }

    #[test]
    fn self_affinity_bootstraps_then_follows() {
        let mut v = Vocab::new();
        let zone = v.zone;
        let (a, b) = (v.intern("a"), v.intern("b"));
        let i = &v.interner;
        let mut g = group(Kind::Affinity, zone, u32::MAX, false);
        g.register(a, i);
        g.register(b, i);
        let any = Req::exists();
        let only_b = Req::single(b);
        let first = g.next_domains(true, &any, &only_b, i);
        assert!(first.has(b, i), "prefers a domain the node offers");
        g.record(b, i);
        assert_eq!(g.next_domains(true, &any, &any, i), Req::single(b));
        assert_eq!(g.next_domains(false, &any, &Req::single(a), i).len(), 0);
    }

    #[test]
    fn selector_semantics() {
        let mut v = Vocab::new();
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["db".into()]),
                },
            ]),
        };
        let s = Selector::compile(&sel, &[], &mut v).expect("valid");
        let (app, web, tier, db) = (
            v.intern("app"),
            v.intern("web"),
            v.intern("tier"),
            v.intern("db"),
        );
        let mut labels = vec![(app, web)];
        labels.sort();
        assert!(s.matches(&labels));
        let mut with_db = vec![(app, web), (tier, db)];
        with_db.sort();
        assert!(!s.matches(&with_db));
    }
}
