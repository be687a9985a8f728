//! Shared helpers for the integration tests: device constructors (with the
//! O_DIRECT fallback for filesystems that refuse it) and data patterns.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use cairn_device::{
    BlockDevice, DeviceError, FaultDevice, FileDevice, FileDeviceOptions, IoEngine, MemDevice,
    BLOCK_SIZE,
};
use tempfile::TempDir;

/// Size of the devices the conformance suite runs on.
pub const DEV_SIZE: u64 = 16 << 20;

/// A device under test plus whatever must outlive it (a temp dir).
pub struct TestDev {
    pub dev: Arc<dyn BlockDevice>,
    pub _dir: Option<TempDir>,
}

pub fn mem() -> TestDev {
    TestDev {
        dev: Arc::new(MemDevice::new(DEV_SIZE)),
        _dir: None,
    }
}

/// A memory device behind the HDD emulation, with no seek or transfer
/// cost, so the suite checks the wrapper's ordering and plumbing only.
pub fn hdd() -> TestDev {
    let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(DEV_SIZE));
    let model = cairn_device::HddModel {
        seek: std::time::Duration::ZERO,
        bytes_per_s: u64::MAX,
    };
    TestDev {
        dev: Arc::new(cairn_device::EmulatedHdd::new(inner, model)),
        _dir: None,
    }
}

pub fn fault() -> TestDev {
    TestDev {
        dev: Arc::new(FaultDevice::new(DEV_SIZE)),
        _dir: None,
    }
}

pub fn file_threads() -> TestDev {
    file_dev(FileDeviceOptions {
        engine: IoEngine::Threads,
        threads: 4,
        ..Default::default()
    })
}

/// Uring with a queue depth well below the suite's 256 concurrent ops, so
/// the backlog path is exercised.
pub fn file_uring() -> TestDev {
    file_dev(FileDeviceOptions {
        engine: IoEngine::Uring,
        queue_depth: 32,
        ..Default::default()
    })
}

pub fn file_dev(opts: FileDeviceOptions) -> TestDev {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev");
    FileDevice::create_file(&path, DEV_SIZE).expect("create_file");
    let dev = open_direct_or_buffered(&path, opts).expect("open");
    TestDev {
        dev: Arc::new(dev),
        _dir: Some(dir),
    }
}

/// Open with the requested options; if O_DIRECT is refused (EINVAL, e.g.
/// on tmpfs) fall back to buffered I/O and say so.
pub fn open_direct_or_buffered(
    path: &Path,
    opts: FileDeviceOptions,
) -> Result<FileDevice, DeviceError> {
    match FileDevice::open(path, opts.clone()) {
        Err(e) if opts.direct && e.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!(
                "O_DIRECT refused on {} ({e}); falling back to buffered I/O",
                path.display()
            );
            FileDevice::open(
                path,
                FileDeviceOptions {
                    direct: false,
                    ..opts
                },
            )
        }
        other => other,
    }
}

/// A block-sized pattern unique to (`tag`, block index).
pub fn pattern(tag: u64, blocks: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity((blocks * BLOCK_SIZE) as usize);
    for b in 0..blocks {
        for i in 0..BLOCK_SIZE {
            let x = tag
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(b.wrapping_mul(31))
                .wrapping_add(i / 8);
            v.push((x ^ (x >> 17) ^ i) as u8);
        }
    }
    v
}
