//! The commit thread and the key-value sync thread.
//!
//! The commit thread waits until fewer than `journal::WRITERS` records
//! are in flight, then takes every queued transaction at once (group
//! commit: the longer the device takes, the larger the next group), waits
//! for their new data, flushes the device if there was any (data must be
//! durable before metadata that points at it can be) and starts a journal
//! record holding all their key-value changes. The finisher thread writes
//! the changes to the key-value store unsynced while the record is in
//! flight (see `journal`), then completes the commits once the record is
//! durable. A group too large for a journal record is written to the
//! key-value store synced instead.
//!
//! The sync thread syncs the key-value store when the journal fills past
//! half, so that its oldest records can be dropped; if the journal fills
//! before that, the commit thread syncs it itself.
//!
//! Fault model: a failed device write, flush, journal write or key-value
//! write or sync fails the store; the commits involved and all later ones
//! return `Failed`. Nothing is acknowledged that is not durable.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use cairn_device::block_on;
use cairn_kv::Batch;

use crate::journal::{Journal, Pending, WRITERS};
use crate::keys;
use crate::pipeline::{finish_group, Prepared};
use crate::state::Inner;
use parking_lot::{Condvar, Mutex};

/// Most transactions committed as one group.
const MAX_GROUP: usize = 512;
/// Past this share of the journal in use, ask for a key-value sync.
const SYNC_AT: f64 = 0.5;

/// A group whose journal record is being written.
struct InFlight {
    group: Vec<Prepared>,
    /// The group's key-value changes, for the finisher to write.
    batch: Batch,
    seq: u64,
    record: Pending,
    start: Instant,
    payload_len: usize,
}

/// Groups handed from the commit thread to the finisher, oldest first.
struct Flight {
    queue: VecDeque<InFlight>,
    stop: bool,
    /// Sequence number of the last record whose group is settled: its
    /// commits completed (or failed) and its deferred writes and releases
    /// handed on. The finisher publishes `journal_written` *before* it
    /// settles a group, so only this says the commit thread may finish a
    /// group itself: groups must settle in order, or a later deferred
    /// write to a block could be queued, and applied, before an earlier one.
    settled: u64,
}

/// What the commit thread and its finisher share.
struct Shared {
    flight: Mutex<Flight>,
    /// A group was handed over, or the finisher is to stop.
    handed: Condvar,
    /// A group was finished (`journal_written` moved), settled, or failed.
    finished: Condvar,
}

/// The commit thread's state.
struct Committer<'a> {
    inner: Arc<Inner>,
    journal: Journal,
    shared: &'a Shared,
    /// Sequence number of the last record begun.
    begun: u64,
}

/// The commit thread.
///
/// It forms groups and starts their journal records; a finisher thread
/// beside it writes each group's key-value batch and waits for the
/// records, in order, acknowledging each group once its record (and so
/// every earlier one) is durable. Up to `journal::WRITERS` records are
/// written at once, so the device sees several commits in flight.
pub(crate) fn commit_loop(inner: Arc<Inner>, journal: Journal) {
    let begun = inner.journal_written.load(Ordering::Acquire);
    let shared = Shared {
        flight: Mutex::new(Flight {
            queue: VecDeque::new(),
            stop: false,
            settled: begun,
        }),
        handed: Condvar::new(),
        finished: Condvar::new(),
    };
    std::thread::scope(|scope| {
        let finisher = std::thread::Builder::new()
            .name("cairn-bs-finish".into())
            .spawn_scoped(scope, || finish_loop(&inner, &shared));
        let mut c = Committer {
            inner: inner.clone(),
            journal,
            shared: &shared,
            begun,
        };
        if let Err(e) = finisher {
            c.inner
                .fail(format!("cannot start the commit finisher thread: {e}"));
        }
        let mut drained = false;
        loop {
            // A group formed only once a record can start takes in
            // everything that queued meanwhile: fewer, larger records.
            let _ = c.wait_finished(WRITERS as u64 - 1);
            match next_group(&c.inner, c.journal.max_payload(), drained) {
                Next::Group(mut group) => {
                    drained = false;
                    if let Err(why) = c.start_group(&mut group) {
                        c.inner.fail(why);
                        for p in group {
                            let _ = p.done.send(c.inner.check_failed());
                        }
                    }
                }
                Next::Drain => {
                    // Finished groups hand their deferred writes to the
                    // deferred thread: all of them must have before it is
                    // told to stop.
                    let _ = c.drain();
                    drained = true;
                }
                Next::Stop => break,
            }
        }
        // Every group handed over is finished before the final sync.
        let _ = c.drain();
        shared.flight.lock().stop = true;
        shared.handed.notify_all();
    });
    // Leave nothing for the journal to replay after a clean stop.
    if inner.failed.get().is_none() {
        if let Err(e) = inner.kv.sync() {
            inner.fail(format!("final metadata sync failed: {e}"));
        }
    }
    inner.pipeline.shutdown_sync();
}

