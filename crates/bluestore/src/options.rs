//! What a BlueStore is made and mounted with.
//!
//! [`MkfsOptions`] fix the on-disk layout (allocation unit, extent-map shard
//! size) and are recorded in the superblock; [`MountOptions`] are runtime
//! knobs (write paths, checksums, compression, caches) and may change
//! between mounts.

use std::path::PathBuf;

use crate::checksum::ChecksumType;
use crate::compression::{Algorithm, CompressionMode};

/// Layout, fixed at mkfs.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    /// Allocation unit in bytes: a power of two, at least 4 KiB.
    pub min_alloc_size: u64,
    /// Logical bytes of an object covered by one extent-map shard (one KV
    /// entry): a multiple of `min_alloc_size`.
    pub shard_size: u64,
    /// Bytes of the commit journal's region (a multiple of the allocation
    /// unit); smaller devices get at most an eighth of their size.
    pub journal_size: u64,
    /// Overwrite an existing store's label and database.
    pub force: bool,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        Self {
            min_alloc_size: 4096,
            shard_size: 256 << 10,
            journal_size: 64 << 20,
            force: false,
        }
    }
}

/// How the three caches share memory.
#[derive(Clone, Debug)]
pub struct CacheOptions {
    /// Total bytes for the onode, data and RocksDB block caches.
    pub cache_size: u64,
    /// Share of `cache_size` for onodes (metadata).
    pub meta_ratio: f64,
    /// Share of `cache_size` for RocksDB's block cache; the rest is data.
    pub kv_ratio: f64,
    /// Resize the caches to keep the process near `memory_target`.
    pub autotune: bool,
    /// Process memory (RSS) the autotuner aims at.
    pub memory_target: u64,
}

impl Default for CacheOptions {
    fn default() -> Self {
        Self {
            cache_size: 256 << 20,
            meta_ratio: 0.4,
            kv_ratio: 0.2,
            autotune: false,
            memory_target: 1 << 30,
        }
    }
}

impl CacheOptions {
    pub fn meta_bytes(&self) -> u64 {
        (self.cache_size as f64 * self.meta_ratio) as u64
    }

    pub fn kv_bytes(&self) -> u64 {
        (self.cache_size as f64 * self.kv_ratio) as u64
    }

    pub fn data_bytes(&self) -> u64 {
        self.cache_size
            .saturating_sub(self.meta_bytes())
            .saturating_sub(self.kv_bytes())
    }
}

/// Other transactions unacknowledged at which the store counts as busy for
/// `MountOptions::deferred_busy_max_bytes`.
pub const DEFER_BUSY_UNACKED: u64 = 4;

/// Runtime knobs.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Overwrites of allocated space up to this many bytes go through the
    /// commit journal (deferred) instead of new space; 0 disables.
    pub deferred_max_bytes: u64,
    /// Overwrites larger than this (and at most `deferred_max_bytes`) are
    /// deferred only while fewer than [`DEFER_BUSY_UNACKED`] other
    /// transactions wait for their commit. A deferred write costs the
    /// device its bytes twice (journal, then in place); a direct one costs
    /// its group a data flush before the record. Alone, the flush costs
    /// more (64 KiB at queue depth 1: 229–241 µs deferred, 373–412 µs
    /// direct); under load, the bytes (64 KiB at queue depth 32: 12–13k
    /// deferred, 15–18k direct; the two cross at about depth 4–8).
    pub deferred_busy_max_bytes: u64,
    /// Bytes of deferred writes not yet applied to the device above which
    /// new small overwrites take the direct path instead.
    pub deferred_backlog_bytes: u64,
    /// A submitter may write a lone transaction's journal record itself
    /// when the store is idle after a run of lone commits, rather than
    /// wake the commit thread and wait to be woken (see `commit`).
    pub inline_commits: bool,
    pub checksum: ChecksumType,
    pub compression_mode: CompressionMode,
    pub compression_algorithm: Algorithm,
    /// Keep compressed data only if at most this share of the raw size.
    pub compression_required_ratio: f64,
    /// Writes smaller than this are not compressed.
    pub compression_min_blob_size: u64,
    /// Compressed blobs hold at most this many raw bytes.
    pub compression_max_blob_size: u64,
    pub cache: CacheOptions,
    /// A RocksDB options string, applied verbatim.
    pub rocksdb_options: String,
    /// Separate directory for RocksDB's write-ahead log.
    pub wal_path: Option<PathBuf>,
}

impl Default for MountOptions {
    fn default() -> Self {
        Self {
            deferred_max_bytes: 64 << 10,
            deferred_busy_max_bytes: 32 << 10,
            deferred_backlog_bytes: 64 << 20,
            inline_commits: true,
            checksum: ChecksumType::Crc32c,
            compression_mode: CompressionMode::None,
            compression_algorithm: Algorithm::Lz4,
            compression_required_ratio: 0.875,
            compression_min_blob_size: 8 << 10,
            compression_max_blob_size: 64 << 10,
            cache: CacheOptions::default(),
            rocksdb_options: String::new(),
            wal_path: None,
        }
    }
}
