//! [`AlignedBuf`]: the only buffer type that crosses the device boundary.
//!
//! Holds bytes aligned to [`BLOCK_SIZE`], a multiple of [`BLOCK_SIZE`]
//! long, so they can be handed to `O_DIRECT` I/O and to the kernel through
//! io_uring without copying: either one heap allocation of its own, or
//! (see [`AlignedBuf::share`]) a caller's immutable `Bytes` that already
//! are aligned, written from where they lie. Shared bytes are never
//! written: mutable access first copies them into an allocation of its
//! own. Freed allocations whose length is a power of two (one block to
//! 1 MiB) wait in a bounded pool for the next allocation of that length
//! (`buf_pool`). Fault model: allocation failure aborts the process (as for any
//! Rust allocation); nothing here performs I/O.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use bytes::Bytes;

use crate::BLOCK_SIZE;

const ALIGN: usize = BLOCK_SIZE as usize;

/// Heap buffer aligned to [`BLOCK_SIZE`] whose length is a multiple of
/// [`BLOCK_SIZE`].
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The owner of the bytes when they are a caller's (`share`); `None`
    /// when `ptr` is an allocation of ours.
    shared: Option<Bytes>,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like a Box<[u8]>, or
// holds a `Bytes` (Send + Sync) whose bytes it only reads.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zero-filled buffer of `len` bytes rounded up to a multiple of
    /// [`BLOCK_SIZE`].
    pub fn zeroed(len: usize) -> Self {
        // SAFETY: zero-filled, so every byte is initialised.
        unsafe { Self::allocate(round_up(len), true) }
    }

    /// A buffer of `len` bytes rounded up to a multiple of [`BLOCK_SIZE`],
    /// not cleared: a device read fills it, so zeroing first would only
    /// cost a pass over the memory.
    ///
    /// # Safety
    /// Every byte is written through [`AlignedBuf::as_mut_ptr`] (by the
    /// kernel) before the buffer is read through `Deref`/`DerefMut` or
    /// handed to safe code; a buffer whose read failed is only dropped.
    pub(crate) unsafe fn for_read(len: usize) -> Self {
        // SAFETY: the caller's contract is `allocate`'s.
        unsafe { Self::allocate(round_up(len), false) }
    }

    /// An allocation of `len` bytes (a multiple of [`BLOCK_SIZE`]),
    /// zero-filled if `zero`.
    ///
    /// # Safety
    /// Unless `zero`, the caller initialises every byte before the buffer
    /// is read or dropped into safe code's hands.
    unsafe fn allocate(len: usize, zero: bool) -> Self {
        if len == 0 {
            return Self {
                ptr: dangling(),
                len: 0,
                shared: None,
            };
        }
        let layout = layout(len);
        if let Some(ptr) = crate::buf_pool::take(layout) {
            if zero {
                // SAFETY: the pooled allocation holds `len` bytes.
                unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
            }
            return Self {
                ptr,
                len,
                shared: None,
            };
        }
        // SAFETY: layout has non-zero size.
        let raw = unsafe {
            if zero {
                alloc::alloc_zeroed(layout)
            } else {
                alloc::alloc(layout)
            }
        };
        match NonNull::new(raw) {
            Some(ptr) => Self {
                ptr,
                len,
                shared: None,
            },
            None => alloc::handle_alloc_error(layout),
        }
    }

    /// `data` to be written: the bytes where they lie, without a copy, if
    /// they start on a [`BLOCK_SIZE`] boundary and are a whole number of
    /// blocks long (a write buffer of that size from the allocator
    /// usually is); otherwise a copy, zero-padded, as
    /// [`from_slice`](Self::from_slice).
    pub fn share(data: Bytes) -> Self {
        if !data.is_empty() && (data.as_ptr() as usize) % ALIGN == 0 && data.len() % ALIGN == 0 {
            if let Some(ptr) = NonNull::new(data.as_ptr().cast_mut()) {
                return Self {
                    ptr,
                    len: data.len(),
                    shared: Some(data),
                };
            }
        }
        Self::from_slice(&data)
    }

    /// The buffer as `Bytes`, without a copy: shared bytes are handed
    /// back, an allocation of our own becomes the `Bytes`' owner (and is
    /// freed with its last clone). Such `Bytes`, or a block-aligned slice
    /// of them, go back to the device through [`share`](Self::share)
    /// without a copy.
    pub fn into_bytes(mut self) -> Bytes {
        match self.shared.take() {
            Some(data) => {
                // Nothing of our own left to free (see `Drop`).
                self.len = 0;
                data
            }
            None => Bytes::from_owner(self),
        }
    }

    /// Make the bytes an allocation of our own (a copy) if they are
    /// shared, before anything may write them.
    fn make_unique(&mut self) {
        if self.shared.is_some() {
            *self = Self::from_slice(self);
        }
    }

    /// A copy of `data`, zero-padded to a multiple of [`BLOCK_SIZE`].
    pub fn from_slice(data: &[u8]) -> Self {
        Self::concat(&[data])
    }

    /// `parts` one after another, zero-padded to a multiple of
    /// [`BLOCK_SIZE`]. Only the padding is zeroed: on the write path the
    /// bytes are copied once, not cleared and then copied.
    pub fn concat(parts: &[&[u8]]) -> Self {
        let len = round_up(parts.iter().map(|p| p.len()).sum());
        // SAFETY: `fill` writes every byte before the buffer is returned.
        let mut buf = unsafe { Self::allocate(len, false) };
        // SAFETY: the buffer holds `len` bytes, at least the parts' total.
        unsafe { fill(buf.as_mut_ptr(), len, parts) };
        buf
    }

    /// Length in bytes (a multiple of [`BLOCK_SIZE`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer to the first byte (aligned to [`BLOCK_SIZE`]).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Mutable raw pointer to the first byte (aligned to [`BLOCK_SIZE`]);
    /// shared bytes are copied first.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.make_unique();
        self.ptr.as_ptr()
    }
}