/// The finisher: for each handed-over group, in order, write its batch to
/// the key-value store (unsynced, while its record is in flight), wait for
/// the record and acknowledge the group (or fail it, and the store, if the
/// record, the write or an earlier one failed).
fn finish_loop(inner: &Inner, shared: &Shared) {
    loop {
        let f = {
            let mut flight = shared.flight.lock();
            loop {
                if let Some(f) = flight.queue.pop_front() {
                    break f;
                }
                if flight.stop {
                    return;
                }
                shared.handed.wait(&mut flight);
            }
        };
        // The only key-value writer while records are in flight (the commit
        // thread writes only with none), so batches land in commit order.
        // After a failure nothing more goes to the key-value store: a
        // batch must never land there without every earlier one.
        let written = match inner.failed.get() {
            Some(why) => Err(why.clone()),
            None => inner
                .kv
                .write(f.batch, false)
                .map_err(|e| format!("metadata write failed: {e}")),
        };
        // The record is waited for either way: its buffer is the writer's
        // until then, and a write error is reported before a later one.
        let durable = f.record.wait();
        match written.and(durable) {
            Ok(()) if inner.failed.get().is_none() => {
                let perf = &inner.perf;
                let us = f.start.elapsed().as_micros() as u64;
                perf.journal_write_us.fetch_add(us, Ordering::Relaxed);
                perf.journal_records.fetch_add(1, Ordering::Relaxed);
                perf.journal_bytes
                    .fetch_add(f.payload_len as u64, Ordering::Relaxed);
                perf.kv_commit(us);
                inner.journal_written.store(f.seq, Ordering::Release);
                finish_group(inner, f.group);
            }
            result => {
                if let Err(why) = result {
                    inner.fail(why);
                }
                for p in f.group {
                    let _ = p.done.send(inner.check_failed());
                }
            }
        }
        shared.flight.lock().settled = f.seq;
        shared.finished.notify_all();
    }
}

enum Next {
    Group(Vec<Prepared>),
    /// Shutting down with nothing queued: finish the groups in flight,
    /// then ask again with `drained`.
    Drain,
    /// Shut down, the deferred thread stopped and nothing queued.
    Stop,
}

/// The next group: every queued transaction, up to `MAX_GROUP` and about
/// `max_bytes` of metadata; see `Next` for shutting down.
fn next_group(inner: &Inner, max_bytes: usize, drained: bool) -> Next {
    let pipeline = &inner.pipeline;
    let mut q = pipeline.commits.lock();
    while q.items.is_empty() {
        if q.shutdown {
            if !drained {
                return Next::Drain;
            }
            if pipeline.deferred_stopped.load(Ordering::Acquire) {
                return Next::Stop;
            }
            // Let the deferred thread drain and stop; it may still commit.
            pipeline.shutdown_deferred();
        }
        pipeline.commit_ready.wait(&mut q);
    }
    let mut bytes = 0;
    let mut n = 0;
    while n < q.items.len().min(MAX_GROUP)
        && (n == 0 || bytes + q.items[n].batch.bytes() <= max_bytes)
    {
        bytes += q.items[n].batch.bytes();
        n += 1;
    }
    Next::Group(q.items.drain(..n).collect())
}

