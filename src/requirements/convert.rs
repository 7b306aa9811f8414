//! Building requirements from what users write: node selectors, node affinity terms, plain
//! labels, Karpenter's `NodeSelectorRequirementWithMinValues`, and whole pods (selector plus
//! the first required term plus, unless strict, the heaviest preferred term, which the
//! scheduler relaxes away later if it cannot be met), and converting back for printing.

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, PreferredSchedulingTerm,
};

use super::error::RequirementError;
use super::requirement::Requirement;
use super::set::Requirements;
pub use crate::api::NodeSelectorRequirementWithMinValues;

impl TryFrom<&NodeSelectorRequirementWithMinValues> for Requirement {
    type Error = RequirementError;

    fn try_from(r: &NodeSelectorRequirementWithMinValues) -> Result<Self, Self::Error> {
        // A negative minValues is rejected by validation; here it can only mean "no floor".
        let min_values = r.min_values.and_then(|m| u32::try_from(m).ok());
        Requirement::new(&r.key, r.operator, &r.values, min_values)
    }
}

impl TryFrom<&NodeSelectorRequirement> for Requirement {
    type Error = RequirementError;

    fn try_from(r: &NodeSelectorRequirement) -> Result<Self, Self::Error> {
        Requirement::parse(&r.key, &r.operator, r.values.iter().flatten(), None)
    }
}

/// Which of a pod's node affinity terms [`Requirements::from_pod`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodRequirementScope {
    /// Node selector, first required term and the heaviest preferred term (as required).
    WithPreferences,
    /// Node selector and first required term only.
    RequiredOnly,
}

impl Requirements {
    /// `key In [value]` for every label.
    pub fn from_labels<'a, I>(labels: I) -> Requirements
    where
        I: IntoIterator<Item = (&'a String, &'a String)>,
    {
        labels
            .into_iter()
            .map(|(key, value)| Requirement::in_values(key, [value]))
            .collect()
    }

    /// Requirements of NodePool/NodeClaim `spec.requirements`.
    pub fn from_requirements_with_min_values(
        requirements: &[NodeSelectorRequirementWithMinValues],
    ) -> Result<Requirements, RequirementError> {
        requirements.iter().map(Requirement::try_from).collect()
    }

    /// Requirements of plain node selector requirements (e.g. one term's match expressions).
    pub fn from_node_selector_requirements(
        requirements: &[NodeSelectorRequirement],
    ) -> Result<Requirements, RequirementError> {
        requirements.iter().map(Requirement::try_from).collect()
    }

    /// Requirements of one node selector term's match expressions; `matchFields` (node
    /// names) do not constrain a node that does not exist yet and are ignored, as upstream.
    pub fn from_node_selector_term(
        term: &NodeSelectorTerm,
    ) -> Result<Requirements, RequirementError> {
        Requirements::from_node_selector_requirements(
            term.match_expressions.as_deref().unwrap_or(&[]),
        )
    }

    /// A pod's requirements, treating its heaviest preferred node affinity term as required
    /// (upstream `NewPodRequirements`).
    pub fn from_pod(pod: &Pod) -> Result<Requirements, RequirementError> {
        Requirements::from_pod_spec(pod.spec.as_ref(), PodRequirementScope::WithPreferences)
    }

    /// A pod's true requirements only (upstream `NewStrictPodRequirements`).
    pub fn from_pod_strict(pod: &Pod) -> Result<Requirements, RequirementError> {
        Requirements::from_pod_spec(pod.spec.as_ref(), PodRequirementScope::RequiredOnly)
    }

    /// Node selector, then (with preferences) the heaviest preferred term, then the first
    /// required term; later terms of the required OR are left for the scheduler's relaxation.
    pub fn from_pod_spec(
        spec: Option<&PodSpec>,
        scope: PodRequirementScope,
    ) -> Result<Requirements, RequirementError> {
        let Some(spec) = spec else {
            return Ok(Requirements::new());
        };
        let mut requirements = spec
            .node_selector
            .as_ref()
            .map(Requirements::from_labels)
            .unwrap_or_default();
        let Some(node_affinity) = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
        else {
            return Ok(requirements);
        };
        if scope == PodRequirementScope::WithPreferences
            && let Some(term) = heaviest_preference(node_affinity)
        {
            requirements.add_all(&Requirements::from_node_selector_term(term)?);
        }
        let first_required = node_affinity
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .and_then(|selector| selector.node_selector_terms.first());
        if let Some(term) = first_required {
            requirements.add_all(&Requirements::from_node_selector_term(term)?);
        }
        Ok(requirements)
    }
}

fn heaviest_preference(
    node_affinity: &k8s_openapi::api::core::v1::NodeAffinity,
) -> Option<&NodeSelectorTerm> {
    let preferred = node_affinity
        .preferred_during_scheduling_ignored_during_execution
        .as_deref()?;
    heaviest_preferred_term(preferred).map(|i| &preferred[i].preference)
}

/// Index of the preferred term with the largest weight (the first such on ties): the term
/// [`Requirements::from_pod`] treats as required, and the one relaxation removes first.
pub fn heaviest_preferred_term(terms: &[PreferredSchedulingTerm]) -> Option<usize> {
    let heaviest = terms.iter().map(|t| t.weight).max()?;
    terms.iter().position(|t| t.weight == heaviest)
}

/// Whether the pod has any preferred node affinity term (which the scheduler may relax).
pub fn has_preferred_node_affinity(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|p| !p.is_empty())
}
