//! Completion plumbing shared by the file engines: how a finished request
//! reaches the future its caller holds.
//!
//! Owns the one-shot channels behind each future and the fan-in used by
//! `write_many`. Fault model: if a completion is dropped without being
//! finished (engine shut down, bug, panic), the waiting future resolves to
//! [`DeviceError::Closed`] instead of hanging.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::{AlignedBuf, BoxFuture, DeviceError};

/// Sender half for a request that returns no data.
pub(crate) enum Done {
    /// A single request with its own future.
    One(oneshot::Sender<Result<(), DeviceError>>),
    /// One member of a `write_many` batch.
    Group(Arc<Group>),
}

impl Done {
    /// Deliver the outcome. A caller that dropped its future is ignored.
    pub(crate) fn finish(self, result: Result<(), DeviceError>) {
        match self {
            Done::One(tx) => {
                let _ = tx.send(result);
            }
            Done::Group(g) => g.finish(result),
        }
    }
}

/// Fan-in of a `write_many` batch: resolves once every member finished,
/// with the first error seen. If a member is dropped unfinished, the last
/// `Arc` drop drops the sender and the future sees `Closed`.
pub(crate) struct Group {
    remaining: AtomicUsize,
    first_err: Mutex<Option<DeviceError>>,
    tx: Mutex<Option<oneshot::Sender<Result<(), DeviceError>>>>,
}

impl Group {
    fn finish(&self, result: Result<(), DeviceError>) {
        if let Err(e) = result {
            let mut slot = self.first_err.lock();
            if slot.is_none() {
                *slot = Some(e);
            }
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let outcome = match self.first_err.lock().take() {
                Some(e) => Err(e),
                None => Ok(()),
            };
            if let Some(tx) = self.tx.lock().take() {
                let _ = tx.send(outcome);
            }
        }
    }
}

/// A new single-request completion and the future that awaits it.
pub(crate) fn unit() -> (Done, BoxFuture<Result<(), DeviceError>>) {
    let (tx, rx) = oneshot::channel();
    (Done::One(tx), recv(rx))
}

/// `n` group members (n > 0) and the future resolving when all finish.
pub(crate) fn group(n: usize) -> (Vec<Done>, BoxFuture<Result<(), DeviceError>>) {
    let (tx, rx) = oneshot::channel();
    let g = Arc::new(Group {
        remaining: AtomicUsize::new(n),
        first_err: Mutex::new(None),
        tx: Mutex::new(Some(tx)),
    });
    let members = (0..n).map(|_| Done::Group(Arc::clone(&g))).collect();
    (members, recv(rx))
}

/// Sender half for a read: delivers the filled buffer or the error.
pub(crate) type ReadTx = oneshot::Sender<Result<AlignedBuf, DeviceError>>;

/// A read completion and the future that awaits its buffer.
pub(crate) fn read() -> (ReadTx, BoxFuture<Result<AlignedBuf, DeviceError>>) {
    let (tx, rx) = oneshot::channel();
    (tx, recv(rx))
}

fn recv<T: Send + 'static>(
    rx: oneshot::Receiver<Result<T, DeviceError>>,
) -> BoxFuture<Result<T, DeviceError>> {
    Box::pin(async move { rx.await.unwrap_or(Err(DeviceError::Closed)) })
}
