//! The data paths of a transaction: writes, zeroing and truncation.
//!
//! A write is cut at shard boundaries, then each piece takes one of two
//! paths:
//!
//! - **Deferred** (in place, through the commit journal): when the piece, widened to
//!   whole 4 KiB blocks, is at most `deferred_max_bytes` (at most
//!   `deferred_busy_max_bytes` while other transactions queue for their
//!   commit) and every block is already allocated to raw (uncompressed)
//!   data of the object. The new
//!   blocks travel in the commit's journal record (never in the key-value
//!   store) and are written to their place on the device after the commit.
//!   One durable record write acknowledges it.
//! - **Direct** (copy-on-write): the piece, widened to whole allocation
//!   units, goes to newly allocated space (compressed if the mode says so
//!   and it pays), the extent map is pointed at it, and what it replaced
//!   is released after the commit. The old data is never overwritten, so a
//!   crash leaves either the old or the new mapping.
//!
//! Either path reads what it must preserve of partly written blocks or
//! units first (read-modify-write), through the transaction's own staged
//! blocks, the cache and the device.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cairn_device::{block_on, AlignedBuf};
use cairn_store::{ObjectId, StoreError};

use crate::builder::Builder;
use crate::compression::{maybe_compress, Policy};
use crate::onode::{Blob, Extent, Onode, Piece, Shard, BLOCK};
use crate::options::DEFER_BUSY_UNACKED;
use crate::read::{self, Sources};

/// Blocks of new blobs this large are not kept in the cache once written.
const UNCACHED_BLOB_BYTES: usize = 64 << 10;

fn floor(x: u64, unit: u64) -> u64 {
    x / unit * unit
}

