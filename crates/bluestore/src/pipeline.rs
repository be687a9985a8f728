//! The commit pipeline: group commit, deferred writes, space release.
//!
//! A built transaction ([`Prepared`]) has its new data already submitted to
//! the device and its metadata in a key-value batch. The **commit thread**
//! (`commit`) makes whole groups of them durable at once: data flushed
//! first, then their metadata as one journal record, and only then
//! completes their commits.
//!
//! Deferred writes (small overwrites whose data travelled in the commit's
//! journal record, see `journal`) go to the **deferred thread** after
//! their commit (`deferred`): it writes them in place and flushes. Until then their
//! blocks stay pinned in the buffer cache. The journal's *tail*, the
//! oldest record with deferred writes not on the device yet, then moves
//! on: every later commit records it (`Sjdef`), the journal reuses no
//! record from the tail on, and after a crash mount applies the deferred
//! writes of the records from the durable tail on. A group too large for a
//! journal record keeps its deferred records in the key-value store
//! instead, and the deferred thread deletes them once applied.
//!
//! Space a transaction released is handed back to the allocator only when
//! (a) the transaction committed, (b) every deferred write of it and of
//! earlier transactions reached the device and a commit recording that
//! (the moved tail, the deleted records) is durable, so no replay can land
//! on reused space, and (c) every read that might still use the space is
//! done.
//!
//! Fault model: a failed device write, flush or key-value write fails the
//! store; the commits involved and all later ones return `Failed`. Nothing
//! is acknowledged that is not durable.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering;

use bytes::Bytes;
use cairn_device::{BoxFuture, DeviceError};
use cairn_kv::Batch;
use cairn_store::StoreError;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use crate::journal::Position;
use crate::keys;
use crate::onode::{PExtent, BLOCK};
use crate::state::Inner;

/// A round starts once this many bytes of deferred writes are queued (see
/// `deferred`); `finish_group` wakes the deferred thread when it is reached.
pub(crate) const DEFERRED_BATCH_BYTES: u64 = 1 << 20;

/// Deferred records waiting for the deferred thread.
#[derive(Default)]
pub(crate) struct DeferredQueue {
    pub(crate) items: VecDeque<DeferredRecord>,
    /// Bytes the queued records write.
    pub(crate) bytes: u64,
    pub(crate) shutdown: bool,
}

impl DeferredRecord {
    pub(crate) fn bytes(&self) -> u64 {
        self.writes.len() as u64 * BLOCK
    }
}

/// Deferred writes of one transaction: `(device offset, block, pin)`.
pub(crate) struct DeferredRecord {
    pub seq: u64,
    pub writes: Vec<(u64, Bytes, u64)>,
    /// The journal record holding it; `None` once committed as a `D`
    /// record in the key-value store instead (a group too large for the
    /// journal), to be deleted there once applied.
    pub record: Option<u64>,
}

impl DeferredRecord {
    /// The `D` value (see [`encode_deferred_into`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.value_len());
        self.encode_into(&mut out);
        out
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_deferred_into(out, self.writes.iter().map(|(p, d, _)| (*p, &d[..])));
    }

    fn value_len(&self) -> usize {
        5 + self.writes.len() * (8 + BLOCK as usize)
    }

    /// Append the record as a `D` put to an encoded batch (see
    /// [`cairn_kv::encode_put`]), its blocks copied straight in.
    pub fn encode_put_into(&self, out: &mut Vec<u8>) {
        cairn_kv::encode_put_header(out, &keys::deferred(self.seq), self.value_len());
        self.encode_into(out);
    }

    /// Bytes the record adds to an encoded batch as a `D` put, at most.
    pub fn encoded_len(&self) -> usize {
        32 + self.value_len()
    }
}

/// Append a deferred record's writes to `out` as the `D` value: a format
/// byte, a count (u32 LE), then per write its device offset (u64 LE) and
/// one block.
fn encode_deferred_into<'a>(
    out: &mut Vec<u8>,
    writes: impl ExactSizeIterator<Item = (u64, &'a [u8])>,
) {
    out.push(DEFERRED_FORMAT);
    out.extend_from_slice(&(writes.len() as u32).to_le_bytes());
    for (phys, data) in writes {
        debug_assert_eq!(data.len() as u64, BLOCK);
        out.extend_from_slice(&phys.to_le_bytes());
        out.extend_from_slice(data);
    }
}

