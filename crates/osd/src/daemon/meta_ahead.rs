//! What an op needs read before it runs, read ahead of it without
//! blocking the event loop.
//!
//! The core runs an op to the end in one call on the OSD's event loop,
//! and the store reads what it lacks synchronously: an object's metadata
//! (BlueStore: its onode, from RocksDB) on first use, and the rest of a
//! block a write covers only part of (read-modify-write). Either read
//! would stall every PG of the OSD for as long as the device takes. So a
//! connection's reader task asks first: metadata missing from memory is
//! read on a blocking thread, and the blocks around a partial write are
//! read through the store's asynchronous read (which caches them), before
//! the op is handed to the core. Only that connection waits (its later
//! messages stay behind it, in order); every other one goes on.
//!
//! Owns the bound on metadata reads in flight and the counters; never
//! decides anything about the op itself. If a read fails, the op runs
//! anyway and reports the store's error itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cairn_store::{ObjectId, ObjectStore, Transaction, TxOp};
use cairn_wire::ObjOp;
use tokio::sync::Semaphore;

/// Metadata reads in flight at once, over every connection.
pub(crate) const META_LOADS_MAX: usize = 8;

/// Reads ahead of ops, shared by every connection of the OSD.
pub(crate) struct MetaAhead {
    permits: Semaphore,
    /// Messages that waited for a metadata read.
    loads: AtomicU64,
    /// Microseconds they waited, summed.
    wait_us: AtomicU64,
    /// Partial writes whose surrounding blocks were read first.
    rmw_reads: AtomicU64,
}

impl MetaAhead {
    pub fn new() -> Self {
        Self {
            permits: Semaphore::new(META_LOADS_MAX),
            loads: AtomicU64::new(0),
            wait_us: AtomicU64::new(0),
            rmw_reads: AtomicU64::new(0),
        }
    }

    /// Read (and so cache) what building the writes `(oid, offset, len)`
    /// would read from the device: the rest of each rewrite unit a write
    /// covers only partly, before and after it (`len` 0: a truncation,
    /// which rewrites the unit it cuts). Does not yield when every write
    /// covers whole units.
    pub async fn read_partial<'a>(
        &self,
        store: &Arc<dyn ObjectStore>,
        writes: impl IntoIterator<Item = (&'a ObjectId, u64, u64)>,
    ) {
        let unit = store.rewrite_unit();
        if unit <= 1 {
            return;
        }
        let mut reads: Vec<(ObjectId, u64, u64)> = Vec::new();
        for (oid, offset, len) in writes {
            let end = offset.saturating_add(len);
            if offset % unit != 0 {
                reads.push((oid.clone(), offset - offset % unit, offset % unit));
            }
            if len > 0 && end % unit != 0 {
                reads.push((oid.clone(), end, unit - end % unit));
            }
        }
        if reads.is_empty() {
            return;
        }
        self.rmw_reads.fetch_add(1, Ordering::Relaxed);
        for (oid, at, len) in reads {
            // A missing object or a read past its end needs nothing read.
            if let Err(e) = store.read(&oid, at, len).await {
                tracing::debug!("reading {oid} at {at} ahead of a partial write: {e}");
            }
        }
    }

    /// Return once the metadata of every object in `oids` is in memory
    /// (or failed to load). Does not yield when it already is.
    pub async fn load<'a>(
        &self,
        store: &Arc<dyn ObjectStore>,
        oids: impl IntoIterator<Item = &'a ObjectId>,
    ) {
        let mut missing: Vec<ObjectId> = oids
            .into_iter()
            .filter(|oid| !store.meta_ready(oid))
            .cloned()
            .collect();
        if missing.is_empty() {
            return;
        }
        missing.dedup();
        let start = Instant::now();
        // The semaphore is never closed.
        let Ok(_permit) = self.permits.acquire().await else {
            return;
        };
        let store = store.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            for oid in &missing {
                if let Err(e) = store.load_meta(oid) {
                    tracing::debug!("reading the metadata of {oid} ahead: {e}");
                }
            }
        })
        .await;
        if let Err(e) = loaded {
            tracing::warn!("a metadata read ahead of an op did not finish: {e}");
        }
        self.loads.fetch_add(1, Ordering::Relaxed);
        self.wait_us
            .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// As `(name, value)` pairs for `cairn osd perf`.
    pub fn counters(&self) -> [(&'static str, u64); 3] {
        [
            ("meta_loads_ahead", self.loads.load(Ordering::Relaxed)),
            (
                "meta_load_ahead_wait_us",
                self.wait_us.load(Ordering::Relaxed),
            ),
            ("rmw_reads_ahead", self.rmw_reads.load(Ordering::Relaxed)),
        ]
    }
}

/// The writes of a client op on `oid` whose edges may need reading:
/// `(oid, offset, len)`, a truncation as `len` 0.
pub(crate) fn client_writes<'a>(
    oid: &'a ObjectId,
    ops: &'a [ObjOp],
) -> impl Iterator<Item = (&'a ObjectId, u64, u64)> + 'a {
    ops.iter().filter_map(move |op| {
        let (offset, len) = match op {
            ObjOp::Write { offset, data } => (*offset, data.len() as u64),
            ObjOp::Zero { offset, len } => (*offset, *len),
            ObjOp::Truncate { size } => (*size, 0),
            _ => return None,
        };
        Some((oid, offset, len))
    })
}

/// The same for a replicated transaction.
pub(crate) fn txn_writes(txn: &Transaction) -> impl Iterator<Item = (&ObjectId, u64, u64)> + '_ {
    txn.ops.iter().filter_map(|op| match op {
        TxOp::Write { oid, offset, data } => Some((oid, *offset, data.len() as u64)),
        TxOp::Zero { oid, offset, len } => Some((oid, *offset, *len)),
        TxOp::Truncate { oid, size } => Some((oid, *size, 0)),
        _ => None,
    })
}
