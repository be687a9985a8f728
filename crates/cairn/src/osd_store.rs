//! An OSD's object store on disk: which backend its directory holds,
//! making one (`cairn osd mkfs`), opening it for the daemon, and checking
//! it (`cairn osd fsck`).
//!
//! An OSD directory records its backend in the file `type`. A BlueStore
//! directory holds `block` (the data device: a preallocated file, or a
//! symlink to a block device or file given with `--device`), `db` (RocksDB,
//! or a symlink to `--db-path`) and optionally `wal` (a symlink to
//! `--wal-path`, RocksDB's write-ahead log). Configuration options
//! (`osd.bluestore_block_path`, `_db_path`, `_wal_path`) override them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use cairn_bluestore::fsck::FsckReport;
use cairn_bluestore::{
    Algorithm, BlueStore, CacheOptions, ChecksumType, CompressionMode, MkfsOptions, MountOptions,
};
use cairn_config::{
    ChecksumKind, CompressionAlgorithmKind, CompressionModeKind, IoEngineKind, OsdConfig, StoreKind,
};
use cairn_device::{BlockDevice, FileDevice, FileDeviceOptions, IoEngine};
use cairn_kv::{BufferedKv, Kv, RocksKv, RocksKvOptions};
use cairn_store::ObjectStore;

const TYPE_FILE: &str = "type";

/// Where a BlueStore's parts are.
pub struct BluePaths {
    pub block: PathBuf,
    pub db: PathBuf,
    pub wal: Option<PathBuf>,
}

fn configured(path: &str) -> Option<PathBuf> {
    (!path.is_empty()).then(|| PathBuf::from(path))
}

pub fn blue_paths(dir: &Path, conf: &OsdConfig) -> BluePaths {
    let wal_link = dir.join("wal");
    BluePaths {
        block: configured(&conf.bluestore_block_path).unwrap_or_else(|| dir.join("block")),
        db: configured(&conf.bluestore_db_path).unwrap_or_else(|| dir.join("db")),
        wal: configured(&conf.bluestore_wal_path).or_else(|| wal_link.exists().then_some(wal_link)),
    }
}

/// The backend recorded in `dir`, if any. A FileStore made before `type`
/// files existed is recognised by its `store` directory.
pub fn recorded_kind(dir: &Path) -> Result<Option<StoreKind>> {
    match std::fs::read_to_string(dir.join(TYPE_FILE)) {
        Ok(text) => {
            let kind = text
                .trim()
                .parse::<StoreKind>()
                .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(TYPE_FILE).display()))?;
            Ok(Some(kind))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(dir.join("store").is_dir().then_some(StoreKind::Filestore))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.join(TYPE_FILE).display())),
    }
}

fn record_kind(dir: &Path, kind: StoreKind) -> Result<()> {
    let path = dir.join(TYPE_FILE);
    std::fs::write(&path, format!("{kind}\n"))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// What `cairn osd mkfs` was asked for beyond the configuration.
#[derive(Default)]
pub struct MkfsRequest {
    pub device: Option<PathBuf>,
    pub db_path: Option<PathBuf>,
    pub wal_path: Option<PathBuf>,
    pub size: Option<u64>,
    pub force: bool,
}

/// Make the store of the OSD whose directory is `dir`. Returns one line
/// describing what was made.
pub fn mkfs(dir: &Path, kind: StoreKind, conf: &OsdConfig, req: &MkfsRequest) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if let Some(existing) = recorded_kind(dir)? {
        if !req.force {
            bail!(
                "{} already holds a {existing} (use --force to overwrite)",
                dir.display()
            );
        }
    }
    let made = match kind {
        StoreKind::Memstore => "a memstore (nothing on disk)".to_string(),
        StoreKind::Filestore => {
            let store = dir.join("store");
            if req.force && store.exists() {
                std::fs::remove_dir_all(&store)
                    .with_context(|| format!("cannot remove {}", store.display()))?;
            }
            drop(open_filestore(dir, conf)?);
            format!("a filestore in {}", store.display())
        }
        StoreKind::Bluestore => mkfs_bluestore(dir, conf, req)?,
    };
    record_kind(dir, kind)?;
    Ok(made)
}

/// Point `link` at `target` (replacing an old link).
fn link(link: &Path, target: &Path) -> Result<()> {
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(link).with_context(|| format!("cannot replace {}", link.display()))?;
    }
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("cannot link {} to {}", link.display(), target.display()))
}

