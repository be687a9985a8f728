//! [`LoopReader`]: reads made on a single-threaded event loop, submitted
//! and reaped on that same loop.
//!
//! The `Uring` engine hands every completion to its reaper thread, which
//! then wakes the caller's loop: per read, the reaper's wake-up and an
//! `eventfd` write to the loop's reactor. A `LoopReader` is a ring of its
//! own for one loop, like [`super::LoopRing`] for journal writes: a task on
//! the loop enters the ring once for every read its turn made, and reaps
//! the completions when the ring's eventfd, watched by the loop's reactor,
//! fires. The read's future is then completed by a task of the same loop:
//! no other thread runs.
//!
//! A read is taken only from a task of the loop that made the reader, and
//! not while that thread is held in [`crate::block_on`] (the task that
//! enters and reaps could not run); otherwise, and when
//! [`LOOP_READ_DEPTH`] reads are in flight, [`LoopReader::read`] declines
//! and the caller reads through the device as usual.
//!
//! Fault model: as the engine's. An OS error fails only the read that hit
//! it; short reads are continued and `EINTR`/`EAGAIN` retried. Dropping
//! the reader lets the reads in flight finish on the loop; if the loop is
//! gone, the last owner waits for them, blocking (their buffers must
//! outlive the kernel's use), and they fail as closed if that cannot be
//! done.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};

use io_uring::IoUring;
use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use super::loop_ring::{consume_eventfd, ring_eventfd};
use super::uring::Slots;
use super::Request;
use crate::done;
use crate::{check_range, AlignedBuf, BoxFuture, DeviceError};

/// Reads in flight on one loop's reader, at most; more go through the
/// device's engine.
pub const LOOP_READ_DEPTH: usize = 64;
/// Failed `io_uring_enter` calls tolerated while draining at drop.
const MAX_DRAIN_ERRORS: u32 = 1000;

struct State {
    /// Reads in flight.
    ops: Slots,
    closing: bool,
}

struct Shared {
    ring: IoUring,
    state: Mutex<State>,
    eventfd: AsyncFd<OwnedFd>,
    /// Wakes the loop's task: reads were queued, or the reader closes.
    wake: Notify,
    /// Reads are queued and the task has not entered the ring since.
    enter_pending: AtomicBool,
    /// The loop's thread: the only one whose reads are taken.
    thread: ThreadId,
    fd: RawFd,
    size: u64,
    /// Reads taken, and `io_uring_enter` calls made to submit them.
    reads: AtomicU64,
    enters: AtomicU64,
    /// Keeps `fd` open for as long as the ring may reference it.
    _file: Arc<File>,
}

/// See the module docs. Owned by whoever reads on the loop (a store
/// attached to it); dropping it stops the loop's task once its reads are
/// done.
pub struct LoopReader {
    shared: Arc<Shared>,
}

impl LoopReader {
    /// A reader of `file` (`size` usable bytes) for the calling thread's
    /// loop. Must be called from a task of a current-thread tokio runtime
    /// with I/O enabled, which then runs the reader's task.
    pub(crate) fn new(file: Arc<File>, size: u64) -> io::Result<Self> {
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread {
            return Err(io::Error::other(
                "a loop reader needs a single-threaded runtime",
            ));
        }
        let depth = LOOP_READ_DEPTH as u32;
        let ring = IoUring::new(depth.next_power_of_two())?;
        let eventfd = ring_eventfd(&ring)?;
        let shared = Arc::new(Shared {
            ring,
            state: Mutex::new(State {
                ops: Slots::with_capacity(LOOP_READ_DEPTH),
                closing: false,
            }),
            eventfd,
            wake: Notify::new(),
            enter_pending: AtomicBool::new(false),
            thread: thread::current().id(),
            fd: file.as_raw_fd(),
            size,
            reads: AtomicU64::new(0),
            enters: AtomicU64::new(0),
            _file: file,
        });
        runtime.spawn(run(Arc::clone(&shared)));
        Ok(Self { shared })
    }

    /// Read `len` bytes at `offset` on the loop, or `None` if this read
    /// cannot be taken here (another thread, the loop held in
    /// [`crate::block_on`], the reader full or closing): read through the
    /// device then.
    pub fn read(
        &self,
        offset: u64,
        len: u64,
    ) -> Option<BoxFuture<Result<AlignedBuf, DeviceError>>> {
        let sh = &*self.shared;
        if len == 0
            || crate::exec::blocking()
            || thread::current().id() != sh.thread
            || tokio::runtime::Handle::try_current().is_err()
        {
            return None;
        }
        if let Err(e) = check_range(offset, len, sh.size) {
            return Some(crate::ready(Err(e)));
        }
        let mut st = sh.state.lock();
        if st.closing || st.ops.inflight >= LOOP_READ_DEPTH {
            return None;
        }
        let (tx, fut) = done::read();
        // SAFETY: the buffer is written only by the kernel through its raw
        // pointer and handed back only once every byte has been read into
        // it; a failed read drops it unread.
        let buf = unsafe { AlignedBuf::for_read(len as usize) };
        let req = Request::Read { offset, buf, tx };
        // SAFETY: the submission queue is only touched under `state`'s lock.
        let mut sq = unsafe { sh.ring.submission_shared() };
        if st.ops.admit(sh.fd, &mut sq, req).is_err() {
            return None;
        }
        drop(sq);
        drop(st);
        sh.reads.fetch_add(1, Ordering::Relaxed);
        if !sh.enter_pending.swap(true, Ordering::AcqRel) {
            sh.wake.notify_one();
        }
        Some(fut)
    }

