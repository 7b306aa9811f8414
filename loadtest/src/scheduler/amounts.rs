//! Resource amounts in the form the filter loop compares fastest: the four core resources
//! as milli-unit integers in fixed slots, extended resources in a short list. Built once per
//! pod and node from the core crate's exact [`Resources`]; a cycle then checks thousands of
//! pod × node pairs with integer comparisons only.

use kerf::labels::{RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_MEMORY, RESOURCE_PODS};
use kerf::resources::Resources;

const CORE: [&str; 4] = [
    RESOURCE_CPU,
    RESOURCE_MEMORY,
    RESOURCE_PODS,
    RESOURCE_EPHEMERAL_STORAGE,
];
const CPU: usize = 0;
const MEMORY: usize = 1;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Amounts {
    core: [i64; 4],
    extended: Vec<(String, i64)>,
}

impl Amounts {
    pub(crate) fn of(resources: &Resources) -> Amounts {
        let mut amounts = Amounts::default();
        for (name, quantity) in resources.iter() {
            let milli = quantity.milli_value();
            match CORE.iter().position(|c| *c == name) {
                Some(slot) => amounts.core[slot] = milli,
                None => amounts.extended.push((name.to_owned(), milli)),
            }
        }
        amounts
    }

    pub(crate) fn add(&mut self, other: &Amounts) {
        for (mine, theirs) in self.core.iter_mut().zip(other.core) {
            *mine = mine.saturating_add(theirs);
        }
        for (name, amount) in &other.extended {
            match self.extended.iter_mut().find(|(n, _)| n == name) {
                Some((_, mine)) => *mine = mine.saturating_add(*amount),
                None => self.extended.push((name.clone(), *amount)),
            }
        }
    }

    fn get(&self, name: &str) -> i64 {
        self.extended
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, a)| *a)
    }

    /// The resources of `self` (a request) that `allocatable` less `used` cannot hold.
    pub(crate) fn shortfalls<'a>(&'a self, allocatable: &Amounts, used: &Amounts) -> Vec<&'a str> {
        let mut short = Vec::new();
        for (slot, name) in CORE.iter().enumerate() {
            let wanted = self.core[slot];
            if wanted > 0 && wanted > allocatable.core[slot].saturating_sub(used.core[slot]) {
                short.push(*name);
            }
        }
        for (name, wanted) in &self.extended {
            if *wanted > 0 && *wanted > allocatable.get(name).saturating_sub(used.get(name)) {
                short.push(name.as_str());
            }
        }
        short
    }

    pub(crate) fn cpu(&self) -> i64 {
        self.core[CPU]
    }

    pub(crate) fn memory(&self) -> i64 {
        self.core[MEMORY]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::resources::Quantity;

    fn amounts(pairs: &[(&str, &str)]) -> Amounts {
        let resources: Resources = pairs
            .iter()
            .map(|(n, q)| (*n, Quantity::parse(q).expect("quantity")))
            .collect();
        Amounts::of(&resources)
    }

    #[test]
    fn shortfalls_name_every_resource_that_does_not_fit() {
        let allocatable = amounts(&[
            ("cpu", "2"),
            ("memory", "4Gi"),
            ("pods", "110"),
            ("nvidia.com/gpu", "1"),
        ]);
        let used = amounts(&[("cpu", "1500m"), ("memory", "1Gi"), ("pods", "3")]);
        assert!(
            amounts(&[("cpu", "500m"), ("memory", "3Gi")])
                .shortfalls(&allocatable, &used)
                .is_empty()
        );
        let request = amounts(&[
            ("cpu", "600m"),
            ("memory", "1Gi"),
            ("nvidia.com/gpu", "2"),
            ("example.com/x", "1"),
        ]);
        assert_eq!(
            request.shortfalls(&allocatable, &used),
            ["cpu", "example.com/x", "nvidia.com/gpu"]
        );
    }

    #[test]
    fn adding_accumulates_core_and_extended() {
        let mut total = amounts(&[("cpu", "1"), ("nvidia.com/gpu", "1")]);
        total.add(&amounts(&[
            ("cpu", "250m"),
            ("nvidia.com/gpu", "1"),
            ("memory", "1Mi"),
        ]));
        assert_eq!(
            total,
            amounts(&[("cpu", "1250m"), ("nvidia.com/gpu", "2"), ("memory", "1Mi")])
        );
    }
}
