//! [`block_on`]: drive a device future to completion on the calling thread.
//!
//! Owns a minimal single-future executor whose waker unparks the waiting
//! thread, so code outside any async runtime (mkfs, fsck, tests) can use a
//! [`crate::BlockDevice`] without extra dependencies. Fault model: none of
//! its own; a future that never wakes blocks the caller forever, exactly as
//! it would on any executor.
//!
//! It is also called from synchronous code that runs inside a tokio task
//! (a store's `submit` building a read-modify-write). Tokio's cooperative
//! budget belongs to that task: once it is spent, every tokio resource
//! (the device's completion channels) answers `Pending` and wakes itself
//! at once, and only yielding to the runtime refills it, which a blocked
//! caller never does. So the future is polled outside the budget.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    /// `block_on` calls under way on this thread.
    static BLOCKING: Cell<u32> = const { Cell::new(0) };
}

/// True inside [`block_on`] on this thread: an async runtime the thread
/// may belong to runs nothing else until it returns, so work must not be
/// left to the runtime's other tasks (see `file::uring::enter_soon`).
pub(crate) fn blocking() -> bool {
    BLOCKING.with(|b| b.get() > 0)
}

/// Counts one `block_on` on this thread while it lives.
struct Blocking;

impl Blocking {
    fn enter() -> Self {
        BLOCKING.with(|b| b.set(b.get() + 1));
        Blocking
    }
}

impl Drop for Blocking {
    fn drop(&mut self) {
        BLOCKING.with(|b| b.set(b.get() - 1));
    }
}

/// Run `f` to completion on the current thread, parking between polls.
///
/// Works on a plain thread with no runtime. Called from inside an async
/// task it works too, but blocks that executor thread until `f` is done.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let _blocking = Blocking::enter();
    crate::file::enter_deferred();
    // Inside a task whose budget is spent, a budgeted poll would spin here
    // forever (see the module docs).
    let mut f = pin!(tokio::task::unconstrained(f));
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        // Spurious unparks are harmless: we simply poll again.
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_from_other_thread() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let h = thread::spawn(move || {
            thread::sleep(std::time::Duration::from_millis(20));
            let _ = tx.send(42u32);
        });
        assert_eq!(block_on(rx).ok(), Some(42));
        h.join().ok();
    }

    /// Called from inside a tokio task that has spent its cooperative
    /// budget, a budgeted poll answers `Pending` and wakes itself forever:
    /// the caller spun at 100% CPU and never returned (seen as a stalled
    /// store in the kill -9 crash test).
    #[test]
    fn completes_inside_a_task_with_its_budget_spent() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            let got = rt.block_on(async {
                while tokio::task::coop::has_budget_remaining() {
                    tokio::task::coop::consume_budget().await;
                }
                assert!(!tokio::task::coop::has_budget_remaining());
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = tx.send(7u32);
                block_on(rx).ok()
            });
            let _ = done_tx.send(got);
        });
        let got = done_rx.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(got, Ok(Some(7)), "block_on never returned");
    }
}
