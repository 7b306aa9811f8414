//! Pod classes and topology groups, built while preparing a solve: each pending pod's
//! constraint spec becomes a class (deduplicated by its view, with the relaxation chain of
//! its preferences), and each affinity, anti-affinity and spread term a topology group,
//! counted from the pods already running on the existing nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodAffinityTerm, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{SparseNode, universe_for};
use crate::pods::PodLike;
use crate::scheduling::class::{
    Class, ClassId, required_term_alternatives, respects, spec_requirements,
};
use crate::scheduling::intern::{FxHashMap, Sym};
use crate::scheduling::pod::{ConstraintSpec, SpecView};
use crate::scheduling::pool::Pool;
use crate::scheduling::req::{ReqSet, Vocab};
use crate::scheduling::topology::{
    DomainUniverse, Group, GroupId, GroupSpec, Kind, Namespaces, NodeFilter, Selector,
    TolerationKey, Topology,
};
use crate::scheduling::types::SchedulingOptions;
use crate::scheduling::volumes::VolumeIndex;
use crate::taints::{self, PreferNoSchedule};

pub(super) struct ClassBuilder<'a> {
    pub(super) vocab: &'a mut Vocab,
    pub(super) universe: DomainUniverse,
    pub(super) nodes: &'a [SparseNode],
    pub(super) pools: &'a [Pool],
    pub(super) volumes: VolumeIndex<'a>,
    pub(super) namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub(super) topology: Topology,
    pub(super) classes: Vec<Class>,
    pub(super) memo: FxHashMap<u64, Vec<ClassId>>,
    pub(super) options: SchedulingOptions,
    pub(super) tolerate_pns: bool,
}

