//! Stores for tests: in memory (MemDevice + MemKv) or on files (a
//! preallocated O_DIRECT file + RocksDB in a temporary directory).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_bluestore::{mkfs, BlueStore, MkfsOptions, MountOptions};
use cairn_device::{BlockDevice, FileDevice, FileDeviceOptions, MemDevice};
use cairn_kv::{Kv, MemKv, RocksKv, RocksKvOptions};

pub const MIB: u64 = 1 << 20;

/// A store in memory; reopening mounts the same device and database again.
pub struct MemStores {
    pub device: Arc<MemDevice>,
    pub kv: Arc<MemKv>,
    pub mkfs: MkfsOptions,
    pub mount: MountOptions,
    made: bool,
}

impl MemStores {
    pub fn new(size: u64) -> Self {
        Self {
            device: Arc::new(MemDevice::new(size)),
            kv: Arc::new(MemKv::new()),
            mkfs: MkfsOptions::default(),
            mount: MountOptions::default(),
            made: false,
        }
    }

    pub fn open(&mut self) -> Arc<BlueStore> {
        if !self.made {
            mkfs(self.device.as_ref(), self.kv.as_ref(), &self.mkfs).expect("mkfs");
            self.made = true;
        }
        let device: Arc<dyn BlockDevice> = self.device.clone();
        let kv: Arc<dyn Kv> = self.kv.clone();
        BlueStore::mount(device, kv, self.mount.clone()).expect("mount")
    }
}

/// A store on a preallocated file with RocksDB beside it.
pub struct FileStores {
    pub dir: tempfile::TempDir,
    pub size: u64,
    pub mkfs: MkfsOptions,
    pub mount: MountOptions,
    made: bool,
}

impl FileStores {
    pub fn new(size: u64) -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            size,
            mkfs: MkfsOptions::default(),
            mount: MountOptions::default(),
            made: false,
        }
    }

    pub fn block_path(&self) -> PathBuf {
        self.dir.path().join("block")
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("db")
    }

    pub fn open(&mut self) -> Arc<BlueStore> {
        if !self.made {
            FileDevice::create_file(self.block_path(), self.size).expect("create block file");
        }
        let device = open_device(&self.block_path());
        let kv = open_kv(&self.db_path(), !self.made, &self.mount.rocksdb_options);
        if !self.made {
            mkfs(device.as_ref(), kv.as_ref(), &self.mkfs).expect("mkfs");
            self.made = true;
        }
        BlueStore::mount(device, kv, self.mount.clone()).expect("mount")
    }
}

pub fn open_device(path: &Path) -> Arc<dyn BlockDevice> {
    Arc::new(FileDevice::open(path, FileDeviceOptions::default()).expect("open device"))
}

pub fn open_kv(path: &Path, create: bool, options: &str) -> Arc<dyn Kv> {
    let opts = RocksKvOptions {
        create,
        options: options.to_string(),
        block_cache_bytes: 8 * MIB,
        ..Default::default()
    };
    Arc::new(RocksKv::open(path, &opts).expect("open RocksDB"))
}
