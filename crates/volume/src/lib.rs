//! The block-volume interface that front ends (the NBD gateway, `cairn bench`)
//! drive, and an in-memory volume for their tests.
//!
//! A [`Volume`] is a byte-addressed virtual disk with many operations in
//! flight. The cluster-backed implementation is `cairn_client::Image`; this
//! crate must never depend on the cluster, so front ends can be tested alone.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum VolumeError {
    /// The range lies (partly) past the end of the volume.
    #[error("range {offset}+{len} is past the end of the volume ({size} bytes)")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("no space left")]
    NoSpace,
    #[error("I/O error: {0}")]
    Io(String),
}

pub type Result<T, E = VolumeError> = std::result::Result<T, E>;

/// A virtual disk. Completed writes are durable (a completed write survives the
/// loss of any component the volume's redundancy covers); `flush` exists for
/// front ends whose protocol has one and returns once every write completed
/// before it is durable.
pub trait Volume: Send + Sync + 'static {
    /// Current size in bytes.
    fn size(&self) -> u64;

    fn read(&self, offset: u64, len: u64) -> impl Future<Output = Result<Bytes>> + Send;

    fn write(&self, offset: u64, data: Bytes) -> impl Future<Output = Result<()>> + Send;

    /// Make the range read as zeros.
    fn write_zeroes(&self, offset: u64, len: u64) -> impl Future<Output = Result<()>> + Send;

    /// Release the range; it reads as zeros afterwards.
    fn discard(&self, offset: u64, len: u64) -> impl Future<Output = Result<()>> + Send;

    fn flush(&self) -> impl Future<Output = Result<()>> + Send;
}

impl<V: Volume> Volume for Arc<V> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn read(&self, offset: u64, len: u64) -> impl Future<Output = Result<Bytes>> + Send {
        (**self).read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes) -> impl Future<Output = Result<()>> + Send {
        (**self).write(offset, data)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> impl Future<Output = Result<()>> + Send {
        (**self).write_zeroes(offset, len)
    }
    fn discard(&self, offset: u64, len: u64) -> impl Future<Output = Result<()>> + Send {
        (**self).discard(offset, len)
    }
    fn flush(&self) -> impl Future<Output = Result<()>> + Send {
        (**self).flush()
    }
}

/// Check that `offset..offset+len` lies inside a volume of `size` bytes.
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(VolumeError::OutOfRange { offset, len, size }),
    }
}

/// An in-memory volume for tests of front ends.
pub struct MemVolume {
    data: Mutex<Vec<u8>>,
}

impl MemVolume {
    pub fn new(size: u64) -> Self {
        Self {
            data: Mutex::new(vec![0; size as usize]),
        }
    }

    /// A copy of the whole contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.lock().clone()
    }
}

impl Volume for MemVolume {
    fn size(&self) -> u64 {
        self.data.lock().len() as u64
    }

    async fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        let data = self.data.lock();
        check_range(offset, len, data.len() as u64)?;
        Ok(Bytes::copy_from_slice(
            &data[offset as usize..(offset + len) as usize],
        ))
    }

    async fn write(&self, offset: u64, buf: Bytes) -> Result<()> {
        let mut data = self.data.lock();
        check_range(offset, buf.len() as u64, data.len() as u64)?;
        data[offset as usize..offset as usize + buf.len()].copy_from_slice(&buf);
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        let mut data = self.data.lock();
        check_range(offset, len, data.len() as u64)?;
        data[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.write_zeroes(offset, len).await
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_past_the_end_are_rejected() {
        assert!(check_range(0, 10, 10).is_ok());
        assert!(check_range(5, 6, 10).is_err());
        assert!(check_range(u64::MAX, 2, 10).is_err());
    }
}
