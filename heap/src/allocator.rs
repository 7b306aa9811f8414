//! The accounting global allocator, all mimalloc. Untagged threads allocate as mimalloc always
//! does (the thread's part of its main heap). Each owner has a first-class mimalloc heap of
//! its own (mimalloc 3: one heap may allocate from any thread, and its blocks be freed from
//! any thread), made on the owner's first allocation; a tagged thread allocates there. A block
//! says which heap it is in (`mi_heap_of`: one page-map lookup), so a free, on whichever
//! thread, knows the owner to count it off without any header, and the process's memory
//! stays laid out by one allocator, as in `kerf controller`. While no thread was ever tagged,
//! the lookup is skipped.
//!
//! A `realloc` is an allocation by the calling thread: a block grown within the heap it is in
//! (untagged and in the main heap, or tagged and in its owner's heap) is resized by mimalloc
//! there; any other is allocated anew as the calling thread allocates, copied, and freed where
//! it was. Zero-size layouts never reach a global allocator (the caller's contract).

#![allow(
    unsafe_code,
    reason = "a global allocator is unsafe by contract; each block says why it holds"
)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_int, c_long, c_void};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicPtr, Ordering};

use libmimalloc_sys::{
    mi_free, mi_heap_delete, mi_heap_malloc_aligned, mi_heap_new, mi_heap_realloc_aligned,
    mi_heap_t, mi_heap_zalloc_aligned, mi_option_get, mi_option_set,
};
use mimalloc::MiMalloc;

use crate::{SLOTS, added, profile, removed, slot, tracking};

unsafe extern "C" {
    /// The heap `p` was allocated in, or null for memory that is not mimalloc's (mimalloc 3).
    fn mi_heap_of(p: *const c_void) -> *mut mi_heap_t;
}

/// mimalloc 3's option numbers (`mi_option_t`) that [`prefer_footprint`] sets; the Rust
/// bindings name only the older ones.
const PURGE_DELAY: c_int = 15;
const GENERIC_COLLECT: c_int = 34;
const PAGE_FULL_RETAIN: c_int = 36;
const ALLOW_THP: c_int = 43;

/// The options [`prefer_footprint`] sets, with their values: free pages go back to the OS at
/// once (default: after 1 s), each thread's heaps collect their deferred frees and empty pages
/// every 100 generic allocations (default 10,000), no empty page is retained per size
/// class (default 2), and no memory mimalloc maps from now on is advised for transparent huge
/// pages (default: advised).
const FOOTPRINT_OPTIONS: [(c_int, c_long); 4] = [
    (PURGE_DELAY, 0),
    (GENERIC_COLLECT, 100),
    (PAGE_FULL_RETAIN, 0),
    (ALLOW_THP, 0),
];

