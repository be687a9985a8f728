//! The commit thread and the key-value sync thread.
//!
//! The commit thread takes every queued transaction at once (group
//! commit), waits for their new data, flushes the device if there was any
//! (data must be durable before metadata that points at it can be), appends
//! all their key-value changes as one journal record written durably, and
//! only then completes their commits; the changes then go to the key-value
//! store unsynced (see `journal`). A group too large for a
//! journal record is written to the key-value store synced instead.
//!
//! The sync thread syncs the key-value store when the journal fills past
//! half, so that its oldest records can be dropped; if the journal fills
//! before that, the commit thread syncs it itself.
//!
//! Fault model: a failed device write, flush, journal write or key-value
//! write or sync fails the store; the commits involved and all later ones
//! return `Failed`. Nothing is acknowledged that is not durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use cairn_device::block_on;
use cairn_kv::Batch;

use crate::journal::Journal;
use crate::keys;
use crate::pipeline::{finish_group, Prepared};
use crate::state::Inner;

/// Most transactions committed as one group.
const MAX_GROUP: usize = 512;
/// Past this share of the journal in use, ask for a key-value sync.
const SYNC_AT: f64 = 0.5;

/// The commit thread.
pub(crate) fn commit_loop(inner: Arc<Inner>, mut journal: Journal) {
    while let Some(mut group) = next_group(&inner, journal.max_payload()) {
        match commit_group(&inner, &mut journal, &mut group) {
            Ok(()) => finish_group(&inner, group),
            Err(why) => {
                inner.fail(why);
                for p in group {
                    let _ = p.done.send(inner.check_failed());
                }
            }
        }
    }
    // Leave nothing for the journal to replay after a clean stop.
    if inner.failed.get().is_none() {
        if let Err(e) = inner.kv.sync() {
            inner.fail(format!("final metadata sync failed: {e}"));
        }
    }
    inner.pipeline.shutdown_sync();
}

/// The next group: every queued transaction, up to `MAX_GROUP` and about
/// `max_bytes` of metadata. `None` once shut down, with the deferred thread
/// stopped (it commits too) and nothing queued.
fn next_group(inner: &Inner, max_bytes: usize) -> Option<Vec<Prepared>> {
    let pipeline = &inner.pipeline;
    let mut q = pipeline.commits.lock();
    while q.items.is_empty() {
        if q.shutdown {
            if pipeline.deferred_stopped.load(Ordering::Acquire) {
                return None;
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
    Some(q.items.drain(..n).collect())
}

fn flush(inner: &Inner) -> Result<(), String> {
    block_on(inner.device.flush()).map_err(|e| format!("device flush failed: {e}"))?;
    inner.perf.device_flushes.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Make a group durable. See the module docs.
fn commit_group(
    inner: &Inner,
    journal: &mut Journal,
    group: &mut [Prepared],
) -> Result<(), String> {
    if let Some(why) = inner.failed.get() {
        return Err(why.clone());
    }
    let mut data = false;
    for p in group.iter_mut() {
        if let Some(write) = p.data.take() {
            block_on(write).map_err(|e| format!("data write failed: {e}"))?;
            data = true;
        }
    }
    if data {
        flush(inner)?;
    }
    let mut batch = Batch::new();
    for p in group.iter_mut() {
        batch.append(std::mem::take(&mut p.batch));
    }
    let start = Instant::now();
    let payload = batch.encode();
    if payload.len() > journal.max_payload() {
        // Synced, it makes every earlier batch durable too: the journal
        // holds nothing needed any more.
        batch.put(keys::JOURNAL_KEY.to_vec(), journal.head().encode());
        inner
            .kv
            .write(batch, true)
            .map_err(|e| format!("metadata commit failed: {e}"))?;
        journal.retire(u64::MAX);
        inner.perf.kv_commit(start.elapsed().as_micros() as u64);
        return Ok(());
    }
    let (fits, fill) = journal.room(payload.len());
    if !fits {
        sync_kv(inner)?;
        journal.retire(u64::MAX);
    }
    let seq = journal.next_seq();
    let after = journal.append(&payload)?;
    inner.perf.journal_records.fetch_add(1, Ordering::Relaxed);
    inner
        .perf
        .journal_bytes
        .fetch_add(payload.len() as u64, Ordering::Relaxed);
    batch.put(keys::JOURNAL_KEY.to_vec(), after.encode());
    inner
        .kv
        .write(batch, false)
        .map_err(|e| format!("metadata write failed: {e}"))?;
    inner.perf.kv_commit(start.elapsed().as_micros() as u64);
    inner.journal_written.store(seq, Ordering::Release);
    journal.retire(inner.journal_synced.load(Ordering::Acquire));
    if fill > SYNC_AT {
        let mut sync = inner.pipeline.sync.lock();
        if sync.items.is_empty() {
            sync.items.push_back(());
            inner.pipeline.sync_ready.notify_one();
        }
    }
    Ok(())
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