/// Files and links a failed mkfs made, removed so that it changes nothing.
struct Undo {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    armed: bool,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn mkfs_bluestore(dir: &Path, conf: &OsdConfig, req: &MkfsRequest) -> Result<String> {
    let mut undo = Undo {
        files: Vec::new(),
        dirs: Vec::new(),
        armed: true,
    };
    let made = mkfs_bluestore_steps(dir, conf, req, &mut undo)?;
    undo.armed = false;
    Ok(made)
}

fn mkfs_bluestore_steps(
    dir: &Path,
    conf: &OsdConfig,
    req: &MkfsRequest,
    undo: &mut Undo,
) -> Result<String> {
    let size = req.size.unwrap_or(conf.bluestore_block_size);
    if size < cairn_bluestore::MIN_DEVICE_BYTES {
        bail!(
            "a device of {size} bytes is too small (at least {} bytes)",
            cairn_bluestore::MIN_DEVICE_BYTES
        );
    }
    let mut paths = blue_paths(dir, conf);
    for (name, given) in [
        ("block", &req.device),
        ("db", &req.db_path),
        ("wal", &req.wal_path),
    ] {
        if let Some(target) = given {
            let target = std::path::absolute(target)
                .with_context(|| format!("bad path {}", target.display()))?;
            link(&dir.join(name), &target)?;
            undo.files.push(dir.join(name));
            match name {
                "block" => paths.block = target,
                "db" => paths.db = target,
                _ => paths.wal = Some(target),
            }
        }
    }
    if !paths.block.exists() {
        FileDevice::create_file(&paths.block, size)?;
        undo.files.push(paths.block.clone());
    } else if req.size.is_some() && paths.block.is_file() {
        bail!(
            "{} exists: --size applies only to a new file",
            paths.block.display()
        );
    }
    let device = open_device(&paths.block, conf)?;
    if req.force && paths.db.exists() {
        std::fs::remove_dir_all(&paths.db)
            .with_context(|| format!("cannot remove {}", paths.db.display()))?;
    }
    if !req.force && paths.db.join("CURRENT").exists() {
        bail!(
            "{} already holds a database (use --force to overwrite)",
            paths.db.display()
        );
    }
    if !paths.db.exists() {
        undo.dirs.push(paths.db.clone());
    }
    if let Some(wal) = paths.wal.as_ref().filter(|w| !w.exists()) {
        undo.dirs.push(wal.clone());
    }
    let kv = open_kv(&paths, conf, true)?;
    let opts = MkfsOptions {
        min_alloc_size: conf.bluestore_min_alloc_size,
        shard_size: conf.bluestore_extent_shard_size,
        journal_size: conf.bluestore_journal_size,
        force: req.force,
    };
    let sb = cairn_bluestore::mkfs(device.as_ref(), kv.as_ref(), &opts)
        .with_context(|| format!("mkfs on {}", paths.block.display()))?;
    Ok(format!(
        "a bluestore {} on {} ({} bytes, allocation unit {}), metadata in {}",
        sb.id(),
        paths.block.display(),
        sb.device_size,
        sb.min_alloc_size,
        paths.db.display()
    ))
}

fn open_device(path: &Path, conf: &OsdConfig) -> Result<Arc<dyn BlockDevice>> {
    let opts = FileDeviceOptions {
        engine: match conf.bluestore_io_engine {
            IoEngineKind::Uring => IoEngine::Uring,
            IoEngineKind::Threads => IoEngine::Threads,
        },
        ..Default::default()
    };
    let device: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(path, opts)?);
    if conf.bluestore_device_emulation != "hdd" {
        return Ok(device);
    }
    let model = cairn_device::HddModel {
        seek: std::time::Duration::from_millis(conf.hdd_emulation_seek_ms),
        bytes_per_s: conf.hdd_emulation_mib_per_s.saturating_mul(1 << 20),
    };
    tracing::warn!(
        "{}: served as an emulated spinning disk ({} ms seek, {} MiB/s): for tests and \
         benchmarks only",
        path.display(),
        conf.hdd_emulation_seek_ms,
        conf.hdd_emulation_mib_per_s
    );
    Ok(Arc::new(cairn_device::EmulatedHdd::new(device, model)))
}

fn open_kv(paths: &BluePaths, conf: &OsdConfig, create: bool) -> Result<Arc<dyn Kv>> {
    let opts = RocksKvOptions {
        wal_dir: paths.wal.clone(),
        // The key-value share of the cache: half block cache, half the two
        // memtables.
        block_cache_bytes: cache_options(conf).kv_bytes() / 2,
        memtable_bytes: (cache_options(conf).kv_bytes() / 4).max(4 << 20),
        options: conf.bluestore_rocksdb_options.clone(),
        background_write_rate: rocksdb_write_rate(conf, &db_class(conf, paths)),
        create,
    };
    let rocks = RocksKv::open(&paths.db, &opts)?;
    Ok(match conf.bluestore_kv_buffer_bytes {
        0 => Arc::new(rocks),
        limit => Arc::new(BufferedKv::new(rocks, limit as usize)),
    })
}

