//! The committer: the one thread that changes a [`FileStore`](super::FileStore).
//!
//! Group commit: it takes every queued transaction (up to a size cap), writes
//! them as one journal record, issues one `fdatasync`, then applies them in
//! order — metadata under a brief write lock, object bytes with `pwrite` into
//! the page cache while holding the stripes of the objects involved — and
//! completes each commit right after its transaction is applied. When the
//! journal outgrows `journal_max_bytes` it checkpoints: sync the object files
//! written since the last checkpoint (and their directories), write the
//! metadata snapshot atomically, and only then start a new journal
//! generation (which makes the old records dead).
//!
//! Fault model: see the parent module. Every I/O error after a record is
//! journaled fails the store; nothing is acknowledged that is not durable.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::Ordering;

use crate::meta::{growth_estimate, DataOp};
use crate::{Collection, ObjectId, Result, StoreError, Transaction, TxOp};

use super::journal::{self, AppendError, Found, Journal};
use super::objects::sync_dir;
use super::{snapshot, Pending, Shared};

/// A batch stops growing once its payload passes this size.
const MAX_BATCH_BYTES: u64 = 32 << 20;
/// Free filesystem space kept back so that applying journaled data never fails.
const FS_RESERVE_BYTES: u64 = 16 << 20;
/// Above this many dirty files a checkpoint uses one `syncfs` instead of
/// an `fdatasync` per file.
const SYNCFS_MIN_FILES: usize = 256;

/// Run the committer; if it panics, fail the store and keep answering every
/// queued transaction with `Failed` until shutdown, so no commit hangs.
pub(super) fn run_guarded(committer: Committer, shared: &Shared) {
    let run = std::panic::AssertUnwindSafe(|| committer.run(shared));
    if std::panic::catch_unwind(run).is_ok() {
        return;
    }
    shared.fail("the committer thread panicked".into());
    loop {
        let batch: Vec<Pending> = {
            let mut queue = shared.queue.lock();
            while queue.items.is_empty() && !queue.shutdown {
                shared.wake.wait(&mut queue);
            }
            if queue.items.is_empty() {
                return;
            }
            queue.items.drain(..).collect()
        };
        for p in batch {
            let _ = p.done.send(Err(StoreError::Failed(
                "the committer thread panicked".into(),
            )));
        }
    }
}

/// A fresh journal generation number.
pub(super) fn new_nonce() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    h.finish()
}

fn batch_cost(txn: &Transaction) -> u64 {
    growth_estimate(txn) + 64 * txn.ops.len() as u64
}

/// The committer's private state.
pub(super) struct Committer {
    journal: Journal,
    /// Sequence number of the next transaction to journal.
    next_seq: u64,
    /// Object files written since the last checkpoint.
    dirty_files: HashSet<ObjectId>,
    /// Collection directories whose entries changed since the last checkpoint.
    dirty_colls: HashSet<Collection>,
    /// The objects directory's entries changed since the last checkpoint.
    root_dirty: bool,
}

impl Committer {
    pub fn new(journal: Journal, next_seq: u64) -> Self {
        Self {
            journal,
            next_seq,
            dirty_files: HashSet::new(),
            dirty_colls: HashSet::new(),
            root_dirty: false,
        }
    }

    /// Replay journal records after the snapshot, restore file lengths, and
    /// checkpoint if anything was replayed.
    pub fn recover(&mut self, shared: &Shared, records: Vec<Found>) -> Result<()> {
        let mut replayed = 0u64;
        for record in records {
            for (i, txn) in record.txns.into_iter().enumerate() {
                let seq = record.first_seq + i as u64;
                if seq < self.next_seq {
                    continue; // already in the snapshot
                }
                if seq != self.next_seq {
                    return Err(StoreError::Corrupt(format!(
                        "journal starts at sequence {seq}, snapshot ends at {}",
                        self.next_seq - 1
                    )));
                }
                self.apply(shared, &txn)?;
                self.next_seq += 1;
                replayed += 1;
            }
        }
        if replayed == 0 {
            return Ok(());
        }
        // Ops replayed onto files that may already hold later effects leave
        // the right bytes but possibly the wrong length; the metadata decides.
        {
            let meta = shared.meta.read();
            for oid in &self.dirty_files {
                match meta.object(oid) {
                    Ok(obj) => shared.objects.fix_len(oid, obj.size)?,
                    Err(_) => shared.objects.remove(oid)?,
                }
            }
        }
        tracing::info!(dir = %shared.dir.display(), replayed, "replayed the journal");
        shared.counters.replayed.store(replayed, Ordering::Relaxed);
        self.checkpoint(shared)
    }