/// Decode a `D` value written by [`encode_deferred_into`].
pub(crate) fn decode_deferred(value: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let (&format, rest) = value.split_first().ok_or("empty deferred record")?;
    if format != DEFERRED_FORMAT {
        return Err(format!("unknown deferred record format {format}"));
    }
    let count = rest
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("truncated deferred record")?;
    let entry = 8 + BLOCK as usize;
    let body = &rest[4..];
    if body.len() != count * entry {
        return Err(format!(
            "deferred record of {} bytes for {count} writes",
            body.len()
        ));
    }
    Ok(body
        .chunks(entry)
        .map(|c| {
            let phys = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
            (phys, c[8..].to_vec())
        })
        .collect())
}

const DEFERRED_FORMAT: u8 = 1;

/// Space released by transaction `seq` under read generation `gen`.
pub(crate) struct Release {
    pub seq: u64,
    pub gen: u64,
    pub extents: Vec<PExtent>,
}

impl Prepared {
    /// Answer the commit, unless it already was.
    pub fn answer(&mut self, result: Result<(), StoreError>) {
        if let Some(done) = self.done.take() {
            let _ = done.send(result);
        }
    }

    /// Bytes of its deferred writes.
    pub fn deferred_bytes(&self) -> u64 {
        self.deferred.as_ref().map_or(0, DeferredRecord::bytes)
    }

    /// Bytes it adds to a journal record, at most.
    pub fn record_bytes(&self) -> usize {
        self.batch.encoded_len()
            + self
                .deferred
                .as_ref()
                .map_or(0, DeferredRecord::encoded_len)
    }
}

/// Where a commit's outcome is sent.
pub(crate) type Done = oneshot::Sender<Result<(), StoreError>>;

/// A transaction ready to commit.
pub(crate) struct Prepared {
    pub seq: u64,
    pub batch: Batch,
    /// Its new data, already submitted to the device.
    pub data: Option<BoxFuture<Result<(), DeviceError>>>,
    /// Blocks of that data pinned in the cache: `(device offset, pin,
    /// keep cached once written)`.
    pub data_pins: Vec<(u64, u64, bool)>,
    pub deferred: Option<DeferredRecord>,
    pub release: Option<Release>,
    /// Transactions whose deferred writes are on the device: once this
    /// commit is durable, so is the journal tail past them.
    pub retires: Vec<u64>,
    /// Answered once: when its record and every earlier one are durable
    /// (see `record`), or when it fails.
    pub done: Option<Done>,
}

pub(crate) struct Queue<T> {
    pub(crate) items: VecDeque<T>,
    pub(crate) shutdown: bool,
    /// Why nothing queued will be served any more (a pipeline thread
    /// died): new items are answered with this at once.
    pub(crate) dead: Option<String>,
    /// While an event loop commits (`loop_commit`), the commit thread
    /// takes a group only when the loop asks, setting this.
    pub(crate) wanted: bool,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
            shutdown: false,
            dead: None,
            wanted: false,
        }
    }
}

#[derive(Default)]
pub(crate) struct Releases {
    pub(crate) waiting: VecDeque<Release>,
    /// Transactions whose deferred writes are not on the device yet.
    pub(crate) unapplied: BTreeSet<u64>,
}

#[derive(Default)]
pub(crate) struct Pipeline {
    pub(crate) commits: Mutex<Queue<Prepared>>,
    pub(crate) commit_ready: Condvar,
    pub(crate) deferred: Mutex<DeferredQueue>,
    pub(crate) deferred_ready: Condvar,
    /// The deferred thread has stopped: it will submit nothing more.
    pub(crate) deferred_stopped: std::sync::atomic::AtomicBool,
    pub(crate) releases: Mutex<Releases>,
    /// Transactions with deferred writes in a journal record that are not
    /// on the device yet, with where that record starts: the first is the
    /// journal's tail.
    pub(crate) tail: Mutex<std::collections::BTreeMap<u64, Position>>,
    /// The tail moved.
    pub(crate) tail_moved: Condvar,
    /// Requests to the key-value sync thread.
    pub(crate) sync: Mutex<Queue<()>>,
    pub(crate) sync_ready: Condvar,
    /// The deferred thread's round size in bytes (0: not sized yet): a
    /// group takes transactions with at most this many bytes of deferred
    /// writes (beyond its first), since a round never splits a record
    /// and a full journal waits for a whole round.
    pub(crate) round_bytes: std::sync::atomic::AtomicU64,
}

