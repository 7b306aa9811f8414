//! `Resources`: a Kubernetes resource list (name → quantity) tuned for the handful of entries
//! real lists hold. The four core resources live in fixed slots (no hashing, no allocation);
//! extended resources (`nvidia.com/gpu`, …) live in a small vector kept sorted by name. The
//! operations follow Karpenter's `utils/resources` helpers (`Merge`, `Subtract`, `Fits`,
//! `MaxResources`) so that scheduling decisions match upstream.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::quantity::Quantity;
use crate::labels::{RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_MEMORY, RESOURCE_PODS};
use std::fmt;

/// The core resource names in lexicographic order; their slot is their index.
const CORE: [&str; 4] = [
    RESOURCE_CPU,
    RESOURCE_EPHEMERAL_STORAGE,
    RESOURCE_MEMORY,
    RESOURCE_PODS,
];

fn core_slot(name: &str) -> Option<usize> {
    CORE.iter().position(|core| *core == name)
}

/// A resource list. Absent and zero are distinct (an absent name is not printed), but every
/// comparison treats an absent name as zero, as Kubernetes does.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    core: [Option<Quantity>; 4],
    /// Sorted by name; never holds a core name.
    extended: Vec<(String, Quantity)>,
}

impl Resources {
    /// The list as the API writes it (`status.capacity`, `spec.resources.requests`: the
    /// API's `ResourceList`), zero entries left out as upstream leaves them out.
    pub fn to_api(&self) -> BTreeMap<String, ApiQuantity> {
        self.iter()
            .filter(|(_, q)| *q != Quantity::ZERO)
            .map(|(name, q)| (name.to_owned(), ApiQuantity(q.to_string())))
            .collect()
    }

    pub fn new() -> Resources {
        Resources::default()
    }

    /// The quantity for `name`, if present.
    pub fn get(&self, name: &str) -> Option<Quantity> {
        match core_slot(name) {
            Some(slot) => self.core[slot],
            None => self
                .extended_position(name)
                .ok()
                .map(|i| self.extended[i].1),
        }
    }

    /// The quantity for `name`, zero when absent.
    pub fn get_or_zero(&self, name: &str) -> Quantity {
        self.get(name).unwrap_or(Quantity::ZERO)
    }

    /// CPU, zero when absent.
    pub fn cpu(&self) -> Quantity {
        self.core[0].unwrap_or(Quantity::ZERO)
    }

    /// Ephemeral storage, zero when absent.
    pub fn ephemeral_storage(&self) -> Quantity {
        self.core[1].unwrap_or(Quantity::ZERO)
    }

    /// Memory, zero when absent.
    pub fn memory(&self) -> Quantity {
        self.core[2].unwrap_or(Quantity::ZERO)
    }

