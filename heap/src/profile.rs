//! A sampling heap profile of one owner: where its live heap was allocated. About one
//! allocation per [`start`]'s interval of bytes is sampled with its backtrace and kept until it
//! is freed. The bytes between two samples are drawn at random (exponentially, around the
//! interval), as tcmalloc's and jemalloc's profilers do: a fixed countdown would land on the
//! same allocation of a repeating pattern every time (one pod store insert allocates the same
//! blocks in the same order as the last), crediting one site with its neighbours' bytes. Each
//! sample stands for the bytes it is expected to stand for (see [`weight`]). The samples
//! live when the owner's sampled heap was at its most, and those live now, are summed by stack
//! in [`report`]. It answers "what holds the controller's heap at its peak" in a release build
//! with the accounting allocator, where heaptrack sees nothing (mimalloc maps its own memory).
//!
//! The profiler allocates its own records (backtraces, the sample table) in mimalloc's main
//! heap, with the calling thread marked as inside it ([`inside`]), so they neither count to
//! the owner nor get sampled. Off (the default), it costs one relaxed load per allocation.

use std::backtrace::Backtrace;
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::Owner;

/// The owner slot being profiled; 0: none.
static PROFILED: AtomicU8 = AtomicU8::new(0);
/// Bytes allocated between two samples.
static INTERVAL: AtomicUsize = AtomicUsize::new(0);
/// The live samples and the snapshot at the sampled peak.
static SAMPLES: Mutex<Option<Samples>> = Mutex::new(None);

/// How far the sampled live bytes must pass the last snapshot before a new one is taken: a
/// handful of samples, so a rising heap is not copied on every sample.
const SNAPSHOT_STEP_SAMPLES: u64 = 8;

