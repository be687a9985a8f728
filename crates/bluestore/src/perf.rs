//! Performance counters of one store, readable at any time.
//!
//! Plain relaxed atomics, bumped on the I/O path (one add per event) and
//! read by [`Perf::snapshot`] for `cairn osd perf` and `cairn bench store`.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

#[derive(Default)]
pub struct Perf {
    pub transactions: AtomicU64,
    pub kv_commits: AtomicU64,
    /// Sum of key-value commit latencies, in microseconds.
    pub kv_commit_us: AtomicU64,
    pub kv_commit_max_us: AtomicU64,
    pub journal_records: AtomicU64,
    /// Records written by their transaction's submitter (see `commit`).
    pub inline_commits: AtomicU64,
    /// Records laid out and written by an event loop (see `loop_commit`).
    pub loop_records: AtomicU64,
    /// Records whose key-value batch the event loop wrote itself (see
    /// `record::answer_on_loop`).
    pub loop_kv_writes: AtomicU64,
    pub journal_bytes: AtomicU64,
    /// Sum of journal record write latencies (durable), in microseconds.
    pub journal_write_us: AtomicU64,
    pub kv_syncs: AtomicU64,
    /// Times a full journal waited for deferred writes to be applied.
    pub journal_tail_waits: AtomicU64,
    pub direct_writes: AtomicU64,
    pub direct_write_bytes: AtomicU64,
    pub deferred_writes: AtomicU64,
    pub deferred_write_bytes: AtomicU64,
    pub deferred_applied: AtomicU64,
    pub rmw_reads: AtomicU64,
    pub compressed_blobs: AtomicU64,
    pub compressed_raw_bytes: AtomicU64,
    pub compressed_stored_bytes: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub device_reads: AtomicU64,
    /// Of `device_reads`, those the store's event loop submitted and reaped
    /// itself (`cairn_device::LoopReader`).
    pub loop_device_reads: AtomicU64,
    pub device_read_bytes: AtomicU64,
    pub device_flushes: AtomicU64,
    pub checksum_errors: AtomicU64,
}

/// A point-in-time copy of the counters, with cache statistics.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PerfSnapshot {
    pub transactions: u64,
    pub kv_commits: u64,
    pub kv_commit_mean_us: f64,
    pub kv_commit_max_us: u64,
    pub journal_records: u64,
    /// Of those, written by their transaction's submitter, on its thread.
    pub inline_commits: u64,
    /// Of those, laid out and written by an event loop (`loop_commit`).
    pub loop_records: u64,
    /// Of those, with their key-value batch written by the event loop
    /// too (no record thread woken).
    pub loop_kv_writes: u64,
    pub journal_bytes: u64,
    pub journal_write_mean_us: f64,
    pub kv_syncs: u64,
    /// Times a full journal waited for deferred writes to be applied (a
    /// larger journal, or a lower deferred threshold, avoids it).
    pub journal_tail_waits: u64,
    pub direct_writes: u64,
    pub direct_write_bytes: u64,
    pub deferred_writes: u64,
    pub deferred_write_bytes: u64,
    pub deferred_applied: u64,
    pub rmw_reads: u64,
    pub compressed_blobs: u64,
    pub compressed_raw_bytes: u64,
    pub compressed_stored_bytes: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub device_reads: u64,
    pub loop_device_reads: u64,
    pub device_read_bytes: u64,
    pub device_flushes: u64,
    pub checksum_errors: u64,
    pub onode_cache_hits: u64,
    pub onode_cache_misses: u64,
    /// Onodes (and absences) read ahead of an op, off the event loop.
    pub onode_cache_loaded_ahead: u64,
    pub onode_cache_entries: u64,
    pub onode_cache_bytes: u64,
    pub data_cache_hits: u64,
    pub data_cache_misses: u64,
    pub data_cache_bytes: u64,
    pub data_pinned_bytes: u64,
    pub kv_cache_bytes: u64,
    /// Free space as the durable free list has it.
    pub free_bytes: u64,
    /// Free space the allocator can hand out now (less space released by
    /// transactions whose deferred writes or reads are still running).
    pub allocatable_bytes: u64,
}

impl Perf {
    /// Record one key-value commit that took `us` microseconds.
    pub fn kv_commit(&self, us: u64) {
        self.kv_commits.fetch_add(1, Ordering::Relaxed);
        self.kv_commit_us.fetch_add(us, Ordering::Relaxed);
        self.kv_commit_max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The counters of this struct (cache fields are filled by the store).
    pub fn snapshot(&self) -> PerfSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let commits = get(&self.kv_commits);
        let records = get(&self.journal_records);
        PerfSnapshot {
            transactions: get(&self.transactions),
            kv_commits: commits,
            kv_commit_mean_us: if commits == 0 {
                0.0
            } else {
                get(&self.kv_commit_us) as f64 / commits as f64
            },
            kv_commit_max_us: get(&self.kv_commit_max_us),
            journal_records: records,
            inline_commits: get(&self.inline_commits),
            loop_records: get(&self.loop_records),
            loop_kv_writes: get(&self.loop_kv_writes),
            journal_write_mean_us: if records == 0 {
                0.0
            } else {
                get(&self.journal_write_us) as f64 / records as f64
            },
            journal_bytes: get(&self.journal_bytes),
            kv_syncs: get(&self.kv_syncs),
            journal_tail_waits: get(&self.journal_tail_waits),
            direct_writes: get(&self.direct_writes),
            direct_write_bytes: get(&self.direct_write_bytes),
            deferred_writes: get(&self.deferred_writes),
            deferred_write_bytes: get(&self.deferred_write_bytes),
            deferred_applied: get(&self.deferred_applied),
            rmw_reads: get(&self.rmw_reads),
            compressed_blobs: get(&self.compressed_blobs),
            compressed_raw_bytes: get(&self.compressed_raw_bytes),
            compressed_stored_bytes: get(&self.compressed_stored_bytes),
            reads: get(&self.reads),
            read_bytes: get(&self.read_bytes),
            device_reads: get(&self.device_reads),
            loop_device_reads: get(&self.loop_device_reads),
            device_read_bytes: get(&self.device_read_bytes),
            device_flushes: get(&self.device_flushes),
            checksum_errors: get(&self.checksum_errors),
            ..Default::default()
        }
    }
}
