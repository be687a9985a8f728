//! [`LoopRing`]: durable writes submitted from an async event loop and
//! completed on that same loop, with no other thread between the caller
//! and the kernel.
//!
//! The engines of `FileDevice` hand every completion to a reaper thread,
//! which wakes the caller's executor: two thread hand-offs per request. A
//! commit log written one record at a time from an event loop pays them on
//! every commit. A `LoopRing` is a small io_uring of its own whose
//! completions signal an eventfd that the loop's reactor watches
//! ([`AsyncFd`]): the loop submits (`io_uring_enter`), goes on with its
//! other work, and reaps the completion itself when the eventfd fires.
//!
//! Every write is `RWF_DSYNC`: complete means durable. Short writes are
//! continued from where they stopped and `EINTR`/`EAGAIN` retried, as the
//! engines do. At most [`LOOP_RING_DEPTH`] writes are in flight; a submit
//! beyond that is refused (the caller bounds its own writes in flight).
//!
//! Fault model: an OS error fails only the write that hit it. Dropping the
//! ring waits, blocking, for the writes the kernel holds (their buffers
//! must outlive them); their outcomes are then lost, so the owner reaps
//! with [`LoopRing::drain_blocking`] first when it needs them.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};

use crate::{check_range, AlignedBuf, DeviceError};

/// Writes in flight on one ring, at most.
pub const LOOP_RING_DEPTH: usize = 8;
/// Retries of `EINTR`/`EAGAIN` before a write is failed.
pub(super) const MAX_RETRIES: u32 = 1000;

/// One write in flight (here and on a `BulkRing`).
pub(super) struct Write {
    pub offset: u64,
    pub buf: AlignedBuf,
    /// Bytes already written.
    pub done: usize,
    pub retries: u32,
}

impl Write {
    pub fn new(offset: u64, buf: AlignedBuf) -> Self {
        Self {
            offset,
            buf,
            done: 0,
            retries: 0,
        }
    }

    /// Count a completion's result `res` (bytes written, or `-errno`):
    /// `Ok` with the write whole or short (continue it), `Err` if it
    /// failed, or was interrupted more than [`MAX_RETRIES`] times.
    pub fn advance(&mut self, res: i32) -> io::Result<()> {
        if res == -libc::EINTR || res == -libc::EAGAIN {
            self.retries += 1;
            (self.retries <= MAX_RETRIES)
                .then_some(())
                .ok_or_else(|| io::Error::other(format!("write retried {MAX_RETRIES} times")))
        } else if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else if res == 0 {
            Err(io::Error::from(io::ErrorKind::WriteZero))
        } else {
            self.done += res as usize;
            Ok(())
        }
    }

    pub fn is_whole(&self) -> bool {
        self.done >= self.buf.len()
    }
}

struct State {
    ring: IoUring,
    /// In flight, by the caller's token.
    writes: HashMap<u64, Write>,
}

/// See the module docs.
pub struct LoopRing {
    state: Mutex<State>,
    eventfd: AsyncFd<OwnedFd>,
    fd: RawFd,
    size: u64,
    /// Keeps `fd` open for as long as the ring may reference it.
    _file: Arc<File>,
}

/// The outcome of one write: the caller's token and its result.
pub type Completion = (u64, Result<(), DeviceError>);

impl LoopRing {
    /// A ring writing to `file` (`size` usable bytes). Must be called
    /// inside a tokio runtime with I/O enabled; the ring's completions are
    /// then reaped by whichever task awaits [`LoopRing::completions`].
    pub(crate) fn new(file: Arc<File>, size: u64) -> io::Result<Self> {
        let ring = IoUring::new((LOOP_RING_DEPTH * 2) as u32)?;
        let eventfd = ring_eventfd(&ring)?;
        Ok(Self {
            state: Mutex::new(State {
                ring,
                writes: HashMap::new(),
            }),
            eventfd,
            fd: file.as_raw_fd(),
            size,
            _file: file,
        })
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.state.lock().writes.len()
    }

