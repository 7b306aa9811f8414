//! Heap accounting by owner: how much of one process's heap belongs to one part of it.
//! `kerf simulate` runs the controller beside the simulated cluster (API emulator, kubelets,
//! scheduler, EC2) and reports the controller's heap apart; nothing else tags a thread.
//!
//! A thread carries an owner tag ([`set_current`]); threads do not inherit it, so whoever
//! spawns a thread or runtime for an owner passes [`current`] on, and [`Scoped`] runs one
//! future's polls as another owner. With the [`Accounting`] allocator (feature `allocator`),
//! a tagged thread allocates from a mimalloc heap of its owner's, and a free on any thread
//! is counted off the owner whose heap holds the block, so memory crossing between parts
//! lands on the right side. Each thread batches its counts and moves them into the shared
//! figures ([`usage`]) every [`FLUSH_BYTES`]: no lock and no shared cache line on the
//! allocation path, at the price of figures exact within [`FLUSH_BYTES`] per thread.
//! The figure is live heap bytes as requested, not resident memory. Untagged threads, as
//! in `kerf controller`, allocate through mimalloc as usual, for one thread-local read per
//! allocation.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::task::{Context, Poll};

#[cfg(feature = "allocator")]
mod allocator;
#[cfg(feature = "allocator")]
pub use allocator::Accounting;
#[cfg(feature = "allocator")]
pub mod profile;

/// Owners the counters have room for (slot 0 means "no owner").
pub const SLOTS: usize = 8;

/// Whose allocations these are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner(u8);

impl Owner {
    /// The kerf controller (in `kerf simulate`, every replica's threads).
    pub const CONTROLLER: Owner = Owner(1);
    /// The simulated Kubernetes API server: its stores and change history, watches, request
    /// handling and built-in controllers.
    pub const EMULATOR: Owner = Owner(2);
    /// The simulated kubelets and node-side controllers, with their informers' caches.
    pub const KUBELETS: Owner = Owner(3);
    /// The simulated kube-scheduler, with its informers' caches.
    pub const SCHEDULER: Owner = Owner(4);
    /// The simulated EC2 region: instances, fleets, tags, the interruption queue.
    pub const EC2: Owner = Owner(5);
    /// What a `kerf simulate` run keeps to report on it (tallies, samples).
    pub const OBSERVERS: Owner = Owner(6);
    /// Everything else on `kerf simulate`'s own threads: the run's driver, and the connection
    /// tasks of the kube clients the simulated parts use.
    pub const SIMULATE: Owner = Owner(7);

    /// The owner in `slot` (1 to [`SLOTS`] − 1); fails to compile in a const, and panics
    /// otherwise, for a slot out of range.
    pub const fn new(slot: u8) -> Self {
        assert!(
            slot >= 1 && (slot as usize) < SLOTS,
            "owner slot out of range"
        );
        Self(slot)
    }
}

/// An owner's heap figures, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocated by the owner's threads and not yet freed.
    pub live_bytes: u64,
    /// The most `live_bytes` has been.
    pub peak_bytes: u64,
}

/// `owner`'s heap figures now (all zero without the [`Accounting`] allocator): the shared
/// figures with the calling thread's own share in them (other threads' are within
/// [`FLUSH_BYTES`] each).
pub fn usage(owner: Owner) -> Usage {
    let live = live_now(owner.0);
    let peak = PEAK[usize::from(owner.0)].load(Ordering::Relaxed).max(live);
    Usage {
        live_bytes: u64::try_from(live).unwrap_or(0),
        peak_bytes: u64::try_from(peak).unwrap_or(0),
    }
}

/// Starts `owner`'s peak again from its live bytes now, so the next [`usage`] tells the most
/// it held since this call: the peak of one phase of a run (a scale-down after the
/// scale-out) rather than of the whole run.
pub fn restart_peak(owner: Owner) {
    PEAK[usize::from(owner.0)].store(live_now(owner.0), Ordering::Relaxed);
}

/// Moves the calling thread's share of every owner's figures into the shared ones: done for
/// each tagged thread as it ends ([`FlushAtExit`]), whose share would otherwise be lost.
fn flush_thread() {
    for slot in 1..SLOTS {
        if let Ok(bytes) = PENDING.try_with(|pending| pending[slot].replace(0)) {
            publish(slot, bytes);
        }
    }
}