fn flush(inner: &Inner) -> Result<(), String> {
    block_on(inner.device.flush()).map_err(|e| format!("device flush failed: {e}"))?;
    inner.perf.device_flushes.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

impl Committer<'_> {
    /// Wait until `done` holds; fails if the store has failed (no more
    /// records will finish or settle then).
    fn wait_until(&self, done: impl Fn(&Flight) -> bool) -> Result<(), String> {
        let mut flight = self.shared.flight.lock();
        loop {
            if let Some(why) = self.inner.failed.get() {
                return Err(why.clone());
            }
            if done(&flight) {
                return Ok(());
            }
            self.shared.finished.wait(&mut flight);
        }
    }

    /// Wait until at most `left` begun records are unfinished.
    fn wait_finished(&self, left: u64) -> Result<(), String> {
        self.wait_until(|_| self.begun - self.inner.journal_written.load(Ordering::Acquire) <= left)
    }

    /// A single transaction, with nothing in flight or being settled and
    /// nothing else queued: a lone commit (queue depth 1) whose record is
    /// best written on this thread. A larger group means commits arrive
    /// concurrently, and the next group should not wait for this one's
    /// record.
    fn lone(&self, group: &[Prepared]) -> bool {
        group.len() == 1
            && self.begun == self.shared.flight.lock().settled
            && self.inner.pipeline.commits.lock().items.is_empty()
    }

    /// Commit a lone group on this thread: its record, its key-value
    /// batch, its acknowledgement, with no other thread involved.
    fn commit_inline(
        &mut self,
        group: &mut Vec<Prepared>,
        mut batch: Batch,
        payload: &[u8],
        start: Instant,
    ) -> Result<(), String> {
        let inner = self.inner.clone();
        let fill = self.journal.room(payload.len()).1;
        let seq = self.journal.next_seq();
        self.begun = seq;
        let after = self.journal.append_inline(payload)?;
        batch.put(keys::JOURNAL_KEY.to_vec(), after.encode());
        inner
            .kv
            .write(batch, false)
            .map_err(|e| format!("metadata write failed: {e}"))?;
        let us = start.elapsed().as_micros() as u64;
        let perf = &inner.perf;
        perf.journal_write_us.fetch_add(us, Ordering::Relaxed);
        perf.journal_records.fetch_add(1, Ordering::Relaxed);
        perf.journal_bytes
            .fetch_add(payload.len() as u64, Ordering::Relaxed);
        perf.kv_commit(us);
        inner.journal_written.store(seq, Ordering::Release);
        finish_group(&inner, std::mem::take(group));
        self.shared.flight.lock().settled = seq;
        self.request_sync(fill);
        Ok(())
    }

    /// Ask the sync thread for a key-value sync past `SYNC_AT`.
    fn request_sync(&self, fill: f64) {
        if fill > SYNC_AT {
            let mut sync = self.inner.pipeline.sync.lock();
            if sync.items.is_empty() {
                sync.items.push_back(());
                self.inner.pipeline.sync_ready.notify_one();
            }
        }
    }

    /// Wait until every group handed over is settled (see `Flight`), so
    /// that this thread may write the key-value store and finish groups
    /// itself.
    fn drain(&self) -> Result<(), String> {
        self.wait_until(|flight| flight.settled == self.begun)
    }

    /// Make a group durable, or start to. See the module docs.
    fn start_group(&mut self, group: &mut Vec<Prepared>) -> Result<(), String> {
        let inner = self.inner.clone();
        if let Some(why) = inner.failed.get() {
            return Err(why.clone());
        }
        let start = Instant::now();
        let mut data = false;
        for p in group.iter_mut() {
            if let Some(write) = p.data.take() {
                block_on(write).map_err(|e| format!("data write failed: {e}"))?;
                data = true;
            }
        }
        if data {
            flush(&inner)?;
        }
        let mut batch = Batch::new();
        for p in group.iter_mut() {
            batch.append(std::mem::take(&mut p.batch));
        }
        let payload = batch.encode();
        if payload.len() > self.journal.max_payload() {
            // Synced, it makes every earlier batch durable too: the journal
            // then holds nothing needed any more. Earlier groups are
            // finished first, so that no record is still being written
            // where later ones may go.
            self.drain()?;
            batch.put(keys::JOURNAL_KEY.to_vec(), self.journal.head().encode());
            inner
                .kv
                .write(batch, true)
                .map_err(|e| format!("metadata commit failed: {e}"))?;
            self.journal.retire(u64::MAX);
            inner.perf.kv_commit(start.elapsed().as_micros() as u64);
            finish_group(&inner, std::mem::take(group));
            return Ok(());
        }
        self.journal
            .retire(inner.journal_synced.load(Ordering::Acquire));
        if !self.journal.room(payload.len()).0 {
            self.drain()?;
            sync_kv(&inner)?;
            self.journal.retire(u64::MAX);
        }
        if self.lone(group) {
            return self.commit_inline(group, batch, &payload, start);
        }
        // No more than `WRITERS` records unanswered (see `journal`).
        self.wait_finished(WRITERS as u64 - 1)?;
        let fill = self.journal.room(payload.len()).1;
        let seq = self.journal.next_seq();
        let (after, record) = self.journal.begin_append(&payload)?;
        self.begun = seq;
        // The finisher writes the batch (unsynced) while the record is in
        // flight (see `journal`).
        batch.put(keys::JOURNAL_KEY.to_vec(), after.encode());
        self.shared.flight.lock().queue.push_back(InFlight {
            group: std::mem::take(group),
            batch,
            seq,
            record,
            start,
            payload_len: payload.len(),
        });
        self.shared.handed.notify_one();
        self.request_sync(fill);
        Ok(())
    }
}

/// Sync the key-value store: every batch written so far becomes durable.
fn sync_kv(inner: &Inner) -> Result<(), String> {
    let written = inner.journal_written.load(Ordering::Acquire);
    inner
        .kv
        .sync()
        .map_err(|e| format!("metadata sync failed: {e}"))?;
    inner.perf.kv_syncs.fetch_add(1, Ordering::Relaxed);
    inner.journal_synced.fetch_max(written, Ordering::AcqRel);
    Ok(())
}

/// The key-value sync thread.
pub(crate) fn sync_loop(inner: Arc<Inner>) {
    loop {
        {
            let mut q = inner.pipeline.sync.lock();
            while q.items.is_empty() && !q.shutdown {
                inner.pipeline.sync_ready.wait(&mut q);
            }
            if q.shutdown {
                return;
            }
            q.items.clear();
        }
        if inner.failed.get().is_some() {
            continue;
        }
        if let Err(why) = sync_kv(&inner) {
            inner.fail(why);
        }
    }
}