thread_local! {
    /// Whether this thread is inside the profiler (its allocations go to the main heap).
    static GUARD: Cell<bool> = const { Cell::new(false) };
    /// Bytes this thread may still allocate before its next sample.
    static COUNTDOWN: Cell<isize> = const { Cell::new(0) };
    /// This thread's xorshift state for drawing the next countdown (never 0).
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

#[derive(Default)]
struct Samples {
    /// Live sampled blocks by address.
    live: HashMap<usize, Sample>,
    /// The bytes the live samples stand for.
    live_bytes: u64,
    /// The most `live_bytes` has been, and the samples live then.
    peak_bytes: u64,
    at_peak: Vec<Sample>,
}

#[derive(Clone)]
struct Sample {
    trace: Arc<Backtrace>,
    bytes: u64,
}

/// Starts sampling `owner`'s allocations, about one per `interval` bytes; a second call
/// starts afresh.
pub fn start(owner: Owner, interval: usize) {
    let _inside = Inside::enter();
    *SAMPLES.lock().unwrap_or_else(PoisonError::into_inner) = Some(Samples::default());
    INTERVAL.store(interval.max(1), Ordering::Relaxed);
    PROFILED.store(owner.0, Ordering::Release);
}

/// Whether the calling thread is inside the profiler: its allocations must not be sampled
/// or counted to an owner.
pub(crate) fn inside() -> bool {
    PROFILED.load(Ordering::Relaxed) != 0 && guarded()
}

fn guarded() -> bool {
    GUARD.try_with(Cell::get).unwrap_or(true)
}

/// Marks the calling thread as inside the profiler until dropped.
struct Inside {
    was: bool,
}

impl Inside {
    fn enter() -> Self {
        let was = GUARD.try_with(|g| g.replace(true)).unwrap_or(true);
        Self { was }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = GUARD.try_with(|g| g.set(self.was));
    }
}

fn profiling(slot: u8) -> bool {
    slot != 0 && PROFILED.load(Ordering::Relaxed) == slot
}

/// A block of `size` bytes at `block` allocated for the owner in `slot`.
pub(crate) fn allocated(slot: u8, block: *mut u8, size: usize) {
    // A panicking thread may hold the backtrace lock a capture takes.
    if block.is_null() || !profiling(slot) || guarded() || std::thread::panicking() {
        return;
    }
    let interval = INTERVAL.load(Ordering::Relaxed);
    let due = COUNTDOWN
        .try_with(|left| {
            let now = left.get() - isize::try_from(size).unwrap_or(isize::MAX);
            if now > 0 {
                left.set(now);
                return false;
            }
            left.set(next_countdown(interval));
            true
        })
        .unwrap_or(false);
    if due {
        record(block, weight(size, interval));
    }
}

/// Bytes until the next sample: exponentially distributed with mean `interval`, so that every
/// byte allocated has the same chance of being the sampled one, whatever the pattern.
fn next_countdown(interval: usize) -> isize {
    let uniform = RANDOM
        .try_with(|state| {
            let mut x = state.get();
            if x == 0 {
                // Seeded per thread from where its state lives; xorshift needs non-zero.
                x = (state as *const Cell<u64> as u64) | 1;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            state.set(x);
            x
        })
        .unwrap_or(1);
    // In (0, 1]: the top 53 bits, shifted off zero.
    let u = ((uniform >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let draw = -u.ln() * interval as f64;
    draw.min(isize::MAX as f64) as isize + 1
}

/// The bytes a sampled block of `size` stands for: its size over the chance that a block
/// that size is sampled (`1 - e^(-size/interval)`), which is about the interval for small
/// blocks and the block itself for large ones.
fn weight(size: usize, interval: usize) -> u64 {
    let chance = -(-(size as f64) / interval as f64).exp_m1();
    if chance <= 0.0 {
        return interval as u64;
    }
    (size as f64 / chance).round() as u64
}

fn record(block: *mut u8, bytes: u64) {
    let _inside = Inside::enter();
    let sample = Sample {
        trace: Arc::new(Backtrace::force_capture()),
        bytes,
    };
    let step = INTERVAL.load(Ordering::Relaxed) as u64 * SNAPSHOT_STEP_SAMPLES;
    let mut guard = SAMPLES.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(samples) = guard.as_mut() else {
        return;
    };
    samples.live_bytes += sample.bytes;
    if let Some(replaced) = samples.live.insert(block as usize, sample) {
        samples.live_bytes -= replaced.bytes;
    }
    if samples.live_bytes >= samples.peak_bytes + step {
        samples.peak_bytes = samples.live_bytes;
        samples.at_peak = samples.live.values().cloned().collect();
    }
}

/// The block at `block` of the owner in `slot` freed.
pub(crate) fn freed(slot: u8, block: *mut u8) {
    if !profiling(slot) || guarded() {
        return;
    }
    let _inside = Inside::enter();
    let mut guard = SAMPLES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(samples) = guard.as_mut()
        && let Some(gone) = samples.live.remove(&(block as usize))
    {
        samples.live_bytes -= gone.bytes;
    }
}

/// The block at `from` of the owner in `slot` resized in place or moved to `to`: counted as
/// the old block freed and a new one of `size` allocated, so a block that grows by
/// reallocation (a `Vec` pushed to, a `String` appended to) has its chance to be sampled at
/// every size, and a sample taken before a block shrank does not go on standing for the
/// larger size.
pub(crate) fn moved(slot: u8, from: *mut u8, to: *mut u8, size: usize) {
    freed(slot, from);
    allocated(slot, to, size);
}

/// The profile as text: the `top` stacks holding the most of the sampled heap at its peak and
/// now, and the same bytes summed by the program's first frame above the allocating one (the
/// program's frames: source outside the toolchain and the package registry, or, where a frame
/// has no source, a symbol starting with `crate_prefix`, e.g. `kerf`); `None` when no
/// profile was started.
pub fn report(top: usize, crate_prefix: &str) -> Option<String> {
    let _inside = Inside::enter();
    let (at_peak, live) = {
        let guard = SAMPLES.lock().unwrap_or_else(PoisonError::into_inner);
        let samples = guard.as_ref()?;
        (
            samples.at_peak.clone(),
            samples.live.values().cloned().collect::<Vec<_>>(),
        )
    };
    let interval = INTERVAL.load(Ordering::Relaxed);
    let mut out = format!("heap profile: one sample per {interval} bytes allocated\n");
    for (title, samples) in [("at the sampled peak", &at_peak), ("at the end", &live)] {
        let stacks = by_stack(samples, crate_prefix);
        let total: u64 = stacks.iter().map(|(_, b)| b).sum();
        let _ = writeln!(
            out,
            "\n## {title}: {} in {} samples",
            mb(total),
            samples.len()
        );
        let _ = writeln!(out, "\n### by the program's first frame");
        for (frame, bytes) in by_first_frame(&stacks).iter().take(top) {
            let _ = writeln!(
                out,
                "{:>10} {:>5.1} %  {frame}",
                mb(*bytes),
                pct(*bytes, total)
            );
        }
        let _ = writeln!(out, "\n### by stack");
        for (stack, bytes) in stacks.iter().take(top) {
            let _ = writeln!(out, "{:>10} {:>5.1} %", mb(*bytes), pct(*bytes, total));
            for frame in stack {
                let _ = writeln!(out, "      {frame}");
            }
        }
    }
    Some(out)
}

/// Frames the profiler and the allocator add above the allocating code, by symbol.
const OWN_SYMBOLS: [&str; 4] = ["std::backtrace", "kerf_heap::", "<kerf_heap::", "__rust"];
/// The same by source file: what the profiler and allocator inline shows only there.
const OWN_FILES: [&str; 2] = ["heap/src/", "library/alloc/src/alloc.rs"];

/// Where the toolchain's and the C library's thread-start sources are, as their frames name
/// them (a workspace crate's own may be relative too: `./tests/x.rs`).
const LIBRARY_SOURCES: [&str; 4] = ["/rustc/", "/rust/deps/", "./nptl/", "./misc/"];

/// Frames kept per stack: the allocating frame, then the caller's own (not the standard
/// library's nor a dependency's), enough to reach the owning structure.
const STACK_DEPTH: usize = 12;
/// The longest a frame is shown; generic arguments can run to kilobytes.
const FRAME_CHARS: usize = 160;

/// One frame of a backtrace: its symbol (inlined functions show a bare name) and source.
struct Frame<'a> {
    symbol: &'a str,
    at: Option<&'a str>,
}

impl Frame<'_> {
    fn own(&self) -> bool {
        OWN_SYMBOLS.iter().any(|own| self.symbol.starts_with(own))
            || self
                .at
                .is_some_and(|at| OWN_FILES.iter().any(|file| at.contains(file)))
    }

    /// Whether the frame is the program's: source outside the toolchain's (std, the crates
    /// std vendors, the C library's thread start) and the package registry's, or, without
    /// source, a symbol starting with `prefix`.
    fn caller_own(&self, prefix: &str) -> bool {
        match self.at {
            Some(at) => {
                !LIBRARY_SOURCES
                    .iter()
                    .any(|library| at.starts_with(library))
                    && !at.contains("/.cargo/")
            }
            None => {
                self.symbol.starts_with(prefix) || self.symbol.starts_with(&format!("<{prefix}"))
            }
        }
    }

    fn show(&self) -> String {
        let symbol: String = self.symbol.chars().take(FRAME_CHARS).collect();
        match self.at {
            Some(at) => format!("{symbol} ({})", short_path(at)),
            None => symbol,
        }
    }
}

/// `path:line:column` from the first `src/`'s parent on (`actors/src/x.rs:12`), as a reader
/// finds it in the tree.
fn short_path(at: &str) -> &str {
    let Some(src) = at.find("/src/") else {
        return at;
    };
    let crate_start = at[..src].rfind('/').map_or(0, |i| i + 1);
    &at[crate_start..]
}

/// The frames of a backtrace's text, in order.
fn parse(text: &str) -> Vec<Frame<'_>> {
    let mut frames: Vec<Frame<'_>> = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(at) = line.strip_prefix("at ") {
            if let Some(last) = frames.last_mut()
                && last.at.is_none()
            {
                last.at = Some(at.trim());
            }
        } else if let Some((index, symbol)) = line.split_once(": ")
            && index.parse::<usize>().is_ok()
        {
            frames.push(Frame {
                symbol: symbol.trim(),
                at: None,
            });
        }
    }
    frames
}