/// Trades some allocator speed for a smaller resident set: mimalloc returns free pages to the
/// OS at once and collects each thread's freed blocks and empty pages often, and the process
/// uses no transparent huge pages. `kerf simulate` sets it: its simulated cluster and
/// controller allocate and free in waves across many threads, and between waves mimalloc
/// would otherwise keep the freed pages resident. The peak resident memory `kerf simulate`
/// reports shows the effect. Nothing without the allocator.
pub fn prefer_footprint() {
    #[cfg(feature = "allocator")]
    allocator::prefer_footprint();
}

/// Whether transparent huge pages are off for this process (Linux, with the allocator).
#[cfg(all(feature = "allocator", target_os = "linux"))]
pub fn huge_pages_disabled() -> bool {
    allocator::huge_pages_disabled()
}

/// mimalloc's value of option `number` (`mi_option_t`) now, to check what is in effect.
#[cfg(feature = "allocator")]
pub fn allocator_option(number: std::ffi::c_int) -> std::ffi::c_long {
    allocator::option(number)
}

/// The owner of the calling thread's allocations, if any.
pub fn current() -> Option<Owner> {
    match slot() {
        0 => None,
        slot => Some(Owner(slot)),
    }
}

/// Makes `owner` the owner of the calling thread's allocations from now on (`None`: nobody's).
pub fn set_current(owner: Option<Owner>) {
    // Read first: scoped futures set the tag on every poll, and a store on each would bounce
    // the flag's cache line between the threads.
    if owner.is_some() && !tracking() {
        TRACKING.store(true, Ordering::Relaxed);
    }
    if owner.is_some() {
        // Here, not on the allocation path: its first use registers the exit hook, which
        // may allocate.
        let registered = FLUSH_AT_EXIT.try_with(|_| ()).is_ok();
        let _ = FLUSH_AT_EXIT_REGISTERED.try_with(|flag| flag.set(registered));
    }
    let _ = OWNER.try_with(|tag| tag.set(owner.map_or(0, |o| o.0)));
}

/// Runs `f` with the calling thread's allocations owned by `owner`, then restores the owner.
pub fn with_owner<R>(owner: Option<Owner>, f: impl FnOnce() -> R) -> R {
    let previous = current();
    set_current(owner);
    let result = f();
    set_current(previous);
    result
}

/// A future whose polls allocate as `owner` (see [`scoped`]).
pub struct Scoped<F> {
    owner: Option<Owner>,
    inner: F,
}

/// `future`, polled with the thread's allocations owned by `owner` (`None`: nobody's), the
/// thread's own owner restored after each poll.
pub fn scoped<F: Future + Unpin>(owner: Option<Owner>, future: F) -> Scoped<F> {
    Scoped {
        owner,
        inner: future,
    }
}

/// `future`, every poll of it allocating as `owner`: for a task spawned on a runtime whose
/// threads are shared with other owners.
pub fn owned<F: Future>(owner: Owner, future: F) -> Scoped<Pin<Box<F>>> {
    scoped(Some(owner), Box::pin(future))
}

/// `future`, every poll of it allocating as the calling thread does now: a task spawned by
/// an owner's code stays that owner's (a spawned task does not otherwise inherit the tag of
/// the task that spawned it).
pub fn inherit<F: Future>(future: F) -> Scoped<Pin<Box<F>>> {
    scoped(current(), Box::pin(future))
}

impl<F: Future + Unpin> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let owner = self.owner;
        with_owner(owner, || Pin::new(&mut self.inner).poll(cx))
    }
}

thread_local! {
    /// The calling thread's owner slot; 0: none. Const-initialised and without a destructor,
    /// so reading it never allocates and works until the thread is gone.
    static OWNER: Cell<u8> = const { Cell::new(0) };
    /// The bytes this thread added to (or, negative, freed from) each owner and has not yet
    /// moved into [`LIVE`]. Const-initialised, without a destructor, like [`OWNER`].
    static PENDING: [Cell<isize>; SLOTS] = const { [const { Cell::new(0) }; SLOTS] };
}