/// The class of the device holding the database, for its pacing: a
/// configured `osd.crush_device_class` when the database shares the data's
/// disk (a loop device or a VM's disk may report itself rotational whatever
/// it is, and the class an operator declared is the better word), else the
/// class detected for the database's own device.
fn db_class(conf: &OsdConfig, paths: &BluePaths) -> String {
    use crate::device_info::{detect_class, same_disk};
    pacing_class(
        &conf.crush_device_class,
        || same_disk(&paths.db, &paths.block),
        || detect_class(&paths.db),
    )
}

/// Only the classes pacing knows (`hdd`, `ssd`, `nvme`) are taken from the
/// configuration: a custom one (`archive`) says nothing of the device.
fn pacing_class(
    configured: &str,
    db_with_data: impl FnOnce() -> bool,
    detected: impl FnOnce() -> &'static str,
) -> String {
    if matches!(configured, "hdd" | "ssd" | "nvme") && db_with_data() {
        configured.to_string()
    } else {
        detected().to_string()
    }
}

/// RocksDB's background write rate for a database on a device of `class`
/// (`hdd`, `ssd`, `nvme`): paced on spinning disks, where a burst of table
/// files holds the journal's writes up; 0 is unlimited.
fn rocksdb_write_rate(conf: &OsdConfig, class: &str) -> u64 {
    match class {
        "hdd" => conf.bluestore_rocksdb_write_rate_hdd,
        _ => conf.bluestore_rocksdb_write_rate_ssd,
    }
}

fn cache_options(conf: &OsdConfig) -> CacheOptions {
    CacheOptions {
        cache_size: conf.bluestore_cache_size,
        meta_ratio: conf.bluestore_cache_meta_ratio.get(),
        kv_ratio: conf.bluestore_cache_kv_ratio.get(),
        autotune: conf.bluestore_cache_autotune,
        memory_target: conf.memory_target,
    }
}

pub fn mount_options(conf: &OsdConfig, paths: &BluePaths) -> MountOptions {
    MountOptions {
        deferred_max_bytes: conf.bluestore_deferred_max_bytes,
        deferred_busy_max_bytes: conf.bluestore_deferred_busy_max_bytes,
        inline_commits: conf.bluestore_inline_commits,
        checksum: match conf.bluestore_csum_type {
            ChecksumKind::Crc32c => ChecksumType::Crc32c,
            ChecksumKind::Xxhash64 => ChecksumType::Xxhash64,
            ChecksumKind::None => ChecksumType::None,
        },
        compression_mode: match conf.bluestore_compression_mode {
            CompressionModeKind::None => CompressionMode::None,
            CompressionModeKind::Passive => CompressionMode::Passive,
            CompressionModeKind::Aggressive => CompressionMode::Aggressive,
            CompressionModeKind::Force => CompressionMode::Force,
        },
        compression_algorithm: match conf.bluestore_compression_algorithm {
            CompressionAlgorithmKind::Lz4 => Algorithm::Lz4,
            CompressionAlgorithmKind::Zstd => Algorithm::Zstd,
            CompressionAlgorithmKind::Snappy => Algorithm::Snappy,
        },
        compression_required_ratio: conf.bluestore_compression_required_ratio.get(),
        compression_min_blob_size: conf.bluestore_compression_min_blob_size,
        compression_max_blob_size: conf.bluestore_compression_max_blob_size,
        cache: cache_options(conf),
        rocksdb_options: conf.bluestore_rocksdb_options.clone(),
        wal_path: paths.wal.clone(),
        ..Default::default()
    }
}

/// Mount the BlueStore of `dir`.
pub fn open_bluestore(dir: &Path, conf: &OsdConfig) -> Result<Arc<BlueStore>> {
    let paths = blue_paths(dir, conf);
    if !paths.block.exists() {
        bail!(
            "{} does not exist: make the store first (cairn osd mkfs --dir {} --store bluestore)",
            paths.block.display(),
            dir.display()
        );
    }
    let device = open_device(&paths.block, conf)?;
    let kv = open_kv(&paths, conf, false)?;
    let store = BlueStore::mount(device, kv, mount_options(conf, &paths))
        .with_context(|| format!("cannot mount the bluestore in {}", dir.display()))?;
    if conf.bluestore_cache_autotune {
        cairn_bluestore::autotune::start(&store, conf.memory_target, conf.bluestore_cache_size);
    }
    Ok(store)
}

