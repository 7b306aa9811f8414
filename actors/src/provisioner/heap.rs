//! Where a round's heap goes, step by step, so a profile of the controller's memory can say
//! which step of which round raised its peak. Figures come from the accounting allocator
//! (`kerf_heap`) for the owner the Provisioner's thread allocates as — the controller's in
//! `kerf simulate` — and are absent where no thread is tagged (`kerf controller`): reading
//! them is two relaxed loads, and nothing is kept between rounds. They are the owner's whole
//! heap, every actor's, so the difference between two steps also holds what other actors
//! allocated meanwhile; the step that raised the peak is exact.

use kerf_heap::Usage;

/// The steps of a round, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Cluster state gathered into the plan's inventory (pods, Nodes and NodeClaims shared).
    Inventory,
    /// The scheduler's input built from it (instance types, existing nodes, pods).
    Snapshot,
    /// The input interned for the solve ([`kerf::scheduling::Batch::prepare`]).
    Prepared,
    /// Every part solved and assembled.
    Solved,
    /// Every planned NodeClaim created.
    Created,
}

/// The owner's heap at the start of a round and after each step.
#[derive(Debug, Clone, Default)]
pub struct RoundHeap {
    start: Option<Usage>,
    steps: Vec<(Step, Usage)>,
}

impl RoundHeap {
    /// Marks the start of a round (nothing is recorded where no owner is counted).
    pub fn start() -> Self {
        Self::from(now())
    }

    fn from(start: Option<Usage>) -> Self {
        Self {
            start,
            steps: Vec::new(),
        }
    }

    /// Records the heap after `step`.
    pub fn mark(&mut self, step: Step) {
        self.record(step, now());
    }

    fn record(&mut self, step: Step, usage: Option<Usage>) {
        if let Some(usage) = usage {
            self.steps.push((step, usage));
        }
    }

    /// The first step after which the owner's peak was higher than at the round's start:
    /// the step that raised the run's peak, if this round raised it.
    pub fn raised_peak(&self) -> Option<Step> {
        let start = self.start?;
        self.steps
            .iter()
            .find(|(_, usage)| usage.peak_bytes > start.peak_bytes)
            .map(|(step, _)| *step)
    }

    /// `step:live` pairs in MiB, for the round's log line (empty where nothing is counted).
    pub fn live_mib(&self) -> String {
        let start = self.start.iter().map(|u| ("start".to_owned(), u));
        let steps = self.steps.iter().map(|(s, u)| (format!("{s:?}"), u));
        start
            .chain(steps)
            .map(|(step, usage)| format!("{step}:{}", mib(usage.live_bytes)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The owner's peak after the last step, in MiB.
    pub fn peak_mib(&self) -> Option<u64> {
        self.steps.last().map(|(_, usage)| mib(usage.peak_bytes))
    }
}

fn now() -> Option<Usage> {
    kerf_heap::current().map(kerf_heap::usage)
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(live_mib: u64, peak_mib: u64) -> Option<Usage> {
        Some(Usage {
            live_bytes: live_mib << 20,
            peak_bytes: peak_mib << 20,
        })
    }

    #[test]
    fn the_step_that_raised_the_peak_is_named() {
        let mut heap = RoundHeap::from(usage(10, 50));
        heap.record(Step::Inventory, usage(20, 50));
        heap.record(Step::Snapshot, usage(30, 60));
        heap.record(Step::Prepared, usage(70, 80));
        assert_eq!(heap.raised_peak(), Some(Step::Snapshot));
        assert_eq!(
            heap.live_mib(),
            "start:10 Inventory:20 Snapshot:30 Prepared:70"
        );
        assert_eq!(heap.peak_mib(), Some(80));
    }

    #[test]
    fn a_round_below_the_peak_raised_nothing_and_untagged_threads_record_nothing() {
        let mut heap = RoundHeap::from(usage(10, 50));
        heap.record(Step::Solved, usage(40, 50));
        assert_eq!(heap.raised_peak(), None);
        let mut untagged = RoundHeap::from(None);
        untagged.record(Step::Solved, None);
        assert_eq!(
            (untagged.live_mib().as_str(), untagged.raised_peak()),
            ("", None)
        );
    }
}