/// Hands a tagged thread's share on as the thread ends ([`flush_thread`]).
struct FlushAtExit;

impl Drop for FlushAtExit {
    fn drop(&mut self) {
        // What the thread frees after this (other thread-locals' destructors) goes straight on.
        let _ = FLUSH_AT_EXIT_REGISTERED.try_with(|flag| flag.set(false));
        flush_thread();
    }
}

thread_local! {
    /// Registered by a thread's first tag: a thread that never had one gathers nothing.
    static FLUSH_AT_EXIT: FlushAtExit = const { FlushAtExit };
    /// Whether [`FLUSH_AT_EXIT`] is registered and not yet run: readable without
    /// registering it, as the allocation path must.
    static FLUSH_AT_EXIT_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// How far a thread's share of an owner's live bytes may grow (either way) before it is moved
/// into the shared figures: large enough that a thread touches the shared counters once per
/// hundreds of allocations, small next to the figures read (tens of megabytes).
pub const FLUSH_BYTES: isize = 64 * 1024;

/// Whether any thread was ever tagged: until then every block is in mimalloc's main heap.
static TRACKING: AtomicBool = AtomicBool::new(false);

/// Each owner's live bytes as the threads moved them here: signed, since one thread's frees
/// may arrive before another's allocations of the same bytes.
static LIVE: [AtomicIsize; SLOTS] = [const { AtomicIsize::new(0) }; SLOTS];
static PEAK: [AtomicIsize; SLOTS] = [const { AtomicIsize::new(0) }; SLOTS];

/// The calling thread's owner slot (0 when none, or while the thread is torn down).
fn slot() -> u8 {
    OWNER.try_with(Cell::get).unwrap_or(0)
}

/// Whether a block may be in an owner's heap (some thread was tagged before it was allocated).
fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed)
}

/// Counts `bytes` more live for the owner in `slot`.
#[cfg_attr(not(feature = "allocator"), allow(dead_code))]
fn added(slot: u8, bytes: usize) {
    gather(slot, isize::try_from(bytes).unwrap_or(isize::MAX));
}

/// Counts `bytes` of the owner in `slot` freed.
#[cfg_attr(not(feature = "allocator"), allow(dead_code))]
fn removed(slot: u8, bytes: usize) {
    gather(slot, isize::try_from(bytes).map_or(isize::MIN, |b| -b));
}

/// Adds `bytes` to the calling thread's share of the owner in `slot`, moving the share into
/// the shared figures once it reaches [`FLUSH_BYTES`] either way. A thread never tagged
/// (so without the hook that hands its share on at exit) moves them at once, as does one
/// being torn down.
#[cfg_attr(not(feature = "allocator"), allow(dead_code))]
fn gather(slot: u8, bytes: isize) {
    let slot = usize::from(slot);
    if FLUSH_AT_EXIT_REGISTERED.try_with(Cell::get) != Ok(true) {
        publish(slot, bytes);
        return;
    }
    let Some(full) = PENDING
        .try_with(|pending| {
            let share = pending.get(slot)?;
            let now = share.get().saturating_add(bytes);
            if now.abs() < FLUSH_BYTES {
                share.set(now);
                return None;
            }
            share.set(0);
            Some(now)
        })
        .unwrap_or(Some(bytes))
    else {
        return;
    };
    publish(slot, full);
}

/// Moves `bytes` into the shared live figure of the owner in `slot`, raising its peak.
fn publish(slot: usize, bytes: isize) {
    if bytes == 0 {
        return;
    }
    if let (Some(live), Some(peak)) = (LIVE.get(slot), PEAK.get(slot)) {
        let now = live
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        peak.fetch_max(now, Ordering::Relaxed);
    }
}

/// The live bytes of the owner in `slot` as the calling thread sees them: the shared figure
/// with its own share in it.
fn live_now(slot: u8) -> isize {
    LIVE[usize::from(slot)].load(Ordering::Relaxed) + pending(slot)
}

/// The calling thread's share of the owner in `slot` not yet in the shared figures.
fn pending(slot: u8) -> isize {
    PENDING
        .try_with(|pending| pending.get(usize::from(slot)).map_or(0, Cell::get))
        .unwrap_or(0)
}
