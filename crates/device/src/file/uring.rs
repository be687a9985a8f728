//! The `Uring` engine: asynchronous I/O through one io_uring instance.
//!
//! Owns the ring, the table of in-flight operations and the single reaper
//! thread. Callers push submission entries under a mutex and call
//! `io_uring_enter` themselves, at once or, on an event loop, once for all
//! the requests of the loop's turn (`enter_soon`); the reaper waits for
//! completions, finishes the futures, resubmits what must continue, admits
//! queued requests, and submits whatever is queued each time it waits.
//!
//! Rules:
//! - At most `queue_depth` operations are in flight (in the submission
//!   queue or in the kernel). Excess requests wait, in arrival order, in a
//!   backlog that the reaper drains as slots free up; they never fail for
//!   lack of room. The ring has more entries than `queue_depth`, and the
//!   completion queue twice that, so neither queue can overflow.
//! - A short read or write is continued from where it stopped; `EINTR` and
//!   `EAGAIN` are retried (up to [`MAX_RETRIES`] times per request).
//! - A flush is an `IORING_OP_FSYNC` with `DATASYNC`, pushed when `flush()`
//!   is called: it covers exactly the writes whose futures had completed by
//!   then (their completions were reaped before the fsync was queued). It is
//!   not ordered against writes still in flight, which it may or may not
//!   cover.
//!
//! Fault model: an OS error fails only the request that hit it. If entering
//! the ring fails transiently, entries stay queued and the reaper retries
//! on its next wake-up (at most [`REAP_TIMEOUT_NS`] later). On drop,
//! backlog requests resolve to [`DeviceError::Closed`]; operations the
//! kernel already holds are waited for (their buffers must outlive them) and
//! report their real outcome; then the reaper exits and is joined.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};

use io_uring::{opcode, squeue, types, IoUring};
use parking_lot::Mutex;

use super::Request;
use crate::DeviceError;

/// Largest byte count handed to one read/write entry; longer requests are
/// carried out as a sequence of continuations.
const MAX_CHUNK: usize = 1 << 30;
/// Retries of `EINTR`/`EAGAIN` before a request is failed.
const MAX_RETRIES: u32 = 1000;
/// The reaper wakes at least this often (ns) to push stranded entries.
const REAP_TIMEOUT_NS: u32 = 100_000_000;
/// `user_data` of the no-op that wakes the reaper at shutdown.
const WAKE: u64 = u64::MAX;

/// One admitted request and its progress.
pub(super) struct Op {
    pub req: Request,
    /// Bytes already transferred (reads and writes).
    pub progress: usize,
    pub retries: u32,
}

/// Operations in flight on a ring, indexed by their entries' `user_data`:
/// shared by the engine and the loop's reader (`loop_reads`).
pub(super) struct Slots {
    pub slots: Vec<Option<Op>>,
    free: Vec<usize>,
    pub inflight: usize,
}

/// A finished request and its result, to be completed outside the lock.
pub(super) type Finished = (Request, Result<(), DeviceError>);

impl Slots {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            slots: Vec::with_capacity(n),
            free: Vec::new(),
            inflight: 0,
        }
    }

    /// Give `req` a slot and queue its first entry. On failure (the
    /// submission queue is unexpectedly full) the request is handed back
    /// untouched.
    pub fn admit(
        &mut self,
        fd: RawFd,
        sq: &mut squeue::SubmissionQueue<'_>,
        req: Request,
    ) -> Result<(), Request> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let mut op = Op {
            req,
            progress: 0,
            retries: 0,
        };
        let entry = build_entry(fd, &mut op, slot);
        // SAFETY: the entry's buffer is owned by `op`, which stays in its
        // slot (heap memory not moved) until the kernel's completion is
        // reaped.
        if unsafe { sq.push(&entry) }.is_err() {
            self.free.push(slot);
            return Err(op.req);
        }
        self.slots[slot] = Some(op);
        self.inflight += 1;
        Ok(())
    }

    /// Handle the completion `res` of `slot`'s entry: queue the op's next
    /// step (a short or interrupted transfer; returns true), or move it to
    /// `finished`.
    pub fn on_completion(
        &mut self,
        fd: RawFd,
        sq: &mut squeue::SubmissionQueue<'_>,
        slot: usize,
        res: i32,
        finished: &mut Vec<Finished>,
    ) -> bool {
        let Some(op) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            tracing::error!(slot, res, "io_uring completion for an unknown slot");
            return false;
        };
        let outcome = match classify(op, res) {
            Next::Again => {
                let entry = build_entry(fd, op, slot);
                // SAFETY: as in `admit`; the op stays in its slot.
                match unsafe { sq.push(&entry) } {
                    Ok(()) => return true,
                    Err(_) => {
                        let (name, offset, len) = op.req.describe();
                        Err(DeviceError::errno(name, offset, len, libc::EBUSY))
                    }
                }
            }
            Next::Finish(result) => result,
        };
        if let Some(op) = self.slots[slot].take() {
            self.free.push(slot);
            self.inflight -= 1;
            finished.push((op.req, outcome));
        }
        false
    }
}

