//! The commit thread and its record threads; inline commits.
//!
//! The commit thread waits until fewer than `journal::WRITERS` records
//! are unacknowledged, then takes every queued transaction at once (group
//! commit: the longer the device takes, the larger the next group), waits
//! for their new data, flushes the device if there was any (data must be
//! durable before metadata that points at it can be) and lays out a journal
//! record holding all their key-value changes and deferred writes. A
//! record thread writes it durably and then *answers* it: completes the
//! commits, then writes its changes to the key-value store unsynced (see
//! `journal`). Records are answered in order: a thread whose record is
//! durable before an earlier one leaves it for the thread answering that
//! one, which then answers both. So one thread hop separates a group from
//! the device, and none separates the device from the acknowledgement. A
//! group too large for a journal record is written to the key-value store
//! synced instead, deferred records and all.
//!
//! A lone transaction (nothing else queued or in flight) is committed by
//! the commit thread itself, record and all. Once several in a row were,
//! the load is one transaction at a time, and the next lone small one is
//! committed by its submitter, on its own thread, before `submit` returns
//! (`try_inline`): no thread hop at all. Whoever commits holds the commit
//! state (the journal's head), so commits stay in order.
//!
//! The sync thread (`kvsync`) syncs the key-value store when the journal
//! fills past half, so that its oldest records can be dropped; if the
//! journal fills before that, the commit thread syncs it itself, and waits
//! for the deferred thread if unapplied deferred writes hold the journal's
//! tail.
//!
//! Fault model: a failed device write, flush, journal write or key-value
//! write or sync fails the store; the commits involved and all later ones
//! return `Failed`. Nothing is acknowledged that is not durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use cairn_device::block_on;
use cairn_kv::Batch;
use parking_lot::MutexGuard;

use crate::journal::Record;
use crate::journal::{Journal, WRITERS};
use crate::keys;
use crate::kvsync::{sync_kv, synced};
use crate::pipeline::{finish_group, Prepared, Queue};
use crate::record::{record_loop, Flight, InFlight, Shared, StopRecords};
use crate::state::Inner;

mod on_loop;
pub(crate) use on_loop::{loop_group, LoopGroup};

/// Lone commits in a row after which a submitter may commit a lone
/// transaction itself (`try_inline`). A submitter committing blocks its
/// thread for the record's write; when a burst follows (an idle moment
/// of a deep queue), the rest of the burst would wait for that one write.
/// A streak says the load is one transaction at a time.
const INLINE_AFTER_LONE: u32 = 3;
/// Most transactions committed as one group.
const MAX_GROUP: usize = 512;
/// Records acknowledged but not settled (batch written, group finished),
/// at most, beyond those in flight. Each holds the space its transactions
/// released (freed only once settled) and dirty onodes in memory: with no
/// bound, a key-value store slower than the journal lets them pile up
/// until the device is full.
const UNSETTLED: u64 = 2;
/// Past this share of the journal in use, ask for a key-value sync.
const SYNC_AT: f64 = 0.5;
/// Bytes the journal tail's position adds to a record, at most.
const TAIL_PUT_BYTES: usize = 64;

/// What whoever commits owns: the journal's head and the last record
/// begun. The commit thread holds it while it forms and starts a group; a
/// submitter committing a lone transaction itself (`try_inline`) holds it
/// for that commit.
pub(crate) struct CommitState {
    journal: Journal,
    /// Sequence number of the last record begun.
    begun: u64,
    /// Lone commits in a row (see `Committer::lone`): the load is one
    /// transaction at a time.
    lone_streak: u32,
}

impl CommitState {
    /// Continue `journal`, whose last record begun is its head's predecessor.
    pub fn new(journal: Journal) -> Self {
        let begun = journal.head().seq - 1;
        Self {
            journal,
            begun,
            lone_streak: 0,
        }
    }
}

/// A committer at work: the commit state, locked.
struct Committer<'a> {
    inner: &'a Arc<Inner>,
    shared: &'a Shared,
    st: MutexGuard<'a, CommitState>,
    /// Committing a lone transaction for its submitter (`try_inline`).
    inline: bool,
}