/// The samples' bytes summed by their stacks, largest first.
fn by_stack(samples: &[Sample], prefix: &str) -> Vec<(Vec<String>, u64)> {
    let mut sums: HashMap<Vec<String>, u64> = HashMap::new();
    for sample in samples {
        *sums.entry(frames(&sample.trace, prefix)).or_default() += sample.bytes;
    }
    let mut stacks: Vec<_> = sums.into_iter().collect();
    stacks.sort_by_key(|s| std::cmp::Reverse(s.1));
    stacks
}

/// The stacks' bytes summed by their first frame of the program's own (the stack's second
/// line: the first is the allocating frame), largest first.
fn by_first_frame(stacks: &[(Vec<String>, u64)]) -> Vec<(String, u64)> {
    let mut sums: HashMap<String, u64> = HashMap::new();
    for (stack, bytes) in stacks {
        let frame = stack
            .get(1)
            .cloned()
            .unwrap_or_else(|| "(none of the program's)".to_owned());
        *sums.entry(frame).or_default() += bytes;
    }
    let mut frames: Vec<_> = sums.into_iter().collect();
    frames.sort_by_key(|f| std::cmp::Reverse(f.1));
    frames
}

/// `trace`'s frames below the profiler's and allocator's own: the first (what allocated),
/// then the program's own callers.
fn frames(trace: &Backtrace, prefix: &str) -> Vec<String> {
    let text = trace.to_string();
    let frames = parse(&text);
    let mut below = frames.iter().skip_while(|f| f.own());
    let first = below.next().map(Frame::show);
    first
        .into_iter()
        .chain(below.filter(|f| f.caller_own(prefix)).map(Frame::show))
        .take(STACK_DEPTH)
        .collect()
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn pct(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part as f64 * 100.0 / total as f64
    }
}
