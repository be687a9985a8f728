//! [`Kv`] on RocksDB.
//!
//! The database lives in one directory (`--db-path`); its write-ahead log
//! may live in another (`--wal-path`), on a faster device, as the tuned
//! clusters in the source documents had it. The block cache is sized by the
//! caller (the store's `cache_size` × `cache_kv_ratio`).
//!
//! Unsynced writes skip RocksDB's write-ahead log altogether: they live in
//! memtables until `sync` flushes those to table files (the caller keeps
//! its own log of them, as BlueStore's commit journal does), so the bulk of
//! the metadata traffic is never written twice. A synced write first makes
//! every unsynced one durable that way, then goes through the WAL and its
//! sync, so a crash never keeps a later batch without an earlier one.
//!
//! Fault model: a `sync` write is durable once it returns; a crash loses at
//! most unsynced batches (a suffix of them), never part of a batch. Errors
//! from RocksDB (I/O errors, a full disk) are returned, never hidden.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rocksdb::{Cache, Env, FlushOptions, Options, ReadOptions, WriteBatch, WriteOptions, DB};

use crate::rocks_options::{parse_options_string, persist, Base};
use crate::{Batch, Entries, Kv, KvError, Op, OpRef, Result};

/// How to open a [`RocksKv`].
#[derive(Clone, Debug)]
pub struct RocksKvOptions {
    /// Directory of the write-ahead log, if not the database directory.
    pub wal_dir: Option<PathBuf>,
    /// Block cache capacity in bytes.
    pub block_cache_bytes: u64,
    /// Bytes of one memtable (RocksDB's `write_buffer_size`; two are kept)
    /// unless the options string sets it.
    pub memtable_bytes: u64,
    /// A RocksDB options string (see [`parse_options_string`]).
    pub options: String,
    /// Bytes per second RocksDB's flushes and compactions may write (its
    /// rate limiter); 0: as fast as they can.
    pub background_write_rate: u64,
    /// Create the database if it does not exist (mkfs); otherwise opening a
    /// missing database is an error.
    pub create: bool,
}

impl Default for RocksKvOptions {
    fn default() -> Self {
        Self {
            wal_dir: None,
            block_cache_bytes: 64 << 20,
            memtable_bytes: 32 << 20,
            options: String::new(),
            background_write_rate: 0,
            create: false,
        }
    }
}

/// RocksDB behind the [`Kv`] trait.
pub struct RocksKv {
    db: DB,
    /// Unsynced (WAL-less) batches may sit in memtables: set once such a
    /// write has returned from RocksDB, so a `sync` that clears it flushes
    /// every write that returned before.
    unsynced: AtomicBool,
    /// One `sync` at a time: a second one must not return (finding nothing
    /// flagged) while the first is still flushing what it took.
    syncing: parking_lot::Mutex<()>,
    cache: Cache,
    path: PathBuf,
}

