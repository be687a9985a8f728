//! The `Threads` engine: a fixed pool of OS threads doing blocking
//! `pread`/`pwrite`/`fdatasync`.
//!
//! Owns the worker threads and their FIFO job queue. Each worker takes one
//! request at a time and carries it out synchronously (see [`super::sys`]
//! for the short-I/O and `EINTR` rules). Fault model: an OS error fails only
//! the request that hit it. On drop, queued requests resolve to
//! [`DeviceError::Closed`], requests already being executed finish normally,
//! and every worker is joined.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use parking_lot::{Condvar, Mutex};

use super::{sys, Request};
use crate::DeviceError;

struct Queue {
    jobs: VecDeque<Request>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    file: Arc<File>,
    is_block: bool,
}

/// A pool of blocking I/O threads over one open file.
pub(crate) struct ThreadsEngine {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadsEngine {
    /// Start `threads` (at least one) workers on `file`.
    pub(crate) fn start(file: Arc<File>, is_block: bool, threads: u32) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            ready: Condvar::new(),
            file,
            is_block,
        });
        let mut engine = Self {
            shared,
            workers: Vec::new(),
        };
        for i in 0..threads.max(1) {
            let shared = Arc::clone(&engine.shared);
            // On failure `engine` drops here and joins the workers started so far.
            let handle = thread::Builder::new()
                .name(format!("cairn-dev-io{i}"))
                .spawn(move || worker(&shared))?;
            engine.workers.push(handle);
        }
        Ok(engine)
    }

    /// Queue requests for the workers.
    pub(crate) fn submit(&self, reqs: impl IntoIterator<Item = Request>) {
        let mut q = self.shared.queue.lock();
        if q.closed {
            drop(q);
            reqs.into_iter().for_each(|r| r.fail(DeviceError::Closed));
            return;
        }
        let before = q.jobs.len();
        q.jobs.extend(reqs);
        let added = q.jobs.len() - before;
        drop(q);
        if added == 1 {
            self.shared.ready.notify_one();
        } else if added > 1 {
            self.shared.ready.notify_all();
        }
    }
}

impl Drop for ThreadsEngine {
    fn drop(&mut self) {
        let pending: Vec<Request> = {
            let mut q = self.shared.queue.lock();
            q.closed = true;
            q.jobs.drain(..).collect()
        };
        self.shared.ready.notify_all();
        if !pending.is_empty() {
            tracing::debug!(
                count = pending.len(),
                "threads engine closing: failing queued requests"
            );
        }
        pending
            .into_iter()
            .for_each(|r| r.fail(DeviceError::Closed));
        let me = thread::current().id();
        for h in self.workers.drain(..) {
            // A completion callback that drops the device runs on a worker:
            // never join ourselves; that worker exits on its next loop.
            if h.thread().id() != me && h.join().is_err() {
                tracing::error!("device I/O worker panicked");
            }
        }
    }
}

fn worker(shared: &Shared) {
    loop {
        let req = {
            let mut q = shared.queue.lock();
            loop {
                if let Some(r) = q.jobs.pop_front() {
                    break r;
                }
                if q.closed {
                    return;
                }
                shared.ready.wait(&mut q);
            }
        };
        execute(shared, req);
    }
}

fn execute(shared: &Shared, mut req: Request) {
    let fd = shared.file.as_raw_fd();
    let result = match &mut req {
        Request::Read { offset, buf, .. } => sys::pread_full(fd, buf, *offset),
        Request::Write { offset, buf, .. } => sys::pwrite_full(fd, buf, *offset),
        Request::Flush { .. } => sys::fdatasync(fd),
        Request::Discard { offset, len, .. } => sys::discard(fd, shared.is_block, *offset, *len),
    };
    if let Err(e) = &result {
        tracing::warn!(error = %e, "device I/O failed");
    }
    req.complete(result);
}
