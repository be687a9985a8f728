//! [`DeviceError`]: every way a device request can fail.
//!
//! Owns the error vocabulary of the crate. Fault model: errors are values,
//! never panics; an `Io` error always names the operation and byte range so
//! a log line alone identifies the failing request.

use std::io;
use std::path::PathBuf;

/// Failure of a device request or of opening/creating a device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Offset or length is not a multiple of [`crate::BLOCK_SIZE`].
    #[error(
        "misaligned request: offset {offset} len {len} (block size {})",
        crate::BLOCK_SIZE
    )]
    Misaligned {
        /// Requested byte offset.
        offset: u64,
        /// Requested length in bytes.
        len: u64,
    },

    /// The range reaches past the end of the device.
    #[error("request out of range: offset {offset} len {len} on device of {size} bytes")]
    OutOfRange {
        /// Requested byte offset.
        offset: u64,
        /// Requested length in bytes.
        len: u64,
        /// Device size in bytes.
        size: u64,
    },

    /// The operating system (or an injected fault) failed the request.
    #[error("{op} failed at offset {offset} len {len}: {source}")]
    Io {
        /// Operation name: "read", "write", "flush", "discard".
        op: &'static str,
        /// Byte offset of the request.
        offset: u64,
        /// Length in bytes of the request.
        len: u64,
        /// Underlying OS error.
        #[source]
        source: io::Error,
    },

    /// The device was dropped before the request could be carried out.
    #[error("device closed")]
    Closed,

    /// Opening, sizing or creating the device at `path` failed.
    #[error("{what} {}: {source}", path.display())]
    Open {
        /// What was being done, e.g. "open" or "preallocate".
        what: &'static str,
        /// The file or device path.
        path: PathBuf,
        /// Underlying OS error.
        #[source]
        source: io::Error,
    },

    /// Preallocating a file failed for lack of space.
    #[error("no space to preallocate {size} bytes for {}", path.display())]
    NoSpace {
        /// The file being created.
        path: PathBuf,
        /// Requested size in bytes.
        size: u64,
    },
}

impl DeviceError {
    /// Build an [`DeviceError::Io`] from a raw errno.
    pub(crate) fn errno(op: &'static str, offset: u64, len: u64, errno: i32) -> Self {
        DeviceError::Io {
            op,
            offset,
            len,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// The raw OS error number of an [`DeviceError::Io`], if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            DeviceError::Io { source, .. } | DeviceError::Open { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }
}