impl Pipeline {
    /// Does a group with `deferred` bytes of deferred writes so far take
    /// `p` too (see `round_bytes`)?
    pub fn deferred_fits(&self, deferred: u64, p: &Prepared) -> bool {
        let max = match self.round_bytes.load(Ordering::Relaxed) {
            0 => u64::MAX,
            n => n,
        };
        deferred + p.deferred_bytes() <= max
    }

    /// Queue a built transaction (in sequence order: called under the state
    /// lock), then run `decide` under the queue's lock; `None` if it was
    /// answered at once instead (the pipeline is dead). Its deferred
    /// writes, if any, count as unapplied from now on. The caller wakes
    /// whoever takes it (see `Inner::queue_commit`).
    pub fn queue_then<R>(&self, p: Prepared, decide: impl FnOnce() -> R) -> Option<R> {
        self.note_unapplied(&p);
        let mut q = self.commits.lock();
        if let Some(why) = &q.dead {
            let mut p = p;
            p.answer(Err(StoreError::Failed(why.clone())));
            return None;
        }
        q.items.push_back(p);
        Some(decide())
    }

    /// `p`'s deferred writes, if any, count as unapplied from now on
    /// (called under the state lock, in sequence order).
    pub fn note_unapplied(&self, p: &Prepared) {
        if p.deferred.is_some() {
            self.releases.lock().unapplied.insert(p.seq);
        }
    }

    /// Stop the commit thread once its queue is empty. The deferred thread
    /// is not stopped here: the last commits hand it their deferred writes
    /// only as they complete, so it is stopped after the commit thread (by
    /// `commit_loop` as it ends, see [`shutdown_deferred`](Self::shutdown_deferred)).
    pub fn shutdown(&self) {
        self.commits.lock().shutdown = true;
        self.commit_ready.notify_all();
    }

    /// Stop the deferred thread once its queue is empty.
    pub fn shutdown_deferred(&self) {
        self.deferred.lock().shutdown = true;
        self.deferred_ready.notify_all();
    }

    /// Stop the key-value sync thread.
    pub fn shutdown_sync(&self) {
        self.sync.lock().shutdown = true;
        self.sync_ready.notify_all();
    }

    pub fn has_waiting_releases(&self) -> bool {
        !self.releases.lock().waiting.is_empty()
    }

    /// The group's deferred writes go in the journal record starting at
    /// `at`: they hold the tail there until applied. Returns the tail.
    pub fn hold_tail(&self, group: &mut [Prepared], at: Position) -> Position {
        let mut tail = self.tail.lock();
        for d in group.iter_mut().filter_map(|p| p.deferred.as_mut()) {
            d.record = Some(at.seq);
            tail.insert(d.seq, at);
        }
        tail.values().next().copied().unwrap_or(at)
    }

    /// The journal's tail, with the next record starting at `head`.
    pub fn tail(&self, head: Position) -> Position {
        self.tail.lock().values().next().copied().unwrap_or(head)
    }

    /// Wait until the tail is past record `seq`, the next record starting
    /// at `head`; returns it. Fails if the store fails meanwhile.
    pub fn wait_tail_past(
        &self,
        inner: &Inner,
        seq: u64,
        head: Position,
    ) -> Result<Position, String> {
        let mut tail = self.tail.lock();
        loop {
            let at = tail.values().next().copied().unwrap_or(head);
            if at.seq > seq {
                return Ok(at);
            }
            if let Some(why) = inner.failed.get() {
                return Err(why.clone());
            }
            self.tail_moved
                .wait_for(&mut tail, std::time::Duration::from_millis(50));
        }
    }
}

