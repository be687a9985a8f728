//! Reading object bytes: plan under the state lock, fetch without it.
//!
//! [`plan`] turns a logical range of an onode into segments — zeros for
//! holes, raw device blocks with their expected checksums, or a compressed
//! blob to inflate — copying what it needs, so that [`fetch`] runs without
//! the onode. [`fetch`] takes each block from the transaction's staged
//! writes (read-modify-write inside a transaction), then the buffer cache,
//! then the device, verifying every block read from the device against its
//! checksum; a mismatch is an error naming object and offset, never data.
//!
//! Space a plan refers to is not reused while the fetch runs: the store
//! holds released space back until reads that started before the release
//! are done (see `pipeline`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cairn_device::{AlignedBuf, BlockDevice, BoxFuture, DeviceError, LoopReader};
use cairn_store::{ObjectId, StoreError};

use crate::cache::BufferCache;
use crate::checksum::{ChecksumType, MAX_WIDTH};
use crate::onode::{Blob, Onode, Piece, BLOCK};
use crate::perf::Perf;

/// Device reads of at least this many blocks are not kept in the cache.
const UNCACHED_RUN_BLOCKS: usize = 16;

/// One device block of a raw blob and what it must checksum to.
#[derive(Clone, Debug)]
pub(crate) struct RawBlock {
    pub phys: u64,
    /// Logical offset of the block's first byte (for error messages).
    pub logical: u64,
    pub csum: ChecksumType,
    /// The block's checksum: the first `csum.width()` bytes.
    pub expect: [u8; MAX_WIDTH],
}

#[derive(Clone, Debug)]
pub(crate) enum Segment {
    Zeros(u64),
    /// Bytes `skip..skip + len` of the concatenated blocks.
    Raw {
        blocks: Vec<RawBlock>,
        skip: u64,
        len: u64,
    },
    /// Raw bytes `skip..skip + len` of a compressed blob starting at
    /// logical offset `logical`.
    Compressed {
        blob: Blob,
        logical: u64,
        skip: u64,
        len: u64,
    },
}

/// A planned read of `[offset, offset + len)`.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub segments: Vec<Segment>,
}

/// Plan a read of `[offset, offset + len)` of `onode`, which must lie
/// within the object's size. Released space referenced by an extent is a
/// corrupt onode.
pub(crate) fn plan(
    oid: &ObjectId,
    onode: &Onode,
    offset: u64,
    len: u64,
    shard_size: u64,
) -> Result<Plan, StoreError> {
    let mut segments = Vec::new();
    let end = offset + len;
    let mut at = offset;
    while at < end {
        let index = at / shard_size;
        let base = index * shard_size;
        let stop = end.min(base + shard_size);
        let (lo, hi) = ((at - base) as u32, (stop - base) as u32);
        let Some(shard) = onode.shards.get(&(index as u32)) else {
            segments.push(Segment::Zeros(stop - at));
            at = stop;
            continue;
        };
        let mut logical = at;
        for piece in shard.lookup(lo, hi) {
            match piece {
                Piece::Hole { len } => segments.push(Segment::Zeros(len)),
                Piece::Data {
                    blob,
                    blob_off,
                    len,
                } => {
                    let b = shard.blobs.get(&blob).ok_or_else(|| {
                        StoreError::Corrupt(format!("{oid}: extent refers to missing blob {blob}"))
                    })?;
                    segments.push(segment(oid, b, blob_off, len, logical)?);
                }
            }
            logical += match piece {
                Piece::Hole { len } | Piece::Data { len, .. } => len,
            };
        }
        at = stop;
    }
    Ok(Plan { segments })
}

fn segment(
    oid: &ObjectId,
    b: &Blob,
    blob_off: u64,
    len: u64,
    logical: u64,
) -> Result<Segment, StoreError> {
    if b.compression.is_some() {
        return Ok(Segment::Compressed {
            blob: b.clone(),
            logical: logical - blob_off,
            skip: blob_off,
            len,
        });
    }
    let first = blob_off / BLOCK;
    let last = (blob_off + len).div_ceil(BLOCK);
    let ranges = b
        .phys_ranges(first * BLOCK, (last - first) * BLOCK)
        .ok_or_else(|| StoreError::Corrupt(format!("{oid}: extent refers to released space")))?;
    let w = b.csum.width();
    let mut blocks = Vec::with_capacity((last - first) as usize);
    let mut index = first as usize;
    let block_logical = logical - (blob_off - first * BLOCK);
    for (phys, rlen) in ranges {
        for k in 0..rlen / BLOCK {
            let i = index - first as usize;
            let mut expect = [0u8; MAX_WIDTH];
            if let Some(stored) = b.csums.get(index * w..(index + 1) * w) {
                expect[..w].copy_from_slice(stored);
            }
            blocks.push(RawBlock {
                phys: phys + k * BLOCK,
                logical: block_logical + i as u64 * BLOCK,
                csum: b.csum,
                expect,
            });
            index += 1;
        }
    }
    Ok(Segment::Raw {
        blocks,
        skip: blob_off - first * BLOCK,
        len,
    })
}

