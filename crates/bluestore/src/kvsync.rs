//! The key-value sync thread: syncs the key-value store when the commit
//! path asks (the journal filling past `SYNC_AT`, see `commit`), so that
//! the journal's oldest records, whose batches the sync makes durable, can
//! be reused.
//!
//! Must never: count a batch durable that was written after the sync
//! began.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::state::Inner;

/// Sync the key-value store: every batch written so far becomes durable.
pub(crate) fn sync_kv(inner: &Inner) -> Result<(), String> {
    let written = inner.journal_written.load(Ordering::Acquire);
    let tail = inner.jdef_written.load(Ordering::Acquire);
    inner
        .kv
        .sync()
        .map_err(|e| format!("metadata sync failed: {e}"))?;
    inner.perf.kv_syncs.fetch_add(1, Ordering::Relaxed);
    synced(inner, written, tail);
    Ok(())
}

/// The batches of records up to `written`, and the tail at `tail`, are
/// durable in the key-value store.
pub(crate) fn synced(inner: &Inner, written: u64, tail: u64) {
    inner.journal_synced.fetch_max(written, Ordering::AcqRel);
    inner.jdef_synced.fetch_max(tail, Ordering::AcqRel);
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
