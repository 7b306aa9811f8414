//! The accounting global allocator. Untagged threads allocate through mimalloc, untouched.
//! Tagged threads allocate through the system allocator a frame of `header + size` bytes and
//! hand out the address after the header, whose last byte names the owner; the header is
//! `max(16, align)` bytes, so the address keeps the layout's alignment (over-aligned layouts
//! included). Which allocator a block came from is told by address, not by a header that an
//! untagged block does not have: mimalloc answers whether a pointer is in its heap
//! (`mi_is_in_heap_region`, one page-map lookup), and a block outside it is a framed one.
//! While no thread was ever tagged, every block is mimalloc's and that lookup is skipped.
//!
//! A `realloc` is an allocation by the calling thread: a block grown by the owner that
//! allocated it is resized in place (its header moves with it); any other (an untagged block
//! grown by a tagged thread, a framed block grown by another owner or by an untagged thread)
//! is allocated anew as the calling thread allocates, copied, and freed where it came from.
//! Zero-size layouts never reach a global allocator (the caller's contract); a framed one
//! would still be a valid, header-only frame.

#![allow(
    unsafe_code,
    reason = "a global allocator is unsafe by contract; each block says why it holds"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

use mimalloc::MiMalloc;

use crate::{added, removed, slot, tracking};

/// The smallest header: the system allocator's guaranteed alignment on 64-bit targets.
const MIN_HEADER: usize = 16;

/// The global allocator that counts tagged threads' allocations by owner.
pub struct Accounting;

/// The frame around a block of `layout` and the header's length: header and frame alignment
/// are both `max(MIN_HEADER, align)`, a power of two, so the block after the header is aligned.
fn frame(layout: Layout) -> Option<(Layout, usize)> {
    let header = layout.align().max(MIN_HEADER);
    let size = layout.size().checked_add(header)?;
    let frame = Layout::from_size_align(size, header).ok()?;
    Some((frame, header))
}

/// Whether `block` came from mimalloc (otherwise it is framed).
fn is_mimalloc(block: *mut u8) -> bool {
    // SAFETY: a pure lookup of the address in mimalloc's page map; it does not dereference it.
    !tracking() || unsafe { libmimalloc_sys::mi_is_in_heap_region(block.cast()) }
}

/// A framed block of `layout` owned by `owner`, or null.
///
/// # Safety
/// `layout` has a non-zero size (the `GlobalAlloc` contract).
unsafe fn alloc_framed(owner: u8, layout: Layout, zeroed: bool) -> *mut u8 {
    let Some((frame, header)) = frame(layout) else {
        return ptr::null_mut();
    };
    // SAFETY: `frame` is at least `header` ≥ 16 bytes, never zero-sized.
    let base = unsafe {
        if zeroed {
            System.alloc_zeroed(frame)
        } else {
            System.alloc(frame)
        }
    };
    if base.is_null() {
        return base;
    }
    // SAFETY: the frame holds `header` bytes before the block, so `block - 1` is in the frame.
    let block = unsafe { base.add(header) };
    // SAFETY: as above: the header's last byte is ours to write.
    unsafe { block.sub(1).write(owner) };
    added(owner, layout.size());
    block
}

/// Frees the framed `block` of `layout`, counting it off its owner.
///
/// # Safety
/// `block` came from [`alloc_framed`] (or a resize of it) with `layout`.
unsafe fn dealloc_framed(block: *mut u8, layout: Layout) {
    let Some((frame, header)) = frame(layout) else {
        return;
    };
    // SAFETY: the owner byte written at allocation, just before the block.
    let owner = unsafe { block.sub(1).read() };
    removed(owner, layout.size());
    // SAFETY: `block - header` is the frame's start, allocated by `System` with `frame`.
    unsafe { System.dealloc(block.sub(header), frame) };
}

// SAFETY: every block comes from mimalloc or the system allocator with a layout they accept,
// is returned to the one it came from, and keeps the requested size and alignment.
unsafe impl GlobalAlloc for Accounting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match slot() {
            // SAFETY: forwarded under the caller's contract.
            0 => unsafe { MiMalloc.alloc(layout) },
            // SAFETY: forwarded under the caller's contract.
            owner => unsafe { alloc_framed(owner, layout, false) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match slot() {
            // SAFETY: forwarded under the caller's contract.
            0 => unsafe { MiMalloc.alloc_zeroed(layout) },
            // SAFETY: forwarded under the caller's contract.
            owner => unsafe { alloc_framed(owner, layout, true) },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if is_mimalloc(block) {
            // SAFETY: a mimalloc block, freed with the layout it was allocated with.
            unsafe { MiMalloc.dealloc(block, layout) }
        } else {
            // SAFETY: not mimalloc's, so framed by `alloc_framed` with this layout.
            unsafe { dealloc_framed(block, layout) }
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let owner = slot();
        let from_mimalloc = is_mimalloc(block);
        if owner == 0 && from_mimalloc {
            // SAFETY: a mimalloc block resized by mimalloc, under the caller's contract.
            return unsafe { MiMalloc.realloc(block, layout, new_size) };
        }
        // SAFETY: framed blocks have their owner byte just before them.
        if !from_mimalloc && owner != 0 && unsafe { block.sub(1).read() } == owner {
            // SAFETY: a framed block of this owner, resized within the system allocator.
            return unsafe { resize_framed(owner, block, layout, new_size) };
        }
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_size` is non-zero (the caller's contract).
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks hold at least the smaller size and do not overlap.
            unsafe { ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size)) };
            // SAFETY: `block` was allocated by this allocator with `layout`.
            unsafe { self.dealloc(block, layout) };
        }
        moved
    }
}

/// Resizes the framed `block` of `owner` to `new_size`, header and all.
///
/// # Safety
/// `block` is framed with `layout` and owned by `owner`; `new_size` is non-zero and valid with
/// `layout.align()`.
unsafe fn resize_framed(owner: u8, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    let Some((frame, header)) = frame(layout) else {
        return ptr::null_mut();
    };
    let Some(new_frame_size) = new_size.checked_add(header) else {
        return ptr::null_mut();
    };
    // SAFETY: the frame was allocated by `System` with `frame`; the new size keeps its
    // alignment valid. `realloc` copies the header (and the owner byte) with the block.
    let base = unsafe { System.realloc(block.sub(header), frame, new_frame_size) };
    if base.is_null() {
        return base;
    }
    if new_size >= layout.size() {
        added(owner, new_size - layout.size());
    } else {
        removed(owner, layout.size() - new_size);
    }
    // SAFETY: the new frame starts with the same `header` bytes.
    unsafe { base.add(header) }
}
