//! The heap profile's samples are unbiased: two functions that allocate alike, in turn, are
//! each credited with about half of what they hold, although the interval between samples is
//! a whole multiple of one round of the pattern; and blocks grown by reallocation are
//! credited with what they grew to. Its own binary, one test: the profile is process-wide.

use std::hint::black_box;
use std::thread;

use kerf_heap::{Accounting, Owner, profile, set_current};

#[global_allocator]
static GLOBAL: Accounting = Accounting;

const KIB: usize = 1 << 10;
const ROUNDS: usize = 4096;

#[inline(never)]
fn first_of_a_pair() -> Vec<u8> {
    vec![1; KIB]
}

#[inline(never)]
fn second_of_a_pair() -> Vec<u8> {
    vec![2; KIB]
}

/// The megabytes `report`'s "at the end" section credits to the first frame named `function`.
fn credited(report: &str, function: &str) -> f64 {
    let at_end = &report[report.find("## at the end").expect("an end section")..];
    let line = at_end
        .lines()
        .find(|line| line.contains(function) && line.contains(" MB "))
        .unwrap_or_else(|| panic!("{function} is in the report: {report}"));
    line.split_whitespace()
        .next()
        .and_then(|mb| mb.parse().ok())
        .unwrap_or_else(|| panic!("a figure in {line:?}"))
}

#[inline(never)]
fn grown_by_pushing() -> Vec<u8> {
    let mut grown = Vec::new();
    for i in 0..64 * KIB {
        grown.push(i as u8);
    }
    grown
}

#[test]
fn alike_allocations_in_turn_and_grown_blocks_are_credited_what_they_hold() {
    alike_allocations_in_turn_are_credited_alike();
    blocks_grown_by_reallocation_are_credited_their_size();
}

fn blocks_grown_by_reallocation_are_credited_their_size() {
    let owner = Owner::new(1);
    profile::start(owner, 32 * KIB);
    let kept = thread::spawn(move || {
        set_current(Some(owner));
        (0..64).map(|_| grown_by_pushing()).collect::<Vec<_>>()
    })
    .join()
    .expect("the tagged thread does not panic");
    let report = profile::report(10, "profile_sampling").expect("a profile was started");
    // 64 blocks of 64 KiB (4.2 MB), each grown from a few bytes.
    let grown = credited(&report, "grown_by_pushing");
    assert!(
        (3.4..=5.0).contains(&grown),
        "grown_by_pushing: {grown} MB\n{report}"
    );
    drop(black_box(kept));
}

fn alike_allocations_in_turn_are_credited_alike() {
    let owner = Owner::new(1);
    // One round of the pattern is 2 KiB: a fixed countdown of 2 KiB would sample the same
    // one of the pair every time.
    profile::start(owner, 2 * KIB);
    let kept = thread::spawn(move || {
        set_current(Some(owner));
        let mut kept = Vec::with_capacity(2 * ROUNDS);
        for _ in 0..ROUNDS {
            kept.push(first_of_a_pair());
            kept.push(second_of_a_pair());
        }
        kept
    })
    .join()
    .expect("the tagged thread does not panic");

    let report = profile::report(10, "profile_sampling").expect("a profile was started");
    let first = credited(&report, "first_of_a_pair");
    let second = credited(&report, "second_of_a_pair");
    // Each holds 4 MiB (4.2 MB); about 2,000 samples each put either within a few percent.
    for (function, mb) in [("first_of_a_pair", first), ("second_of_a_pair", second)] {
        assert!((3.6..=4.8).contains(&mb), "{function}: {mb} MB\n{report}");
    }
    drop(black_box(kept));
}
