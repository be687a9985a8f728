//! Freed block-aligned allocations kept for reuse (see [`crate::AlignedBuf`]).
//!
//! On an OSD's write path every 4 KiB write gets an aligned copy of its
//! data (the deferred write's block, see the store's `try_deferred`), made
//! on the event loop and freed by the deferred thread once applied. From
//! the allocator each came back as fresh memory: an aligned block goes
//! through its slow over-allocating path, and the allocator returns freed
//! pages to the system after a few milliseconds (the binary's allocator
//! tuning, kept short for the daemon's resident size), so each one faulted
//! its page in again. Here freed buffers whose length is a power of two
//! from one block to [`MAX_POOLED`] wait, up to [`POOL_BYTES_PER_CLASS`]
//! per length, for the next allocation of that length, from any thread.
//!
//! Must never hand out a buffer still in use (only `AlignedBuf`'s drop
//! gives one back), nor keep more than its bound: beyond it, a buffer goes
//! back to the allocator.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use parking_lot::Mutex;

const MIN_POOLED: usize = crate::BLOCK_SIZE as usize;
/// The largest length pooled.
pub const MAX_POOLED: usize = 1 << 20;
const CLASSES: usize = (MAX_POOLED / MIN_POOLED).trailing_zeros() as usize + 1;
/// Bytes of freed buffers kept per length, at most.
pub const POOL_BYTES_PER_CLASS: usize = 2 << 20;

struct Class(Mutex<Vec<NonNull<u8>>>);

// SAFETY: the pointers are allocations owned by the pool, not shared with
// anyone while in it; the mutex orders every access.
unsafe impl Sync for Class {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Class = Class(Mutex::new(Vec::new()));
static POOL: [Class; CLASSES] = [EMPTY; CLASSES];

/// The class of a `len`-byte buffer, if pooled: a power of two from one
/// block to [`MAX_POOLED`].
fn class_of(len: usize) -> Option<usize> {
    if !(MIN_POOLED..=MAX_POOLED).contains(&len) || !len.is_power_of_two() {
        return None;
    }
    Some((len / MIN_POOLED).trailing_zeros() as usize)
}

fn capacity(class: usize) -> usize {
    POOL_BYTES_PER_CLASS / (MIN_POOLED << class)
}

/// A freed allocation of exactly `layout`, if one is waiting. Its
/// contents are whatever its last user left.
pub(crate) fn take(layout: Layout) -> Option<NonNull<u8>> {
    let class = class_of(layout.size())?;
    POOL[class].0.lock().pop()
}

/// Give back an allocation of `layout`: kept for reuse if its length is
/// pooled and the pool has room, freed otherwise.
///
/// # Safety
/// `ptr` was allocated with `layout` (by the global allocator or handed
/// out by [`take`] for it) and is not used after this call.
pub(crate) unsafe fn give(ptr: NonNull<u8>, layout: Layout) {
    if let Some(class) = class_of(layout.size()) {
        let mut free = POOL[class].0.lock();
        if free.len() < capacity(class) {
            free.push(ptr);
            return;
        }
    }
    // SAFETY: allocated with `layout` (the caller's contract), unused.
    unsafe { alloc::dealloc(ptr.as_ptr(), layout) };
}

/// Bytes the pool holds now.
pub fn pooled_bytes() -> usize {
    POOL.iter()
        .enumerate()
        .map(|(i, c)| c.0.lock().len() * (MIN_POOLED << i))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_powers_of_two_from_a_block_to_the_max_are_pooled() {
        assert_eq!(class_of(0), None);
        assert_eq!(class_of(4096), Some(0));
        assert_eq!(class_of(8192), Some(1));
        assert_eq!(class_of(12288), None);
        assert_eq!(class_of(MAX_POOLED), Some(CLASSES - 1));
        assert_eq!(class_of(2 * MAX_POOLED), None);
        assert_eq!(capacity(0), 512);
        assert_eq!(capacity(CLASSES - 1), 2);
    }
}