fn ceil(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

impl Builder<'_> {
    fn onode_mut(&mut self, oid: &ObjectId) -> Result<&mut Onode, StoreError> {
        self.work
            .get_mut(oid)
            .and_then(|w| w.onode.as_mut())
            .ok_or_else(|| StoreError::NotFound(oid.clone()))
    }

    fn size_of(&self, oid: &ObjectId) -> u64 {
        self.work
            .get(oid)
            .and_then(|w| w.onode.as_ref())
            .map_or(0, |o| o.core.size)
    }

    fn set_size(&mut self, oid: &ObjectId, size: u64) -> Result<(), StoreError> {
        let o = self.onode_mut(oid)?;
        if o.core.size != size {
            o.core.size = size;
            if let Some(w) = self.work.get_mut(oid) {
                w.core_dirty = true;
            }
        }
        Ok(())
    }

    /// The shard `index` of `oid`, for changing (created if missing).
    fn shard_mut(&mut self, oid: &ObjectId, index: u32) -> Result<&mut Shard, StoreError> {
        let first = self
            .work
            .get_mut(oid)
            .is_some_and(|w| w.dirty_shards.insert(index));
        let o = self.onode_mut(oid)?;
        if first {
            // Counted again, as changed, when the transaction finishes.
            let bytes = o.shards.get(&index).map_or(0, |s| s.approx_bytes());
            o.shard_bytes -= bytes;
        }
        Ok(Arc::make_mut(o.shards.entry(index).or_default()))
    }

    /// Drop shard `index` of `oid` if it maps nothing any more.
    fn drop_if_empty(&mut self, oid: &ObjectId, index: u32) -> Result<(), StoreError> {
        let o = self.onode_mut(oid)?;
        if o.shards.get(&index).is_some_and(|s| s.is_empty()) {
            o.shards.remove(&index);
        }
        Ok(())
    }

    /// Object bytes `[offset, offset + len)` as they stand in this
    /// transaction; zeros past the object's size.
    fn read_current(
        &mut self,
        oid: &ObjectId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, StoreError> {
        let size = self.size_of(oid);
        let mut out = Vec::with_capacity(len as usize);
        let within = size.saturating_sub(offset).min(len);
        if within > 0 {
            self.inner.perf.rmw_reads.fetch_add(1, Ordering::Relaxed);
            let onode = self
                .work
                .get(oid)
                .and_then(|w| w.onode.as_ref())
                .ok_or_else(|| StoreError::NotFound(oid.clone()))?;
            let plan = read::plan(oid, onode, offset, within, self.inner.shard_size())?;
            let src = Sources {
                device: &self.inner.device,
                cache: &self.inner.cache,
                staged: Some(&self.staged),
                perf: &self.inner.perf,
                // Declined here: this thread is held in `block_on`.
                loop_reader: None,
            };
            block_on(read::fetch(oid, &plan, &src, &mut out))
                .inspect_err(|e| read::note_checksum_error(&self.inner.perf, e))?;
        }
        out.resize(len as usize, 0);
        Ok(out)
    }

    /// Whether shard `index` maps any byte of `[lo, hi)`.
    fn has_data(&self, oid: &ObjectId, index: u32, lo: u64, hi: u64) -> bool {
        let shard = self
            .work
            .get(oid)
            .and_then(|w| w.onode.as_ref())
            .and_then(|o| o.shards.get(&index));
        shard.is_some_and(|s| {
            s.lookup(lo as u32, hi as u32)
                .iter()
                .any(|p| matches!(p, Piece::Data { .. }))
        })
    }

    pub fn write(&mut self, oid: &ObjectId, offset: u64, data: &Bytes) -> Result<(), StoreError> {
        if self.object(oid, true)?.is_none() {
            return Err(StoreError::NotFound(oid.clone()));
        }
        if data.is_empty() {
            return Ok(());
        }
        let end = offset + data.len() as u64;
        self.for_each_shard(offset, end, |b, index, lo, hi, at| {
            let piece = data.slice((at - offset) as usize..(at - offset + hi - lo) as usize);
            b.write_shard(oid, index, lo, hi, &piece)
        })?;
        let size = self.size_of(oid).max(end);
        self.set_size(oid, size)
    }

    /// Call `f(self, shard index, lo, hi, logical start)` for each shard
    /// piece `[lo, hi)` (shard-relative) of `[start, end)`.
    fn for_each_shard(
        &mut self,
        start: u64,
        end: u64,
        mut f: impl FnMut(&mut Self, u32, u64, u64, u64) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let ss = self.inner.shard_size();
        let mut at = start;
        while at < end {
            let index = at / ss;
            let base = index * ss;
            let stop = end.min(base + ss);
            f(self, index as u32, at - base, stop - base, at)?;
            at = stop;
        }
        Ok(())
    }

    fn write_shard(
        &mut self,
        oid: &ObjectId,
        index: u32,
        lo: u64,
        hi: u64,
        data: &Bytes,
    ) -> Result<(), StoreError> {
        if self.try_deferred(oid, index, lo, hi, data)? {
            return Ok(());
        }
        self.write_direct(oid, index, lo, hi, data)
    }

    /// The in-place path; `Ok(false)` if the piece does not qualify.
    fn try_deferred(
        &mut self,
        oid: &ObjectId,
        index: u32,
        lo: u64,
        hi: u64,
        data: &Bytes,
    ) -> Result<bool, StoreError> {
        let opts = &self.inner.opts;
        let (a, b) = (floor(lo, BLOCK), ceil(hi, BLOCK));
        if b - a > opts.deferred_max_bytes
            || self.inner.deferred_backlog.load(Ordering::Relaxed) > opts.deferred_backlog_bytes
        {
            return Ok(false);
        }
        if b - a > opts.deferred_busy_max_bytes {
            // Transactions before this one not yet acknowledged.
            let acked = self.inner.acked.load(Ordering::Acquire);
            if self.seq.saturating_sub(acked + 1) >= DEFER_BUSY_UNACKED {
                return Ok(false);
            }
        }
        // Every block must be raw, live blob space: (device offset, blob, block).
        let mut targets: Vec<(u64, u32, usize)> = Vec::new();
        {
            let Some(shard) = self
                .work
                .get(oid)
                .and_then(|w| w.onode.as_ref())
                .and_then(|o| o.shards.get(&index))
            else {
                return Ok(false);
            };
            for piece in shard.lookup(a as u32, b as u32) {
                let Piece::Data {
                    blob,
                    blob_off,
                    len,
                } = piece
                else {
                    return Ok(false);
                };
                let Some(bl) = shard.blobs.get(&blob).filter(|bl| bl.compression.is_none()) else {
                    return Ok(false);
                };
                let Some(ranges) = bl.phys_ranges(blob_off, len) else {
                    return Ok(false);
                };
                let mut block = (blob_off / BLOCK) as usize;
                for (phys, rlen) in ranges {
                    for k in 0..rlen / BLOCK {
                        targets.push((phys + k * BLOCK, blob, block));
                        block += 1;
                    }
                }
            }
        }
        let ss = self.inner.shard_size();
        let base = u64::from(index) * ss;
        let buf = if (a, b) == (lo, hi) {
            // Whole blocks: a copy of the caller's bytes (not zero-filled
            // first), never a slice of the caller's buffer, which may be
            // far larger than this piece and would stay in memory, unseen
            // by the cache's and the backlog's accounting, until the
            // deferred write is applied. Block-aligned, so that the
            // deferred thread writes it in place from where it lies.
            AlignedBuf::from_slice(data).into_bytes()
        } else {
            let mut buf = self.read_current(oid, base + a, b - a)?;
            buf[(lo - a) as usize..(hi - a) as usize].copy_from_slice(data);
            Bytes::from(buf)
        };
        let csum = self.inner.opts.checksum;
        let shard = self.shard_mut(oid, index)?;
        let mut blocks = Vec::with_capacity(targets.len());
        for (k, &(phys, blob, block)) in targets.iter().enumerate() {
            let bytes = buf.slice(k * BLOCK as usize..(k + 1) * BLOCK as usize);
            if let Some(bl) = shard.blobs.get_mut(&blob) {
                if bl.csum != csum && bl.csum.width() == 0 && csum.width() > 0 {
                    // A blob written without checksums keeps none.
                } else {
                    let t = bl.csum;
                    t.update(&mut bl.csums, block, &bytes);
                }
            }
            blocks.push((phys, bytes));
        }
        // A block that is the whole of `buf` is a buffer of its own.
        let own = buf.len() == BLOCK as usize;
        for (phys, bytes) in blocks {
            self.stage(phys, bytes, own);
            self.deferred.insert(phys);
        }
        Ok(true)
    }

    /// The copy-on-write path.
    fn write_direct(
        &mut self,
        oid: &ObjectId,
        index: u32,
        lo: u64,
        hi: u64,
        data: &Bytes,
    ) -> Result<(), StoreError> {
        let au = self.inner.au();
        let base = u64::from(index) * self.inner.shard_size();
        let (a, b) = (floor(lo, au), ceil(hi, au));
        let mut buf = vec![0u8; (b - a) as usize];
        if a < lo {
            let head = self.read_current(oid, base + a, lo - a)?;
            buf[..head.len()].copy_from_slice(&head);
        }
        if hi < b {
            let tail = self.read_current(oid, base + hi, b - hi)?;
            buf[(hi - a) as usize..].copy_from_slice(&tail);
        }
        buf[(lo - a) as usize..(hi - a) as usize].copy_from_slice(data);

        let policy = self.inner.compression_for(oid.coll.pool);
        let compress = policy.mode.compresses() && b - a >= policy.min_blob_size;
        let chunk = if compress {
            ceil(policy.max_blob_size.max(au), au)
        } else {
            b - a
        };
        let buf = Bytes::from(buf);
        let mut new_blobs = Vec::new();
        let mut at = 0u64;
        while at < b - a {
            let len = chunk.min(b - a - at);
            let raw = buf.slice(at as usize..(at + len) as usize);
            new_blobs.push((a + at, self.new_blob(raw, compress.then_some(&policy))?));
            at += len;
        }
        let shard = self.shard_mut(oid, index)?;
        let touched = shard.punch(a as u32, b as u32);
        let released = shard.release(&touched, au);
        for (at, blob) in new_blobs {
            let len = blob.logical_len;
            let id = shard.add_blob(blob);
            shard.insert(
                at as u32,
                Extent {
                    len,
                    blob: id,
                    blob_off: 0,
                },
            );
        }
        self.released.extend(released);
        self.inner
            .perf
            .direct_writes
            .fetch_add(1, Ordering::Relaxed);
        self.inner
            .perf
            .direct_write_bytes
            .fetch_add(b - a, Ordering::Relaxed);
        Ok(())
    }

    /// Allocate, fill and stage a blob holding `raw`, compressed by
    /// `policy` if given and worth it.
    fn new_blob(&mut self, raw: Bytes, policy: Option<&Policy>) -> Result<Blob, StoreError> {
        let au = self.inner.au();
        let compressed = policy.and_then(|p| {
            maybe_compress(p.algorithm, p.required_ratio, au, &raw).map(|c| (p.algorithm, c))
        });
        let (stored, compression) = match compressed {
            Some((algorithm, c)) => {
                let clen = c.len() as u32;
                let perf = &self.inner.perf;
                perf.compressed_blobs.fetch_add(1, Ordering::Relaxed);
                perf.compressed_raw_bytes
                    .fetch_add(raw.len() as u64, Ordering::Relaxed);
                perf.compressed_stored_bytes
                    .fetch_add(u64::from(clen), Ordering::Relaxed);
                let mut padded = c;
                padded.resize(ceil(u64::from(clen), BLOCK) as usize, 0);
                (Bytes::from(padded), Some((algorithm, clen)))
            }
            None => (raw.clone(), None),
        };
        let alloc_len = ceil(stored.len() as u64, au);
        let pextents = self
            .st
            .alloc
            .allocate(alloc_len, alloc_len)
            .ok_or(StoreError::NoSpace)?;
        self.allocated.extend(pextents.iter().copied());
        let csum = self.inner.opts.checksum;
        let csums = csum.compute(&stored);
        let mut at = 0usize;
        for p in &pextents {
            let n = (p.len as usize).min(stored.len() - at);
            if n > 0 {
                let piece = stored.slice(at..at + n);
                // The caller's bytes themselves when aligned (no copy).
                self.writes
                    .push((p.offset, AlignedBuf::share(piece.clone())));
                for k in 0..n / BLOCK as usize {
                    let block = piece.slice(k * BLOCK as usize..(k + 1) * BLOCK as usize);
                    let phys = p.offset + (k as u64) * BLOCK;
                    // A slice of the caller's buffer, never its own.
                    self.stage(phys, block, false);
                    if stored.len() >= UNCACHED_BLOB_BYTES {
                        self.uncached.insert(phys);
                    }
                }
            }
            at += n;
        }
        Ok(Blob {
            pextents,
            logical_len: raw.len() as u32,
            compression,
            csum,
            csums,
        })
    }

    /// Unmap `[lo, hi)` of shard `index` (whole blocks), releasing space.
    fn punch(&mut self, oid: &ObjectId, index: u32, lo: u64, hi: u64) -> Result<(), StoreError> {
        if lo >= hi || !self.has_data(oid, index, lo, hi) {
            return Ok(());
        }
        let au = self.inner.au();
        let shard = self.shard_mut(oid, index)?;
        let touched = shard.punch(lo as u32, hi as u32);
        let released = shard.release(&touched, au);
        self.released.extend(released);
        self.drop_if_empty(oid, index)
    }

    pub fn zero(&mut self, oid: &ObjectId, offset: u64, len: u64) -> Result<(), StoreError> {
        if self.object(oid, true)?.is_none() {
            return Err(StoreError::NotFound(oid.clone()));
        }
        if len == 0 {
            return Ok(());
        }
        let end = offset + len;
        let clip = end.min(self.size_of(oid));
        if offset < clip {
            self.for_each_shard(offset, clip, |b, index, lo, hi, _| {
                let (a, z) = (ceil(lo, BLOCK), floor(hi, BLOCK));
                if a < z {
                    b.punch(oid, index, a, z)?;
                }
                // Partial blocks at the edges: write zeros where data is.
                let edges = if a < z {
                    vec![(lo, a), (z, hi)]
                } else {
                    vec![(lo, hi)]
                };
                for (x, y) in edges {
                    if x < y && b.has_data(oid, index, floor(x, BLOCK), ceil(y, BLOCK)) {
                        b.write_shard(oid, index, x, y, &Bytes::from(vec![0u8; (y - x) as usize]))?;
                    }
                }
                Ok(())
            })?;
        }
        let size = self.size_of(oid).max(end);
        self.set_size(oid, size)
    }

    pub fn truncate(&mut self, oid: &ObjectId, size: u64) -> Result<(), StoreError> {
        if self.object(oid, true)?.is_none() {
            return Err(StoreError::NotFound(oid.clone()));
        }
        let old = self.size_of(oid);
        if size < old {
            let ss = self.inner.shard_size();
            let cut = ceil(size, BLOCK);
            let first = (cut / ss) as u32;
            let indices: Vec<u32> = self
                .work
                .get(oid)
                .and_then(|w| w.onode.as_ref())
                .map(|o| o.shards.range(first..).map(|(&i, _)| i).collect())
                .unwrap_or_default();
            for index in indices {
                let base = u64::from(index) * ss;
                self.punch(oid, index, cut.saturating_sub(base), ss)?;
            }
            // The bytes after the new end in its last block must read as
            // zeros if the object grows again.
            if size % BLOCK != 0 {
                let index = (size / ss) as u32;
                let base = u64::from(index) * ss;
                let (lo, hi) = (size - base, cut - base);
                if self.has_data(oid, index, floor(lo, BLOCK), hi) {
                    self.write_shard(
                        oid,
                        index,
                        lo,
                        hi,
                        &Bytes::from(vec![0u8; (hi - lo) as usize]),
                    )?;
                }
            }
        }
        self.set_size(oid, size)
    }
}
