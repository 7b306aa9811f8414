//! The value set behind a requirement: sorted, deduplicated, immutable and shared. All values
//! of a set live in one string with an index of where each ends, so building a set of
//! hundreds of instance-type names costs two allocations, lookups are binary searches over
//! contiguous memory, and cloning is one reference-count increment. Set operations hand back
//! an existing set instead of allocating whenever the result equals one of their inputs.

use std::sync::Arc;

/// Values packed end to end; value `i` spans `ends[i - 1]..ends[i]` (from 0 for the first).
#[derive(PartialEq, Eq, Hash)]
struct Packed {
    text: Box<str>,
    ends: Box<[u32]>,
}

/// An immutable sorted set of label values; cloning shares the storage.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct ValueSet(Option<Arc<Packed>>);

impl std::fmt::Debug for ValueSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Borrowed access to a set's packed values.
#[derive(Clone, Copy)]
struct View<'a> {
    text: &'a str,
    ends: &'a [u32],
}

impl<'a> View<'a> {
    #[inline]
    fn span(self, i: usize) -> (usize, usize) {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        (start, self.ends[i] as usize)
    }

    #[inline]
    fn bytes(self, i: usize) -> &'a [u8] {
        let (start, end) = self.span(i);
        &self.text.as_bytes()[start..end]
    }
}

/// The values of a set in order.
pub(crate) struct Iter<'a> {
    text: &'a str,
    ends: std::slice::Iter<'a, u32>,
    start: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let end = *self.ends.next()? as usize;
        let value = &self.text[self.start..end];
        self.start = end;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// Accumulates sorted, distinct values into a [`ValueSet`].
struct Builder {
    text: String,
    ends: Vec<u32>,
}

impl Builder {
    fn with_capacity(values: usize, bytes: usize) -> Builder {
        Builder {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(values),
        }
    }

    fn push(&mut self, value: &str) {
        self.text.push_str(value);
        let end =
            u32::try_from(self.text.len()).expect("a label value set holds under 4 GiB of text");
        self.ends.push(end);
    }

    fn build(self) -> ValueSet {
        if self.ends.is_empty() {
            return ValueSet(None);
        }
        ValueSet(Some(Arc::new(Packed {
            text: self.text.into_boxed_str(),
            ends: self.ends.into_boxed_slice(),
        })))
    }
}

impl ValueSet {
    pub(crate) fn from_strs<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut values: Vec<&str> = values.into_iter().collect();
        values.sort_unstable();
        values.dedup();
        let bytes = values.iter().map(|v| v.len()).sum();
        let mut builder = Builder::with_capacity(values.len(), bytes);
        values.iter().for_each(|v| builder.push(v));
        builder.build()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |p| p.ends.len())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    #[inline]
    fn view(&self) -> View<'_> {
        match &self.0 {
            Some(packed) => View {
                text: &packed.text,
                ends: &packed.ends,
            },
            None => View {
                text: "",
                ends: &[],
            },
        }
    }

    pub(crate) fn iter(&self) -> Iter<'_> {
        let view = self.view();
        Iter {
            text: view.text,
            ends: view.ends.iter(),
            start: 0,
        }
    }

    pub(crate) fn first(&self) -> Option<&str> {
        self.iter().next()
    }

    pub(crate) fn contains(&self, value: &str) -> bool {
        // Short sets (zones, capacity types, an instance type's single value) are the common
        // case; equality rejects most candidates on length alone, where ordering must
        // compare bytes.
        const LINEAR_UP_TO: usize = 8;
        let view = self.view();
        let value = value.as_bytes();
        let len = view.ends.len();
        if len <= LINEAR_UP_TO {
            let text = view.text.as_bytes();
            let mut start = 0;
            return view.ends.iter().any(|&end| {
                let candidate = &text[start..end as usize];
                start = end as usize;
                candidate == value
            });
        }
        let (mut low, mut high) = (0, len);
        while low < high {
            let mid = low + (high - low) / 2;
            match view.bytes(mid).cmp(value) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    /// The values for which `keep` holds, sharing `self` when all of them do.
    pub(crate) fn filtered(&self, keep: impl Fn(&str) -> bool) -> ValueSet {
        let Some(first_dropped) = self.iter().position(|v| !keep(v)) else {
            return self.clone();
        };
        let packed = self
            .0
            .as_ref()
            .expect("a value was dropped, so the set is not empty");
        let mut builder = Builder::with_capacity(self.len() - 1, packed.text.len());
        self.iter()
            .take(first_dropped)
            .for_each(|v| builder.push(v));
        self.iter()
            .skip(first_dropped + 1)
            .filter(|v| keep(v))
            .for_each(|v| builder.push(v));
        builder.build()
    }

    /// Values in both sets that satisfy `keep`, sharing an input when it equals the result.
    pub(crate) fn intersection(&self, other: &ValueSet, keep: impl Fn(&str) -> bool) -> ValueSet {
        let (small, large) = if self.len() <= other.len() {
            (self, other)
        } else {
            (other, self)
        };
        // Searching costs log2(large) per value of `small`; walking both costs one step per
        // value of either, which wins when the sizes are close.
        let result = if large.len() <= 8 * small.len() {
            small.filtered_in_order(large, &keep)
        } else {
            small.filtered(|v| large.contains(v) && keep(v))
        };
        if result.len() == large.len() {
            large.clone()
        } else {
            result
        }
    }

    /// `self.filtered(|v| other.contains(v) && keep(v))` by a merge walk of both sets.
    fn filtered_in_order(&self, other: &ValueSet, keep: &impl Fn(&str) -> bool) -> ValueSet {
        let mut others = other.iter().peekable();
        let mut in_other = |v: &str| {
            while others.next_if(|o| *o < v).is_some() {}
            others.peek().is_some_and(|o| *o == v)
        };
        let flags: Vec<bool> = self.iter().map(|v| in_other(v) && keep(v)).collect();
        if flags.iter().all(|kept| *kept) {
            return self.clone();
        }
        let mut builder = Builder::with_capacity(flags.len(), self.view().text.len());
        self.iter()
            .zip(&flags)
            .filter(|(_, kept)| **kept)
            .for_each(|(v, _)| builder.push(v));
        builder.build()
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
        let mut builder = Builder::with_capacity(self.len() + other.len(), 0);
        let (mut a, mut b) = (self.iter().peekable(), other.iter().peekable());
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
                builder.push(value);
            }
        }
        builder.build()
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
        ValueSet::from_strs(values.iter().copied())
    }

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn construction_sorts_and_deduplicates() {
        let s = set(&["b", "a", "b", ""]);
        assert_eq!(s.iter().collect::<Vec<_>>(), ["", "a", "b"]);
        assert_eq!(s.first(), Some(""));
        assert!(set(&[]).is_empty());
        assert_eq!(set(&[]), ValueSet::default());
        assert_eq!(set(&["x", "y"]), set(&["y", "x", "x"]));
    }

    #[test]
    fn lookups_in_short_and_long_sets() {
        let long: Vec<String> = (0..100).map(|i| format!("v{i:03}")).collect();
        let s = ValueSet::from_strs(long.iter().map(String::as_str));
        assert!(long.iter().all(|v| s.contains(v)));
        assert!(!s.contains("v100") && !s.contains("") && !s.contains("v0"));
        let short = set(&["a", "bb"]);
        assert!(short.contains("bb") && !short.contains("b"));
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
        assert_eq!(set(&["a", "b", "c"]).filtered(|v| v != "a"), bc);
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