    /// The thread body: commit batches until shut down and drained.
    pub fn run(mut self, shared: &Shared) {
        loop {
            let batch = {
                let mut queue = shared.queue.lock();
                while queue.items.is_empty() && !queue.shutdown {
                    shared.wake.wait(&mut queue);
                }
                if queue.items.is_empty() {
                    return;
                }
                let mut cost = 0;
                let mut batch = Vec::new();
                while let Some(p) = queue.items.front() {
                    if !batch.is_empty() && cost >= MAX_BATCH_BYTES {
                        break;
                    }
                    cost += batch_cost(&p.txn);
                    batch.extend(queue.items.pop_front());
                }
                batch
            };
            self.commit_batch(shared, batch);
            if self.journal.len > shared.options.journal_max_bytes && shared.failed.get().is_none()
            {
                if let Err(e) = self.checkpoint(shared) {
                    shared.fail(format!("checkpoint failed: {e}"));
                }
            }
        }
    }

    /// Drop the transactions that would overfill the store, replying `NoSpace`.
    fn admit(&self, shared: &Shared, batch: Vec<Pending>) -> Vec<Pending> {
        let used = shared.meta.read().totals.used;
        let capacity = shared.options.capacity_bytes.unwrap_or(u64::MAX);
        let available = match shared.fs_space() {
            Ok((_, available)) => available.saturating_sub(FS_RESERVE_BYTES),
            Err(e) => {
                tracing::warn!("fstatvfs failed: {e}");
                u64::MAX
            }
        };
        let mut growth = 0u64;
        let mut admitted = Vec::with_capacity(batch.len());
        for p in batch {
            let g = growth_estimate(&p.txn);
            // Journal and object file both take the bytes until a checkpoint.
            let fits = g == 0
                || (used.saturating_add(growth + g) <= capacity
                    && (growth + g).saturating_mul(2) <= available);
            if fits {
                growth += g;
                admitted.push(p);
            } else {
                let _ = p.done.send(Err(StoreError::NoSpace));
            }
        }
        admitted
    }

    fn commit_batch(&mut self, shared: &Shared, batch: Vec<Pending>) {
        if let Some(why) = shared.failed.get() {
            for p in batch {
                let _ = p.done.send(Err(StoreError::Failed(why.clone())));
            }
            return;
        }
        let batch = self.admit(shared, batch);
        if batch.is_empty() {
            return;
        }
        let capacity = batch.iter().map(|p| batch_cost(&p.txn)).sum::<u64>();
        let mut record = journal::begin(self.next_seq, capacity as usize);
        let mut journaled = Vec::with_capacity(batch.len());
        for p in batch {
            match record.push(&p.txn) {
                Ok(()) => journaled.push(p),
                Err(e) => {
                    let _ = p.done.send(Err(e));
                }
            }
        }
        if journaled.is_empty() {
            return;
        }
        record.seal(self.journal.nonce);
        if let Err(e) = self.journal.append(&record.buf) {
            let reply = |err: &dyn Fn() -> StoreError| {
                for p in journaled {
                    let _ = p.done.send(Err(err()));
                }
            };
            match e {
                AppendError::Write(e) if is_no_space(&e) => {
                    tracing::warn!("journal append out of space; batch rejected");
                    reply(&|| StoreError::NoSpace);
                }
                AppendError::Write(e) => {
                    tracing::warn!("journal append failed: {e}; batch rejected");
                    let msg = e.to_string();
                    reply(&|| StoreError::Io(std::io::Error::new(e.kind(), msg.clone())));
                }
                AppendError::Sync(e) => {
                    let why = format!("journal sync failed: {e}");
                    shared.fail(why.clone());
                    reply(&|| StoreError::Failed(why.clone()));
                }
            }
            return;
        }
        self.next_seq += u64::from(record.count);
        shared.counters.batches.fetch_add(1, Ordering::Relaxed);
        shared
            .counters
            .transactions
            .fetch_add(u64::from(record.count), Ordering::Relaxed);
        drop(record);

        let mut journaled = journaled.into_iter();
        for p in journaled.by_ref() {
            match self.apply(shared, &p.txn) {
                Ok(()) => {
                    let _ = p.done.send(Ok(()));
                }
                Err(e) => {
                    let why = format!("applying a journaled transaction failed: {e}");
                    shared.fail(why.clone());
                    let _ = p.done.send(Err(StoreError::Failed(why)));
                    break;
                }
            }
        }
        if let Some(why) = shared.failed.get() {
            for p in journaled {
                let _ = p.done.send(Err(StoreError::Failed(why.clone())));
            }
        }
    }

