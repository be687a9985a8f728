//! The consistency check: every byte of data space is either free or used
//! by exactly one blob, every onode and shard decodes and keeps its
//! invariants, and (deep mode) every stored block matches its checksum.
//!
//! Runs on a mounted store while it is quiet (no transactions in flight);
//! it reads the key-value store, not the caches, so it checks what a
//! remount would find (blocks with a deferred write still pending are
//! checked as that write, which a remount would replay, leaves them).
//! With repair, leaked space (neither free nor used) is returned to the
//! free list; nothing else is changed.

use std::collections::{BTreeMap, HashMap};

use cairn_device::block_on;
use cairn_kv::{scan_all, Batch};
use cairn_store::StoreError;
use serde::Serialize;

use crate::keys;
use crate::onode::{decode, Core, Shard, BLOCK};
use crate::rangeset::RangeSet;
use crate::state::{device_error, kv_error};
use crate::store::BlueStore;

/// What fsck found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FsckReport {
    pub objects: u64,
    pub blobs: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Bytes neither free nor used by any blob.
    pub leaked_bytes: u64,
    /// Problems that are not leaks: overlaps, decode failures, bad
    /// checksums, broken invariants.
    pub errors: Vec<String>,
    /// Leaked bytes returned to the free list by repair.
    pub repaired_bytes: u64,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.leaked_bytes == 0
    }
}

impl BlueStore {
    /// Check the store; `deep` also reads and verifies every stored block;
    /// `repair` returns leaked space to the free list.
    pub fn fsck(&self, deep: bool, repair: bool) -> Result<FsckReport, StoreError> {
        let inner = self.inner();
        inner.wait_kv_current()?;
        let kv = inner.kv.as_ref();
        let sb = &inner.sb;
        let au = sb.min_alloc_size;
        let mut report = FsckReport::default();
        let mut used = RangeSet::new();
        let (start, end) = keys::range_of(&[keys::ONODE]);
        let onodes = scan_all(kv, &start, &end).map_err(kv_error)?;
        let mut nids = BTreeMap::new();
        let pending = if deep {
            pending_deferred(inner, &mut report)?
        } else {
            HashMap::new()
        };
        for (key, value) in onodes {
            let Some(oid) = keys::decode_onode(&key) else {
                report.errors.push("undecodable onode key".into());
                continue;
            };
            report.objects += 1;
            let core: Core = match decode(&value) {
                Ok(c) => c,
                Err(e) => {
                    report.errors.push(format!("{oid}: onode: {e}"));
                    continue;
                }
            };
            if let Some(other) = nids.insert(core.nid, oid.clone()) {
                report
                    .errors
                    .push(format!("{oid} and {other} share nid {}", core.nid));
            }
            let (s, e) = keys::range_of(&keys::nid_prefix(keys::SHARD, core.nid));
            for (skey, svalue) in scan_all(kv, &s, &e).map_err(kv_error)? {
                let index = keys::decode_shard(&skey).unwrap_or(u32::MAX);
                let shard: Shard = match decode(&svalue) {
                    Ok(s) => s,
                    Err(e) => {
                        report.errors.push(format!("{oid}: shard {index}: {e}"));
                        continue;
                    }
                };
                if let Err(e) = shard.check(sb.shard_size as u32, au) {
                    report.errors.push(format!("{oid}: shard {index}: {e}"));
                }
                for (id, blob) in &shard.blobs {
                    report.blobs += 1;
                    for p in blob.live() {
                        let len = u64::from(p.len);
                        if p.offset < sb.data_start || p.offset + len > sb.device_size {
                            report
                                .errors
                                .push(format!("{oid}: blob {id} outside the device"));
                        } else if used.overlaps(p.offset, len) {
                            report
                                .errors
                                .push(format!("{oid}: blob {id} at {:#x} is used twice", p.offset));
                        } else {
                            used.insert(p.offset, len);
                        }
                    }
                    if deep {
                        check_blob(self, &oid.to_string(), *id, blob, &pending, &mut report)?;
                    }
                }
            }
        }
        let (fs, fe) = keys::range_of(&[keys::FREE]);
        let free_entries = scan_all(kv, &fs, &fe).map_err(kv_error)?;
        let free =
            crate::allocator::load_freelist(&free_entries, au, sb.data_start, sb.device_size)
                .map_err(|e| StoreError::Corrupt(format!("free list: {e}")))?;
        for (o, l) in free.iter() {
            if used.overlaps(o, l) {
                report
                    .errors
                    .push(format!("free extent {o:#x}+{l:#x} is in use"));
            }
        }
        report.used_bytes = used.total();
        report.free_bytes = free.total();
        let space = sb.device_size / au * au - sb.data_start;
        let leaks = leaked(&used, &free, sb.data_start, sb.device_size / au * au);
        report.leaked_bytes = leaks.iter().map(|(_, l)| l).sum();
        debug_assert!(report.errors.is_empty() || report.leaked_bytes <= space);
        if repair && report.errors.is_empty() && !leaks.is_empty() {
            let mut st = inner.state.lock();
            let mut batch = Batch::new();
            for &(o, l) in &leaks {
                let p = crate::onode::PExtent {
                    offset: o,
                    len: l as u32,
                };
                st.freelist.release(p, &mut batch);
                st.alloc.release(p);
            }
            kv.write(batch, true).map_err(kv_error)?;
            report.repaired_bytes = report.leaked_bytes;
        }
        Ok(report)
    }
}