impl RocksKv {
    /// Up to `limit` entries in `start..end`; with `memory_only`, from the
    /// memtables and the block cache only (`Incomplete` otherwise).
    fn scan_tier(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        memory_only: bool,
    ) -> std::result::Result<Entries, rocksdb::Error> {
        if start >= end || limit == 0 {
            return Ok(Vec::new());
        }
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(end.to_vec());
        if memory_only {
            memory_tier(&mut read);
        }
        let mut it = self.db.raw_iterator_opt(read);
        it.seek(start);
        let mut out = Vec::new();
        while it.valid() && out.len() < limit {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                out.push((k.to_vec(), v.to_vec()));
            }
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// Write `wb`, as `write` writes a batch.
    fn write_wb(&self, wb: WriteBatch, sync: bool) -> Result<()> {
        let mut opts = WriteOptions::default();
        if sync {
            // Earlier WAL-less batches first, or the WAL could outlive them
            // (waiting for a sync that is flushing them). The WAL itself
            // needs no sync of its own here: this write's covers it.
            self.flush_unsynced(&self.syncing.lock())?;
            opts.set_sync(true);
            self.db.write_opt(wb, &opts).map_err(backend)
        } else {
            opts.disable_wal(true);
            self.db.write_opt(wb, &opts).map_err(backend)?;
            // Only now: flagged before, a sync could clear the flag and
            // switch memtables before this batch is in one, and the next
            // sync would then skip it.
            self.unsynced.store(true, Ordering::Release);
            Ok(())
        }
    }

    /// Flush the memtables if a WAL-less batch may be in them. Called with
    /// `syncing` held (`_one`), so that a second caller waits for a flush
    /// in progress rather than find nothing flagged and go on.
    fn flush_unsynced(&self, _one: &parking_lot::MutexGuard<'_, ()>) -> Result<()> {
        if self.unsynced.swap(false, Ordering::AcqRel) {
            let mut flush = FlushOptions::default();
            flush.set_wait(true);
            if let Err(e) = self.db.flush_opt(&flush) {
                self.unsynced.store(true, Ordering::Release);
                return Err(backend(e));
            }
        }
        Ok(())
    }

    /// Open (or with `options.create`, create) the database in `path`.
    pub fn open(path: &Path, options: &RocksKvOptions) -> Result<Self> {
        let open_err = |reason: String| KvError::Open {
            path: path.display().to_string(),
            reason,
        };
        if !options.create && !path.join("CURRENT").exists() {
            return Err(open_err("no RocksDB database there".into()));
        }
        if let Some(wal) = &options.wal_dir {
            std::fs::create_dir_all(wal).map_err(|e| {
                open_err(format!(
                    "cannot create WAL directory {}: {e}",
                    wal.display()
                ))
            })?;
        }
        let parsed = parse_options_string(&options.options)?;
        let base = Base {
            create: options.create,
            memtable_bytes: options.memtable_bytes,
        };
        persist(path, options.wal_dir.as_deref(), &parsed.rocksdb, base)?;

        let mut env = Env::new().map_err(|e| open_err(e.to_string()))?;
        if let Some(n) = parsed.compaction_threads {
            env.set_background_threads(n);
        }
        if let Some(n) = parsed.flusher_threads {
            env.set_high_priority_background_threads(n);
        }
        let capacity = usize::try_from(options.block_cache_bytes).unwrap_or(usize::MAX);
        let cache = Cache::new_lru_cache(capacity).map_err(|e| open_err(e.to_string()))?;
        // The database's options come back in two parts: the database-wide
        // ones, and each column family's (memtable size, compression, table
        // options). Both must be passed to the open: opened with the first
        // alone, the default family ran on RocksDB's defaults (64 MiB
        // memtables, snappy), whatever the options string said.
        let (mut db_options, families) =
            Options::load_latest(path, env.clone(), false, cache.clone())
                .map_err(|e| open_err(format!("cannot load its options: {e}")))?;
        db_options.set_env(&env);
        db_options.create_if_missing(false);
        if options.background_write_rate > 0 {
            // Not part of the options file: set at every open. Refilled
            // every 100 ms (RocksDB's default), fairness 10 (its default).
            let rate = i64::try_from(options.background_write_rate).unwrap_or(i64::MAX);
            db_options.set_ratelimiter(rate, 100_000, 10);
        }
        let db = DB::open_cf_descriptors(&db_options, path, families)
            .map_err(|e| open_err(e.to_string()))?;
        tracing::debug!(path = %path.display(), options = %parsed.rocksdb, "opened RocksDB");
        Ok(Self {
            db,
            unsynced: AtomicBool::new(false),
            syncing: parking_lot::Mutex::new(()),
            cache,
            path: path.to_path_buf(),
        })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A RocksDB property such as `rocksdb.estimate-num-keys`.
    pub fn property(&self, name: &str) -> Option<String> {
        self.db.property_value(name).ok().flatten()
    }
}

impl Drop for RocksKv {
    fn drop(&mut self) {
        // Unsynced writes wait in memtables: a clean close keeps them.
        if let Err(e) = self.sync() {
            tracing::warn!(path = %self.path.display(), error = %e, "RocksDB WAL flush at close failed");
        }
    }
}

/// Reads from the memtables and the block cache only: RocksDB's
/// `kBlockCacheTier`, answering `Incomplete` where it would read a file.
// The target type cannot be written out: it is not exported.
#[allow(clippy::missing_transmute_annotations)]
fn memory_tier(read: &mut ReadOptions) {
    // The crate (0.20.1) takes a `ReadTier` here but does not export the
    // type: `#[repr(i32)] enum ReadTier { All = 0, BlockCache }`.
    // SAFETY: same size, and 1 is the value of `ReadTier::BlockCache`.
    read.set_read_tier(unsafe { std::mem::transmute::<i32, _>(1) });
}

fn backend(e: rocksdb::Error) -> KvError {
    KvError::Backend(e.into_string())
}

impl Kv for RocksKv {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get(key).map_err(backend)
    }

    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan_tier(start, end, limit, false).map_err(backend)
    }