/// Sets [`FOOTPRINT_OPTIONS`]; mimalloc reads them as it goes, so they hold from the next
/// allocations on. And turns transparent huge pages off for the process, as mimalloc does at
/// start when told to by its environment (`MIMALLOC_ALLOW_THP=0`): the option alone comes too
/// late for the arena mimalloc mapped (and advised) at start, where a 2 MiB huge page fills
/// in whole as soon as one block in it is touched.
pub(crate) fn prefer_footprint() {
    for (option, value) in FOOTPRINT_OPTIONS {
        // SAFETY: sets a process-wide option by its number; mimalloc stores it atomically.
        unsafe { mi_option_set(option, value) };
    }
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and no pointer; it sets a flag of
    // this process's memory map that page faults read. It fails only on kernels without
    // it, where there is nothing to turn off.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Whether transparent huge pages are off for this process.
#[cfg(target_os = "linux")]
pub(crate) fn huge_pages_disabled() -> bool {
    // SAFETY: PR_GET_THP_DISABLE takes no argument; it returns the flag, or -1.
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
}

/// The value mimalloc has for `option` now.
pub(crate) fn option(option: c_int) -> c_long {
    // SAFETY: reads a process-wide option by its number.
    unsafe { mi_option_get(option) }
}

/// The global allocator that counts tagged threads' allocations by owner.
pub struct Accounting;

/// Each owner's heap, null until its first allocation.
static HEAPS: [AtomicPtr<mi_heap_t>; SLOTS] = [const { AtomicPtr::new(null_mut()) }; SLOTS];

/// The heap of the owner in `slot` (1..SLOTS), made on first use; null if mimalloc cannot.
fn heap_of_owner(slot: u8) -> *mut mi_heap_t {
    let Some(cell) = HEAPS.get(usize::from(slot)) else {
        return null_mut();
    };
    let heap = cell.load(Ordering::Acquire);
    if !heap.is_null() {
        return heap;
    }
    // SAFETY: makes a heap; mimalloc allocates its metadata itself, not through Rust.
    let made = unsafe { mi_heap_new() };
    match cell.compare_exchange(null_mut(), made, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => made,
        Err(first) => {
            // SAFETY: `made` is ours, empty and never handed out.
            unsafe { mi_heap_delete(made) };
            first
        }
    }
}

/// The owner slot whose heap `block` is in; 0 for mimalloc's main heap (or while no thread was
/// ever tagged, when every block is there).
fn owner_of(block: *mut u8) -> u8 {
    if !tracking() {
        return 0;
    }
    // SAFETY: a lookup of the address in mimalloc's page map; it does not dereference it.
    let heap = unsafe { mi_heap_of(block.cast()) };
    if heap.is_null() {
        return 0;
    }
    HEAPS
        .iter()
        .position(|h| h.load(Ordering::Relaxed) == heap)
        .and_then(|slot| u8::try_from(slot).ok())
        .unwrap_or(0)
}

/// A block of `layout` in the heap of the owner in `slot`, counted, or null.
fn alloc_owned(slot: u8, layout: Layout, zeroed: bool) -> *mut u8 {
    let heap = heap_of_owner(slot);
    if heap.is_null() {
        return null_mut();
    }
    // SAFETY: a live heap, and the layout's size and alignment as the caller gave them.
    let block = unsafe {
        if zeroed {
            mi_heap_zalloc_aligned(heap, layout.size(), layout.align())
        } else {
            mi_heap_malloc_aligned(heap, layout.size(), layout.align())
        }
    };
    if !block.is_null() {
        added(slot, layout.size());
        profile::allocated(slot, block.cast(), layout.size());
    }
    block.cast()
}

/// The owner slot the calling thread allocates for: its own, or none while it is inside the
/// heap profiler, whose records count to nobody.
fn allocating_slot() -> u8 {
    match slot() {
        0 => 0,
        _ if profile::inside() => 0,
        owner => owner,
    }
}

// SAFETY: every block comes from mimalloc with the requested size and alignment, and is
// freed or resized by mimalloc, which handles blocks of any of its heaps.
unsafe impl GlobalAlloc for Accounting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match allocating_slot() {
            // SAFETY: forwarded under the caller's contract.
            0 => unsafe { MiMalloc.alloc(layout) },
            owner => alloc_owned(owner, layout, false),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match allocating_slot() {
            // SAFETY: forwarded under the caller's contract.
            0 => unsafe { MiMalloc.alloc_zeroed(layout) },
            owner => alloc_owned(owner, layout, true),
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match owner_of(block) {
            // SAFETY: a main-heap block, freed with the layout it was allocated with.
            0 => unsafe { MiMalloc.dealloc(block, layout) },
            owner => {
                removed(owner, layout.size());
                profile::freed(owner, block);
                // SAFETY: a block of an owner's heap; mimalloc frees it from any thread.
                unsafe { mi_free(block.cast()) }
            }
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let owner = allocating_slot();
        if owner_of(block) != owner {
            return move_block(self, block, layout, new_size);
        }
        if owner == 0 {
            // SAFETY: a main-heap block resized by mimalloc, under the caller's contract.
            return unsafe { MiMalloc.realloc(block, layout, new_size) };
        }
        // SAFETY: a block of this owner's heap, resized there (in place or moved within it).
        let resized = unsafe {
            mi_heap_realloc_aligned(heap_of_owner(owner), block.cast(), new_size, layout.align())
        };
        if !resized.is_null() {
            profile::moved(owner, block, resized.cast(), new_size);
            if new_size >= layout.size() {
                added(owner, new_size - layout.size());
            } else {
                removed(owner, layout.size() - new_size);
            }
        }
        resized.cast()
    }
}

/// `block` reallocated by a thread of another owner (or none): allocated as that thread
/// allocates, copied, and freed where it was.
fn move_block(allocator: &Accounting, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    // SAFETY: the caller of `realloc` guarantees `new_size` with `layout.align()` is a layout.
    let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
    // SAFETY: `new_size` is non-zero (the caller's contract).
    let moved = unsafe { allocator.alloc(new_layout) };
    if !moved.is_null() {
        // SAFETY: both blocks hold at least the smaller size and do not overlap.
        unsafe { ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size)) };
        // SAFETY: `block` was allocated by this allocator with `layout`.
        unsafe { allocator.dealloc(block, layout) };
    }
    moved
}
