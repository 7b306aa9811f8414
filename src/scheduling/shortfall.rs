//! What exactly is short when no instance type can take a pod, for the person reading the
//! "no instance type satisfied resources" error. Upstream only says that no type had enough
//! resources; users then guess between a typo in a request, a NodePool limit and a missing
//! device plugin. This names the three cases kerf can tell apart: a resource no usable
//! instance type offers at all (an extended resource such as `vpc.amazonaws.com/pod-eni`),
//! types that would fit but are excluded by the NodePool's remaining limits, and the largest
//! allowed type's allocatable set against the request. Computed only on the error path.

use super::intern::Bits;
use super::pool::Pool;
use super::req::{ReqSet, Vocab};
use super::resvec::{ResNames, format_milli};

impl Pool {
    /// The shortfall of `total` (the NodeClaim's requests plus the pod's) against the types in
    /// `current` that meet `reqs`, or `None` when resources are not what failed.
    pub fn shortfall(
        &mut self,
        current: &Bits,
        reqs: &ReqSet,
        total: &[i64],
        names: &ResNames,
        vocab: &Vocab,
    ) -> Option<String> {
        let compatible =
            |pool: &Pool, i: usize| pool.its[i].reqs.intersects(reqs, &vocab.interner).is_ok();
        let allowed: Vec<usize> = current.iter().filter(|i| compatible(self, *i)).collect();
        if allowed.iter().any(|i| fits(total, self.effective_row(*i))) {
            return None;
        }
        let mut parts = Vec::new();
        let usable: Vec<usize> = self.base.iter().filter(|i| compatible(self, *i)).collect();
        let missing: Vec<String> = (0..total.len())
            .filter(|r| total[*r] > 0 && usable.iter().all(|i| self.effective_row(*i)[*r] <= 0))
            .map(|r| names.name(r).to_owned())
            .collect();
        if !missing.is_empty() {
            parts.push(format!("no instance type offers {}", missing.join(", ")));
        }
        let within = self.within_limits();
        let over_limits = usable
            .iter()
            .filter(|i| !within.has(**i) && fits(total, self.effective_row(**i)))
            .count();
        if over_limits > 0 {
            parts.push(format!(
                "{over_limits} instance type(s) that would fit exceed the nodepool's remaining limits ({})",
                self.render_remaining(names)
            ));
        }
        if missing.is_empty()
            && let Some(largest) = self.largest(&allowed, total)
        {
            parts.push(format!(
                "the largest allowed, {}, has {} allocatable after daemonset overhead",
                self.its[largest].name,
                names.render(&masked(self.effective_row(largest), total))
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The type with the most room on the first requested resource no allowed type has enough
    /// of: the one a user would expect to fit.
    fn largest(&self, allowed: &[usize], total: &[i64]) -> Option<usize> {
        let short = (0..total.len()).find(|r| {
            total[*r] > 0
                && allowed
                    .iter()
                    .all(|i| self.effective_row(*i)[*r] < total[*r])
        })?;
        allowed
            .iter()
            .copied()
            .max_by_key(|i| self.effective_row(*i)[short])
    }

    /// `cpu=2, nodes=3`: what is left of each limited resource.
    fn render_remaining(&self, names: &ResNames) -> String {
        let mut parts: Vec<String> = self
            .remaining
            .iter()
            .enumerate()
            .filter_map(|(r, left)| {
                let name = names.name(r);
                left.map(|left| format!("{name}={}", format_milli(name, left.max(0))))
            })
            .collect();
        if let Some(nodes) = self.remaining_nodes {
            parts.push(format!("nodes={}", nodes.max(0)));
        }
        parts.join(", ")
    }
}

fn fits(total: &[i64], row: &[i64]) -> bool {
    super::resvec::fits(total, row)
}

/// `row` keeping only the resources `total` requests.
fn masked(row: &[i64], total: &[i64]) -> Vec<i64> {
    row.iter()
        .zip(total)
        .map(|(have, want)| if *want > 0 { *have } else { 0 })
        .collect()
}