/// Where fetched blocks come from, besides the device.
pub(crate) struct Sources<'a> {
    pub device: &'a Arc<dyn BlockDevice>,
    pub cache: &'a BufferCache,
    /// Blocks written earlier in the transaction being built.
    pub staged: Option<&'a foldhash::HashMap<u64, Bytes>>,
    pub perf: &'a Perf,
    /// The store's event loop reads through this ring when it is the
    /// caller (see `cairn_device::LoopReader`); everyone else, and the
    /// loop when the ring declines, through the device's engine.
    pub loop_reader: Option<&'a LoopReader>,
}

impl Sources<'_> {
    fn device_read(&self, offset: u64, len: u64) -> BoxFuture<Result<AlignedBuf, DeviceError>> {
        if let Some(read) = self.loop_reader.and_then(|r| r.read(offset, len)) {
            self.perf.loop_device_reads.fetch_add(1, Ordering::Relaxed);
            return read;
        }
        self.device.read(offset, len)
    }

    fn cached(&self, phys: u64) -> Option<Bytes> {
        if let Some(b) = self.staged.and_then(|s| s.get(&phys)) {
            return Some(b.clone());
        }
        self.cache.get(phys)
    }

    /// One block, from memory or the device; `check`ed if read from the
    /// device, and then cached.
    async fn block(
        &self,
        b: &RawBlock,
        check: impl Fn(&[u8]) -> Result<(), StoreError>,
    ) -> Result<Bytes, StoreError> {
        let epoch = self.cache.epoch(b.phys);
        if let Some(got) = self.cached(b.phys) {
            return Ok(got);
        }
        let buf = self
            .device_read(b.phys, BLOCK)
            .await
            .map_err(crate::state::device_error)?;
        self.perf.device_reads.fetch_add(1, Ordering::Relaxed);
        self.perf
            .device_read_bytes
            .fetch_add(BLOCK, Ordering::Relaxed);
        let block = Bytes::from_owner(buf);
        check(&block)?;
        self.cache.insert_clean(b.phys, block.clone(), true, epoch);
        Ok(block)
    }

    /// Blocks `phys` (each 4 KiB) in order, from memory or the device; each
    /// block read from the device is checked against `expect` of the same
    /// index by `check`.
    async fn blocks(
        &self,
        wanted: &[u64],
        check: impl Fn(usize, &[u8]) -> Result<(), StoreError>,
    ) -> Result<Vec<Bytes>, StoreError> {
        let epochs: Vec<u64> = wanted.iter().map(|&p| self.cache.epoch(p)).collect();
        let mut out: Vec<Option<Bytes>> = wanted.iter().map(|&p| self.cached(p)).collect();
        // Contiguous runs of missing blocks: one device read each, all in flight.
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, got) in out.iter().enumerate() {
            if got.is_some() {
                continue;
            }
            match runs.last_mut() {
                Some((start, n)) if *start + *n == i && wanted[i - 1] + BLOCK == wanted[i] => {
                    *n += 1
                }
                _ => runs.push((i, 1)),
            }
        }
        let reads: Vec<_> = runs
            .iter()
            .map(|&(start, n)| self.device_read(wanted[start], n as u64 * BLOCK))
            .collect();
        for (&(start, n), read) in runs.iter().zip(reads) {
            let buf = read.await.map_err(crate::state::device_error)?;
            self.perf.device_reads.fetch_add(1, Ordering::Relaxed);
            self.perf
                .device_read_bytes
                .fetch_add(n as u64 * BLOCK, Ordering::Relaxed);
            // The buffer becomes the blocks' bytes without a copy. Large
            // runs (sequential reads) are not cached: they would only push
            // out blocks more likely to be read again.
            let whole = Bytes::from_owner(buf);
            let cache = n < UNCACHED_RUN_BLOCKS;
            for k in 0..n {
                let block = whole.slice(k * BLOCK as usize..(k + 1) * BLOCK as usize);
                check(start + k, &block)?;
                if cache {
                    self.cache.insert_clean(
                        wanted[start + k],
                        block.clone(),
                        n == 1,
                        epochs[start + k],
                    );
                }
                out[start + k] = Some(block);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}

fn mismatch(oid: &ObjectId, logical: u64, phys: u64) -> StoreError {
    StoreError::Checksum {
        oid: oid.clone(),
        offset: logical,
        device_offset: phys,
    }
}

/// Count and log `e` if it is a checksum error: done by the caller of
/// [`fetch`] for the error it returns (a read may first retry a mismatch
/// that a concurrent in-place overwrite caused, which is no corruption).
pub(crate) fn note_checksum_error(perf: &Perf, e: &StoreError) {
    if let StoreError::Checksum {
        oid,
        offset,
        device_offset,
    } = e
    {
        perf.checksum_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(%oid, logical = offset, phys = device_offset, "checksum mismatch");
    }
}

impl RawBlock {
    fn check(&self, oid: &ObjectId, data: &[u8]) -> Result<(), StoreError> {
        self.csum
            .verify(&self.expect[..self.csum.width()], 0, data)
            .map_err(|_| mismatch(oid, self.logical, self.phys))
    }
}

/// Bytes `skip..skip + len` of one block of `oid`: a slice of the block,
/// not a copy.
async fn within_block(
    oid: &ObjectId,
    b: &RawBlock,
    skip: u64,
    len: u64,
    src: &Sources<'_>,
) -> Result<Bytes, StoreError> {
    let block = src.block(b, |data| b.check(oid, data)).await?;
    let (from, n) = (skip as usize, len as usize);
    if from + n > block.len() {
        return Err(StoreError::Corrupt(format!(
            "{oid}: read of {n} bytes at {from} in one block"
        )));
    }
    Ok(block.slice(from..from + n))
}

/// Carry out `plan` for object `oid`, whose bytes number `len`. A read
/// within one block is that block's cached bytes, not a copy.
pub(crate) async fn fetch_bytes(
    oid: &ObjectId,
    plan: &Plan,
    src: &Sources<'_>,
    len: u64,
) -> Result<Bytes, StoreError> {
    if let [Segment::Raw { blocks, skip, len }] = plan.segments.as_slice() {
        if let [b] = blocks.as_slice() {
            return within_block(oid, b, *skip, *len, src).await;
        }
    }
    let mut out = Vec::with_capacity(len as usize);
    fetch(oid, plan, src, &mut out).await?;
    Ok(Bytes::from(out))
}

/// Carry out `plan` for object `oid`, appending the bytes to `out`.
pub(crate) async fn fetch(
    oid: &ObjectId,
    plan: &Plan,
    src: &Sources<'_>,
    out: &mut Vec<u8>,
) -> Result<(), StoreError> {
    for seg in &plan.segments {
        match seg {
            Segment::Zeros(len) => out.resize(out.len() + *len as usize, 0),
            Segment::Raw { blocks, skip, len } if blocks.len() == 1 => {
                // One block (a small random read): no run bookkeeping.
                out.extend_from_slice(&within_block(oid, &blocks[0], *skip, *len, src).await?);
            }
            Segment::Raw { blocks, skip, len } => {
                let wanted: Vec<u64> = blocks.iter().map(|b| b.phys).collect();
                let got = src
                    .blocks(&wanted, |i, data| blocks[i].check(oid, data))
                    .await?;
                let mut left = (*skip as usize, *len as usize);
                for block in got {
                    if left.1 == 0 {
                        break;
                    }
                    let from = left.0.min(block.len());
                    let n = (block.len() - from).min(left.1);
                    out.extend_from_slice(&block[from..from + n]);
                    left = (left.0 - from, left.1 - n);
                }
            }
            Segment::Compressed {
                blob,
                logical,
                skip,
                len,
            } => {
                let raw = inflate(oid, blob, *logical, src).await?;
                out.extend_from_slice(&raw[*skip as usize..(*skip + *len) as usize]);
            }
        }
    }
    Ok(())
}

/// The raw bytes of a compressed blob.
async fn inflate(
    oid: &ObjectId,
    blob: &Blob,
    logical: u64,
    src: &Sources<'_>,
) -> Result<Vec<u8>, StoreError> {
    let Some((algorithm, clen)) = blob.compression else {
        return Err(StoreError::Corrupt(format!(
            "{oid}: blob is not compressed"
        )));
    };
    let ranges = blob
        .phys_ranges(0, blob.stored_len())
        .ok_or_else(|| StoreError::Corrupt(format!("{oid}: compressed blob lost space")))?;
    let wanted: Vec<u64> = ranges
        .iter()
        .flat_map(|&(p, l)| (0..l / BLOCK).map(move |k| p + k * BLOCK))
        .collect();
    let got = src
        .blocks(&wanted, |i, data| {
            blob.csum
                .verify(&blob.csums, i, data)
                .map_err(|_| mismatch(oid, logical, wanted[i]))
        })
        .await?;
    let mut stored = Vec::with_capacity(got.len() * BLOCK as usize);
    for b in got {
        stored.extend_from_slice(&b);
    }
    algorithm
        .decompress(&stored[..clen as usize], blob.logical_len as usize)
        .map_err(|e| StoreError::Corrupt(format!("{oid} at offset {logical}: {e}")))
}
