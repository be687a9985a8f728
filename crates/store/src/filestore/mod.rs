//! [`FileStore`]: a file per object plus a write-ahead journal.
//!
//! # On-disk layout
//! ```text
//! DIR/lock               flock'ed while a process has the store open
//! DIR/meta               metadata snapshot (see `snapshot`), replaced atomically
//! DIR/journal            write-ahead journal: 4 KiB-aligned batch records,
//!                        rewritten from the start after each checkpoint
//! DIR/objects/<pg>/<n>   object bytes; <pg> is "pool.seed-hex", <n> the escaped name
//! ```
//!
//! # Who owns what
//! - `journal`: record framing, appends with one `fdatasync` per batch,
//!   journal generations, and the scan that tells a torn tail from corruption.
//! - `snapshot`: the atomic metadata snapshot written at checkpoints.
//! - `objects`: object files, name escaping, file handles, lock stripes.
//! - `committer`: the one thread that writes: group commit, apply, checkpoint.
//! - this module: options, open/recovery, and the read side of the trait.
//!
//! All metadata (sizes, attributes, omaps, collection logs and attributes)
//! lives in memory and reaches the disk only through the journal and the
//! snapshot. Object bytes are written to the files with `pwrite` after the
//! journal sync and are synced only at checkpoints.
//!
//! # Fault model
//! - `kill -9` / power loss: every acknowledged transaction is in the journal
//!   or in a snapshot whose object files were synced before it was written;
//!   recovery loads the snapshot and replays the journal after it. Replay is
//!   idempotent (ops are absolute overwrites), and object file lengths are
//!   set to the metadata sizes afterwards. A transaction is never half there:
//!   it is applied from a whole, checksummed record or not at all.
//! - A torn record at the journal's tail is an unacknowledged batch and is
//!   dropped; a damaged record followed by a valid one, a damaged snapshot,
//!   or a sequence gap makes `open` fail with [`StoreError::Corrupt`].
//! - A failed `fdatasync` (journal) or `fsync` (checkpoint), or an I/O error
//!   while applying a journaled transaction, puts the store into the failed
//!   state: nothing more is acknowledged, every later submit fails, reads go on.
//! - `ENOSPC` while appending to the journal: any file extension is cut back,
//!   the batch's commits fail with [`StoreError::NoSpace`], and the next
//!   batch overwrites the partial record;
//!   later transactions work once space is freed. Transactions that would
//!   grow the store past `capacity_bytes`, or leave the filesystem with less
//!   than a small reserve, fail with `NoSpace` before they are journaled.

mod checkpoint;
mod committer;
mod journal;
mod objects;
mod snapshot;

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::meta::Meta;
use crate::{
    BoxFuture, Collection, Commit, ObjectId, ObjectStat, ObjectStore, Result, StoreError,
    StoreStats, Transaction, Version,
};

use committer::Committer;
use objects::Objects;

/// Reads up to this size are served on the calling thread; larger ones go
/// to tokio's blocking pool.
const INLINE_READ_MAX: u64 = 256 * 1024;

/// How a [`FileStore`] behaves.
#[derive(Clone, Debug)]
pub struct FileStoreOptions {
    /// Checkpoint (sync object files, write a snapshot, empty the journal)
    /// once the journal grows past this many bytes. Default 256 MiB.
    pub journal_max_bytes: u64,
    /// Logical bytes the store may hold; `None` means the filesystem's size.
    /// Transactions that would grow the store past it fail with `NoSpace`.
    pub capacity_bytes: Option<u64>,
    /// Test hook: injected journal faults.
    #[doc(hidden)]
    pub faults: Option<Arc<FaultInjection>>,
}

impl Default for FileStoreOptions {
    fn default() -> Self {
        Self {
            journal_max_bytes: 256 << 20,
            capacity_bytes: None,
            faults: None,
        }
    }
}

/// Test hook: faults the journal reports instead of doing its I/O.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct FaultInjection {
    /// The next this many journal appends write half their record, then fail with ENOSPC.
    pub journal_enospc: AtomicU32,
    /// The next journal sync fails with EIO.
    pub sync_failure: AtomicBool,
    /// Every checkpoint stalls this long after syncing the object files,
    /// before writing its snapshot (`u64::MAX` holds it until lowered).
    pub checkpoint_delay_ms: AtomicU64,
}