struct State {
    ops: Slots,
    /// Requests waiting for a free slot, in arrival order.
    backlog: VecDeque<Request>,
    closing: bool,
}

struct Shared {
    ring: IoUring,
    state: Mutex<State>,
    fd: RawFd,
    max_inflight: usize,
    /// An enter is scheduled on an async runtime (see [`enter_soon`]).
    enter_pending: AtomicBool,
    /// `io_uring_enter` calls made to submit (not the reaper's waits).
    enters: AtomicU64,
    /// Keeps `fd` open for as long as the ring may reference it.
    _file: Arc<File>,
}

/// io_uring-driven I/O over one open file.
pub(crate) struct UringEngine {
    shared: Arc<Shared>,
    reaper: Option<JoinHandle<()>>,
}

impl UringEngine {
    /// Create a ring allowing `queue_depth` (at least one) operations in
    /// flight, and start its reaper thread.
    pub(crate) fn start(file: Arc<File>, queue_depth: u32) -> io::Result<Self> {
        let max_inflight = queue_depth.max(1) as usize;
        let entries = (queue_depth.max(1) + 1).next_power_of_two();
        let ring = IoUring::new(entries)?;
        let shared = Arc::new(Shared {
            ring,
            state: Mutex::new(State {
                ops: Slots::with_capacity(max_inflight),
                backlog: VecDeque::new(),
                closing: false,
            }),
            fd: file.as_raw_fd(),
            max_inflight,
            enter_pending: AtomicBool::new(false),
            enters: AtomicU64::new(0),
            _file: file,
        });
        let for_reaper = Arc::clone(&shared);
        let reaper = thread::Builder::new()
            .name("cairn-dev-uring".into())
            .spawn(move || reap(&for_reaper))?;
        Ok(Self {
            shared,
            reaper: Some(reaper),
        })
    }

    /// Submit requests: admitted ones with a single `io_uring_enter` (now,
    /// or with others later in this turn of an event loop: [`enter_soon`]),
    /// the rest to the backlog.
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        let mut rejected = Vec::new();
        let mut admitted = 0usize;
        {
            let mut st = self.shared.state.lock();
            if st.closing {
                rejected.extend(reqs);
            } else {
                // SAFETY: every SubmissionQueue is created under `state`'s lock.
                let mut sq = unsafe { self.shared.ring.submission_shared() };
                for req in reqs {
                    if st.backlog.is_empty() && st.ops.inflight < self.shared.max_inflight {
                        match admit(&self.shared, &mut st, &mut sq, req) {
                            Ok(()) => admitted += 1,
                            Err(req) => st.backlog.push_back(req),
                        }
                    } else {
                        st.backlog.push_back(req);
                    }
                }
            }
        }
        rejected
            .into_iter()
            .for_each(|r| r.fail(DeviceError::Closed));
        if admitted > 0 {
            enter_soon(&self.shared);
        }
    }

    /// `io_uring_enter` calls made to submit requests so far.
    pub(crate) fn submit_calls(&self) -> u64 {
        self.shared.enters.load(Ordering::Relaxed)
    }
}

