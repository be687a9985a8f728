//! [`BufferedKv`]: a write-back buffer of the latest value per key in front
//! of another [`Kv`].
//!
//! The store rewrites the same few keys over and over (an object's onode
//! and extent-map shard on every write to it), and RocksDB keeps every
//! version as a new node of its memtable's skip list until a flush, each
//! insert a walk down that list. This buffer keeps only the newest value of
//! each key (an update in place of a B-tree) and hands the inner store one
//! batch of what is left when it [`spills`](BufferedKv::spill): at every
//! `sync`, and once it holds more than its limit of bytes. A key put and
//! range-deleted between two spills (a PG log entry trimmed soon after it
//! was appended) never reaches the inner store.
//!
//! A spill is one synced write to the inner store, so a batch written
//! without sync may be lost in a crash until `sync` (which spills) returns,
//! and nothing in the inner store ever is. On RocksDB that puts the spill
//! in its write-ahead log rather than flushing memtables at every sync: the
//! memtables fill with the newest values of many syncs before a flush, and
//! keys deleted meanwhile never reach a table file. Reads see the buffer
//! first. A spill moves the
//! buffer aside (still read) until the inner store has taken it, so a reader
//! never misses a value in between. A scan that overlaps a spill taken after
//! it began starts again (the third time, holding spills off), so it never
//! mixes two points in time.
//!
//! Must never: return a value of a batch not applied whole; let a spilled
//! batch reach the inner store before an earlier one; drop the buffer's
//! contents before the inner store has them (a failed spill is kept and
//! retried).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{successor, Batch, Entries, Kv, Op, OpRef, Result};

/// Bytes counted per buffered key beyond its key and value (the B-tree's
/// share and the two allocations' headers), so that a bound on bytes bounds
/// memory for small values too.
const ENTRY_OVERHEAD: usize = 64;

/// Scans read again after a spill overlapped them, at most, before one
/// holds spills off while it reads.
const SCAN_RETRIES: u32 = 2;

/// What the buffer knows of a key.
enum Found<'a> {
    Value(&'a [u8]),
    Deleted,
    Unknown,
}

/// Writes since a point in time, newest value per key.
#[derive(Default)]
struct Layer {
    /// `Some` a put, `None` a delete.
    points: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Disjoint `[start, end)` ranges deleted, keyed by start. Every point
    /// in a range was written after the range's delete (the delete removed
    /// the points before it), so a spill applies the ranges first.
    ranges: BTreeMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl Layer {
    fn is_empty(&self) -> bool {
        self.points.is_empty() && self.ranges.is_empty()
    }

    fn covered(&self, key: &[u8]) -> bool {
        self.ranges
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .is_some_and(|(_, end)| key < end.as_slice())
    }

    fn lookup(&self, key: &[u8]) -> Found<'_> {
        match self.points.get(key) {
            Some(Some(v)) => Found::Value(v),
            Some(None) => Found::Deleted,
            None if self.covered(key) => Found::Deleted,
            None => Found::Unknown,
        }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Put(k, v) => self.set(k, Some(v)),
            Op::Delete(k) => self.set(k, None),
            Op::DeleteRange(start, end) => self.delete_range(start, end),
        }
    }

    fn set(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        let (key_len, value_len) = (key.len(), value.as_ref().map_or(0, Vec::len));
        match self.points.insert(key, value) {
            Some(old) => self.bytes = self.bytes + value_len - old.map_or(0, |v| v.len()),
            None => self.bytes += key_len + value_len + ENTRY_OVERHEAD,
        }
    }

    fn delete_range(&mut self, start: Vec<u8>, end: Vec<u8>) {
        if start >= end {
            return;
        }
        let doomed: Vec<Vec<u8>> = self
            .points
            .range::<[u8], _>((
                Bound::Included(start.as_slice()),
                Bound::Excluded(end.as_slice()),
            ))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            if let Some(v) = self.points.remove(&k) {
                self.bytes -= k.len() + v.map_or(0, |v| v.len()) + ENTRY_OVERHEAD;
            }
        }
        // Merge with every range it overlaps or touches.
        let (mut lo, mut hi) = (start, end);
        if let Some((s, e)) = self
            .ranges
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(lo.as_slice())))
            .next_back()
        {
            if e.as_slice() >= lo.as_slice() {
                lo = s.clone();
            }
        }
        let merged: Vec<Vec<u8>> = self
            .ranges
            .range::<[u8], _>((
                Bound::Included(lo.as_slice()),
                Bound::Included(hi.as_slice()),
            ))
            .map(|(s, _)| s.clone())
            .collect();
        for s in merged {
            if let Some(e) = self.ranges.remove(&s) {
                self.bytes -= s.len() + e.len() + ENTRY_OVERHEAD;
                if e > hi {
                    hi = e;
                }
            }
        }
        self.bytes += lo.len() + hi.len() + ENTRY_OVERHEAD;
        self.ranges.insert(lo, hi);
    }

    /// The layer as one batch's ops: its ranges, then its points.
    fn ops(&self) -> impl Iterator<Item = OpRef<'_>> {
        let ranges = self
            .ranges
            .iter()
            .map(|(start, end)| OpRef::DeleteRange(start, end));
        let points = self.points.iter().map(|(k, v)| match v {
            Some(v) => OpRef::Put(k, v),
            None => OpRef::Delete(k),
        });
        ranges.chain(points)
    }
}