/// Write `parts` one after another at `dst`, then zeroes up to `len`.
///
/// # Safety
/// `dst` is valid for `len` bytes of writes, `len` is at least the parts'
/// total, and no part overlaps `dst..dst + len`.
unsafe fn fill(dst: *mut u8, len: usize, parts: &[&[u8]]) {
    let mut at = 0;
    for part in parts {
        // SAFETY: `at + part.len()` is within `len` (the caller's bound)
        // and the part does not overlap the destination.
        unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), dst.add(at), part.len()) };
        at += part.len();
    }
    // SAFETY: `at..len` is within the destination.
    unsafe { std::ptr::write_bytes(dst.add(at), 0, len - at) };
}

fn round_up(len: usize) -> usize {
    len.div_ceil(ALIGN) * ALIGN
}

fn layout(len: usize) -> Layout {
    match Layout::from_size_align(len, ALIGN) {
        Ok(l) => l,
        // Only reachable for lengths near isize::MAX, which no allocator
        // could satisfy anyway.
        Err(_) => panic!("AlignedBuf: length {len} too large"),
    }
}

fn dangling() -> NonNull<u8> {
    // An aligned, non-null address that is never dereferenced (len == 0).
    NonNull::new(std::ptr::without_provenance_mut(ALIGN)).unwrap_or(NonNull::dangling())
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // Shared bytes go with their `Bytes`.
        if self.len != 0 && self.shared.is_none() {
            // SAFETY: allocated in `allocate` with exactly this layout; the
            // pool frees it or hands it to a later `allocate` of the same.
            unsafe { crate::buf_pool::give(self.ptr, layout(self.len)) }
        }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes (or len == 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.make_unique();
        // SAFETY: as above, and we hold the unique owner mutably (never
        // shared bytes: `make_unique` copied them).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for AlignedBuf {}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_alignment() {
        let b = AlignedBuf::zeroed(1);
        assert_eq!(b.len(), ALIGN);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
        let e = AlignedBuf::zeroed(0);
        assert!(e.is_empty());
        assert_eq!(&*e, &[] as &[u8]);
        let s = AlignedBuf::from_slice(&[7u8; 5000]);
        assert_eq!(s.len(), 2 * ALIGN);
        assert!(s[..5000].iter().all(|&x| x == 7));
        assert!(s[5000..].iter().all(|&x| x == 0));
        assert_eq!(s.clone(), s);
    }

    /// Aligned `Bytes` (a slice of an `AlignedBuf`) and an unaligned one.
    fn aligned_bytes(len: usize, fill: u8) -> Bytes {
        let mut b = AlignedBuf::zeroed(len + ALIGN);
        b.fill(fill);
        Bytes::from_owner(b)
    }

    #[test]
    fn aligned_bytes_are_shared_and_copied_only_before_a_write() {
        let whole = aligned_bytes(2 * ALIGN, 5);
        let data = whole.slice(ALIGN..3 * ALIGN);
        let mut buf = AlignedBuf::share(data.clone());
        assert!(buf.shared.is_some());
        assert_eq!(buf.as_ptr(), data.as_ptr(), "no copy");
        assert_eq!(&buf[..], &data[..]);
        drop(buf.clone());
        // Writing through the buffer copies first; the caller's bytes stay.
        buf[0] = 9;
        assert!(buf.shared.is_none());
        assert_ne!(buf.as_ptr(), data.as_ptr());
        assert_eq!(buf.as_ptr() as usize % ALIGN, 0);
        assert_eq!(data[0], 5);
        assert_eq!(buf[0], 9);
        assert!(buf[1..].iter().all(|&x| x == 5));
        let mut raw = AlignedBuf::share(data.clone());
        assert_ne!(raw.as_mut_ptr().cast_const(), data.as_ptr());
        assert!(raw.shared.is_none());
        drop(raw);
        drop(whole);
        assert!(data.iter().all(|&x| x == 5), "the bytes outlive both");
    }

    #[test]
    fn into_bytes_keeps_the_allocation_and_shares_back_without_a_copy() {
        let own = AlignedBuf::from_slice(&[3u8; 2 * ALIGN]);
        let ptr = own.as_ptr();
        let bytes = own.into_bytes();
        assert_eq!(bytes.as_ptr(), ptr, "no copy into Bytes");
        assert_eq!(&bytes[..], &[3u8; 2 * ALIGN][..]);
        let second = bytes.slice(ALIGN..);
        let back = AlignedBuf::share(second.clone());
        assert_eq!(back.as_ptr(), second.as_ptr(), "no copy back");
        // Shared bytes come back as they went in; dropping the buffer they
        // came through frees nothing (the bytes are still read after).
        let again = back.into_bytes();
        assert_eq!(again.as_ptr(), second.as_ptr());
        drop(bytes);
        drop(second);
        assert!(again.iter().all(|&x| x == 3));
        assert!(AlignedBuf::zeroed(0).into_bytes().is_empty());
    }

    #[test]
    fn unaligned_or_partial_bytes_are_copied_and_padded() {
        let whole = aligned_bytes(2 * ALIGN, 6);
        for data in [
            whole.slice(1..ALIGN + 1),
            whole.slice(0..ALIGN + 10),
            Bytes::new(),
        ] {
            let buf = AlignedBuf::share(data.clone());
            assert!(buf.shared.is_none());
            assert_eq!(buf.as_ptr() as usize % ALIGN, 0);
            assert_eq!(buf.len(), data.len().div_ceil(ALIGN) * ALIGN);
            assert_eq!(&buf[..data.len()], &data[..]);
            assert!(buf[data.len()..].iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn freed_buffers_are_reused_clean_and_the_pool_stays_bounded() {
        use crate::{pooled_bytes, MAX_POOLED, POOL_BYTES_PER_CLASS};
        // A length no other test uses, so the pool's class is ours alone.
        const LEN: usize = 256 << 10;
        let first = AlignedBuf::from_slice(&[7u8; LEN]);
        let at = first.as_ptr();
        drop(first);
        // A zeroed buffer of the same length: the same memory, cleared.
        let again = AlignedBuf::zeroed(LEN);
        assert_eq!(again.as_ptr(), at, "not reused");
        assert!(
            again.iter().all(|&x| x == 0),
            "old bytes left in a zeroed buffer"
        );
        // Through `Bytes`, too: given back when its last clone goes.
        drop(again.into_bytes());
        let copy = AlignedBuf::concat(&[&[5u8; 10]]);
        assert!(copy[..10].iter().all(|&x| x == 5));
        assert!(copy[10..].iter().all(|&x| x == 0));
        // Many freed at once: no more than the bound is kept.
        let many: Vec<_> = (0..64).map(|_| AlignedBuf::zeroed(LEN)).collect();
        drop(many);
        let classes = (MAX_POOLED / ALIGN).ilog2() as usize + 1;
        assert!(
            pooled_bytes() <= POOL_BYTES_PER_CLASS * classes,
            "{} bytes pooled",
            pooled_bytes()
        );
        let again = AlignedBuf::zeroed(LEN);
        assert!(again.iter().all(|&x| x == 0));
    }

    #[test]
    fn concat_copies_parts_in_order_and_zeroes_the_padding() {
        let b = AlignedBuf::concat(&[&[1u8; 10], &[], &[2u8; ALIGN]]);
        assert_eq!(b.len(), 2 * ALIGN);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert!(b[..10].iter().all(|&x| x == 1));
        assert!(b[10..10 + ALIGN].iter().all(|&x| x == 2));
        assert!(b[10 + ALIGN..].iter().all(|&x| x == 0));
        // Over memory that is not zero (a fresh allocation may happen to
        // be), `fill` still leaves zeros after the parts.
        let mut dirty = AlignedBuf::zeroed(2 * ALIGN);
        dirty.fill(0xAB);
        // SAFETY: the buffer holds 2 * ALIGN bytes; the parts are separate.
        unsafe {
            fill(
                dirty.as_mut_ptr(),
                dirty.len(),
                &[&[1u8; 10], &[2u8; ALIGN]],
            )
        };
        assert_eq!(&dirty[..], &b[..]);
        let exact = AlignedBuf::concat(&[&[3u8; ALIGN]]);
        assert_eq!(exact.len(), ALIGN);
        assert!(exact.iter().all(|&x| x == 3));
        assert!(AlignedBuf::concat(&[]).is_empty());
        assert!(AlignedBuf::concat(&[&[]]).is_empty());
    }
}
