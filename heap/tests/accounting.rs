//! The accounting allocator installed as this test binary's global allocator: what a tagged
//! thread allocates is counted to its owner until freed on whichever thread, the peak holds,
//! and untagged threads are not counted. Tests run in parallel, so each uses its own owner and
//! compares that owner's figures only; the harness's own allocations are untagged.

#![allow(unsafe_code, reason = "the tests call the allocator as std does")]

use std::alloc::{GlobalAlloc, Layout};
use std::future::Future as _;
use std::hint::black_box;
use std::thread;

use kerf_heap::{
    Accounting, Owner, Usage, allocator_option, inherit, prefer_footprint, restart_peak, scoped,
    set_current, usage, with_owner,
};

#[global_allocator]
static GLOBAL: Accounting = Accounting;

const MIB: usize = 1 << 20;

/// Runs `f` on a fresh thread tagged `owner` and returns what it returns.
fn on_thread_of<T: Send + 'static>(owner: Owner, f: impl FnOnce() -> T + Send + 'static) -> T {
    thread::spawn(move || {
        set_current(Some(owner));
        f()
    })
    .join()
    .expect("the tagged thread does not panic")
}

fn live(owner: Owner) -> u64 {
    usage(owner).live_bytes
}

#[test]
fn bytes_allocated_on_a_tagged_thread_and_freed_on_another_are_subtracted() {
    let owner = Owner::new(2);
    let buffer = on_thread_of(owner, || vec![7u8; 4 * MIB]);
    assert!(live(owner) >= 4 * MIB as u64, "{:?}", usage(owner));
    // Freed on this (untagged) thread: counted off the owner that allocated it.
    drop(black_box(buffer));
    assert!(live(owner) < MIB as u64, "{:?}", usage(owner));
    // And freed on another tagged thread of a different owner: still off the first owner.
    let buffer = on_thread_of(owner, || vec![1u8; 2 * MIB]);
    let other = Owner::new(3);
    let before_other = live(other);
    on_thread_of(other, move || drop(black_box(buffer)));
    assert!(live(owner) < MIB as u64, "{:?}", usage(owner));
    assert!(
        live(other) <= before_other + 64 * 1024,
        "{:?}",
        usage(other)
    );
}

#[test]
fn the_peak_holds_after_the_bytes_are_freed() {
    let owner = Owner::new(4);
    on_thread_of(owner, || {
        let big = black_box(vec![0u8; 8 * MIB]);
        drop(big);
        black_box(vec![0u8; MIB]);
    });
    let Usage {
        live_bytes,
        peak_bytes,
    } = usage(owner);
    assert!(peak_bytes >= 8 * MIB as u64, "peak {peak_bytes}");
    assert!(live_bytes < MIB as u64, "live {live_bytes}");
}

#[test]
fn a_restarted_peak_counts_only_what_came_after() {
    let owner = Owner::new(1);
    let _serial = serial();
    let kept = on_thread_of(owner, || {
        drop(black_box(vec![0u8; 16 * MIB]));
        black_box(vec![0u8; MIB])
    });
    assert!(
        usage(owner).peak_bytes >= 16 * MIB as u64,
        "{:?}",
        usage(owner)
    );
    restart_peak(owner);
    let restarted = usage(owner);
    assert_eq!(restarted.peak_bytes, restarted.live_bytes);
    on_thread_of(owner, || drop(black_box(vec![0u8; 4 * MIB])));
    let Usage { peak_bytes, .. } = usage(owner);
    assert!(
        (5 * MIB as u64..16 * MIB as u64).contains(&peak_bytes),
        "peak {peak_bytes} after the restart: the 1 MiB kept and the 4 MiB, not the 16"
    );
    drop(kept);
}

#[test]
fn allocations_on_an_untagged_thread_are_not_counted() {
    let owner = Owner::new(5);
    // A tagged thread starts an untagged one: threads do not inherit the tag.
    let (before, during) = on_thread_of(owner, move || {
        let before = live(owner);
        let during = thread::spawn(move || {
            let held = black_box(vec![3u8; 16 * MIB]);
            let during = live(owner);
            drop(held);
            during
        })
        .join()
        .expect("no panic");
        (before, during)
    });
    assert!(
        during < before + MIB as u64,
        "before {before}, during {during}"
    );
    // Within a tagged thread, code run as nobody's is not counted either.
    let (outside, inside) = on_thread_of(owner, move || {
        let outside = live(owner);
        let inside = with_owner(None, || {
            let held = black_box(vec![3u8; 16 * MIB]);
            let inside = live(owner);
            drop(held);
            inside
        });
        (outside, inside)
    });
    assert!(
        inside < outside + MIB as u64,
        "outside {outside}, inside {inside}"
    );
}

#[test]
fn a_scoped_future_allocates_as_its_owner() {
    let owner = Owner::new(6);
    let future_owner = Owner::new(7);
    let held = on_thread_of(owner, move || {
        let future = Box::pin(async { black_box(vec![5u8; 4 * MIB]) });
        let mut scoped = scoped(Some(future_owner), future);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(&mut scoped).poll(&mut cx) {
            std::task::Poll::Ready(held) => held,
            std::task::Poll::Pending => unreachable!("the future is ready at once"),
        }
    });
    assert!(
        live(future_owner) >= 4 * MIB as u64,
        "{:?}",
        usage(future_owner)
    );
    assert!(live(owner) < MIB as u64, "{:?}", usage(owner));
    drop(held);
    assert!(live(future_owner) < MIB as u64, "{:?}", usage(future_owner));
}