struct Buffers {
    /// Where writes go.
    active: Layer,
    /// The previous active layer, while a spill writes it to the inner
    /// store (or after that failed). Older than `active`.
    spilling: Option<Arc<Layer>>,
    /// Counts spills begun: a scan that sees it move started again.
    spills: u64,
}

/// A write-back buffer in front of `K`. See the module docs.
pub struct BufferedKv<K: Kv> {
    inner: K,
    limit: usize,
    buffers: Mutex<Buffers>,
    /// One spill at a time, so that spilled batches reach `inner` in order.
    spill_lock: Mutex<()>,
}

impl<K: Kv> BufferedKv<K> {
    /// Buffer writes to `inner`, spilling once more than `limit` bytes of
    /// keys and values are buffered.
    pub fn new(inner: K, limit: usize) -> Self {
        Self {
            inner,
            limit,
            buffers: Mutex::new(Buffers {
                active: Layer::default(),
                spilling: None,
                spills: 0,
            }),
            spill_lock: Mutex::new(()),
        }
    }

    pub fn inner(&self) -> &K {
        &self.inner
    }

    /// Bytes buffered (keys, values and a per-key overhead), spilling or not.
    pub fn buffered_bytes(&self) -> usize {
        let b = self.buffers.lock();
        b.active.bytes + b.spilling.as_ref().map_or(0, |l| l.bytes)
    }

    /// Hand everything buffered to the inner store as one synced write:
    /// durable on return.
    pub fn spill(&self) -> Result<()> {
        self.spill_with(|_| true)
    }

    /// Spill if the buffer is still over its limit once this thread's turn
    /// to spill comes (writers that passed the limit together spill once).
    fn spill_if_over(&self) -> Result<()> {
        self.spill_with(|active| active.bytes > self.limit)
    }

    fn spill_with(&self, wanted: impl Fn(&Layer) -> bool) -> Result<()> {
        let _one = self.spill_lock.lock();
        // A spill that failed before left its layer in place: it goes first.
        let pending = self.buffers.lock().spilling.clone();
        if let Some(layer) = pending {
            self.inner.write_ops(&mut layer.ops(), true)?;
            self.buffers.lock().spilling = None;
        }
        let layer = {
            let mut b = self.buffers.lock();
            if b.active.is_empty() || !wanted(&b.active) {
                return Ok(());
            }
            let layer = Arc::new(std::mem::take(&mut b.active));
            b.spilling = Some(layer.clone());
            b.spills += 1;
            layer
        };
        self.inner.write_ops(&mut layer.ops(), true)?;
        self.buffers.lock().spilling = None;
        Ok(())
    }