    /// Apply one transaction to the metadata and the object files.
    fn apply(&mut self, shared: &Shared, txn: &Transaction) -> Result<()> {
        let all = txn
            .ops
            .iter()
            .any(|op| matches!(op, TxOp::RemoveCollection { .. }));
        let data_oids = txn.ops.iter().filter_map(|op| match op {
            TxOp::Write { oid, .. }
            | TxOp::Zero { oid, .. }
            | TxOp::Truncate { oid, .. }
            | TxOp::Remove { oid } => Some(oid),
            _ => None,
        });
        let _stripes = shared.objects.lock(data_oids, all);
        let mut ops = Vec::new();
        shared.meta.write().apply(txn, &mut ops);
        let objects = &shared.objects;
        for op in ops {
            match op {
                DataOp::Write { oid, offset, data } => {
                    objects.write(oid, offset, data)?;
                    self.mark_dirty(oid);
                }
                DataOp::Punch { oid, offset, len } => {
                    objects.punch(oid, offset, len)?;
                    self.mark_dirty(oid);
                }
                DataOp::SetLen { oid, size } => {
                    objects.set_len(oid, size)?;
                    self.mark_dirty(oid);
                }
                DataOp::Remove { oid } => {
                    objects.remove(oid)?;
                    self.dirty_files.remove(oid);
                    self.dirty_colls.insert(oid.coll);
                }
                DataOp::RemoveCollection { coll } => {
                    objects.remove_collection(coll)?;
                    self.dirty_files.retain(|oid| oid.coll != coll);
                    self.root_dirty = true;
                }
            }
        }
        Ok(())
    }

    fn mark_dirty(&mut self, oid: &ObjectId) {
        if !self.dirty_files.contains(oid) {
            self.dirty_files.insert(oid.clone());
            if self.dirty_colls.insert(oid.coll) {
                self.root_dirty = true;
            }
        }
    }

    /// Make everything applied so far durable without the journal, then empty it.
    pub fn checkpoint(&mut self, shared: &Shared) -> Result<()> {
        let objects = &shared.objects;
        if self.dirty_files.len() >= SYNCFS_MIN_FILES {
            syncfs(&self.journal.file)?;
        } else {
            for oid in &self.dirty_files {
                objects.sync(oid)?;
            }
            for coll in &self.dirty_colls {
                sync_dir(&objects.coll_path(*coll))?;
            }
            if self.root_dirty {
                sync_dir(objects.root())?;
            }
        }
        let nonce = new_nonce();
        let image = snapshot::encode(&shared.meta.read(), self.next_seq - 1, nonce)?;
        snapshot::write(&shared.dir, &image)?;
        drop(image);
        // The snapshot now names the new generation: the old records are dead.
        self.journal
            .reset(nonce, shared.options.journal_max_bytes.max(MAX_BATCH_BYTES))?;
        self.dirty_files.clear();
        self.dirty_colls.clear();
        self.root_dirty = false;
        shared.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(dir = %shared.dir.display(), seq = self.next_seq - 1, "checkpoint");
        Ok(())
    }
}

fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
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