    fn get_in_memory(&self, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        // The memtables and the block cache only: `Incomplete` otherwise.
        let mut read = ReadOptions::default();
        memory_tier(&mut read);
        match self.db.get_opt(key, &read) {
            // RocksDB 7 answers a memory-only read that reaches a table
            // file not open yet with an empty value, not `Incomplete`
            // (fixed upstream in 2024, facebook/rocksdb#12443): an empty
            // value read this way says nothing.
            Ok(Some(value)) if value.is_empty() => Ok(None),
            Ok(found) => Ok(Some(found)),
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => Ok(None),
            Err(e) => Err(backend(e)),
        }
    }

    fn scan_in_memory(&self, start: &[u8], end: &[u8], limit: usize) -> Result<Option<Entries>> {
        match self.scan_tier(start, end, limit, true) {
            Ok(out) => Ok(Some(out)),
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => Ok(None),
            Err(e) => Err(backend(e)),
        }
    }

    fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        self.write_wb(write_batch(&batch), sync)
    }

    fn write_ops(&self, ops: &mut dyn Iterator<Item = OpRef<'_>>, sync: bool) -> Result<()> {
        self.write_wb(write_batch_of(ops), sync)
    }

    fn try_write(&self, batch: &mut Batch) -> Result<bool> {
        let mut opts = WriteOptions::default();
        opts.disable_wal(true);
        // Fail with `Incomplete` rather than wait for a stall to clear.
        opts.set_no_slowdown(true);
        match self.db.write_opt(write_batch(batch), &opts) {
            Ok(()) => {
                // As in `write`: flagged only once the batch is in.
                self.unsynced.store(true, Ordering::Release);
                Ok(true)
            }
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => Ok(false),
            Err(e) => Err(backend(e)),
        }
    }

    fn sync(&self) -> Result<()> {
        self.flush_unsynced(&self.syncing.lock())?;
        self.db.flush_wal(true).map_err(backend)
    }

    fn cache_usage(&self) -> u64 {
        self.cache.get_usage() as u64
    }

    fn stats(&self) -> Vec<(String, String)> {
        [
            "rocksdb.estimate-num-keys",
            "rocksdb.cur-size-all-mem-tables",
            "rocksdb.block-cache-usage",
            "rocksdb.num-running-compactions",
            "rocksdb.total-sst-files-size",
        ]
        .iter()
        .filter_map(|name| self.property(name).map(|v| (name.to_string(), v)))
        .collect()
    }
}

/// `batch` as RocksDB's batch.
fn write_batch(batch: &Batch) -> WriteBatch {
    write_batch_of(batch.ops().iter().map(Op::borrowed))
}

fn write_batch_of<'a>(ops: impl Iterator<Item = OpRef<'a>>) -> WriteBatch {
    let mut wb = WriteBatch::default();
    for op in ops {
        match op {
            OpRef::Put(k, v) => wb.put(k, v),
            OpRef::Delete(k) => wb.delete(k),
            OpRef::DeleteRange(start, end) => wb.delete_range(start, end),
        }
    }
    wb
}