    /// Pods, zero when absent.
    pub fn pods(&self) -> Quantity {
        self.core[3].unwrap_or(Quantity::ZERO)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name` to `quantity`, returning the previous quantity.
    pub fn insert(&mut self, name: &str, quantity: Quantity) -> Option<Quantity> {
        if let Some(slot) = core_slot(name) {
            return self.core[slot].replace(quantity);
        }
        match self.extended_position(name) {
            Ok(i) => Some(std::mem::replace(&mut self.extended[i].1, quantity)),
            Err(i) => {
                self.extended.insert(i, (name.to_owned(), quantity));
                None
            }
        }
    }

    /// Builder form of [`Resources::insert`].
    pub fn with(mut self, name: &str, quantity: Quantity) -> Resources {
        self.insert(name, quantity);
        self
    }

    pub fn remove(&mut self, name: &str) -> Option<Quantity> {
        if let Some(slot) = core_slot(name) {
            return self.core[slot].take();
        }
        let i = self.extended_position(name).ok()?;
        Some(self.extended.remove(i).1)
    }

    pub fn len(&self) -> usize {
        self.core.iter().flatten().count() + self.extended.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when every quantity is zero (or the list is empty).
    pub fn is_zero(&self) -> bool {
        self.iter().all(|(_, quantity)| quantity.is_zero())
    }

    /// Entries in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Quantity)> + '_ {
        let core = CORE
            .iter()
            .zip(self.core.iter())
            .filter_map(|(name, q)| q.map(|q| (*name, q)));
        MergeByName {
            left: core.peekable(),
            right: self
                .extended
                .iter()
                .map(|(n, q)| (n.as_str(), *q))
                .peekable(),
        }
    }

    /// Adds every entry of `other` into `self` (Karpenter `MergeInto`).
    pub fn add_assign(&mut self, other: &Resources) {
        for (name, quantity) in other.iter() {
            let sum = self.get_or_zero(name).saturating_add(quantity);
            self.insert(name, sum);
        }
    }

    /// The entry-wise sum of both lists (Karpenter `Merge`).
    pub fn merged(&self, other: &Resources) -> Resources {
        let mut sum = self.clone();
        sum.add_assign(other);
        sum
    }

    /// Subtracts every entry of `other` from `self`, adding names `self` lacks as negatives
    /// (Karpenter `SubtractFrom`).
    pub fn sub_assign(&mut self, other: &Resources) {
        for (name, quantity) in other.iter() {
            let difference = self.get_or_zero(name).saturating_sub(quantity);
            self.insert(name, difference);
        }
    }

    /// `self - other` over the names of `self` only; names only in `other` are ignored
    /// (Karpenter `Subtract`, used for allocatable = capacity - overhead). May go negative.
    pub fn subtract(&self, other: &Resources) -> Resources {
        let mut difference = self.clone();
        for slot in 0..CORE.len() {
            if let (Some(mine), Some(theirs)) = (difference.core[slot], other.core[slot]) {
                difference.core[slot] = Some(mine.saturating_sub(theirs));
            }
        }
        for (name, quantity) in &mut difference.extended {
            if let Some(theirs) = other.get(name) {
                *quantity = quantity.saturating_sub(theirs);
            }
        }
        difference
    }

    /// The entry-wise maximum over the union of names (Karpenter `MaxResources`).
    pub fn max(&self, other: &Resources) -> Resources {
        let mut result = self.clone();
        for (name, quantity) in other.iter() {
            if result.get(name).is_none_or(|mine| quantity > mine) {
                result.insert(name, quantity);
            }
        }
        result
    }

    /// The entry-wise minimum over the union of names, a name one list lacks counting as
    /// zero: what both lists offer at least.
    pub fn min(&self, other: &Resources) -> Resources {
        let mut result = Resources::new();
        for (name, _) in self.iter().chain(other.iter()) {
            result.insert(name, self.get_or_zero(name).min(other.get_or_zero(name)));
        }
        result
    }

    /// True when `self` (a request) fits in `total` (Karpenter `Fits`): no entry of `total`
    /// is negative and every requested quantity is at most what `total` has (absent = 0).
    pub fn fits(&self, total: &Resources) -> bool {
        self.first_unfit(total).is_none()
    }

    /// The first resource (in name order) that prevents `self` from fitting in `total`, for
    /// explaining a failed fit; a negative entry of `total` is reported by its own name.
    pub fn first_unfit<'a>(&'a self, total: &'a Resources) -> Option<&'a str> {
        if let Some((name, _)) = total.iter().find(|(_, quantity)| quantity.signum() < 0) {
            return Some(name);
        }
        self.iter()
            .find(|(name, quantity)| *quantity > total.get_or_zero(name))
            .map(|(name, _)| name)
    }

    fn extended_position(&self, name: &str) -> Result<usize, usize> {
        self.extended
            .binary_search_by(|(existing, _)| existing.as_str().cmp(name))
    }
}

/// Merges two name-sorted entry iterators into one name-sorted iterator.
struct MergeByName<L: Iterator, R: Iterator> {
    left: std::iter::Peekable<L>,
    right: std::iter::Peekable<R>,
}

impl<'a, L, R> Iterator for MergeByName<L, R>
where
    L: Iterator<Item = (&'a str, Quantity)>,
    R: Iterator<Item = (&'a str, Quantity)>,
{
    type Item = (&'a str, Quantity);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.left.peek(), self.right.peek()) {
            (Some(l), Some(r)) if r.0 < l.0 => self.right.next(),
            (Some(_), _) => self.left.next(),
            (None, _) => self.right.next(),
        }
    }
}

impl<S: AsRef<str>> FromIterator<(S, Quantity)> for Resources {
    fn from_iter<I: IntoIterator<Item = (S, Quantity)>>(entries: I) -> Resources {
        let mut resources = Resources::new();
        resources.extend(entries);
        resources
    }
}

impl<S: AsRef<str>> Extend<(S, Quantity)> for Resources {
    fn extend<I: IntoIterator<Item = (S, Quantity)>>(&mut self, entries: I) {
        for (name, quantity) in entries {
            self.insert(name.as_ref(), quantity);
        }
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(name, q)| (name, q.to_string())))
            .finish()
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (name, quantity)) in self.iter().enumerate() {
            let separator = if i == 0 { "" } else { ", " };
            write!(f, "{separator}{name}: {quantity}")?;
        }
        f.write_str("}")
    }
}