impl ClassBuilder<'_> {
    /// The class of a pending pod whose view has the fingerprint `fp` (from its form), found
    /// without copying its spec when it already exists.
    pub(super) fn class_of(&mut self, pod: &impl PodLike, fp: u64) -> ClassId {
        let view = SpecView::of(pod);
        if let Some(ids) = self.memo.get(&fp)
            && let Some(id) = ids
                .iter()
                .find(|id| self.classes[**id as usize].spec.view() == view)
        {
            return *id;
        }
        self.class_chain(view.to_owned())
    }

    /// The class of `spec`, building it and its relaxation chain when new.
    fn class_chain(&mut self, spec: ConstraintSpec) -> ClassId {
        let fp = spec.fingerprint();
        if let Some(ids) = self.memo.get(&fp)
            && let Some(id) = ids
                .iter()
                .find(|id| self.classes[**id as usize].spec == spec)
        {
            return *id;
        }
        let id = ClassId::try_from(self.classes.len()).expect("fewer than 2^32 classes");
        let class = self.build(spec.clone());
        self.classes.push(class);
        self.memo.entry(fp).or_default().push(id);
        let mut relaxed = spec;
        if respects(self.options.preference_policy) && relaxed.relax(self.tolerate_pns).is_some() {
            let next = self.class_chain(relaxed);
            self.classes[id as usize].next = Some(next);
        }
        id
    }

    fn build(&mut self, spec: ConstraintSpec) -> Class {
        let ns = self.vocab.intern(&spec.namespace);
        let mut labels: Vec<(Sym, Sym)> = spec
            .labels
            .iter()
            .map(|(k, v)| (self.vocab.intern(k), self.vocab.intern(v)))
            .collect();
        labels.sort_unstable();
        let mut error = None;
        let respect = respects(self.options.preference_policy);
        let reqs = spec_requirements(&spec, respect, self.vocab).unwrap_or_else(|e| {
            error = Some(e);
            ReqSet::default()
        });
        let strict = spec_requirements(&spec, false, self.vocab).unwrap_or_default();
        let volumes = self
            .volumes
            .alternatives(&spec.namespace, &spec.claims, self.vocab)
            .unwrap_or_else(|e| {
                error.get_or_insert(e);
                Vec::new()
            });
        let attaches = self
            .volumes
            .attachments(&spec.namespace, &spec.claims, self.vocab);
        let pool_taint = self
            .pools
            .iter()
            .map(|p| {
                taints::tolerates_with(&p.taints, &spec.tolerations, PreferNoSchedule::Consider)
                    .err()
                    .map(|u| u.to_string())
            })
            .collect();
        let mut class = Class {
            ns,
            labels,
            reqs,
            strict,
            tolerations: spec.tolerations.clone(),
            ports: spec.host_ports.clone(),
            volumes,
            attaches,
            owned: Vec::new(),
            inverse_owned: Vec::new(),
            selected_by: Vec::new(),
            inverse_selected_by: Vec::new(),
            next: None,
            error,
            pool_taint,
            spec,
        };
        self.own_groups(&mut class);
        class
    }

    fn own_groups(&mut self, class: &mut Class) {
        let respect = respects(self.options.preference_policy);
        let spec = class.spec.clone();
        for tsc in &spec.spread {
            if !respect && tsc.when_unsatisfiable != "DoNotSchedule" {
                continue;
            }
            let key = self.vocab.intern(&tsc.topology_key);
            let extra: Vec<(Sym, Sym)> = tsc
                .match_label_keys
                .iter()
                .flatten()
                .filter_map(|k| {
                    spec.labels
                        .get(k)
                        .map(|v| (self.vocab.intern(k), self.vocab.intern(v)))
                })
                .collect();
            let selector = tsc
                .label_selector
                .as_ref()
                .and_then(|s| Selector::compile(s, &extra, self.vocab));
            let mut terms = Vec::new();
            if let Ok(alts) = required_term_alternatives(&spec, self.vocab) {
                terms = alts;
            }
            let filter = NodeFilter {
                terms: terms.into_iter().filter(|t| !t.0.is_empty()).collect(),
                honor_affinity: tsc.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_taints: tsc.node_taints_policy.as_deref() == Some("Honor"),
                tolerations: spec.tolerations.iter().map(TolerationKey::of).collect(),
            };
            let gs = GroupSpec {
                kind: Kind::Spread,
                key,
                max_skew: u32::try_from(tsc.max_skew.max(0)).unwrap_or(0),
                min_domains: tsc
                    .min_domains
                    .map(|m| u32::try_from(m.max(0)).unwrap_or(0)),
                namespaces: Namespaces::Set(vec![class.ns]),
                selector,
                filter: Some(filter),
            };
            let id = self.group(gs, &spec.tolerations);
            class.owned.push(id);
        }
        let Some(affinity) = spec.affinity.as_ref() else {
            return;
        };
        let mut terms: Vec<(Kind, &PodAffinityTerm)> = Vec::new();
        if let Some(a) = &affinity.pod_affinity {
            terms.extend(
                a.required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .map(|t| (Kind::Affinity, t)),
            );
            if respect {
                terms.extend(
                    a.preferred_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                        .map(|t| (Kind::Affinity, &t.pod_affinity_term)),
                );
            }
        }
        if let Some(a) = &affinity.pod_anti_affinity {
            terms.extend(
                a.required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .map(|t| (Kind::AntiAffinity, t)),
            );
            if respect {
                terms.extend(
                    a.preferred_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                        .map(|t| (Kind::AntiAffinity, &t.pod_affinity_term)),
                );
            }
        }
        for (kind, term) in terms {
            let gs = self.term_spec(kind, &spec.namespace, term);
            let id = self.group(gs, &spec.tolerations);
            class.owned.push(id);
        }
        for term in affinity.pod_anti_affinity.iter().flat_map(|a| {
            a.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
        }) {
            let gs = self.term_spec(Kind::AntiAffinity, &spec.namespace, term);
            let id = self.inverse_group(gs);
            class.inverse_owned.push(id);
        }
        class.owned.sort_unstable();
        class.owned.dedup();
    }

    fn term_spec(&mut self, kind: Kind, pod_ns: &str, term: &PodAffinityTerm) -> GroupSpec {
        let key = self.vocab.intern(&term.topology_key);
        let selector = term
            .label_selector
            .as_ref()
            .and_then(|s| Selector::compile(s, &[], self.vocab));
        GroupSpec {
            kind,
            key,
            max_skew: u32::MAX,
            min_domains: None,
            namespaces: self.term_namespaces(
                pod_ns,
                term.namespaces.as_deref(),
                term.namespace_selector.as_ref(),
            ),
            selector,
            filter: None,
        }
    }

    fn term_namespaces(
        &mut self,
        pod_ns: &str,
        names: Option<&[String]>,
        selector: Option<&LabelSelector>,
    ) -> Namespaces {
        let names = names.unwrap_or_default();
        let mut set: Vec<Sym> = names.iter().map(|n| self.vocab.intern(n)).collect();
        match selector {
            None if names.is_empty() => set.push(self.vocab.intern(pod_ns)),
            None => {}
            Some(sel) => {
                let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
                if empty {
                    return Namespaces::All;
                }
                if let Some(compiled) = Selector::compile(sel, &[], self.vocab) {
                    for (ns, ns_labels) in self.namespaces {
                        let mut l: Vec<(Sym, Sym)> = ns_labels
                            .iter()
                            .map(|(k, v)| (self.vocab.intern(k), self.vocab.intern(v)))
                            .collect();
                        l.sort_unstable();
                        if compiled.matches(&l) {
                            set.push(self.vocab.intern(ns));
                        }
                    }
                }
            }
        }
        set.sort_unstable();
        set.dedup();
        Namespaces::Set(set)
    }

    /// The regular group for `spec`, counting pods already running when it is new.
    fn group(&mut self, spec: GroupSpec, owner_tolerations: &[Toleration]) -> GroupId {
        universe_for(&mut self.universe, self.pools, spec.key, self.vocab);
        let vocab = &*self.vocab;
        let universe = &self.universe;
        let nodes = self.nodes;
        let (id, _) = self.topology.get_or_create(spec, false, |spec| {
            let honor_taints = spec.filter.as_ref().is_some_and(|f| f.honor_taints);
            let mut g = Group::new(spec.clone(), spec.key == vocab.hostname);
            for d in universe.domains_for(spec.key, honor_taints.then_some(owner_tolerations)) {
                g.register(d, &vocab.interner);
            }
            for n in nodes {
                let counts_here = spec
                    .filter
                    .as_ref()
                    .is_none_or(|f| f.matches(&n.taints, &n.reqs, vocab, true));
                if !counts_here {
                    continue;
                }
                let domain = match n.label_values.get(&spec.key) {
                    Some(d) => *d,
                    None if spec.key == vocab.hostname => n.host,
                    None => continue,
                };
                if !g.is_hostname {
                    g.register(domain, &vocab.interner);
                }
                for (shape, counted) in &n.shapes {
                    if *counted > 0 && g.selects(shape.ns, &shape.labels) {
                        g.record_n(domain, *counted, &vocab.interner);
                    }
                }
            }
            g
        });
        id
    }

    fn inverse_group(&mut self, spec: GroupSpec) -> GroupId {
        universe_for(&mut self.universe, self.pools, spec.key, self.vocab);
        let vocab = &*self.vocab;
        let universe = &self.universe;
        let (id, _) = self.topology.get_or_create(spec, true, |spec| {
            let mut g = Group::new(spec.clone(), spec.key == vocab.hostname);
            for d in universe.domains_for(spec.key, None) {
                g.register(d, &vocab.interner);
            }
            g
        });
        id
    }

    /// Inverse groups from running pods with required anti-affinity, recorded where they run.
    pub(super) fn existing_inverse_groups(&mut self) {
        let nodes = self.nodes;
        for n in nodes {
            for (shape, counted) in n.shapes.iter().filter(|(_, c)| *c > 0) {
                for term in &shape.form.anti_terms {
                    let spec = self.term_spec(Kind::AntiAffinity, &shape.form.namespace, term);
                    let key = spec.key;
                    let id = self.inverse_group(spec);
                    if let Some(d) = n.label_values.get(&key) {
                        self.topology.inverse[id as usize].record_n(
                            *d,
                            *counted,
                            &self.vocab.interner,
                        );
                    }
                }
            }
        }
    }

    /// Which groups select each class's pods.
    pub(super) fn link_selections(&mut self) {
        for class in &mut self.classes {
            class.selected_by = (0..self.topology.groups.len())
                .filter(|g| self.topology.groups[*g].selects(class.ns, &class.labels))
                .map(|g| g as GroupId)
                .collect();
            class.inverse_selected_by = (0..self.topology.inverse.len())
                .filter(|g| self.topology.inverse[*g].selects(class.ns, &class.labels))
                .map(|g| g as GroupId)
                .collect();
        }
    }
}
