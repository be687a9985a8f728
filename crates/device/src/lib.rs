//! Block devices: where the BlueStore-class object store keeps object data.
//!
//! This crate owns the lowest layer of the store: a flat array of bytes
//! addressed in [`BLOCK_SIZE`]-aligned units, with asynchronous read, write,
//! flush and discard. It knows nothing about objects, allocation or
//! metadata; those belong to the store above it.
//!
//! Implementations:
//! - [`FileDevice`] ([`mod@file`]): a regular file or raw block device, driven
//!   by io_uring or by a pool of threads doing `pread`/`pwrite`.
//! - [`MemDevice`] ([`mod@mem`]): plain memory, for tests.
//! - [`FaultDevice`] ([`mod@fault`]): memory with injected errors and simulated
//!   power loss, for crash tests.
//! - [`EmulatedHdd`] ([`mod@hdd`]): any device served like a spinning disk
//!   (seeks, bandwidth, one request at a time), for tests and benchmarks.
//!
//! Fault model shared by every device:
//! - A request whose offset or length is not a multiple of [`BLOCK_SIZE`]
//!   fails with [`DeviceError::Misaligned`]; one that reaches past
//!   [`BlockDevice::size`] fails with [`DeviceError::OutOfRange`]. Neither
//!   touches the device, and the device keeps working afterwards.
//! - A completed write is visible to later reads but is *not* durable until
//!   a [`BlockDevice::flush`] called after the write completed has itself
//!   completed. After power loss any subset of unflushed writes may survive,
//!   and a multi-block write may survive only in part (torn), block by block.
//! - A failed operation ([`DeviceError::Io`]) leaves the affected range in an
//!   unknown state: callers must not assume either old or new content.
//! - When a device is dropped, requests it had not yet started resolve to
//!   [`DeviceError::Closed`]; requests the OS had already accepted are allowed
//!   to finish (their buffers must stay alive until the kernel is done).
//!
//! Every future returned here is runtime-agnostic: it may be awaited on any
//! executor, or driven from a plain thread with [`block_on`].

#![deny(missing_docs)]

mod buf;
mod buf_pool;
mod done;
mod error;
mod exec;
pub mod fault;
pub mod file;
pub mod hdd;
pub mod mem;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

pub use buf::AlignedBuf;
pub use buf_pool::{pooled_bytes, MAX_POOLED, POOL_BYTES_PER_CLASS};
pub use error::DeviceError;
pub use exec::block_on;
pub use fault::{CrashPolicy, FaultDevice, FaultOn};
pub use file::{
    Completion, FileDevice, FileDeviceOptions, IoEngine, LoopReader, LoopRing, LOOP_READ_DEPTH,
    LOOP_RING_DEPTH,
};
pub use hdd::{EmulatedHdd, HddModel};
pub use mem::MemDevice;

/// Alignment, in bytes, of every offset and length handed to a device.
pub const BLOCK_SIZE: u64 = 4096;

/// A boxed, sendable future with no borrowed state, as returned by every
/// [`BlockDevice`] method.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// An asynchronous block device addressed in [`BLOCK_SIZE`] units.
///
/// The returned futures own everything they need: they do not borrow the
/// device and may outlive it (they then resolve to [`DeviceError::Closed`]
/// if the device was dropped before starting them).
pub trait BlockDevice: Send + Sync + 'static {
    /// Usable size in bytes; always a multiple of [`BLOCK_SIZE`].
    fn size(&self) -> u64;

    /// Read `len` bytes at `offset` (both aligned).
    fn read(&self, offset: u64, len: u64) -> BoxFuture<Result<AlignedBuf, DeviceError>>;

    /// Write `buf` at `offset`. Complete = the device has it (a read sees
    /// it); durable only after a later [`flush`](Self::flush) completes.
    fn write(&self, offset: u64, buf: AlignedBuf) -> BoxFuture<Result<(), DeviceError>>;

    /// Many writes submitted together (one syscall where the engine allows);
    /// resolves when all are done, with the first error if any failed. All
    /// ranges are validated before anything is submitted: a misaligned or
    /// out-of-range element fails the whole call and writes nothing.
    fn write_many(&self, writes: Vec<(u64, AlignedBuf)>) -> BoxFuture<Result<(), DeviceError>>;

    /// Write `buf` at `offset` and return once it is durable, blocking the
    /// calling thread (for a thread whose only job is that write, such as a
    /// commit log's). Writes made before are not necessarily durable (flush
    /// for that). The default writes and flushes.
    fn write_durable(&self, offset: u64, buf: AlignedBuf) -> Result<(), DeviceError> {
        block_on(self.write(offset, buf))?;
        block_on(self.flush())
    }

    /// A [`LoopRing`] on this device for the calling async event loop
    /// (inside a tokio runtime): durable writes completed on that loop,
    /// with no thread in between. `None` where the device has no such
    /// path (memory and fault-injection devices); callers then use
    /// [`write_durable`](Self::write_durable) on a thread of their own.
    fn loop_ring(&self) -> Option<Result<LoopRing, DeviceError>> {
        None
    }

    /// A [`LoopReader`] on this device for the calling event loop (a task
    /// of a single-threaded tokio runtime): reads submitted and completed
    /// on that loop, with no thread in between. `None` where the device
    /// has no such path; callers then read with [`read`](Self::read).
    fn loop_reader(&self) -> Option<Result<LoopReader, DeviceError>> {
        None
    }

    /// Make every write whose future completed before this call durable
    /// (`fdatasync` / FLUSH). Writes still in flight when `flush` is called
    /// are not covered.
    fn flush(&self) -> BoxFuture<Result<(), DeviceError>>;

    /// Write all of `writes` (validated first, as [`write_many`]), at most
    /// `depth` on the device at once, blocking the calling thread until
    /// they are done (durable only after a flush), or until the first
    /// error, which is returned once nothing is in flight. For a thread
    /// whose job is writing in bulk, such as a store's deferred writes. The
    /// default submits groups of [`BULK_GROUP`] through `write_many`, the
    /// next as the oldest completes.
    ///
    /// [`write_many`]: Self::write_many
    fn write_all_blocking(
        &self,
        writes: Vec<(u64, AlignedBuf)>,
        depth: usize,
    ) -> Result<(), DeviceError> {
        write_in_groups(self, writes, depth)
    }

    /// [`flush`](Self::flush), blocking the calling thread.
    fn flush_blocking(&self) -> Result<(), DeviceError> {
        block_on(self.flush())
    }

    /// Tell the device a range is unused (may be a no-op). The range's
    /// content afterwards is unspecified: old data or zeros.
    fn discard(&self, offset: u64, len: u64) -> BoxFuture<Result<(), DeviceError>>;
}