impl<'a> Committer<'a> {
    fn lock(inner: &'a Arc<Inner>) -> Self {
        Self {
            inner,
            shared: &inner.records,
            st: inner.commit.lock(),
            inline: false,
        }
    }
}

/// The commit thread.
///
/// It forms groups and lays out their journal records; `WRITERS` + 1
/// record threads beside it write the records and answer them in order
/// (see `record`), so the device sees several commits in flight.
pub(crate) fn commit_loop(inner: Arc<Inner>) {
    let shared = &inner.records;
    std::thread::scope(|scope| {
        for i in 0..WRITERS + 1 {
            let spawned = std::thread::Builder::new()
                .name(format!("cairn-bs-record{i}"))
                .spawn_scoped(scope, || record_loop(&inner, shared));
            if let Err(e) = spawned {
                inner.fail(format!("cannot start a journal record thread: {e}"));
            }
        }
        // However this thread leaves the scope, the record threads stop
        // (once every record laid out is written and answered) so that
        // the scope can end.
        let _stop = StopRecords(shared);
        let mut drained = false;
        loop {
            match wait_for_commits(&inner, drained) {
                Next::Commits => {
                    // However the commit state is released (an empty group
                    // too), an event loop that found it held takes up what
                    // queued meanwhile. Declared first: dropped after `c`.
                    let _wake = WakeLoop(&inner);
                    let mut c = Committer::lock(&inner);
                    // A group formed only once a record can start takes in
                    // everything that queued meanwhile: fewer, larger
                    // records.
                    let _ = c.wait_unacked(WRITERS as u64 - 1);
                    let max_bytes = c.st.journal.max_payload() - TAIL_PUT_BYTES;
                    // Taken with the commit state held, so that no
                    // submitter commits a later transaction itself while
                    // this group is between the queue and its record.
                    let mut group = take_group(&inner, max_bytes);
                    if group.is_empty() {
                        continue; // a dead pipeline answered them
                    }
                    drained = false;
                    if let Err(why) = c.start_group(&mut group) {
                        c.inner.fail(why);
                        for mut p in group {
                            p.answer(c.inner.check_failed());
                        }
                    }
                }
                Next::Drain => {
                    // Finished groups hand their deferred writes to the
                    // deferred thread: all of them must have before it is
                    // told to stop.
                    let _ = Committer::lock(&inner).drain();
                    drained = true;
                }
                Next::Stop => break,
            }
        }
        // Every record laid out is answered before the final sync.
        let _ = Committer::lock(&inner).drain();
    });
    // Leave nothing for the journal to replay after a clean stop.
    if inner.failed.get().is_none() {
        if let Err(e) = inner.kv.sync() {
            inner.fail(format!("final metadata sync failed: {e}"));
        }
    }
    inner.pipeline.shutdown_sync();
}

/// Wakes an event loop's commit task when dropped (see `commit_loop`).
struct WakeLoop<'a>(&'a Inner);

impl Drop for WakeLoop<'_> {
    fn drop(&mut self) {
        if let Some(lc) = self.0.loop_commits.get() {
            lc.wake.notify_one();
        }
    }
}

enum Next {
    /// Transactions are queued.
    Commits,
    /// Shutting down with nothing queued: finish the groups in flight,
    /// then ask again with `drained`.
    Drain,
    /// Shut down, the deferred thread stopped and nothing queued.
    Stop,
}

/// Fails the store if an inline commit panics on its submitter's thread:
/// its record may be begun and never settled, which the commit thread
/// would otherwise wait for forever.
struct InlineDies<'a>(&'a Inner);

impl Drop for InlineDies<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let inner = self.0;
            inner
                .fail("a transaction's submitter panicked committing it; remount the store".into());
            let _flight = inner.records.flight.lock();
            inner.records.finished.notify_all();
        }
    }
}