impl FaultInjection {
    fn take_journal_enospc(&self) -> bool {
        self.journal_enospc
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn take_sync_failure(&self) -> bool {
        self.sync_failure.swap(false, Ordering::SeqCst)
    }
}

/// Counters of a [`FileStore`]'s write path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStoreStats {
    /// Journal records written (one per group commit).
    pub batches: u64,
    /// Transactions journaled and applied.
    pub transactions: u64,
    /// Checkpoints completed (including the one after recovery).
    pub checkpoints: u64,
    /// Times commits waited for a background checkpoint: the journal file
    /// in use filled up before the checkpoint of the other one was done.
    pub checkpoint_stalls: u64,
    /// Transactions replayed from the journal by `open`.
    pub replayed: u64,
    /// Journal files that held transactions to replay at `open`: 2 when a
    /// crash interrupted a background checkpoint after new commits.
    pub replayed_journals: u64,
}

struct Pending {
    txn: Transaction,
    done: tokio::sync::oneshot::Sender<Result<()>>,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Pending>,
    shutdown: bool,
}

#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    transactions: AtomicU64,
    checkpoints: AtomicU64,
    checkpoint_stalls: AtomicU64,
    replayed: AtomicU64,
    replayed_journals: AtomicU64,
}

/// State shared by the store handle, its reads, and the committer thread.
struct Shared {
    dir: PathBuf,
    options: FileStoreOptions,
    meta: RwLock<Meta>,
    objects: Objects,
    queue: Mutex<Queue>,
    wake: Condvar,
    failed: OnceLock<String>,
    counters: Counters,
    /// Holds the flock on `DIR/lock`; also the fd for `fstatvfs`.
    lock_file: File,
}

impl Shared {
    fn fail(&self, why: String) {
        tracing::error!(dir = %self.dir.display(), "file store failed: {why}");
        let _ = self.failed.set(why);
    }

    fn failed_error(&self) -> Option<StoreError> {
        self.failed.get().map(|why| StoreError::Failed(why.clone()))
    }

    fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.objects.with_read_lock(oid, || {
            let size = self.meta.read().object(oid)?.size;
            let len = len.min(size.saturating_sub(offset));
            if len == 0 {
                return Ok(Vec::new());
            }
            Ok(self.objects.read(oid, offset, len)?)
        })
    }

    /// Filesystem (total, available) bytes.
    fn fs_space(&self) -> std::io::Result<(u64, u64)> {
        // SAFETY: fstatvfs writes into the zeroed struct we own.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstatvfs(self.lock_file.as_raw_fd(), &mut st) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let frsize = st.f_frsize as u64;
        Ok((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
    }
}

/// A durable object store: a file per object plus a write-ahead journal with
/// group commit. See the module docs for layout and fault model.
pub struct FileStore {
    shared: Arc<Shared>,
    committer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl FileStore {
    /// Open the store in `dir`, creating it on first use, and recover it:
    /// load the snapshot, replay the journal after it, then checkpoint.
    /// Fails if another handle (in any process) has the store open.
    pub fn open(dir: &Path, options: FileStoreOptions) -> Result<Arc<FileStore>> {
        std::fs::create_dir_all(dir.join("objects"))?;
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))?;
        // SAFETY: flock on a valid open fd.
        if unsafe { libc::flock(lock_file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            return Err(StoreError::Io(std::io::Error::new(
                err.kind(),
                format!("store {} is in use: {err}", dir.display()),
            )));
        }

        let (meta, seq, nonce, slot) = match snapshot::load(dir)? {
            Some(snap) => (snap.meta, snap.seq, snap.nonce, snap.slot),
            None => {
                for name in journal::FILES {
                    if std::fs::metadata(dir.join(name)).is_ok_and(|m| m.len() > 0) {
                        return Err(StoreError::Corrupt(format!(
                            "{name} present but metadata snapshot missing"
                        )));
                    }
                }
                let nonce = committer::new_nonce();
                snapshot::write(dir, &snapshot::encode(&Meta::default(), 0, nonce, 0)?)?;
                (Meta::default(), 0, nonce, 0)
            }
        };
        let journals = journal::open(dir, nonce, slot, options.faults.clone())?;
        objects::sync_dir(dir)?;

        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            meta: RwLock::new(meta),
            objects: Objects::new(dir.join("objects")),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            failed: OnceLock::new(),
            counters: Counters::default(),
            lock_file,
            options,
        });
        let mut committer = Committer::new(journals.active, journals.spare, seq + 1);
        committer.recover(&shared, journals.records)?;
        if shared.counters.replayed.load(Ordering::Relaxed) > 0 {
            let c = &shared.counters;
            c.replayed_journals.store(journals.live, Ordering::Relaxed);
        }

        let thread_shared = shared.clone();
        let handle = std::thread::Builder::new()
            .name("cairn-filestore".into())
            .spawn(move || committer::run_guarded(committer, &thread_shared))?;
        Ok(Arc::new(FileStore {
            shared,
            committer: Mutex::new(Some(handle)),
        }))
    }

    /// Counters of the write path.
    pub fn stats(&self) -> FileStoreStats {
        let c = &self.shared.counters;
        FileStoreStats {
            batches: c.batches.load(Ordering::Relaxed),
            transactions: c.transactions.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            checkpoint_stalls: c.checkpoint_stalls.load(Ordering::Relaxed),
            replayed: c.replayed.load(Ordering::Relaxed),
            replayed_journals: c.replayed_journals.load(Ordering::Relaxed),
        }
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }
}

