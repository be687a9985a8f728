//! The committer: the one thread that changes a [`FileStore`](super::FileStore).
//!
//! Group commit: it takes every queued transaction (up to a size cap), writes
//! them as one journal record, issues one `fdatasync`, then applies them in
//! order — metadata under a brief write lock, object bytes with `pwrite` into
//! the page cache while holding the stripes of the objects involved — and
//! completes each commit right after its transaction is applied.
//!
//! When the active journal file outgrows `journal_max_bytes` it rotates, at
//! the batch boundary: it starts the next journal generation in the other
//! file, and hands a checkpoint of everything before the boundary (a
//! copy-on-write clone of the metadata plus the files dirtied so far) to a
//! background thread, then goes on committing. It waits for a checkpoint only
//! when it must rotate again while that checkpoint still runs, because the
//! other file is free only once the checkpoint's snapshot is durable.
//!
//! Fault model: see the parent module. Every I/O error after a record is
//! journaled fails the store; nothing is acknowledged that is not durable.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::meta::{growth_estimate, DataOp};
use crate::{ObjectId, Result, StoreError, Transaction, TxOp};

use super::checkpoint::{self, Dirty, InFlight, Job};
use super::journal::{self, AppendError, Found, Journal};
use super::{Pending, Shared};

/// A batch stops growing once its payload passes this size.
const MAX_BATCH_BYTES: u64 = 32 << 20;
/// Free filesystem space kept back so that applying journaled data never fails.
const FS_RESERVE_BYTES: u64 = 16 << 20;

/// Run the committer; if it panics, fail the store and keep answering every
/// queued transaction with `Failed` until shutdown, so no commit hangs.
pub(super) fn run_guarded(committer: Committer, shared: &Arc<Shared>) {
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
    /// The journal file being appended to.
    journal: Journal,
    /// The other journal file: the previous generation until the running
    /// checkpoint (if any) is done, dead records after that.
    spare: Journal,
    /// Sequence number of the next transaction to journal.
    next_seq: u64,
    /// Files and directories changed in the current generation.
    dirty: Dirty,
    /// The checkpoint of the previous generation, while it may still run.
    checkpoint: Option<InFlight>,
}

impl Committer {
    /// A committer appending to `journal`, whose next transaction is `next_seq`.
    pub fn new(journal: Journal, spare: Journal, next_seq: u64) -> Self {
        Self {
            journal,
            spare,
            next_seq,
            dirty: Dirty::default(),
            checkpoint: None,
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
                        "journal continues at sequence {seq} after {}",
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
            for oid in &self.dirty.files {
                match meta.object(oid) {
                    Ok(obj) => shared.objects.fix_len(oid, obj.size)?,
                    Err(_) => shared.objects.remove(oid)?,
                }
            }
        }
        tracing::info!(dir = %shared.dir.display(), replayed, "replayed the journal");
        shared.counters.replayed.store(replayed, Ordering::Relaxed);
        // Checkpoint here, before any commit, into a generation two ahead of
        // the snapshot's: both replayed generations become dead at once.
        let nonce = journal::next_nonce(journal::next_nonce(self.journal.nonce));
        let job = self.job(shared, nonce, self.journal.slot);
        checkpoint::run(shared, job)?;
        self.journal.reset(nonce, journal_keep(shared))?;
        Ok(())
    }

    /// A checkpoint of everything applied so far, continuing in generation
    /// `nonce` in journal file `slot`; the dirty sets start afresh.
    fn job(&mut self, shared: &Shared, nonce: u64, slot: usize) -> Job {
        Job {
            meta: shared.meta.read().clone(),
            seq: self.next_seq - 1,
            nonce,
            slot,
            dirty: std::mem::take(&mut self.dirty),
        }
    }

    /// The thread body: commit batches until shut down and drained.
    pub fn run(mut self, shared: &Arc<Shared>) {
        loop {
            let batch = {
                let mut queue = shared.queue.lock();
                while queue.items.is_empty() && !queue.shutdown {
                    shared.wake.wait(&mut queue);
                }
                if queue.items.is_empty() {
                    break;
                }
                let mut cost = 0;
                let mut batch = Vec::new();
                while let Some(p) = queue.items.front() {
                    if !batch.is_empty() && (cost >= MAX_BATCH_BYTES || has_move(&p.txn)) {
                        break;
                    }
                    cost += batch_cost(&p.txn);
                    let moves = has_move(&p.txn);
                    batch.extend(queue.items.pop_front());
                    if moves {
                        break;
                    }
                }
                batch
            };
            // A move is journaled as the copy it makes (see `expand_moves`),
            // so it runs alone, after everything before it is applied.
            let batch = match batch.first().filter(|p| has_move(&p.txn)) {
                Some(_) => batch
                    .into_iter()
                    .filter_map(|mut p| match expand_moves(shared, &p.txn) {
                        Ok(txn) => {
                            p.txn = txn;
                            Some(p)
                        }
                        Err(e) => {
                            let _ = p.done.send(Err(e));
                            None
                        }
                    })
                    .collect(),
                None => batch,
            };
            self.commit_batch(shared, batch);
            if self.should_rotate(shared) {
                if let Err(e) = self.rotate(shared) {
                    shared.fail(format!("checkpoint failed: {e}"));
                }
            }
        }
        // The store closes only once its last checkpoint is done (or failed,
        // which has failed the store already).
        if let Some(running) = self.checkpoint.take() {
            let _ = running.wait();
        }
    }