fn open_filestore(dir: &Path, conf: &OsdConfig) -> Result<Arc<dyn ObjectStore>> {
    let options = cairn_store::filestore::FileStoreOptions {
        journal_max_bytes: conf.journal_max_bytes,
        ..Default::default()
    };
    let store = cairn_store::filestore::FileStore::open(&dir.join("store"), options)
        .with_context(|| format!("cannot open the filestore in {}", dir.display()))?;
    Ok(store)
}

/// Open the store the daemon serves. A memstore or filestore is made on
/// first start; a bluestore must have been made with `cairn osd mkfs`.
pub fn open(dir: &Path, conf: &OsdConfig) -> Result<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let want = conf.store;
    match recorded_kind(dir)? {
        Some(have) if have != want => bail!(
            "{} holds a {have} but osd.store is {want} (make a new store with cairn osd mkfs --force)",
            dir.display()
        ),
        Some(_) => {}
        None if want == StoreKind::Bluestore => bail!(
            "{} holds no store: make one first (cairn osd mkfs --dir {} --store bluestore)",
            dir.display(),
            dir.display()
        ),
        None => record_kind(dir, want)?,
    }
    let store: Arc<dyn ObjectStore> = match want {
        StoreKind::Memstore => Arc::new(cairn_store::memstore::MemStore::new()),
        StoreKind::Filestore => open_filestore(dir, conf)?,
        StoreKind::Bluestore => open_bluestore(dir, conf)?,
    };
    if conf.debug_commit_delay_ms == 0 {
        return Ok(store);
    }
    tracing::warn!(
        "osd.debug_commit_delay_ms = {}: every commit is held back that long (a fault-test \
         setting, never for production)",
        conf.debug_commit_delay_ms
    );
    let delay = std::time::Duration::from_millis(conf.debug_commit_delay_ms);
    let delayed = cairn_store::delayed::DelayedCommits::new(store, delay)
        .context("cannot start the delayed-commit thread")?;
    Ok(Arc::new(delayed))
}

/// Check (and with `repair`, mend) the BlueStore of `dir`.
pub fn fsck(dir: &Path, conf: &OsdConfig, deep: bool, repair: bool) -> Result<FsckReport> {
    match recorded_kind(dir)? {
        Some(StoreKind::Bluestore) => {}
        Some(other) => bail!("fsck checks a bluestore; {} holds a {other}", dir.display()),
        None => bail!("{} holds no store", dir.display()),
    }
    let store = open_bluestore(dir, conf)?;
    Ok(store.fsck(deep, repair)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_class_paces_a_database_on_the_data_disk_only() {
        // Configured and on the data's disk: the configured class.
        assert_eq!(pacing_class("ssd", || true, || "hdd"), "ssd");
        assert_eq!(pacing_class("hdd", || true, || "ssd"), "hdd");
        // On a disk of its own, or none configured: what is detected.
        assert_eq!(pacing_class("ssd", || false, || "hdd"), "hdd");
        assert_eq!(pacing_class("", || true, || "hdd"), "hdd");
        // A custom class says nothing of the device.
        assert_eq!(pacing_class("archive", || true, || "hdd"), "hdd");
        let conf = OsdConfig {
            crush_device_class: "ssd".into(),
            ..OsdConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let paths = blue_paths(dir.path(), &conf);
        assert_eq!(db_class(&conf, &paths), "ssd");
        assert_eq!(rocksdb_write_rate(&conf, &db_class(&conf, &paths)), 0);
    }

    #[test]
    fn rocksdb_is_paced_by_the_class_of_its_device() {
        let conf = OsdConfig {
            bluestore_rocksdb_write_rate_hdd: 7,
            bluestore_rocksdb_write_rate_ssd: 9,
            ..OsdConfig::default()
        };
        assert_eq!(rocksdb_write_rate(&conf, "hdd"), 7);
        assert_eq!(rocksdb_write_rate(&conf, "ssd"), 9);
        assert_eq!(rocksdb_write_rate(&conf, "nvme"), 9);
        let defaults = OsdConfig::default();
        assert_eq!(rocksdb_write_rate(&defaults, "hdd"), 16 << 20);
        assert_eq!(rocksdb_write_rate(&defaults, "ssd"), 0, "unlimited");
    }
}