/// Enter the ring for what was just queued: at once off an async runtime
/// (or blocked in `block_on` on one), or, on one, from a task spawned
/// behind the tasks already queued there, so that the requests the loop's
/// other tasks make in this turn go to the kernel in the same
/// `io_uring_enter`. One system call then submits them
/// all, and the block layer hands them to the device together (one
/// notification of a virtual disk, a VM exit, instead of one each): at 4K
/// randread QD32 an OSD made about one `io_uring_enter` per read.
///
/// At most one such task is pending per ring (`enter_pending`); it enters
/// when it runs or, if its runtime drops it unrun, as it is dropped. A
/// request that finds it pending leaves its enter to it; should the task's
/// thread be held up otherwise than in `block_on`, the reaper submits the
/// request on its next pass (a completion, or `REAP_TIMEOUT_NS`).
fn enter_soon(shared: &Arc<Shared>) {
    let runtime = match tokio::runtime::Handle::try_current() {
        // A caller blocked in `block_on` on a loop thread (a store building
        // a read-modify-write) would wait for a task that cannot run.
        Ok(runtime) if !crate::exec::blocking() => runtime,
        _ => {
            enter(shared);
            return;
        }
    };
    if shared.enter_pending.swap(true, Ordering::AcqRel) {
        return;
    }
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        d.retain(|w| w.strong_count() > 0);
        if !d.iter().any(|w| is_ring(w, shared)) {
            d.push(Arc::downgrade(shared));
        }
    });
    let pending = PendingEnter(Arc::clone(shared));
    runtime.spawn(async move { drop(pending) });
}

thread_local! {
    /// Rings whose enter this thread left to a task (one entry per ring).
    static DEFERRED: RefCell<Vec<Weak<Shared>>> = const { RefCell::new(Vec::new()) };
}

/// Enter every ring whose enter this thread left to a task: called as the
/// thread blocks in `block_on`, when no task of its runtime can run. A
/// request submitted before (a future that submits when made) would
/// otherwise wait for the reaper's next pass.
pub(crate) fn enter_deferred() {
    let rings: Vec<Weak<Shared>> = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    for shared in rings.iter().filter_map(Weak::upgrade) {
        enter(&shared);
    }
}

/// Whether `w` refers to `shared`'s ring.
fn is_ring(w: &Weak<Shared>, shared: &Arc<Shared>) -> bool {
    std::ptr::eq(w.as_ptr(), Arc::as_ptr(shared))
}

/// The pending enter of [`enter_soon`], done as it drops.
struct PendingEnter(Arc<Shared>);

impl Drop for PendingEnter {
    fn drop(&mut self) {
        // Cleared first: a request queued from here on schedules its own
        // enter (this one may submit it too; the next then finds nothing).
        self.0.enter_pending.store(false, Ordering::Release);
        // Done here, so no later `block_on` on this thread enters for it
        // (`try_with`: the thread may be ending).
        let _ = DEFERRED.try_with(|d| d.borrow_mut().retain(|w| !is_ring(w, &self.0)));
        enter(&self.0);
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        let backlog: Vec<Request> = {
            let mut st = self.shared.state.lock();
            st.closing = true;
            // SAFETY: created under `state`'s lock.
            let mut sq = unsafe { self.shared.ring.submission_shared() };
            let nop = opcode::Nop::new().build().user_data(WAKE);
            // SAFETY: a no-op references no memory. If the queue is full the
            // reaper still wakes on its timeout.
            let _ = unsafe { sq.push(&nop) };
            drop(sq);
            st.backlog.drain(..).collect()
        };
        backlog
            .into_iter()
            .for_each(|r| r.fail(DeviceError::Closed));
        enter(&self.shared);
        if let Some(h) = self.reaper.take() {
            if h.thread().id() != thread::current().id() && h.join().is_err() {
                tracing::error!("io_uring reaper thread panicked");
            }
        }
    }
}

/// `io_uring_enter` for whatever is queued; transient failures are left to
/// the reaper's next pass.
fn enter(shared: &Shared) {
    shared.enters.fetch_add(1, Ordering::Relaxed);
    loop {
        match shared.ring.submit() {
            Ok(_) => return,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "io_uring submit deferred to reaper");
                return;
            }
        }
    }
}

fn admit(
    shared: &Shared,
    st: &mut State,
    sq: &mut squeue::SubmissionQueue<'_>,
    req: Request,
) -> Result<(), Request> {
    st.ops.admit(shared.fd, sq, req)
}