/// Wait until transactions are queued; see `Next` for shutting down.
fn wait_for_commits(inner: &Inner, drained: bool) -> Next {
    let pipeline = &inner.pipeline;
    let mut q = pipeline.commits.lock();
    // While an event loop commits, it asks for the groups it cannot do.
    let loop_owns = |q: &Queue<Prepared>| {
        !q.shutdown
            && !q.wanted
            && inner
                .loop_commits
                .get()
                .is_some_and(|lc| lc.attached.load(Ordering::Acquire))
    };
    while q.items.is_empty() || loop_owns(&q) {
        if q.items.is_empty() && q.shutdown {
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
    Next::Commits
}

/// The next group: every queued transaction, up to `MAX_GROUP`, about
/// `max_bytes` of metadata and a deferred round of deferred writes.
fn take_group(inner: &Inner, max_bytes: usize) -> Vec<Prepared> {
    let mut q = inner.pipeline.commits.lock();
    let (mut bytes, mut deferred) = (0, 0);
    let mut n = 0;
    while n < q.items.len().min(MAX_GROUP)
        && (n == 0
            || bytes + q.items[n].record_bytes() <= max_bytes
                && inner.pipeline.deferred_fits(deferred, &q.items[n]))
    {
        bytes += q.items[n].record_bytes();
        deferred += q.items[n].deferred_bytes();
        n += 1;
    }
    q.wanted = false;
    q.items.drain(..n).collect()
}

/// A lone transaction its submitter commits itself, on its own thread:
/// see [`try_inline`].
pub(crate) struct Inline<'a>(Committer<'a>);

/// Whether the submitter of `p`, just built under the state lock (which
/// orders transactions), may commit it itself: nothing queued or in flight,
/// no new data to wait for, and room for its record in the journal. Then
/// the record is written on the submitter's thread and the commit is
/// complete when [`Inline::commit`] returns: at queue depth 1 that saves
/// the hand-offs to the commit thread and back (two thread wake-ups).
/// Otherwise `None`, and `p` is to be queued as usual (`Inner::queue_commit`).
///
/// The commit state stays held until the commit is done, so any later
/// transaction queues behind it; the state lock need not be.
pub(crate) fn try_inline<'a>(inner: &'a Arc<Inner>, p: &Prepared) -> Option<Inline<'a>> {
    if !inner.opts.inline_commits || p.data.is_some() || inner.failed.get().is_some() {
        return None;
    }
    if inner.loop_commits.get().is_some() {
        // An event loop commits; the loop's thread must never block.
        return None;
    }
    let st = inner.commit.try_lock()?;
    if st.lone_streak < INLINE_AFTER_LONE {
        return None;
    }
    let mut c = Committer {
        inner,
        shared: &inner.records,
        st,
        inline: true,
    };
    {
        let q = inner.pipeline.commits.lock();
        if !q.items.is_empty() || q.shutdown || q.dead.is_some() {
            return None;
        }
    }
    // Nothing in flight or being settled: `commit_inline`'s condition,
    // which stays true while the commit state is held.
    if c.shared.flight.lock().settled != c.st.begun {
        return None;
    }
    let payload_len = p.record_bytes() + TAIL_PUT_BYTES;
    if payload_len > c.st.journal.max_payload() {
        return None;
    }
    let retirable = retirable(c.inner);
    c.st.journal.retire(retirable);
    if !c.st.journal.room(payload_len).0 {
        return None;
    }
    // As `Pipeline::queue_then` would, still under the state lock.
    inner.pipeline.note_unapplied(p);
    Some(Inline(c))
}

