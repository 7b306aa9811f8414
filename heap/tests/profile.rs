//! The heap profile with the accounting allocator installed: a tagged thread's live blocks are
//! found by the functions that allocated them, blocks freed before the end show only in the
//! peak's view, other owners' and untagged allocations are not sampled, and the profiler's own
//! records count to nobody. Its own binary: the profile is process-wide.

use std::hint::black_box;
use std::thread;

use kerf_heap::{Accounting, Owner, profile, set_current, usage};

#[global_allocator]
static GLOBAL: Accounting = Accounting;

const KIB: usize = 1 << 10;

#[inline(never)]
fn kept_by_the_profiled_owner() -> Vec<Vec<u8>> {
    (0..128).map(|i| vec![i as u8; 64 * KIB]).collect()
}

#[inline(never)]
fn freed_before_the_end() -> Vec<Vec<u8>> {
    (0..256).map(|i| vec![i as u8; 64 * KIB]).collect()
}

#[inline(never)]
fn allocated_by_another_owner() -> Vec<Vec<u8>> {
    (0..128).map(|i| vec![i as u8; 64 * KIB]).collect()
}

/// The section of `report` from `title` to the next `## ` heading.
fn section<'a>(report: &'a str, title: &str) -> &'a str {
    let start = report.find(title).expect("the report has the section");
    let rest = &report[start + title.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

#[test]
fn live_blocks_are_found_by_the_function_that_allocated_them() {
    let owner = Owner::new(1);
    // Small against the blocks, so that every one of them is all but certain to be sampled.
    profile::start(owner, 4 * KIB);
    let kept = thread::spawn(move || {
        set_current(Some(owner));
        let kept = kept_by_the_profiled_owner();
        drop(black_box(freed_before_the_end()));
        kept
    })
    .join()
    .expect("the tagged thread does not panic");
    let other = thread::spawn(|| {
        set_current(Some(Owner::new(2)));
        allocated_by_another_owner()
    })
    .join()
    .expect("the other owner's thread does not panic");
    let untagged = allocated_by_another_owner();

    let report = profile::report(10, "profile").expect("a profile was started");
    let at_peak = section(&report, "## at the sampled peak");
    let at_end = section(&report, "## at the end");
    assert!(at_peak.contains("kept_by_the_profiled_owner"), "{report}");
    assert!(at_peak.contains("freed_before_the_end"), "{report}");
    assert!(at_end.contains("kept_by_the_profiled_owner"), "{report}");
    assert!(!at_end.contains("freed_before_the_end"), "{report}");
    assert!(!report.contains("allocated_by_another_owner"), "{report}");
    // 128 blocks of 64 KiB, each sampled (and the list's own block, a few KiB).
    assert!(at_end.starts_with(": 8.4 MB in "), "{report}");

    // The backtraces the profiler keeps are not the owner's: it holds only `kept`.
    let held = usage(owner).live_bytes;
    assert!(
        held < (128 * 64 * KIB + 256 * KIB) as u64,
        "the owner holds {held} bytes"
    );
    drop(black_box((kept, other, untagged)));
}