/// The submission entry for the next step of `op`.
fn build_entry(fd: RawFd, op: &mut Op, slot: usize) -> squeue::Entry {
    let fd = types::Fd(fd);
    let progress = op.progress;
    let entry = match &mut op.req {
        Request::Read { offset, buf, .. } => {
            let chunk = (buf.len() - progress).min(MAX_CHUNK) as u32;
            // SAFETY (pointer arithmetic): progress < buf.len().
            let ptr = unsafe { buf.as_mut_ptr().add(progress) };
            opcode::Read::new(fd, ptr, chunk)
                .offset(*offset + progress as u64)
                .build()
        }
        Request::Write { offset, buf, .. } => {
            let chunk = (buf.len() - progress).min(MAX_CHUNK) as u32;
            // SAFETY (pointer arithmetic): progress < buf.len().
            let ptr = unsafe { buf.as_ptr().add(progress) };
            opcode::Write::new(fd, ptr, chunk)
                .offset(*offset + progress as u64)
                .build()
        }
        Request::Flush { .. } => opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build(),
        Request::Discard { offset, len, .. } => opcode::Fallocate::new(fd, *len)
            .offset(*offset)
            .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
            .build(),
    };
    entry.user_data(slot as u64)
}

/// What to do with an operation after one completion.
enum Next {
    Again,
    Finish(Result<(), DeviceError>),
}

fn classify(op: &mut Op, res: i32) -> Next {
    let (name, offset, len) = op.req.describe();
    if res < 0 {
        let errno = -res;
        if matches!(errno, libc::EINTR | libc::EAGAIN) && op.retries < MAX_RETRIES {
            op.retries += 1;
            return Next::Again;
        }
        return Next::Finish(Err(DeviceError::errno(name, offset, len, errno)));
    }
    match &op.req {
        Request::Read { .. } | Request::Write { .. } => {
            if res == 0 && (op.progress as u64) < len {
                let kind = if name == "read" {
                    io::ErrorKind::UnexpectedEof
                } else {
                    io::ErrorKind::WriteZero
                };
                return Next::Finish(Err(DeviceError::Io {
                    op: name,
                    offset,
                    len,
                    source: kind.into(),
                }));
            }
            op.progress += res as usize;
            if (op.progress as u64) < len {
                Next::Again
            } else {
                Next::Finish(Ok(()))
            }
        }
        Request::Flush { .. } | Request::Discard { .. } => Next::Finish(Ok(())),
    }
}

/// The reaper thread: wait, reap, resubmit, admit, complete; until closed
/// and idle.
fn reap(shared: &Shared) {
    let ts = types::Timespec::new().nsec(REAP_TIMEOUT_NS);
    let args = types::SubmitArgs::new().timespec(&ts);
    let ext_arg = shared.ring.params().is_feature_ext_arg();
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(shared.max_inflight + 1);
    let mut finished: Vec<(Request, Result<(), DeviceError>)> = Vec::new();
    let mut failures = 0u64;
    loop {
        let waited = if ext_arg {
            shared.ring.submitter().submit_with_args(1, &args)
        } else {
            shared.ring.submit_and_wait(1)
        };
        match waited {
            Err(e)
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) =>
            {
                // Not transient. In-flight buffers may still be in the
                // kernel's hands, so keep trying rather than fail them.
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::error!(error = %e, failures, "io_uring wait failing; retrying");
                }
                thread::sleep(std::time::Duration::from_millis(1));
            }
            _ => failures = 0,
        }
        // SAFETY: this thread is the only user of the completion queue.
        let cq = unsafe { shared.ring.completion_shared() };
        cqes.extend(cq.map(|c| (c.user_data(), c.result())));

        let exit = {
            let mut st = shared.state.lock();
            // SAFETY: created under `state`'s lock.
            let mut sq = unsafe { shared.ring.submission_shared() };
            for (ud, res) in cqes.drain(..) {
                if ud != WAKE {
                    on_completion(shared, &mut st, &mut sq, ud as usize, res, &mut finished);
                }
            }
            while st.ops.inflight < shared.max_inflight {
                let Some(req) = st.backlog.pop_front() else {
                    break;
                };
                if let Err(req) = admit(shared, &mut st, &mut sq, req) {
                    st.backlog.push_front(req);
                    break;
                }
            }
            st.closing && st.ops.inflight == 0 && st.backlog.is_empty()
        };
        for (req, result) in finished.drain(..) {
            if let Err(e) = &result {
                tracing::warn!(error = %e, "device I/O failed");
            }
            req.complete(result);
        }
        if exit {
            tracing::debug!("io_uring reaper exiting");
            return;
        }
    }
}

fn on_completion(
    shared: &Shared,
    st: &mut State,
    sq: &mut squeue::SubmissionQueue<'_>,
    slot: usize,
    res: i32,
    finished: &mut Vec<Finished>,
) {
    st.ops.on_completion(shared.fd, sq, slot, res, finished);
}
