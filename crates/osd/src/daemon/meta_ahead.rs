//! Object metadata read ahead of the ops that need it, off the event loop.
//!
//! The core runs an op to the end in one call on the OSD's event loop,
//! and the store reads an object's metadata (BlueStore: its onode, from
//! RocksDB) on first use. When that metadata is not in memory, the read
//! would stall every PG of the OSD for as long as the device takes. So a
//! connection's reader task asks the store first, and if the object's
//! metadata is missing, has it read on a blocking thread and waits for it
//! before handing the op to the core. Only that connection waits (its
//! later messages stay behind it, in order); every other one goes on.
//!
//! Owns the bound on such reads in flight and their counters; never
//! decides anything about the op itself. If the read fails, the op runs
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
}

impl MetaAhead {
    pub fn new() -> Self {
        Self {
            permits: Semaphore::new(META_LOADS_MAX),
            loads: AtomicU64::new(0),
            wait_us: AtomicU64::new(0),
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
    pub fn counters(&self) -> [(&'static str, u64); 2] {
        [
            ("meta_loads_ahead", self.loads.load(Ordering::Relaxed)),
            (
                "meta_load_ahead_wait_us",
                self.wait_us.load(Ordering::Relaxed),
            ),
        ]
    }
}
