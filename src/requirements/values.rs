//! The value set behind a requirement: sorted, deduplicated, immutable and shared. Sets are
//! read far more often than built (every compatibility check searches them), so lookups are
//! binary searches over one contiguous slice, and set operations hand back an existing set
//! instead of allocating whenever the result equals one of their inputs.

use std::sync::Arc;

/// An immutable sorted set of label values; cloning shares the storage.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct ValueSet(Option<Arc<[Arc<str>]>>);

impl std::fmt::Debug for ValueSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl ValueSet {
    pub(crate) fn from_unsorted(mut values: Vec<Arc<str>>) -> Self {
        values.sort_unstable();
        values.dedup();
        Self::from_sorted(values)
    }

    fn from_sorted(values: Vec<Arc<str>>) -> Self {
        if values.is_empty() {
            ValueSet(None)
        } else {
            ValueSet(Some(values.into()))
        }
    }

    pub(crate) fn as_slice(&self) -> &[Arc<str>] {
        self.0.as_deref().unwrap_or(&[])
    }

    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.as_slice().iter().map(|v| &**v)
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn first(&self) -> Option<&str> {
        self.as_slice().first().map(|v| &**v)
    }

    pub(crate) fn contains(&self, value: &str) -> bool {
        // Short sets (zones, capacity types, an instance type's single value) are the common
        // case; equality rejects most candidates on length alone, where ordering must
        // compare bytes.
        const LINEAR_UP_TO: usize = 8;
        let values = self.as_slice();
        if values.len() <= LINEAR_UP_TO {
            values.iter().any(|v| **v == *value)
        } else {
            values
                .binary_search_by(|probe| (**probe).cmp(value))
                .is_ok()
        }
    }

    /// The values for which `keep` holds, sharing `self` when all of them do.
    pub(crate) fn filtered(&self, keep: impl Fn(&str) -> bool) -> ValueSet {
        let values = self.as_slice();
        let Some(first_dropped) = values.iter().position(|v| !keep(v)) else {
            return self.clone();
        };
        let mut kept = Vec::with_capacity(values.len() - 1);
        kept.extend_from_slice(&values[..first_dropped]);
        kept.extend(
            values[first_dropped + 1..]
                .iter()
                .filter(|v| keep(v))
                .cloned(),
        );
        ValueSet::from_sorted(kept)
    }

    /// Values in both sets that satisfy `keep`, sharing an input when it equals the result.
    pub(crate) fn intersection(&self, other: &ValueSet, keep: impl Fn(&str) -> bool) -> ValueSet {
        let (small, large) = if self.len() <= other.len() {
            (self, other)
        } else {
            (other, self)
        };
        let result = small.filtered(|v| large.contains(v) && keep(v));
        if result.len() == large.len() {
            large.clone()
        } else {
            result
        }
    }

    /// Values of `self` absent from `other` that satisfy `keep`.
    pub(crate) fn difference(&self, other: &ValueSet, keep: impl Fn(&str) -> bool) -> ValueSet {
        self.filtered(|v| !other.contains(v) && keep(v))
    }

    /// Values in either set that satisfy `keep`.
    pub(crate) fn union(&self, other: &ValueSet, keep: impl Fn(&str) -> bool) -> ValueSet {
        if other.iter().all(|v| self.contains(v)) {
            return self.filtered(keep);
        }
        if self.iter().all(|v| other.contains(v)) {
            return other.filtered(keep);
        }
        let mut merged: Vec<Arc<str>> = Vec::with_capacity(self.len() + other.len());
        let (mut a, mut b) = (
            self.as_slice().iter().peekable(),
            other.as_slice().iter().peekable(),
        );
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => match x.cmp(y) {
                    std::cmp::Ordering::Less => a.next(),
                    std::cmp::Ordering::Greater => b.next(),
                    std::cmp::Ordering::Equal => {
                        b.next();
                        a.next()
                    }
                },
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            if let Some(value) = next.filter(|v| keep(v)) {
                merged.push(value.clone());
            }
        }
        ValueSet::from_sorted(merged)
    }

    /// Whether both sets hold the same storage, i.e. an operation returned an input as is.
    #[cfg(test)]
    pub(crate) fn shares_storage_with(&self, other: &ValueSet) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&str]) -> ValueSet {
        ValueSet::from_unsorted(values.iter().map(|v| Arc::from(*v)).collect())
    }

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn construction_sorts_and_deduplicates() {
        let s = set(&["b", "a", "b"]);
        assert_eq!(s.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(set(&[]).is_empty());
        assert_eq!(set(&[]), ValueSet::default());
    }

    #[test]
    fn set_operations() {
        let ab = set(&["a", "b"]);
        let bc = set(&["b", "c"]);
        assert_eq!(ab.intersection(&bc, all), set(&["b"]));
        assert_eq!(ab.difference(&bc, all), set(&["a"]));
        assert_eq!(ab.union(&bc, all), set(&["a", "b", "c"]));
        assert_eq!(ab.union(&bc, |v| v != "b"), set(&["a", "c"]));
        assert!(ab.intersection(&set(&["z"]), all).is_empty());
    }

    #[test]
    fn unchanged_results_share_an_input() {
        let ab = set(&["a", "b"]);
        let abc = set(&["a", "b", "c"]);
        assert!(abc.intersection(&ab, all).shares_storage_with(&ab));
        assert!(ab.union(&abc, all).shares_storage_with(&abc));
        assert!(ab.difference(&set(&["z"]), all).shares_storage_with(&ab));
    }
}
