//! `Requirements`: the requirements of a pod, NodePool, NodeClaim or instance type, one per
//! key, kept in a vector ordered by key hash (see `key.rs`). The scheduler asks "are these
//! compatible?" millions of times per solve, so the checks walk both ordered vectors (or
//! binary-search the larger one when sizes differ a lot), compare integers rather than key
//! strings, and allocate nothing unless they have to describe a failure. Everything shown to
//! people (rendering, node selector requirements) is in alphabetical key order.

use std::collections::BTreeMap;
use std::fmt;

use super::NodeSelectorRequirementWithMinValues;
use super::incompatible::{Incompatible, KeyConflict};
use super::key::hash_name;
use super::operator::Operator;
use super::requirement::Requirement;
use crate::labels;

/// Labels the scheduler adds to NodeClaim requirements only to simulate daemonset
/// scheduling; they never become labels of their own.
const SCHEDULING_SIMULATION_KEYS: &[&str] = &[labels::REGISTERED, labels::INITIALIZED];

/// Which keys may be absent on the receiver of [`Requirements::compatible`] while the
/// incoming side requires them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowUndefined {
    /// Every required key must be defined (upstream's default).
    Nothing,
    /// Well-known labels may be undefined (upstream's `AllowUndefinedWellKnownLabels`):
    /// their values come from instance types and offerings, not from the NodePool.
    WellKnownLabels,
}

impl AllowUndefined {
    fn allows(self, key: &str) -> bool {
        match self {
            AllowUndefined::Nothing => false,
            AllowUndefined::WellKnownLabels => labels::is_well_known_label(key),
        }
    }

    fn candidates(self) -> &'static [&'static str] {
        match self {
            AllowUndefined::Nothing => &[],
            AllowUndefined::WellKnownLabels => labels::WELL_KNOWN_LABELS,
        }
    }
}

/// A set of requirements, at most one per (normalised) key.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    /// Ordered by key (hash first), keys unique.
    entries: Vec<Requirement>,
}

impl Requirements {
    pub fn new() -> Self {
        Requirements::default()
    }

    /// Adds a requirement, intersecting it with the one already present for its key.
    pub fn add(&mut self, requirement: Requirement) {
        match self
            .entries
            .binary_search_by(|r| r.key_ref().cmp(requirement.key_ref()))
        {
            Ok(i) => self.entries[i] = requirement.intersection(&self.entries[i]),
            Err(i) => self.entries.insert(i, requirement),
        }
    }

    /// Adds every requirement of `other` (see [`Requirements::add`]).
    pub fn add_all(&mut self, other: &Requirements) {
        if self.entries.is_empty() {
            self.entries = other.entries.clone();
            return;
        }
        for requirement in &other.entries {
            self.add(requirement.clone());
        }
    }