/// Blocks with a deferred write not yet applied, by device offset: what a
/// remount would replay onto them (the journal's records from its tail on
/// and the records in the key-value store, in transaction order, so the
/// latest wins). Until applied, the device holds older content than the
/// checksums in the onodes describe. Read before any block: a write that
/// leaves this set was applied to the device first.
fn pending_deferred(
    inner: &crate::state::Inner,
    report: &mut FsckReport,
) -> Result<HashMap<u64, Vec<u8>>, StoreError> {
    let kv = inner.kv.as_ref();
    let mut records = crate::mount::journal_deferred(inner.device.as_ref(), kv, &inner.sb)?;
    let (start, end) = keys::range_of(&[keys::DEFERRED]);
    for (key, value) in scan_all(kv, &start, &end).map_err(kv_error)? {
        let seq = keys::decode_u64_key(&key);
        match (seq, crate::pipeline::decode_deferred(&value)) {
            (Some(seq), Ok(writes)) => records.push((seq, writes)),
            (_, Err(e)) => report.errors.push(format!("deferred record {seq:?}: {e}")),
            (None, Ok(_)) => report.errors.push("bad deferred record key".into()),
        }
    }
    records.sort_by_key(|(seq, _)| *seq);
    Ok(records.into_iter().flat_map(|(_, writes)| writes).collect())
}

/// Ranges of `[start, end)` in neither `used` nor `free`.
fn leaked(used: &RangeSet, free: &RangeSet, start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut taken: Vec<(u64, u64)> = used.iter().chain(free.iter()).collect();
    taken.sort_unstable();
    let mut out = Vec::new();
    let mut at = start;
    for (o, l) in taken {
        if o > at {
            out.push((at, o - at));
        }
        at = at.max(o + l);
    }
    if at < end {
        out.push((at, end - at));
    }
    out
}

fn check_blob(
    store: &BlueStore,
    oid: &str,
    id: u32,
    blob: &crate::onode::Blob,
    pending: &HashMap<u64, Vec<u8>>,
    report: &mut FsckReport,
) -> Result<(), StoreError> {
    let device = &store.inner().device;
    let stored = blob.stored_len();
    // Piece by piece, skipping released units: a raw blob that overwrites
    // or zeroing partly released still has its live units checked.
    let mut at = 0u64;
    for p in &blob.pextents {
        let len = u64::from(p.len).min(stored.saturating_sub(at));
        if p.is_live() && len > 0 {
            let mut data = block_on(device.read(p.offset, len)).map_err(device_error)?;
            for (k, block) in data.chunks_mut(BLOCK as usize).enumerate() {
                if let Some(newer) = pending.get(&(p.offset + k as u64 * BLOCK)) {
                    block.copy_from_slice(newer);
                }
            }
            let first = (at / BLOCK) as usize;
            if let Err(bad) = blob.csum.verify(&blob.csums, first, &data) {
                report.errors.push(format!(
                    "{oid}: blob {id} block {bad} (device offset {:#x}) fails its checksum",
                    p.offset + (bad - first) as u64 * BLOCK
                ));
            }
        }
        at += u64::from(p.len);
    }
    Ok(())
}