    /// Reads taken so far.
    pub fn reads(&self) -> u64 {
        self.shared.reads.load(Ordering::Relaxed)
    }

    /// `io_uring_enter` calls made to submit them.
    pub fn submit_calls(&self) -> u64 {
        self.shared.enters.load(Ordering::Relaxed)
    }
}

impl Drop for LoopReader {
    fn drop(&mut self) {
        self.shared.state.lock().closing = true;
        self.shared.wake.notify_one();
    }
}

/// The loop's task: enter what the turn queued, reap what completed, wait
/// for the ring's eventfd or more reads; until closed and idle.
async fn run(shared: Arc<Shared>) {
    loop {
        if shared.enter_pending.swap(false, Ordering::AcqRel) {
            enter(&shared);
        }
        reap(&shared);
        {
            let st = shared.state.lock();
            if st.closing && st.ops.inflight == 0 {
                return;
            }
        }
        tokio::select! {
            ready = shared.eventfd.readable() => match ready {
                Ok(ready) => consume_eventfd(ready),
                // The reactor is gone (the runtime is shutting down): the
                // last owner drains what is in flight.
                Err(_) => return,
            },
            _ = shared.wake.notified() => {}
        }
    }
}

/// `io_uring_enter` for whatever is queued. A failure leaves the entries
/// queued; the next read or completion enters again.
fn enter(shared: &Shared) {
    shared.enters.fetch_add(1, Ordering::Relaxed);
    loop {
        match shared.ring.submit() {
            Ok(_) => return,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "loop reader: io_uring submit failed; retried later");
                shared.enter_pending.store(true, Ordering::Release);
                return;
            }
        }
    }
}

/// Complete every read whose completion is queued; continue short or
/// interrupted ones.
fn reap(shared: &Shared) {
    let mut finished = Vec::new();
    let mut resubmit = false;
    {
        let mut st = shared.state.lock();
        // SAFETY: completions are only taken under `state`'s lock.
        let cqes: Vec<(u64, i32)> = unsafe { shared.ring.completion_shared() }
            .map(|c| (c.user_data(), c.result()))
            .collect();
        // SAFETY: as above, under `state`'s lock.
        let mut sq = unsafe { shared.ring.submission_shared() };
        for (ud, res) in cqes {
            resubmit |= st
                .ops
                .on_completion(shared.fd, &mut sq, ud as usize, res, &mut finished);
        }
    }
    if resubmit {
        enter(shared);
    }
    for (req, result) in finished {
        if let Err(e) = &result {
            tracing::warn!(error = %e, "device read failed");
        }
        req.complete(result);
    }
}

impl Drop for Shared {
    /// The loop's task is gone with reads in flight (its runtime ended):
    /// wait for the kernel to be done with their buffers.
    fn drop(&mut self) {
        let mut errors = 0u32;
        loop {
            let st = self.state.get_mut();
            if st.ops.inflight == 0 {
                return;
            }
            // SAFETY: `&mut self`: no one else touches the queues.
            let cqes: Vec<(u64, i32)> = unsafe { self.ring.completion_shared() }
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (ud, res) in cqes {
                if let Some(op) = st.ops.slots.get_mut(ud as usize).and_then(Option::take) {
                    st.ops.inflight -= 1;
                    let result = match res {
                        r if r < 0 => {
                            let (name, offset, len) = op.req.describe();
                            Err(DeviceError::errno(name, offset, len, -r))
                        }
                        // Not continued: the reader is closing.
                        _ if op.progress + (res as usize) < op.req.describe().2 as usize => {
                            Err(DeviceError::Closed)
                        }
                        _ => Ok(()),
                    };
                    op.req.complete(result);
                }
            }
            if st.ops.inflight == 0 {
                return;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    errors += 1;
                    if errors > MAX_DRAIN_ERRORS {
                        // Leak the buffers rather than free them under the
                        // kernel.
                        tracing::error!(error = %e, "loop reader: giving up waiting for {} reads", st.ops.inflight);
                        std::mem::forget(std::mem::take(&mut st.ops.slots));
                        return;
                    }
                    thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }
}