    /// Removes and returns the requirement on `key`.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.position(key).ok().map(|i| self.entries.remove(i))
    }

    /// The requirement on `key`, if defined; an undefined key allows any value.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.position(key).ok().map(|i| &self.entries[i])
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Keys, in a fixed order that is not alphabetical (see [`Requirements::sorted`]).
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.entries.iter().map(Requirement::key)
    }

    /// Requirements, in a fixed order that is not alphabetical.
    pub fn iter(&self) -> std::slice::Iter<'_, Requirement> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether any requirement carries `minValues`.
    pub fn has_min_values(&self) -> bool {
        self.entries.iter().any(|r| r.min_values().is_some())
    }

    /// Requirements in alphabetical key order, for output people read.
    pub fn sorted(&self) -> Vec<&Requirement> {
        let mut sorted: Vec<&Requirement> = self.entries.iter().collect();
        sorted.sort_unstable_by(|a, b| a.key().cmp(b.key()));
        sorted
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        let hash = hash_name(key);
        self.entries
            .binary_search_by(|r| r.key_ref().cmp_name(hash, key))
    }

    fn find(&self, requirement: &Requirement) -> Option<&Requirement> {
        let i = self
            .entries
            .binary_search_by(|r| r.key_ref().cmp(requirement.key_ref()))
            .ok()?;
        Some(&self.entries[i])
    }

    /// Whether `incoming` can loosely be met by `self`: every key `incoming` requires is
    /// defined here (unless `allow` lets it be undefined, or it only excludes values) and
    /// every key both define has a value in common. Allocation-free; see
    /// [`Requirements::compatible`] for the reason when it is not.
    pub fn is_compatible(&self, incoming: &Requirements, allow: AllowUndefined) -> bool {
        self.visit_incoming(incoming, |existing, incoming| match existing {
            Some(existing) => keys_intersect(existing, incoming),
            None => allow.allows(incoming.key()) || allows_absence(incoming),
        })
    }

    /// [`Requirements::is_compatible`] with the reason: the alphabetically first undefined
    /// key, else every conflicting key.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        allow: AllowUndefined,
    ) -> Result<(), Incompatible> {
        if self.is_compatible(incoming, allow) {
            return Ok(());
        }
        let undefined = incoming
            .entries
            .iter()
            .find(|r| !self.contains_key(r.key()) && !allow.allows(r.key()) && !allows_absence(r));
        if let Some(requirement) = undefined {
            return Err(Incompatible::UndefinedLabel {
                key: requirement.key().to_owned(),
                typo_of: self.typo_hint(requirement.key(), allow),
            });
        }
        self.intersects(incoming)
    }

    /// Whether every key both sides define has a value in common; keys only one side
    /// defines are ignored. Two requirements that both tolerate the label's absence (NotIn,
    /// DoesNotExist) never conflict.
    pub fn has_intersection(&self, incoming: &Requirements) -> bool {
        self.visit_incoming(incoming, |existing, incoming| {
            existing.is_none_or(|existing| keys_intersect(existing, incoming))
        })
    }

    /// [`Requirements::has_intersection`] naming every conflicting key and both sides'
    /// requirements on it.
    pub fn intersects(&self, incoming: &Requirements) -> Result<(), Incompatible> {
        if self.has_intersection(incoming) {
            return Ok(());
        }
        let mut conflicts = Vec::new();
        self.visit_incoming(incoming, |existing, incoming| {
            if let Some(existing) = existing.filter(|e| !keys_intersect(e, incoming)) {
                conflicts.push(KeyConflict {
                    key: incoming.key().to_owned(),
                    incoming: incoming.clone(),
                    existing: existing.clone(),
                });
            }
            true
        });
        conflicts.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Err(Incompatible::Conflicts(conflicts))
    }

    /// Calls `visit` with each incoming requirement and the receiver's requirement on the
    /// same key, in stored order, until it returns false; returns whether it never did.
    fn visit_incoming(
        &self,
        incoming: &Requirements,
        mut visit: impl FnMut(Option<&Requirement>, &Requirement) -> bool,
    ) -> bool {
        // A merge walk costs len(self)+len(incoming) comparisons, binary searches
        // len(incoming)*log2(len(self)); pods bring few keys, instance types many.
        if incoming.len() * 8 < self.len() {
            return incoming.entries.iter().all(|r| visit(self.find(r), r));
        }
        let mut existing = self.entries.iter().peekable();
        incoming.entries.iter().all(|r| {
            while existing.next_if(|e| e.key_ref() < r.key_ref()).is_some() {}
            visit(existing.next_if(|e| e.key_ref() == r.key_ref()), r)
        })
    }

    fn typo_hint(&self, key: &str, allow: AllowUndefined) -> Option<String> {
        let suffix = key.split_once('/').map_or(key, |(_, name)| name);
        let resembles =
            |label: &str| label.contains(key) || (!suffix.is_empty() && label.ends_with(suffix));
        allow
            .candidates()
            .iter()
            .copied()
            .chain(self.keys())
            .find(|label| resembles(label))
            .map(str::to_owned)
    }

    /// Node selector requirements equivalent to these, in alphabetical key order (a key
    /// with two bounds, or bounds and exclusions, yields several).
    pub fn node_selector_requirements(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        self.sorted()
            .into_iter()
            .flat_map(Requirement::to_node_selector_requirements)
            .collect()
    }

    /// Labels a new node gets for its custom requirements, as upstream's NodeClaim template
    /// resolves them: a value from [`Requirement::any`] for every key that is not well known,
    /// restricted or a scheduling-simulation key. Well-known labels come from the instance
    /// type and offering instead (see [`Requirements::single_value_labels`]).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.entries
            .iter()
            .filter(|r| {
                let key = r.key();
                !labels::is_well_known_label(key)
                    && !labels::is_restricted_label(key)
                    && !SCHEDULING_SIMULATION_KEYS.contains(&key)
            })
            .filter_map(|r| Some((r.key().to_owned(), r.any()?)))
            .collect()
    }

    /// Every key restricted to exactly one value, with that value: the labels an instance
    /// type's or offering's requirements pin on the node launched from it.
    pub fn single_value_labels(&self) -> BTreeMap<String, String> {
        self.entries
            .iter()
            .filter(|r| r.len() == 1)
            .filter_map(|r| Some((r.key().to_owned(), r.values().next()?.to_owned())))
            .collect()
    }
}

/// Whether two requirements on one key fit together: they share a value, or both tolerate
/// the label being absent.
fn keys_intersect(existing: &Requirement, incoming: &Requirement) -> bool {
    existing.has_intersection(incoming) || (allows_absence(existing) && allows_absence(incoming))
}

/// NotIn and DoesNotExist are satisfied by a node without the label.
fn allows_absence(requirement: &Requirement) -> bool {
    matches!(
        requirement.operator(),
        Operator::NotIn | Operator::DoesNotExist
    )
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<T: IntoIterator<Item = Requirement>>(iter: T) -> Self {
        let mut requirements = Requirements::new();
        requirements.extend(iter);
        requirements
    }
}

impl Extend<Requirement> for Requirements {
    fn extend<T: IntoIterator<Item = Requirement>>(&mut self, iter: T) {
        for requirement in iter {
            self.add(requirement);
        }
    }
}

impl<'a> IntoIterator for &'a Requirements {
    type Item = &'a Requirement;
    type IntoIter = std::slice::Iter<'a, Requirement>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

/// Upstream's rendering: requirements in alphabetical key order joined by `, `, leaving out restricted
/// labels (the hostname), which would only be noise in scheduling messages.
impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sorted = self.sorted();
        let shown = sorted
            .into_iter()
            .filter(|r| !labels::is_restricted_label(r.key()));
        for (i, requirement) in shown.enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Requirements({self})")
    }
}