    /// Start writing `buf` at `offset` durably; its completion carries
    /// `token`, which must not be in flight already.
    pub fn submit(&self, token: u64, offset: u64, buf: AlignedBuf) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size)?;
        let mut st = self.state.lock();
        if st.writes.len() >= LOOP_RING_DEPTH || st.writes.contains_key(&token) {
            let why = format!(
                "loop ring: write {token} refused ({} in flight, at most {LOOP_RING_DEPTH})",
                st.writes.len()
            );
            return Err(io_error(offset, buf.len(), io::Error::other(why)));
        }
        let write = Write::new(offset, buf);
        let len = write.buf.len();
        push(&mut st.ring, self.fd, token, &write)?;
        // Kept from here on, whatever `enter` says: the entry is queued,
        // so the buffer must outlive it. If entering fails, a later enter
        // (before every wait for completions) may still submit it; the
        // caller has failed by then and acknowledges nothing of it.
        st.writes.insert(token, write);
        enter(&st.ring).map_err(|e| io_error(offset, len, e))
    }

    /// Wait for at least one write to complete; returns every write that
    /// completed. Cancel-safe: completions are reaped only in the poll that
    /// returns them.
    pub async fn completions(&self) -> Vec<Completion> {
        loop {
            self.enter_queued();
            let done = self.reap();
            if !done.is_empty() {
                return done;
            }
            let Ok(ready) = self.eventfd.readable().await else {
                // The reactor is gone (runtime shutting down): nothing will
                // wake this task again.
                return std::future::pending().await;
            };
            consume_eventfd(ready);
        }
    }

    /// Block until every write in flight completed; returns them all.
    ///
    /// It holds the ring while it waits: a task reaping on another thread
    /// waits with it (this is for detaching and dropping only).
    pub fn drain_blocking(&self) -> Vec<Completion> {
        let mut out = Vec::new();
        let mut errors = 0u32;
        loop {
            out.extend(self.reap());
            let mut st = self.state.lock();
            if st.writes.is_empty() {
                return out;
            }
            if let Err(e) = st.ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    errors += 1;
                    if errors > MAX_RETRIES {
                        // The buffers of what is left are leaked rather
                        // than freed under the kernel.
                        tracing::error!(error = %e, "loop ring: giving up waiting for {} writes", st.writes.len());
                        std::mem::forget(std::mem::take(&mut st.writes));
                        return out;
                    }
                    drop(st);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }

    /// Enter what is queued and not yet submitted (an earlier enter that
    /// failed, or a continuation's); failures are left for the next call.
    fn enter_queued(&self) {
        let mut st = self.state.lock();
        if st.ring.submission().is_empty() {
            return;
        }
        if let Err(e) = enter(&st.ring) {
            tracing::warn!(error = %e, "loop ring: entering queued writes");
        }
    }

    /// Take every completion queued: finished writes are returned, short
    /// or interrupted ones continued.
    fn reap(&self) -> Vec<Completion> {
        let mut st = self.state.lock();
        let cqes: Vec<(u64, i32)> = st
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let mut out = Vec::new();
        let mut resubmit = false;
        for (token, res) in cqes {
            let Some(mut w) = st.writes.remove(&token) else {
                tracing::error!("loop ring: a completion for unknown write {token}");
                continue;
            };
            match w.advance(res) {
                Err(e) => out.push((token, Err(io_error(w.offset, w.buf.len(), e)))),
                Ok(()) if w.is_whole() => out.push((token, Ok(()))),
                Ok(()) => match push(&mut st.ring, self.fd, token, &w) {
                    Ok(()) => {
                        st.writes.insert(token, w);
                        resubmit = true;
                    }
                    Err(e) => out.push((token, Err(e))),
                },
            }
        }
        if resubmit {
            if let Err(e) = enter(&st.ring) {
                tracing::warn!(error = %e, "loop ring: resubmitting a short write");
            }
        }
        out
    }
}

impl Drop for LoopRing {
    fn drop(&mut self) {
        let lost = self.drain_blocking();
        if !lost.is_empty() {
            tracing::debug!("loop ring dropped with {} writes unreaped", lost.len());
        }
    }
}

/// Queue the rest of `w` as a `RWF_DSYNC` write.
fn push(ring: &mut IoUring, fd: RawFd, token: u64, w: &Write) -> Result<(), DeviceError> {
    let left = (w.buf.len() - w.done) as u32;
    // SAFETY (pointer arithmetic): `done` < the buffer's length.
    let ptr = unsafe { w.buf.as_ptr().add(w.done) };
    let entry = opcode::Write::new(types::Fd(fd), ptr, left)
        .offset(w.offset + w.done as u64)
        .rw_flags(libc::RWF_DSYNC)
        .build()
        .user_data(token);
    // SAFETY: the buffer is owned by the `Write` kept in `writes` (its heap
    // memory does not move) until this entry's completion is reaped.
    unsafe { ring.submission().push(&entry) }.map_err(|_| {
        let full = io::Error::other("loop ring: submission queue full");
        io_error(w.offset, w.buf.len(), full)
    })
}

fn io_error(offset: u64, len: usize, source: io::Error) -> DeviceError {
    DeviceError::Io {
        op: "durable write",
        offset,
        len: len as u64,
        source,
    }
}

/// `io_uring_enter` until everything queued is submitted; transient
/// errors (`EINTR`, `EAGAIN`, `EBUSY`) are retried a bounded number of
/// times.
fn enter(ring: &IoUring) -> io::Result<()> {
    let mut retries = 0;
    loop {
        match ring.submit() {
            // SAFETY: the submission queue is only touched under the
            // state's lock, which every caller holds.
            Ok(_) if unsafe { ring.submission_shared() }.is_empty() => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) && retries < MAX_RETRIES => {}
            Err(e) => return Err(e),
        }
        retries += 1;
        if retries > MAX_RETRIES {
            return Err(io::Error::other("io_uring_enter submitted nothing"));
        }
    }
}

/// A new `eventfd`, registered with `ring` (signalled at every completion)
/// and with the calling runtime's reactor.
pub(super) fn ring_eventfd(ring: &IoUring) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: eventfd returns a new descriptor we then own, or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let efd = unsafe { OwnedFd::from_raw_fd(raw) };
    ring.submitter().register_eventfd(efd.as_raw_fd())?;
    // SAFETY: the `AsyncFd` owns `efd`, which nothing else closes or
    // replaces while it is registered.
    Ok(unsafe { AsyncFd::register_with_interest(efd, tokio::io::Interest::READABLE)? })
}

/// A ring's `eventfd` fired: reset its counter and clear the reactor's
/// readiness. One read empties the counter, and whatever completes after it
/// signals the `eventfd` again, a new edge the reactor sees; so readiness
/// is cleared at once rather than found stale by a second read.
pub(super) fn consume_eventfd(mut ready: AsyncFdReadyGuard<'_, OwnedFd>) {
    let mut count = [0u8; 8];
    // SAFETY: reading 8 bytes into an 8-byte buffer. An error (the counter
    // already zero) leaves nothing to do.
    unsafe { libc::read(ready.get_inner().as_raw_fd(), count.as_mut_ptr().cast(), 8) };
    ready.clear_ready();
}
