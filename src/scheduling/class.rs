//! Pod classes: the distinct constraint specs among the pending pods. Everything the solver
//! derives from constraints (requirements, tolerations, topology groups, volume topology,
//! which NodePools' taints it tolerates) is computed once per class; a pod is its requests
//! plus a chain of classes, one per preference-relaxation step.

use k8s_openapi::api::core::v1::Toleration;

use super::intern::Sym;
use super::pod::{ConstraintSpec, HostPort};
use super::req::{ReqSet, Vocab, add_expressions};
use super::topology::GroupId;
use super::types::PreferencePolicy;
use super::volumes::Attached;

/// Index of a class.
pub type ClassId = u32;

/// A distinct constraint spec and everything derived from it.
#[derive(Clone, Debug)]
pub struct Class {
    pub spec: ConstraintSpec,
    pub ns: Sym,
    /// Pod labels sorted by key.
    pub labels: Vec<(Sym, Sym)>,
    /// Node requirements including the heaviest preferred node-affinity term.
    pub reqs: ReqSet,
    /// Node requirements from the node selector and the first required term only.
    pub strict: ReqSet,
    pub tolerations: Vec<Toleration>,
    pub ports: Vec<HostPort>,
    /// Alternative topology requirements from the pod's volumes (empty: unconstrained).
    pub volumes: Vec<ReqSet>,
    /// The volumes its pods attach, by CSI driver (counted against a node's attach limits).
    pub attaches: Attached,
    /// Groups from the class's own spreads and (anti-)affinity terms.
    pub owned: Vec<GroupId>,
    /// Inverse anti-affinity groups from its required anti-affinity terms.
    pub inverse_owned: Vec<GroupId>,
    /// Regular groups whose namespace and selector match the class's pods (sorted).
    pub selected_by: Vec<GroupId>,
    /// Inverse groups that match the class's pods.
    pub inverse_selected_by: Vec<GroupId>,
    /// The class after the next relaxation step.
    pub next: Option<ClassId>,
    /// Set when pods of this class cannot be scheduled at all (bad spec, missing volume).
    pub error: Option<String>,
    /// Per pool (solve order): the untolerated taint, rendered, if any.
    pub pool_taint: Vec<Option<String>>,
}

/// Node requirements of a spec: node selector, the first required node-affinity term and,
/// when `with_preferred`, the heaviest preferred term. Errors name the bad requirement.
pub fn spec_requirements(
    spec: &ConstraintSpec,
    with_preferred: bool,
    vocab: &mut Vocab,
) -> Result<ReqSet, String> {
    let mut reqs = vocab.label_set(spec.node_selector.iter());
    let Some(node_affinity) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return Ok(reqs);
    };
    if with_preferred
        && let Some(preferred) = node_affinity
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
    {
        let mut terms: Vec<_> = preferred.iter().collect();
        terms.sort_by_key(|t| std::cmp::Reverse(t.weight));
        if let Some(t) = terms.first() {
            add_expressions(
                &mut reqs,
                t.preference.match_expressions.iter().flatten(),
                vocab,
            )?;
        }
    }
    if let Some(first) = node_affinity
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .and_then(|r| r.node_selector_terms.first())
    {
        add_expressions(&mut reqs, first.match_expressions.iter().flatten(), vocab)?;
    }
    Ok(reqs)
}

/// Node requirements of each required node-affinity term (each combined with the node
/// selector); a single node-selector set when there are no terms.
pub fn required_term_alternatives(
    spec: &ConstraintSpec,
    vocab: &mut Vocab,
) -> Result<Vec<ReqSet>, String> {
    let base = vocab.label_set(spec.node_selector.iter());
    let terms = crate::pods::required_node_terms(spec.affinity.as_ref());
    if terms.is_empty() {
        return Ok(vec![base]);
    }
    terms
        .iter()
        .map(|t| {
            let mut set = base.clone();
            add_expressions(&mut set, t.match_expressions.iter().flatten(), vocab)?;
            Ok(set)
        })
        .collect()
}

/// Whether a policy keeps preferred terms and ScheduleAnyway spreads.
pub fn respects(policy: PreferencePolicy) -> bool {
    policy == PreferencePolicy::Respect
}
