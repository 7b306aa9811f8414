//! Memory figures of a `kerf simulate` run, where the controller shares the process with the
//! API emulator, kubelets, scheduler and EC2 simulator. The process's peak resident memory
//! (`VmHWM` in `/proc/self/status`) is all of them together; the controller's own figure is
//! its live heap, counted by the accounting allocator (`kerf_heap`) on the threads it runs on
//! ([`super::controller_threads`]), so allocator overhead and fragmentation are not in it.
//!
//! The simulated cluster's parts are counted the same way, each as its own owner
//! ([`simulated_heap`]): the emulator's, kubelets', scheduler's and EC2's tasks (and the tasks
//! they spawn), the controller's calls into EC2 ([`super::outside`]), the observers, and the
//! rest of the process as `simulate`. A block counts to the part that allocated it until it is
//! freed, wherever it travels. Each part's peak is reached at its own moment, so peaks do not
//! add up to the process's; the live figures at the end do.

use std::sync::atomic::{AtomicU64, Ordering};

use kerf_heap::Owner;

use super::figures::HeapPart;

/// The simulated cluster's parts, by the name the summary gives them, and their owner tag.
const SIMULATED_PARTS: [(&str, Owner); 6] = [
    ("emulator", Owner::EMULATOR),
    ("kubelets", Owner::KUBELETS),
    ("scheduler", Owner::SCHEDULER),
    ("ec2", Owner::EC2),
    ("observers", Owner::OBSERVERS),
    ("simulate", Owner::SIMULATE),
];

/// The controller's heap peak before the current phase began ([`start_phase`]).
static PEAK_BEFORE_PHASE: AtomicU64 = AtomicU64::new(0);

/// The controller's heap now and at its peak over the whole run (zero before a controller
/// started).
pub fn controller_heap() -> kerf_heap::Usage {
    let usage = kerf_heap::usage(kerf_heap::Owner::CONTROLLER);
    kerf_heap::Usage {
        peak_bytes: usage
            .peak_bytes
            .max(PEAK_BEFORE_PHASE.load(Ordering::Relaxed)),
        ..usage
    }
}

/// Each part of the simulated cluster's heap now and at its peak over the whole run.
pub fn simulated_heap() -> Vec<HeapPart> {
    SIMULATED_PARTS
        .iter()
        .map(|&(part, owner)| {
            let usage = kerf_heap::usage(owner);
            HeapPart {
                part,
                peak_bytes: usage.peak_bytes,
                live_bytes: usage.live_bytes,
            }
        })
        .collect()
}

/// Starts a phase of the run (the scale-down after the scale-out): from now on
/// [`phase_peak_bytes`] tells the controller's heap peak since this call, while
/// [`controller_heap`] keeps the run's.
pub fn start_phase() {
    let usage = kerf_heap::usage(kerf_heap::Owner::CONTROLLER);
    PEAK_BEFORE_PHASE.fetch_max(usage.peak_bytes, Ordering::Relaxed);
    kerf_heap::restart_peak(kerf_heap::Owner::CONTROLLER);
}

/// The controller's heap peak since the last [`start_phase`].
pub fn phase_peak_bytes() -> u64 {
    kerf_heap::usage(kerf_heap::Owner::CONTROLLER).peak_bytes
}

/// Peak resident set size in bytes, or `None` where `/proc` is not available.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kib(&status, "VmHWM:").map(|kib| kib * 1024)
}

/// The value in kB of the `/proc/*/status` line starting with `field`.
fn parse_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_high_water_mark_in_kib() {
        let status = "Name:\tkerf\nVmPeak:\t  900 kB\nVmHWM:\t   123456 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(parse_kib(status, "VmHWM:"), Some(123_456));
        assert_eq!(parse_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_a_peak() {
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(peak_rss_bytes().is_some_and(|b| b > 0));
        }
    }
}