    /// Rotate once the journal passes `journal_max_bytes`, as soon as the
    /// previous checkpoint is done; while it runs the journal may grow to
    /// twice that, and only then do commits wait for it.
    fn should_rotate(&self, shared: &Shared) -> bool {
        let max = shared.options.journal_max_bytes;
        if self.journal.len <= max || shared.failed.get().is_some() {
            return false;
        }
        let running = self.checkpoint.as_ref().is_some_and(|c| !c.is_finished());
        !running || self.journal.len > max.saturating_mul(2)
    }

    /// Continue in the other journal file and checkpoint the generation just
    /// closed in the background. Waits only for the previous checkpoint.
    fn rotate(&mut self, shared: &Arc<Shared>) -> Result<()> {
        if let Some(running) = self.checkpoint.take() {
            if !running.is_finished() {
                shared
                    .counters
                    .checkpoint_stalls
                    .fetch_add(1, Ordering::Relaxed);
            }
            running.wait()?;
        }
        // The durable snapshot names the active generation now, so the
        // spare file holds only dead records.
        let nonce = journal::next_nonce(self.journal.nonce);
        let job = self.job(shared, nonce, self.spare.slot);
        std::mem::swap(&mut self.journal, &mut self.spare);
        self.journal.reset(nonce, journal_keep(shared))?;
        self.checkpoint = checkpoint::spawn(shared, job)?;
        Ok(())
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
                    self.dirty.write(oid);
                }
                DataOp::Punch { oid, offset, len } => {
                    objects.punch(oid, offset, len)?;
                    self.dirty.write(oid);
                }
                DataOp::SetLen { oid, size } => {
                    objects.set_len(oid, size)?;
                    self.dirty.write(oid);
                }
                DataOp::Remove { oid } => {
                    objects.remove(oid)?;
                    self.dirty.remove(oid);
                }
                DataOp::RemoveCollection { coll } => {
                    objects.remove_collection(coll)?;
                    self.dirty.remove_collection(coll);
                }
                DataOp::Rename { from, to } => {
                    // Moves are expanded before they are journaled.
                    unreachable!("a move of {from} to {to} reached the FileStore unexpanded")
                }
            }
        }
        Ok(())
    }
}

/// Journal file size kept across generations (the most a generation can
/// grow to); larger files are shortened.
fn journal_keep(shared: &Shared) -> u64 {
    shared
        .options
        .journal_max_bytes
        .saturating_mul(2)
        .saturating_add(MAX_BATCH_BYTES)
}

fn has_move(txn: &Transaction) -> bool {
    txn.ops
        .iter()
        .any(|op| matches!(op, TxOp::Move { .. } | TxOp::SplitCollection { .. }))
}

/// The transaction with each move turned into the copy it makes: the
/// target replaced by the source's bytes, attributes and omap, then the
/// source removed (a split, into the moves it makes). Journaled that way,
/// a replay redoes the copy from the journal's bytes, whatever the object
/// files hold by then; the price is that a split's moved bytes pass
/// through memory and the journal. Needs every transaction before it
/// applied (a move runs alone in its batch), and no op of its own
/// transaction changing an object before it moves.
fn expand_moves(shared: &Shared, txn: &Transaction) -> Result<Transaction> {
    let mut moves = Vec::new();
    for op in &txn.ops {
        match op {
            TxOp::SplitCollection { coll, pg_num } => {
                let moving = |oid: &ObjectId| {
                    oid.coll == *coll
                        && crate::split_destination(*coll, *pg_num, &oid.name).is_some()
                };
                if txn.ops.iter().filter_map(TxOp::object).any(moving) {
                    return Err(StoreError::Invalid(format!(
                        "a split of {coll} and changes to objects it moves in one transaction \
                         (unsupported by the FileStore)"
                    )));
                }
                for (from, to) in shared.meta.read().split_moves(*coll, *pg_num) {
                    moves.push(TxOp::Move { from, to });
                }
            }
            op => moves.push(op.clone()),
        }
    }
    let mut out = Transaction::new();
    let mut touched = std::collections::HashSet::new();
    let mut removed_colls = std::collections::HashSet::new();
    for op in &moves {
        let TxOp::Move { from, to } = op else {
            touched.extend(op.object());
            if let TxOp::RemoveCollection { coll } = op {
                removed_colls.insert(*coll);
            }
            out.push(op.clone());
            continue;
        };
        if touched.contains(from) || removed_colls.contains(&from.coll) {
            return Err(StoreError::Invalid(format!(
                "{from} is changed and then moved in one transaction (unsupported by the FileStore)"
            )));
        }
        touched.insert(to);
        let meta = match shared.meta.read().object(from) {
            Ok(meta) => meta.clone(),
            Err(StoreError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        let data = {
            let _stripe = shared.objects.lock(std::iter::once(from), false);
            shared.objects.read(from, 0, meta.size)?
        };
        out.remove(to).touch(to);
        if !data.is_empty() {
            out.write(to, 0, bytes::Bytes::from(data));
        }
        if meta.size as usize > 0 {
            out.truncate(to, meta.size);
        }
        for (key, value) in meta.attrs {
            out.set_attr(to, &key, value);
        }
        if !meta.omap.is_empty() {
            out.omap_set(to, meta.omap.into_iter().collect());
        }
        out.remove(from);
    }
    Ok(out)
}

fn is_no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}
