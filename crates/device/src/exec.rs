//! [`block_on`]: drive a device future to completion on the calling thread.
//!
//! Owns a minimal single-future executor whose waker unparks the waiting
//! thread, so code outside any async runtime (mkfs, fsck, tests) can use a
//! [`crate::BlockDevice`] without extra dependencies. Fault model: none of
//! its own; a future that never wakes blocks the caller forever, exactly as
//! it would on any executor.

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

/// Run `f` to completion on the current thread, parking between polls.
///
/// Works on a plain thread with no runtime. Do not call it from inside an
/// async task: it blocks the executor thread.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
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
}
