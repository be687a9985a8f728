//! [`BulkRing`]: many writes from one thread that waits for them, on an
//! io_uring of that thread's own.
//!
//! Through the engine, a thread writing a round of blocks hands each group
//! to the engine's ring, sleeps on a futex, and is woken by the engine's
//! completion thread: two thread switches per group, and a completion
//! thread running for nobody else. Here the writing thread submits and
//! waits in the same `io_uring_enter`, and the kernel's completion work
//! runs in that thread when it asks for completions (`DEFER_TASKRUN`,
//! where the kernel has it), so it sleeps once per batch of completions
//! and no other thread runs.
//!
//! Writes are plain (not durable until a flush). Short writes continue from
//! where they stopped; `EINTR`/`EAGAIN` are retried a bounded number of
//! times. The first error stops new writes; those in flight finish (its
//! buffers must outlive them) and the error is returned. A wait that fails
//! for good leaves the ring broken and never used again.
//!
//! Must never: free a buffer the kernel may still write from.

use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::thread::ThreadId;

use io_uring::{opcode, types, IoUring};

use super::loop_ring::{Write, MAX_RETRIES};
use crate::{check_writes, AlignedBuf, DeviceError};

/// Most submission queue entries of a ring: the most writes in flight.
const MAX_ENTRIES: usize = 4096;
/// Bytes one submission entry writes at most (its length is 32 bits).
const MAX_ENTRY_BYTES: usize = (u32::MAX as usize) & !4095;
/// See the module docs. Used only by the thread that made it (a
/// single-issuer ring refuses any other).
pub(crate) struct BulkRing {
    ring: IoUring,
    owner: ThreadId,
    /// Submission queue entries: the most writes in flight.
    entries: usize,
    /// Set when a call gave up with writes still in the kernel: their
    /// completions must never be taken for a later call's.
    broken: bool,
    fd: RawFd,
    /// Keeps `fd` open for as long as the ring may reference it.
    _file: Arc<File>,
}

impl BulkRing {
    /// A ring for the calling thread, for up to `depth` writes in flight.
    pub(crate) fn new(file: Arc<File>, depth: usize) -> io::Result<Self> {
        let entries = depth.clamp(8, MAX_ENTRIES).next_power_of_two() as u32;
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::new(entries))?;
        Ok(Self {
            ring,
            owner: std::thread::current().id(),
            entries: entries as usize,
            broken: false,
            fd: file.as_raw_fd(),
            _file: file,
        })
    }

    /// Whether the calling thread may use this ring.
    pub(crate) fn is_mine(&self) -> bool {
        self.owner == std::thread::current().id() && !self.broken
    }

    /// Whether `depth` writes fit in flight at once.
    pub(crate) fn holds(&self, depth: usize) -> bool {
        depth.min(MAX_ENTRIES) <= self.entries
    }

    /// Write all of `writes` (`size`: the device's usable bytes), at most
    /// `depth` in flight, blocking until every one is done or the first
    /// error.
    pub(crate) fn write_all(
        &mut self,
        writes: Vec<(u64, AlignedBuf)>,
        size: u64,
        depth: usize,
    ) -> Result<(), DeviceError> {
        debug_assert!(self.is_mine(), "a bulk ring used by another thread");
        let depth = depth.clamp(1, self.entries);
        check_writes(&writes, size)?;
        // Never dropped while the kernel may hold its buffers: freed at the
        // end with nothing in flight, leaked if anything unwinds.
        let mut writes: ManuallyDrop<Vec<Write>> = ManuallyDrop::new(
            writes
                .into_iter()
                .filter(|(_, buf)| !buf.is_empty())
                .map(|(offset, buf)| Write::new(offset, buf))
                .collect(),
        );
        let mut next = 0;
        let mut in_flight = 0;
        let mut failed: Option<DeviceError> = None;
        let mut wait_errors = 0;
        while next < writes.len() && failed.is_none() || in_flight > 0 {
            while failed.is_none() && next < writes.len() && in_flight < depth {
                if let Err(e) = push(&mut self.ring, self.fd, next, &writes[next]) {
                    failed = Some(e);
                    break;
                }
                next += 1;
                in_flight += 1;
            }
            if in_flight == 0 {
                break;
            }
            // Refill once a quarter of the window is done (or all of what
            // is left): one sleep per batch of completions.
            let left = writes.len() - next;
            let want = if left == 0 || failed.is_some() {
                in_flight
            } else {
                (depth / 4).clamp(1, in_flight)
            };
            if let Err(e) = self.ring.submit_and_wait(want) {
                match e.raw_os_error() {
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY) if wait_errors < MAX_RETRIES => {
                        wait_errors += 1;
                    }
                    _ => {
                        // The kernel may still hold buffers: they stay
                        // leaked (never dropped), and the ring is never
                        // used again.
                        tracing::error!(error = %e, "bulk ring: giving up on {in_flight} writes in flight");
                        self.broken = true;
                        return Err(io_error(0, 0, e));
                    }
                }
            }
            let cqes: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            if !cqes.is_empty() {
                wait_errors = 0;
            }
            for (token, res) in cqes {
                in_flight -= 1;
                let w = &mut writes[token as usize];
                match w.advance(res) {
                    Ok(()) if w.is_whole() => {}
                    Ok(()) => match push(&mut self.ring, self.fd, token as usize, w) {
                        Ok(()) => in_flight += 1,
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    },
                    Err(e) => {
                        failed.get_or_insert(io_error(w.offset, w.buf.len(), e));
                    }
                }
            }
        }
        // SAFETY: nothing is in flight (the loop ends only then), so the
        // kernel holds none of the buffers; `writes` is not used again.
        unsafe { ManuallyDrop::drop(&mut writes) };
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Queue the rest of `w` (write number `token`).
fn push(ring: &mut IoUring, fd: RawFd, token: usize, w: &Write) -> Result<(), DeviceError> {
    // One entry writes at most this much; the rest goes on as a short write.
    let left = (w.buf.len() - w.done).min(MAX_ENTRY_BYTES) as u32;
    // SAFETY (pointer arithmetic): `done` < the buffer's length.
    let ptr = unsafe { w.buf.as_ptr().add(w.done) };
    let entry = opcode::Write::new(types::Fd(fd), ptr, left)
        .offset(w.offset + w.done as u64)
        .build()
        .user_data(token as u64);
    // SAFETY: the buffer is owned by the caller's `writes`, which outlives
    // every entry: `write_all` returns only with nothing in flight, or
    // leaks them.
    unsafe { ring.submission().push(&entry) }.map_err(|_| {
        io_error(
            w.offset,
            w.buf.len(),
            io::Error::other("bulk ring: submission queue full"),
        )
    })
}

fn io_error(offset: u64, len: usize, source: io::Error) -> DeviceError {
    DeviceError::Io {
        op: "write",
        offset,
        len: len as u64,
        source,
    }
}
