//! Thin, synchronous wrappers over the system calls the file engines use.
//!
//! Owns the retry rules for blocking I/O: short reads and writes are
//! continued, `EINTR` is retried, and every failure is turned into a
//! [`DeviceError::Io`] naming the operation and the whole requested range.
//! Fault model: whatever the kernel reports is passed up unchanged; reading
//! past end of file (which a correctly sized device never does) is reported
//! as `UnexpectedEof`, a write that makes no progress as `WriteZero`.

use std::io;
use std::os::fd::RawFd;

use crate::{AlignedBuf, DeviceError};

/// `_IOR(0x12, 114, size_t)`: size in bytes of a block device.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `_IO(0x12, 119)`: discard a byte range `[start, len]` of a block device.
const BLKDISCARD: libc::c_ulong = 0x1277;

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Read exactly `buf.len()` bytes at `offset`, writing only through the
/// buffer's raw pointer (it may not be initialised yet).
pub(crate) fn pread_full(fd: RawFd, buf: &mut AlignedBuf, offset: u64) -> Result<(), DeviceError> {
    let total = buf.len();
    let base = buf.as_mut_ptr();
    let mut done = 0usize;
    while done < total {
        // SAFETY: `base + done .. base + total` lies within the buffer's
        // allocation, which `buf` keeps alive and exclusively borrowed.
        let n = unsafe {
            libc::pread(
                fd,
                base.add(done).cast(),
                total - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(DeviceError::Io {
                    op: "read",
                    offset,
                    len: total as u64,
                    source: io::ErrorKind::UnexpectedEof.into(),
                })
            }
            _ => match last_errno() {
                libc::EINTR | libc::EAGAIN => continue,
                e => return Err(DeviceError::errno("read", offset, total as u64, e)),
            },
        }
    }
    Ok(())
}

/// Write all of `buf` at `offset`.
pub(crate) fn pwrite_full(fd: RawFd, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
    pwrite_all(fd, buf, offset, 0)
}

/// Write all of `buf` at `offset` with `RWF_DSYNC`: durable on return.
pub(crate) fn pwrite_dsync(fd: RawFd, buf: &[u8], offset: u64) -> Result<(), DeviceError> {
    pwrite_all(fd, buf, offset, libc::RWF_DSYNC)
}

/// `pwritev2` with `flags` until all of `buf` is written.
fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64, flags: libc::c_int) -> Result<(), DeviceError> {
    let total = buf.len() as u64;
    let mut done = 0usize;
    while done < buf.len() {
        let rest = &buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: one iovec over a valid readable region of `rest.len()`
        // bytes, alive for the call.
        let n =
            unsafe { libc::pwritev2(fd, &iov, 1, (offset + done as u64) as libc::off_t, flags) };
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(DeviceError::Io {
                    op: "write",
                    offset,
                    len: total,
                    source: io::ErrorKind::WriteZero.into(),
                })
            }
            _ => match last_errno() {
                libc::EINTR | libc::EAGAIN => continue,
                e => return Err(DeviceError::errno("write", offset, total, e)),
            },
        }
    }
    Ok(())
}

/// `fdatasync(fd)`, retrying on `EINTR`.
pub(crate) fn fdatasync(fd: RawFd) -> Result<(), DeviceError> {
    loop {
        // SAFETY: plain syscall on a descriptor we own.
        if unsafe { libc::fdatasync(fd) } == 0 {
            return Ok(());
        }
        match last_errno() {
            libc::EINTR => continue,
            e => return Err(DeviceError::errno("flush", 0, 0, e)),
        }
    }
}

/// Discard `[offset, offset+len)`: `BLKDISCARD` on a block device, a punched
/// hole (size kept) on a regular file.
pub(crate) fn discard(fd: RawFd, is_block: bool, offset: u64, len: u64) -> Result<(), DeviceError> {
    if len == 0 {
        return Ok(());
    }
    loop {
        let rc = if is_block {
            let range: [u64; 2] = [offset, len];
            // SAFETY: BLKDISCARD reads two u64 from the pointer.
            unsafe { libc::ioctl(fd, BLKDISCARD as _, range.as_ptr()) }
        } else {
            // SAFETY: plain syscall on a descriptor we own.
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            }
        };
        if rc == 0 {
            return Ok(());
        }
        match last_errno() {
            libc::EINTR => continue,
            e => return Err(DeviceError::errno("discard", offset, len, e)),
        }
    }
}

/// Size in bytes of the block device open at `fd`.
pub(crate) fn block_device_size(fd: RawFd) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer.
    let rc = unsafe { libc::ioctl(fd, BLKGETSIZE64 as _, &mut size as *mut u64) };
    if rc == 0 {
        Ok(size)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `posix_fallocate(fd, 0, len)`: allocate real blocks for the whole range.
pub(crate) fn preallocate(fd: RawFd, len: u64) -> io::Result<()> {
    loop {
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
        match rc {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}