/// A group is durable: complete its commits and hand on what follows.
///
/// Groups must be finished one at a time, in commit order: deferred writes
/// are queued here, and a round applies the latest queued write of each
/// block, so a later write queued first would be overwritten by an
/// earlier one.
pub(crate) fn finish_group(inner: &Inner, group: Vec<Prepared>) {
    let (Some(first), Some(last)) = (group.first(), group.last()) else {
        return;
    };
    let (first, last) = (first.seq, last.seq);
    let before = inner.committed.swap(last, Ordering::AcqRel);
    assert!(
        before < first,
        "commit groups finished out of order: transaction {first} after {before}"
    );
    inner.acked.fetch_max(last, Ordering::AcqRel);
    inner.committed_moved.notify_all();
    let mut deferred = Vec::new();
    let mut releases = Vec::new();
    let mut retired = Vec::new();
    for mut p in group {
        p.answer(Ok(()));
        for (phys, pin, keep) in p.data_pins {
            inner.cache.unpin(phys, pin, keep);
        }
        deferred.extend(p.deferred);
        releases.extend(p.release);
        retired.extend(p.retires);
    }
    if !deferred.is_empty() {
        let mut q = inner.pipeline.deferred.lock();
        let before = q.bytes;
        q.bytes += deferred.iter().map(DeferredRecord::bytes).sum::<u64>();
        q.items.extend(deferred);
        // The deferred thread waits for a full batch or a deadline: wake it
        // to start the deadline or once the batch is full, not every time.
        if before == 0 || before < DEFERRED_BATCH_BYTES && q.bytes >= DEFERRED_BATCH_BYTES {
            inner.pipeline.deferred_ready.notify_one();
        }
    }
    if !releases.is_empty() || !retired.is_empty() {
        let mut rel = inner.pipeline.releases.lock();
        rel.waiting.extend(releases);
        for seq in retired {
            rel.unapplied.remove(&seq);
        }
    }
    try_release(inner);
}

/// A pipeline thread panicked: fail the store, answer every queued commit
/// with the failure and let nothing more queue, so that commits return
/// `Failed` and unmount completes rather than wait for the dead thread.
/// The journal and the key-value store hold everything acknowledged; a
/// remount recovers it.
pub(crate) fn thread_died(inner: &Inner, thread: &str) {
    inner.fail(format!("the {thread} thread panicked; remount the store"));
    let why = inner
        .failed
        .get()
        .cloned()
        .unwrap_or_else(|| format!("the {thread} thread panicked"));
    let abandoned: Vec<Prepared> = {
        let mut q = inner.pipeline.commits.lock();
        q.dead = Some(why.clone());
        q.items.drain(..).collect()
    };
    for mut p in abandoned {
        p.answer(Err(StoreError::Failed(why.clone())));
    }
    inner.pipeline.commit_ready.notify_all();
}

/// Hand back every released extent that can no longer be in use.
pub(crate) fn try_release(inner: &Inner) {
    let ready: Vec<Release> = {
        let mut rel = inner.pipeline.releases.lock();
        let mut ready = Vec::new();
        while let Some(front) = rel.waiting.front() {
            let deferred_done = rel.unapplied.first().is_none_or(|&s| s > front.seq);
            if !deferred_done || !inner.reads.all_done_before(front.gen) {
                break;
            }
            ready.extend(rel.waiting.pop_front());
        }
        ready
    };
    if ready.is_empty() {
        return;
    }
    let mut st = inner.state.lock();
    for r in ready {
        for p in r.extents {
            inner.cache.forget(p.offset, u64::from(p.len));
            st.alloc.release(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transaction with `blocks` deferred blocks.
    fn txn(blocks: u64) -> Prepared {
        Prepared {
            seq: 1,
            batch: Batch::new(),
            data: None,
            data_pins: Vec::new(),
            deferred: (blocks > 0).then(|| DeferredRecord {
                seq: 1,
                writes: (0..blocks).map(|b| (b * BLOCK, Bytes::new(), 0)).collect(),
                record: None,
            }),
            release: None,
            retires: Vec::new(),
            done: None,
        }
    }

    #[test]
    fn a_group_takes_about_a_round_of_deferred_writes() {
        let p = Pipeline::default();
        // Before the first round: no bound.
        assert!(p.deferred_fits(u64::MAX / 2, &txn(64)));
        p.round_bytes.store(8 * BLOCK, Ordering::Relaxed);
        assert!(p.deferred_fits(0, &txn(8)));
        assert!(p.deferred_fits(4 * BLOCK, &txn(4)));
        assert!(!p.deferred_fits(4 * BLOCK, &txn(5)), "past the round");
        assert!(p.deferred_fits(8 * BLOCK, &txn(0)), "no deferred writes");
    }
}