/// Polls `future` once on the calling thread; it must be ready.
fn poll_ready<F: std::future::Future + Unpin>(mut future: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(&mut future).poll(&mut cx) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => unreachable!("the future is ready at once"),
    }
}

#[test]
fn an_inheriting_future_allocates_as_whoever_made_it_wherever_it_is_polled() {
    // Made on a thread of owner 1 (a task spawned by an owner's code), polled on an untagged
    // thread (a runtime worker shared with other owners): its allocations are owner 1's.
    let owner = Owner::new(1);
    let _serial = serial();
    let before = live(owner);
    let future = on_thread_of(owner, || inherit(async { black_box(vec![3u8; 4 * MIB]) }));
    let held = poll_ready(future);
    assert!(live(owner) >= before + 4 * MIB as u64, "{:?}", usage(owner));
    drop(held);
    assert!(live(owner) < before + MIB as u64, "{:?}", usage(owner));
    // Made on an untagged thread, it allocates as nobody's, even polled by a tagged thread.
    let future = inherit(async { black_box(vec![3u8; 4 * MIB]) });
    let held = on_thread_of(owner, move || poll_ready(future));
    assert!(live(owner) < before + MIB as u64, "{:?}", usage(owner));
    drop(held);
}

#[test]
fn realloc_moves_bytes_to_the_thread_that_grows_them() {
    let owner = Owner::new(1);
    let _serial = serial();
    // Allocated untagged (mimalloc), grown on a tagged thread: now the owner's.
    let mut grown = Vec::<u8>::with_capacity(16);
    grown.push(1);
    let grown = on_thread_of(owner, move || {
        grown.reserve_exact(4 * MIB);
        grown
    });
    assert_eq!(grown[0], 1, "the contents moved with the block");
    assert!(live(owner) >= 4 * MIB as u64, "{:?}", usage(owner));
    // Grown by its owner again: resized within its owner's heap, counted once.
    let grown = on_thread_of(owner, move || {
        let mut grown = grown;
        grown.reserve_exact(8 * MIB);
        grown
    });
    let counted = live(owner);
    assert!(
        counted >= 8 * MIB as u64 && counted < 10 * MIB as u64,
        "{counted}"
    );
    // Grown by an untagged thread: leaves the owner for mimalloc.
    let mut grown = grown;
    grown.reserve_exact(16 * MIB);
    assert_eq!(grown[0], 1);
    assert!(live(owner) < MIB as u64, "{:?}", usage(owner));
}

#[test]
fn small_allocations_a_thread_still_holds_in_its_share_are_counted_when_it_ends() {
    // Each block is far below the share a thread gathers before it touches the shared
    // figures, and so is their sum: only the hand-on at the thread's end counts them.
    let owner = Owner::new(1);
    let _serial = serial();
    let before = live(owner);
    let kept: Vec<Box<[u8; 512]>> = on_thread_of(owner, || {
        (0..32).map(|_| black_box(Box::new([1u8; 512]))).collect()
    });
    let counted = live(owner) - before;
    assert!(
        counted >= 32 * 512 && counted < kerf_heap::FLUSH_BYTES as u64,
        "counted {counted}"
    );
    drop(kept);
    // Freed on this (untagged) thread: subtracted at once.
    assert!(live(owner) <= before + 1024, "{:?}", usage(owner));
}

#[test]
fn over_aligned_blocks_keep_their_alignment_and_count() {
    let owner = Owner::new(1);
    let _serial = serial();
    on_thread_of(owner, move || {
        for align in [32, 4096, 64 * 1024] {
            let layout = Layout::from_size_align(3 * MIB, align).expect("valid layout");
            let before = live(owner);
            // SAFETY: a non-zero layout, freed below with the same layout.
            let block = unsafe { GLOBAL.alloc_zeroed(layout) };
            assert!(!block.is_null());
            assert_eq!(block as usize % align, 0, "aligned to {align}");
            // SAFETY: the block holds 3 MiB of zeroes.
            assert_eq!(unsafe { block.add(3 * MIB - 1).read() }, 0);
            assert_eq!(live(owner), before + 3 * MIB as u64);
            // SAFETY: grown within the same alignment; the contents move.
            let block = unsafe {
                block.write(42);
                GLOBAL.realloc(block, layout, 5 * MIB)
            };
            assert_eq!(block as usize % align, 0, "still aligned to {align}");
            // SAFETY: the first byte moved with the block.
            assert_eq!(unsafe { block.read() }, 42);
            assert_eq!(live(owner), before + 5 * MIB as u64);
            let layout = Layout::from_size_align(5 * MIB, align).expect("valid layout");
            // SAFETY: freed with the layout it now has.
            unsafe { GLOBAL.dealloc(block, layout) };
            assert_eq!(live(owner), before);
        }
    });
}

/// The tests on owner 1 compare exact figures; they run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static OWNER_ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    OWNER_ONE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn preferring_footprint_replaces_mimallocs_purge_and_collect_defaults_and_turns_huge_pages_off() {
    // purge_delay, generic_collect, page_full_retain by their numbers in mimalloc 3.
    let options = [15, 34, 36];
    assert_eq!(
        options.map(allocator_option),
        [1000, 10_000, 2],
        "mimalloc 3's defaults: the numbers name the options meant"
    );
    assert_eq!(allocator_option(43), 1, "allow_thp's default");
    prefer_footprint();
    assert_eq!(options.map(allocator_option), [0, 100, 0]);
    assert_eq!(allocator_option(43), 0, "allow_thp: no new region advised");
    #[cfg(target_os = "linux")]
    assert!(kerf_heap::huge_pages_disabled());
}
