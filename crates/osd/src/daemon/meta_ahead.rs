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

use cairn_store::{ObjectId, ObjectStore};
use tokio::sync::Semaphore;

/// Metadata reads in flight at once, over every connection.
pub(crate) const META_LOADS_MAX: usize = 8;

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

    /// Read (and so cache) the parts of the store's rewrite units that the
    /// writes `[offset, offset + len)` of `oid` cover only partly, so that
    /// building their transaction finds them in memory. Does not yield
    /// when every write covers whole units.
    pub async fn read_partial(
        &self,
        store: &Arc<dyn ObjectStore>,
        oid: &ObjectId,
        writes: impl IntoIterator<Item = (u64, u64)>,
    ) {
        let unit = store.rewrite_unit();
        if unit <= 1 {
            return;
        }
        let mut units: Vec<u64> = Vec::new();
        for (offset, len) in writes {
            let end = offset.saturating_add(len);
            if len == 0 {
                continue;
            }
            if offset % unit != 0 {
                units.push(offset - offset % unit);
            }
            if end % unit != 0 {
                units.push(end - end % unit);
            }
        }
        if units.is_empty() {
            return;
        }
        units.sort_unstable();
        units.dedup();
        self.rmw_reads.fetch_add(1, Ordering::Relaxed);
        for at in units {
            // A missing object or a read past its end needs nothing read.
            if let Err(e) = store.read(oid, at, unit).await {
                tracing::debug!("reading {oid} at {at} ahead of a partial write: {e}");
            }
        }
    }

    /// Return once the metadata of every object in `oids` is in memory
    /// (or failed to load). Does not yield when it already is.
    pub async fn load(
        &self,
        store: &Arc<dyn ObjectStore>,
        oids: impl IntoIterator<Item = ObjectId>,
    ) {
        let mut missing: Vec<ObjectId> = oids
            .into_iter()
            .filter(|oid| !store.meta_ready(oid))
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