impl Inline<'_> {
    /// Commit `p` (the transaction `try_inline` was asked about).
    pub fn commit(mut self, p: Prepared) {
        let _dies = InlineDies(self.0.inner);
        self.0
            .inner
            .perf
            .inline_commits
            .fetch_add(1, Ordering::Relaxed);
        let mut group = vec![p];
        if let Err(why) = self.0.start_group(&mut group) {
            self.0.inner.fail(why);
            for mut p in group {
                p.answer(self.0.inner.check_failed());
            }
        }
    }
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

    /// Wait until at most `left` begun records are unacknowledged (maybe
    /// not durable yet), and at most `UNSETTLED` more acknowledged but
    /// not settled.
    fn wait_unacked(&self, left: u64) -> Result<(), String> {
        self.wait_until(|flight| {
            self.st.begun - flight.acked <= left
                && self.st.begun - flight.settled <= left + UNSETTLED
        })
    }

    /// A single transaction, with nothing in flight or being settled and
    /// nothing else queued: a lone commit (queue depth 1) whose record is
    /// best written on this thread. A larger group means commits arrive
    /// concurrently, and the next group should not wait for this one's
    /// record.
    fn lone(&self, group: &[Prepared]) -> bool {
        if self.inline {
            // `try_inline` checked; what queued since waits for it.
            return true;
        }
        group.len() == 1
            && self.st.begun == self.shared.flight.lock().settled
            && self.inner.pipeline.commits.lock().items.is_empty()
    }

    /// Commit a lone group on this thread: its record, its key-value
    /// batch, its acknowledgement, with no other thread involved.
    fn commit_inline(
        &mut self,
        group: &mut Vec<Prepared>,
        batch: Batch,
        payload: &[u8],
        tail: u64,
        start: Instant,
    ) -> Result<(), String> {
        let inner = self.inner.clone();
        let (mut f, record, fill) = self.place(group, batch, payload, tail, start);
        let written = record.write(inner.device.as_ref()).and_then(|()| {
            // Durable: acknowledged before the key-value write, as the
            // record threads do (see `record::take_acks`).
            for p in f.group.iter_mut() {
                inner.acked.fetch_max(p.seq, Ordering::AcqRel);
                p.answer(Ok(()));
            }
            inner
                .kv
                .write(std::mem::take(&mut f.batch), false)
                .map_err(|e| format!("metadata write failed: {e}"))
        });
        if let Err(why) = written {
            // The caller fails the group's commits still unanswered.
            *group = f.group;
            return Err(why);
        }
        crate::record::record_answered(&inner, f.start, f.payload_len, f.tail, f.seq);
        finish_group(&inner, f.group);
        {
            let mut flight = self.shared.flight.lock();
            flight.settled = f.seq;
            flight.acked = f.seq;
        }
        if let Some(lc) = inner.loop_commits.get() {
            lc.poke();
        }
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
        self.wait_until(|flight| flight.settled == self.st.begun)
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
        let (mut batch, payload_len) = Self::merge(group);
        if payload_len > self.st.journal.max_payload() {
            return self.commit_oversized(group, batch, start);
        }
        self.st.journal.retire(retirable(self.inner));
        if !self.st.journal.room(payload_len).0 {
            self.make_room(payload_len)?;
        }
        let (payload, tail) = self.encode_record(group, &mut batch, payload_len);
        if self.lone(group) {
            self.st.lone_streak = self.st.lone_streak.saturating_add(1);
            return self.commit_inline(group, batch, &payload, tail, start);
        }
        self.st.lone_streak = 0;
        // No more than `WRITERS` records unacknowledged (see `journal`).
        self.wait_unacked(WRITERS as u64 - 1)?;
        let (f, record, fill) = self.place(group, batch, &payload, tail, start);
        self.shared.flight.lock().to_write.push_back((f, record));
        self.shared.handed.notify_one();
        self.request_sync(fill);
        Ok(())
    }

    /// The journal record's payload for `group`, whose batches are merged
    /// in `batch` (`payload_len` bytes at most): the batch with the
    /// journal tail's position, then the deferred records. Returns it with
    /// the tail's record.
    fn encode_record(
        &mut self,
        group: &mut [Prepared],
        batch: &mut Batch,
        payload_len: usize,
    ) -> (Vec<u8>, u64) {
        let at = self.st.journal.head();
        let tail = self.inner.pipeline.hold_tail(group, at);
        batch.put(keys::JDEF_KEY.to_vec(), tail.encode());
        // The record holds the deferred records; the key-value store never
        // does (see `journal`).
        let mut payload = Vec::with_capacity(payload_len);
        batch.encode_into(&mut payload);
        for d in group.iter().filter_map(|p| p.deferred.as_ref()) {
            d.encode_put_into(&mut payload);
        }
        (payload, tail.seq)
    }

    /// Place `payload` as the next record at the journal's head: the record
    /// to write, what answers it once durable, and the journal's fill.
    fn place(
        &mut self,
        group: &mut Vec<Prepared>,
        mut batch: Batch,
        payload: &[u8],
        tail: u64,
        start: Instant,
    ) -> (InFlight, Record, f64) {
        let fill = self.st.journal.room(payload.len()).1;
        let seq = self.st.journal.next_seq();
        let (after, record) = self.st.journal.place_record(payload);
        self.st.begun = seq;
        // Whoever answers the record writes the batch once it is durable.
        batch.put(keys::JOURNAL_KEY.to_vec(), after.encode());
        let f = InFlight {
            group: std::mem::take(group),
            batch,
            seq,
            tail,
            start,
            payload_len: payload.len(),
        };
        (f, record, fill)
    }

    /// Merge the group's batches: the merged batch and the record's
    /// payload length.
    fn merge(group: &mut [Prepared]) -> (Batch, usize) {
        let mut batch = Batch::new();
        for p in group.iter_mut() {
            batch.append(std::mem::take(&mut p.batch));
        }
        // The batch, the tail's position and the deferred records.
        let payload_len = batch.encoded_len()
            + TAIL_PUT_BYTES
            + group
                .iter()
                .filter_map(|p| p.deferred.as_ref())
                .map(|d| d.encoded_len())
                .sum::<usize>();
        (batch, payload_len)
    }

    /// A group too large for a journal record goes to the key-value store
    /// synced, deferred records and all. That makes every earlier batch
    /// durable too. Earlier groups are settled first, so that no record is
    /// still being written where later ones may go.
    fn commit_oversized(
        &mut self,
        group: &mut Vec<Prepared>,
        mut batch: Batch,
        start: Instant,
    ) -> Result<(), String> {
        let inner = self.inner.clone();
        self.drain()?;
        for p in group.iter_mut() {
            if let Some(d) = p.deferred.as_mut() {
                d.record = None;
                batch.put(keys::deferred(d.seq), d.encode());
            }
        }
        let head = self.st.journal.head();
        let tail = inner.pipeline.tail(head);
        batch.put(keys::JDEF_KEY.to_vec(), tail.encode());
        batch.put(keys::JOURNAL_KEY.to_vec(), head.encode());
        let written = inner.journal_written.load(Ordering::Acquire);
        inner
            .kv
            .write(batch, true)
            .map_err(|e| format!("metadata commit failed: {e}"))?;
        inner.jdef_written.fetch_max(tail.seq, Ordering::AcqRel);
        synced(&inner, written, tail.seq);
        self.st.journal.retire(retirable(self.inner));
        inner.perf.kv_commit(start.elapsed().as_micros() as u64);
        finish_group(&inner, std::mem::take(group));
        Ok(())
    }

    /// The journal is full: settle every group in flight, sync the
    /// key-value store and drop what that made durable, waiting for
    /// deferred writes to be applied as long as they hold the tail. The
    /// moved tail is written to the key-value store directly (this thread
    /// cannot commit it: it is the one waiting).
    fn make_room(&mut self, payload_len: usize) -> Result<(), String> {
        let inner = self.inner.clone();
        self.drain()?;
        loop {
            sync_kv(&inner)?;
            self.st.journal.retire(retirable(self.inner));
            if self.st.journal.room(payload_len).0 {
                return Ok(());
            }
            let held = inner.jdef_synced.load(Ordering::Acquire);
            inner
                .perf
                .journal_tail_waits
                .fetch_add(1, Ordering::Relaxed);
            let tail = inner
                .pipeline
                .wait_tail_past(&inner, held, self.st.journal.head())?;
            let mut batch = Batch::new();
            batch.put(keys::JDEF_KEY.to_vec(), tail.encode());
            inner
                .kv
                .write(batch, false)
                .map_err(|e| format!("metadata write failed: {e}"))?;
            inner.jdef_written.fetch_max(tail.seq, Ordering::AcqRel);
        }
    }
}

/// Records the journal may reuse: those whose batches a sync made
/// durable in the key-value store, before the durable tail.
fn retirable(inner: &Inner) -> u64 {
    let synced = inner.journal_synced.load(Ordering::Acquire);
    let tail = inner.jdef_synced.load(Ordering::Acquire);
    synced.min(tail.saturating_sub(1))
}
