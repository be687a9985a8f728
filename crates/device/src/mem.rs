//! [`MemDevice`]: a block device held entirely in memory, for tests.
//!
//! Owns a byte vector behind a read-write lock. Every request completes
//! before its future is returned. Fault model: nothing fails except
//! misaligned or out-of-range requests; there is no volatile cache, so every
//! completed write is immediately "durable" and `flush` is a no-op. Use
//! [`crate::FaultDevice`] to model errors and power loss.

use parking_lot::RwLock;

use crate::{check_range, check_writes, ready, AlignedBuf, BlockDevice, BoxFuture, DeviceError};

/// An in-memory block device.
pub struct MemDevice {
    data: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled device of `size` bytes rounded down to a multiple of
    /// [`crate::BLOCK_SIZE`].
    pub fn new(size: u64) -> Self {
        let size = size - size % crate::BLOCK_SIZE;
        Self::from_vec(vec![0; size as usize])
    }

    /// A device whose content is `data`, truncated to a multiple of
    /// [`crate::BLOCK_SIZE`].
    pub fn from_vec(mut data: Vec<u8>) -> Self {
        let keep = data.len() - data.len() % crate::BLOCK_SIZE as usize;
        data.truncate(keep);
        Self {
            data: RwLock::new(data),
        }
    }

    /// A copy of the whole device content.
    pub fn to_vec(&self) -> Vec<u8> {
        self.data.read().clone()
    }

    /// Consume the device, returning its content.
    pub fn into_vec(self) -> Vec<u8> {
        self.data.into_inner()
    }

    /// Synchronous read, for tests and for [`crate::FaultDevice`].
    pub fn read_sync(&self, offset: u64, len: u64) -> Result<AlignedBuf, DeviceError> {
        let data = self.data.read();
        check_range(offset, len, data.len() as u64)?;
        let start = offset as usize;
        Ok(AlignedBuf::from_slice(&data[start..start + len as usize]))
    }

    /// Synchronous write, for tests and for [`crate::FaultDevice`].
    pub fn write_sync(&self, offset: u64, buf: &[u8]) -> Result<(), DeviceError> {
        let mut data = self.data.write();
        check_range(offset, buf.len() as u64, data.len() as u64)?;
        let start = offset as usize;
        data[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }
}

impl std::fmt::Debug for MemDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemDevice")
            .field("size", &self.size())
            .finish()
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.data.read().len() as u64
    }

    fn read(&self, offset: u64, len: u64) -> BoxFuture<Result<AlignedBuf, DeviceError>> {
        ready(self.read_sync(offset, len))
    }

    fn write(&self, offset: u64, buf: AlignedBuf) -> BoxFuture<Result<(), DeviceError>> {
        ready(self.write_sync(offset, &buf))
    }

    fn write_many(&self, writes: Vec<(u64, AlignedBuf)>) -> BoxFuture<Result<(), DeviceError>> {
        let mut data = self.data.write();
        let result = check_writes(&writes, data.len() as u64).map(|()| {
            for (off, buf) in &writes {
                let start = *off as usize;
                data[start..start + buf.len()].copy_from_slice(buf);
            }
        });
        ready(result)
    }

    fn flush(&self) -> BoxFuture<Result<(), DeviceError>> {
        ready(Ok(()))
    }

    fn discard(&self, offset: u64, len: u64) -> BoxFuture<Result<(), DeviceError>> {
        ready(check_range(offset, len, self.size()))
    }
}
