//! Checkpoints: make the effects of one journal generation durable without
//! the journal, so that its file can be reused.
//!
//! A checkpoint is a [`Job`] built by the committer at a batch boundary: a
//! copy-on-write clone of the metadata as of sequence `seq` (the last
//! transaction of the generation being closed), the object files and
//! directories that generation dirtied, and the generation that continues
//! after `seq`. [`run`] encodes the metadata (then drops the clone, which ends
//! the copy-on-write window), syncs the dirty files and directories, and
//! writes the snapshot (temp file, fsync, rename, directory fsync). [`spawn`]
//! runs it on its own thread while commits go on in the other journal file.
//!
//! Fault model: any error fails the store (an object file that failed its
//! fsync may have lost pages; nothing may be acknowledged as durable on top
//! of it). The snapshot is replaced atomically, so a crash anywhere leaves
//! the previous snapshot, whose journal generations are still intact.

use std::collections::HashSet;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::meta::Meta;
use crate::{Collection, ObjectId, Result, StoreError};

use super::objects::sync_dir;
use super::{snapshot, Shared};

/// Above this many dirty files a checkpoint uses one `syncfs` instead of
/// an `fdatasync` per file.
const SYNCFS_MIN_FILES: usize = 256;

/// The object files and directories one journal generation changed.
#[derive(Default)]
pub(super) struct Dirty {
    /// Object files written.
    pub files: HashSet<ObjectId>,
    /// Collection directories whose entries changed.
    colls: HashSet<Collection>,
    /// The objects directory's entries changed.
    root: bool,
}

impl Dirty {
    /// The object's file was written (and maybe created).
    pub fn write(&mut self, oid: &ObjectId) {
        if !self.files.contains(oid) {
            self.files.insert(oid.clone());
            if self.colls.insert(oid.coll) {
                self.root = true; // the collection's directory may be new
            }
        }
    }

    /// The object's file was removed.
    pub fn remove(&mut self, oid: &ObjectId) {
        self.files.remove(oid);
        self.colls.insert(oid.coll);
    }

    /// The collection's directory was removed.
    pub fn remove_collection(&mut self, coll: Collection) {
        self.files.retain(|oid| oid.coll != coll);
        self.root = true;
    }

    /// Sync the files, then the directories. Files may be written, removed
    /// or recreated meanwhile (see the parent module's docs on why that is
    /// fine); a file or directory that is gone needs no sync.
    fn sync(&self, shared: &Shared) -> Result<()> {
        let objects = &shared.objects;
        if self.files.len() >= SYNCFS_MIN_FILES {
            return Ok(syncfs(&shared.lock_file)?);
        }
        for oid in &self.files {
            objects.sync(oid)?;
        }
        for coll in &self.colls {
            sync_dir(&objects.coll_path(*coll))?;
        }
        if self.root {
            sync_dir(objects.root())?;
        }
        Ok(())
    }
}

/// One checkpoint's work.
pub(super) struct Job {
    /// The metadata as of `seq` (a copy-on-write clone).
    pub meta: Meta,
    /// The last transaction the checkpoint covers.
    pub seq: u64,
    /// The journal generation after `seq`, and its file.
    pub nonce: u64,
    pub slot: usize,
    /// What the transactions up to `seq` changed since the last checkpoint.
    pub dirty: Dirty,
}

/// Run a checkpoint on the calling thread. Once this returns `Ok`, the
/// snapshot names `job.nonce`: the generations before it are dead.
pub(super) fn run(shared: &Shared, job: Job) -> Result<()> {
    let Job {
        meta,
        seq,
        nonce,
        slot,
        dirty,
    } = job;
    // Encoding is CPU work and syncing mostly waiting: do both at once.
    let (image, synced) = std::thread::scope(|scope| {
        let encode = || snapshot::encode(&meta, seq, nonce, slot);
        let encoder = std::thread::Builder::new()
            .name("cairn-snapshot".into())
            .spawn_scoped(scope, encode);
        let synced = dirty.sync(shared);
        let image = match encoder {
            Ok(encoder) => encoder
                .join()
                .unwrap_or_else(|_| Err(StoreError::Failed("snapshot encoding panicked".into()))),
            // No thread to spare: encode after the sync instead.
            Err(_) => encode(),
        };
        (image, synced)
    });
    drop(meta);
    let (image, ()) = (image?, synced?);
    test_delay(shared);
    snapshot::write(&shared.dir, &image)?;
    shared.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(dir = %shared.dir.display(), seq, "checkpoint");
    Ok(())
}

/// Test hook: stall while `checkpoint_delay_ms` says so (re-read every
/// millisecond, so setting it to 0 releases a held checkpoint).
fn test_delay(shared: &Shared) {
    let Some(faults) = shared.options.faults.as_deref() else {
        return;
    };
    let start = Instant::now();
    loop {
        let ms = faults.checkpoint_delay_ms.load(Ordering::SeqCst);
        if start.elapsed() >= Duration::from_millis(ms) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A checkpoint running on its own thread.
pub(super) struct InFlight {
    handle: std::thread::JoinHandle<Result<()>>,
}

impl InFlight {
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Wait for the checkpoint. Its failure has already failed the store.
    pub fn wait(self) -> Result<()> {
        self.handle
            .join()
            .unwrap_or_else(|_| Err(StoreError::Failed("the checkpoint thread panicked".into())))
    }
}

/// Start `job` on a new thread; if no thread can be started, run it here
/// (and return `None`). A failed checkpoint fails the store.
pub(super) fn spawn(shared: &Arc<Shared>, job: Job) -> Result<Option<InFlight>> {
    let job = Arc::new(parking_lot::Mutex::new(Some(job)));
    let thread_job = job.clone();
    let thread_shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("cairn-checkpoint".into())
        .spawn(move || {
            let Some(job) = thread_job.lock().take() else {
                return Ok(());
            };
            let result = run(&thread_shared, job);
            if let Err(e) = &result {
                thread_shared.fail(format!("checkpoint failed: {e}"));
            }
            result
        });
    match spawned {
        Ok(handle) => Ok(Some(InFlight { handle })),
        Err(e) => {
            tracing::warn!("cannot start a checkpoint thread ({e}); checkpointing inline");
            match job.lock().take() {
                Some(job) => run(shared, job).map(|()| None),
                None => Ok(None),
            }
        }
    }
}

/// Sync the whole filesystem holding `file`.
fn syncfs(file: &std::fs::File) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: syncfs on a valid open fd.
        if unsafe { libc::syncfs(file.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        // SAFETY: sync takes no arguments and cannot fail.
        unsafe { libc::sync() };
        Ok(())
    }
}