impl Drop for FileStore {
    /// Finish every queued transaction, then stop the committer thread.
    fn drop(&mut self) {
        self.shared.queue.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.committer.lock().take() {
            if handle.join().is_err() {
                tracing::error!("file store committer thread panicked");
            }
        }
    }
}

impl ObjectStore for FileStore {
    fn perf_dump(&self) -> String {
        let s = self.stats();
        format!(
            "{{\"backend\":\"filestore\",\"transactions\":{},\"batches\":{},\"checkpoints\":{},\"checkpoint_stalls\":{},\"replayed\":{}}}",
            s.transactions, s.batches, s.checkpoints, s.checkpoint_stalls, s.replayed
        )
    }

    fn submit(&self, txn: Transaction) -> Result<Commit> {
        txn.validate()?;
        if let Some(err) = self.shared.failed_error() {
            return Err(err);
        }
        let (done, commit) = Commit::pending();
        let mut queue = self.shared.queue.lock();
        queue.items.push_back(Pending { txn, done });
        let first = queue.items.len() == 1;
        drop(queue);
        if first {
            self.shared.wake.notify_one();
        }
        Ok(commit)
    }

    fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> BoxFuture<Result<Bytes>> {
        let handle = tokio::runtime::Handle::try_current();
        match handle {
            Ok(handle) if len > INLINE_READ_MAX => {
                let shared = self.shared.clone();
                let oid = oid.clone();
                let task = handle.spawn_blocking(move || shared.read(&oid, offset, len));
                Box::pin(async move {
                    task.await
                        .map_err(|e| {
                            StoreError::Io(std::io::Error::other(format!("read task failed: {e}")))
                        })?
                        .map(Bytes::from)
                })
            }
            _ => Box::pin(std::future::ready(
                self.shared.read(oid, offset, len).map(Bytes::from),
            )),
        }
    }

    fn stat(&self, oid: &ObjectId) -> Result<ObjectStat> {
        self.shared.meta.read().stat(oid)
    }

    fn get_attr(&self, oid: &ObjectId, key: &str) -> Result<Option<Vec<u8>>> {
        self.shared.meta.read().get_attr(oid, key)
    }

    fn get_attrs(&self, oid: &ObjectId) -> Result<BTreeMap<String, Vec<u8>>> {
        self.shared.meta.read().get_attrs(oid)
    }

    fn omap_get(&self, oid: &ObjectId, keys: &[String]) -> Result<BTreeMap<String, Vec<u8>>> {
        self.shared.meta.read().omap_get(oid, keys)
    }

    fn omap_list(
        &self,
        oid: &ObjectId,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        self.shared.meta.read().omap_list(oid, start_after, max)
    }

    fn list_objects(&self, coll: Collection) -> Result<Vec<String>> {
        Ok(self.shared.meta.read().list_objects(coll))
    }

    fn list_collections(&self) -> Result<Vec<Collection>> {
        Ok(self.shared.meta.read().list_collections())
    }

    fn read_log(&self, coll: Collection) -> Result<Vec<(Version, Vec<u8>)>> {
        Ok(self.shared.meta.read().read_log(coll))
    }

    fn coll_get_attr(&self, coll: Collection, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.shared.meta.read().coll_get_attr(coll, key))
    }

    fn statfs(&self) -> Result<StoreStats> {
        let totals = self.shared.meta.read().totals;
        let total_bytes = match self.shared.options.capacity_bytes {
            Some(capacity) => capacity,
            None => self.shared.fs_space()?.0,
        };
        Ok(StoreStats {
            total_bytes,
            used_bytes: totals.used,
            objects: totals.objects,
        })
    }
}