    fn apply(&self, batch: Batch) -> bool {
        let mut b = self.buffers.lock();
        for op in batch.into_ops() {
            b.active.apply(op);
        }
        b.active.bytes > self.limit
    }
}

impl<K: Kv> Kv for BufferedKv<K> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.buffered(key) {
            Some(found) => Ok(found),
            None => self.inner.get(key),
        }
    }

    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        match self.scan_layers(start, end, limit, false)? {
            Some(out) => Ok(out),
            None => unreachable!("a scan that may read the device always answers"),
        }
    }

    fn get_in_memory(&self, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        match self.buffered(key) {
            Some(found) => Ok(Some(found)),
            None => self.inner.get_in_memory(key),
        }
    }

    fn scan_in_memory(&self, start: &[u8], end: &[u8], limit: usize) -> Result<Option<Entries>> {
        self.scan_layers(start, end, limit, true)
    }

    fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        let over = self.apply(batch);
        if sync {
            self.sync()
        } else if over {
            self.spill_if_over()
        } else {
            Ok(())
        }
    }

    fn try_write(&self, batch: &mut Batch) -> Result<bool> {
        let mut b = self.buffers.lock();
        if b.active.bytes > self.limit {
            return Ok(false);
        }
        for op in std::mem::take(batch).into_ops() {
            b.active.apply(op);
        }
        Ok(true)
    }

    fn sync(&self) -> Result<()> {
        // Every write to `inner` is a synced one: what is not buffered is
        // durable.
        self.spill()
    }

    fn cache_usage(&self) -> u64 {
        self.inner.cache_usage()
    }

    fn stats(&self) -> Vec<(String, String)> {
        let mut stats = self.inner.stats();
        stats.push((
            "cairn.kv-buffered-bytes".into(),
            self.buffered_bytes().to_string(),
        ));
        stats
    }
}

impl<K: Kv> Drop for BufferedKv<K> {
    fn drop(&mut self) {
        // Dropping a store makes what was written durable (see `Kv`).
        if let Err(e) = self.sync() {
            tracing::warn!(error = %e, "spilling the key-value write buffer at close failed");
        }
    }
}

/// What the buffers say about `[start, end)`: the newest buffered value or
/// delete of each key there, and the ranges deleted in it, as disjoint
/// sorted ranges.
type Overlay = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Sorted, disjoint `[start, end)` ranges.
type Ranges = Vec<(Vec<u8>, Vec<u8>)>;

fn overlay(b: &Buffers, start: &[u8], end: &[u8]) -> (Overlay, Ranges) {
    let bounds = (Bound::Included(start), Bound::Excluded(end));
    let mut points = Overlay::new();
    let mut ranges = Layer::default();
    // Oldest first: newer points replace older ones, a newer range
    // deletes older points.
    for layer in b.spilling.as_deref().into_iter().chain(Some(&b.active)) {
        for (s, e) in layer.ranges.iter() {
            if s.as_slice() < end && e.as_slice() > start {
                ranges.delete_range(s.clone(), e.clone());
                let doomed: Vec<Vec<u8>> = points
                    .range::<[u8], _>((
                        Bound::Included(s.as_slice()),
                        Bound::Excluded(e.as_slice()),
                    ))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    points.insert(k, None);
                }
            }
        }
        for (k, v) in layer.points.range::<[u8], _>(bounds) {
            points.insert(k.clone(), v.clone());
        }
    }
    (points, ranges.ranges.into_iter().collect())
}