/// Writes submitted together by [`BlockDevice::write_all_blocking`]'s
/// default (one `write_many`, one system call where the engine allows).
pub const BULK_GROUP: usize = 8;

/// [`BlockDevice::write_all_blocking`]'s default: a sliding window of
/// groups, the next group submitted as the oldest completes. Waiting for
/// whole batches would leave the device's queue draining between them.
pub fn write_in_groups<D: BlockDevice + ?Sized>(
    device: &D,
    writes: Vec<(u64, AlignedBuf)>,
    depth: usize,
) -> Result<(), DeviceError> {
    check_writes(&writes, device.size())?;
    let window = (depth / BULK_GROUP).max(1);
    let mut in_flight: std::collections::VecDeque<BoxFuture<Result<(), DeviceError>>> =
        std::collections::VecDeque::with_capacity(window);
    let mut writes = writes.into_iter().peekable();
    let mut failed = None;
    while writes.peek().is_some() && failed.is_none() {
        if in_flight.len() == window {
            if let Some(Err(e)) = in_flight.pop_front().map(block_on) {
                failed = Some(e);
                break;
            }
        }
        let group: Vec<(u64, AlignedBuf)> = writes.by_ref().take(BULK_GROUP).collect();
        in_flight.push_back(device.write_many(group));
    }
    for group in in_flight {
        if let Err(e) = block_on(group) {
            failed.get_or_insert(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Open a file or block device at `path` as a shared [`BlockDevice`].
pub fn open_device(
    path: impl AsRef<Path>,
    opts: FileDeviceOptions,
) -> Result<Arc<dyn BlockDevice>, DeviceError> {
    Ok(Arc::new(FileDevice::open(path, opts)?))
}

/// Check that `offset`/`len` are aligned and lie within `size`.
pub(crate) fn check_range(offset: u64, len: u64, size: u64) -> Result<(), DeviceError> {
    if offset % BLOCK_SIZE != 0 || len % BLOCK_SIZE != 0 {
        return Err(DeviceError::Misaligned { offset, len });
    }
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange { offset, len, size }),
    }
}

/// Check every element of a `write_many` batch.
pub(crate) fn check_writes(writes: &[(u64, AlignedBuf)], size: u64) -> Result<(), DeviceError> {
    writes
        .iter()
        .try_for_each(|(off, buf)| check_range(*off, buf.len() as u64, size))
}

/// An already-resolved [`BoxFuture`].
pub(crate) fn ready<T: Send + 'static>(value: T) -> BoxFuture<T> {
    Box::pin(std::future::ready(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_range_rules() {
        assert!(check_range(0, 0, 0).is_ok());
        assert!(check_range(4096, 4096, 8192).is_ok());
        assert!(matches!(
            check_range(1, 4096, 8192),
            Err(DeviceError::Misaligned { .. })
        ));
        assert!(matches!(
            check_range(0, 100, 8192),
            Err(DeviceError::Misaligned { .. })
        ));
        assert!(matches!(
            check_range(8192, 4096, 8192),
            Err(DeviceError::OutOfRange { .. })
        ));
        assert!(matches!(
            check_range(u64::MAX - 4095, 8192, 8192),
            Err(DeviceError::OutOfRange { .. })
        ));
    }
}