/// Whether `key` lies in one of the sorted, disjoint `ranges`.
fn in_ranges(ranges: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> bool {
    let i = ranges.partition_point(|(s, _)| s.as_slice() <= key);
    i > 0 && key < ranges[i - 1].1.as_slice()
}

impl<K: Kv> BufferedKv<K> {
    /// [`Kv::scan`] over the buffer's layers and `inner`; with
    /// `memory_only`, `None` when `inner` cannot answer from memory.
    fn scan_layers(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        memory_only: bool,
    ) -> Result<Option<Entries>> {
        if start >= end || limit == 0 {
            return Ok(Some(Vec::new()));
        }
        for attempt in 0.. {
            // Holding off spills may wait for one to finish writing, which
            // a read from memory only must not do: it gives up instead.
            if memory_only && attempt >= SCAN_RETRIES {
                return Ok(None);
            }
            // Past a few rounds lost to spills, hold them off for one.
            let _no_spill = (attempt >= SCAN_RETRIES).then(|| self.spill_lock.lock());
            let (overlay, hidden, spills) = {
                let b = self.buffers.lock();
                let (overlay, hidden) = overlay(&b, start, end);
                (overlay, hidden, b.spills)
            };
            let out = self.merge(start, end, limit, &overlay, &hidden, memory_only)?;
            // A spill begun since may have put newer values into `inner`
            // than the overlay holds: read again.
            if self.buffers.lock().spills == spills {
                return Ok(out);
            }
        }
        unreachable!("a scan holding off spills is never retried")
    }

    /// What the buffer's layers say of `key`: `Some(None)` deleted, `None`
    /// not buffered (either never written or already in `inner`: a
    /// spilling layer is dropped only once `inner` has it).
    fn buffered(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let b = self.buffers.lock();
        let found = match b.active.lookup(key) {
            Found::Unknown => match &b.spilling {
                Some(layer) => layer.lookup(key),
                None => Found::Unknown,
            },
            found => found,
        };
        match found {
            Found::Value(v) => Some(Some(v.to_vec())),
            Found::Deleted => Some(None),
            Found::Unknown => None,
        }
    }

    /// Up to `limit` entries of `[start, end)`: the inner store's, read in
    /// chunks, under the overlay (`None`: with `memory_only`, the inner
    /// store could not answer from memory).
    fn merge(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        overlay: &Overlay,
        hidden: &[(Vec<u8>, Vec<u8>)],
        memory_only: bool,
    ) -> Result<Option<Entries>> {
        let chunk = limit.clamp(16, 4096);
        let mut out = Vec::new();
        let mut from = start.to_vec();
        loop {
            // The overlay's entries from here on are merged in this round.
            let lower = from.clone();
            // Skip a deleted range rather than read it.
            let i = hidden.partition_point(|(s, _)| s.as_slice() <= from.as_slice());
            if i > 0 && from.as_slice() < hidden[i - 1].1.as_slice() {
                from = hidden[i - 1].1.clone();
            }
            let part = if from.as_slice() >= end {
                Vec::new()
            } else if memory_only {
                match self.inner.scan_in_memory(&from, end, chunk)? {
                    Some(part) => part,
                    None => return Ok(None),
                }
            } else {
                self.inner.scan(&from, end, chunk)?
            };
            let done = part.len() < chunk;
            // Everything below `upto` is now known.
            let upto = match part.last() {
                Some((last, _)) if !done => successor(last),
                _ => end.to_vec(),
            };
            let mut inner = part
                .into_iter()
                .filter(|(k, _)| !overlay.contains_key(k) && !in_ranges(hidden, k))
                .peekable();
            let mut mine = overlay
                .range::<[u8], _>((
                    Bound::Included(lower.as_slice()),
                    Bound::Excluded(upto.as_slice()),
                ))
                .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
                .peekable();
            loop {
                if out.len() >= limit {
                    return Ok(Some(out));
                }
                let take_mine = match (mine.peek(), inner.peek()) {
                    (Some((mk, _)), Some((ik, _))) => *mk < ik,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                if take_mine {
                    if let Some((k, v)) = mine.next() {
                        out.push((k.clone(), v.clone()));
                    }
                } else if let Some(kv) = inner.next() {
                    out.push(kv);
                }
            }
            if done {
                return Ok(Some(out));
            }
            from = upto;
        }
    }
}
