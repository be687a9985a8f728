//! What a mounted store shares between its handle, its transaction
//! builder, its reads and its background threads.
//!
//! [`State`] is everything transactions change in memory, under one mutex:
//! building a transaction is serial (that fixes the submission order), and
//! short — device I/O is submitted, never waited for, except the rare
//! read-modify-write of a block not in cache. Reads take the lock only to
//! plan. [`Inner`] holds the rest: device, key-value store, caches,
//! counters, and the pipeline's queues.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cairn_device::BlockDevice;
use cairn_kv::Kv;
use cairn_store::{Collection, ObjectId, StoreError};
use parking_lot::Mutex;

use crate::compression::Policy;

use crate::allocator::{Allocator, Freelist};
use crate::cache::{BufferCache, Lookup, OnodeCache};
use crate::commit::CommitState;
use crate::keys;
use crate::label::Superblock;
use crate::onode::{decode, Core, Onode, Shard};
use crate::options::MountOptions;
use crate::perf::Perf;
use crate::pipeline::Pipeline;
use crate::record;

/// Object ids are reserved in the key-value store this many at a time.
pub const NID_BATCH: u64 = 1024;

pub(crate) struct State {
    pub onodes: OnodeCache,
    pub alloc: Allocator,
    pub freelist: Freelist,
    pub next_nid: u64,
    /// Object ids below this are reserved durably (`Snid`).
    pub nid_limit: u64,
    /// Sequence number of the next transaction.
    pub next_seq: u64,
    /// Collections that may exist (checked against the store when listed).
    pub colls: BTreeSet<Collection>,
    pub objects: u64,
    /// Bumped by every transaction that releases space (see `ReadTracker`).
    pub read_gen: u64,
}

/// Reads in flight, by the `read_gen` they started under. Space released
/// under generation `g` may be reused only when no read older than `g` runs.
#[derive(Default)]
pub(crate) struct ReadTracker {
    active: Mutex<BTreeMap<u64, usize>>,
}

impl ReadTracker {
    pub fn enter(&self, gen: u64) {
        *self.active.lock().entry(gen).or_default() += 1;
    }

    pub fn leave(&self, gen: u64) {
        let mut active = self.active.lock();
        if let Some(n) = active.get_mut(&gen) {
            *n -= 1;
            if *n == 0 {
                active.remove(&gen);
            }
        }
    }

    /// Whether every read that started before generation `gen` is done.
    pub fn all_done_before(&self, gen: u64) -> bool {
        self.active
            .lock()
            .keys()
            .next()
            .is_none_or(|&oldest| oldest >= gen)
    }
}

pub(crate) struct Inner {
    pub device: Arc<dyn BlockDevice>,
    pub kv: Arc<dyn Kv>,
    pub sb: Superblock,
    pub opts: MountOptions,
    pub cache: BufferCache,
    pub perf: Perf,
    pub state: Mutex<State>,
    pub pipeline: Pipeline,
    /// The journal's head, held by whoever commits (see `commit`).
    pub commit: Mutex<CommitState>,
    /// Records between the committer and the record threads.
    pub records: record::Shared,
    /// Set once the store is attached to an event loop (`loop_commit`).
    pub loop_commits: OnceLock<Arc<crate::loop_commit::LoopCommits>>,
    /// Set once with `loop_commits`: the loop's own reads (see `read`).
    pub loop_reader: OnceLock<cairn_device::LoopReader>,
    pub reads: ReadTracker,
    /// Set once when a durable write fails: nothing more is accepted.
    pub failed: OnceLock<String>,
    /// Sequence number of the last committed transaction: its batch is in
    /// the key-value store.
    pub committed: AtomicU64,
    /// Sequence number of the last acknowledged transaction: durable in
    /// the journal, its batch maybe not in the key-value store yet (see
    /// `record`). At least `committed`.
    pub acked: AtomicU64,
    /// `committed` moved (see [`Inner::wait_kv_current`]).
    pub committed_moved: parking_lot::Condvar,
    pub committed_lock: Mutex<()>,
    /// Bytes of deferred writes not yet on the device.
    pub deferred_backlog: AtomicU64,
    /// The last journal record whose batch went to the key-value store...
    pub journal_written: AtomicU64,
    /// ...and the last one a key-value sync made durable there.
    pub journal_synced: AtomicU64,
    /// The journal tail (as the sequence number of its record) the last
    /// batch written to the key-value store recorded...
    pub jdef_written: AtomicU64,
    /// ...and the one a key-value sync made durable there. The journal
    /// reuses no record from it on.
    pub jdef_synced: AtomicU64,
    /// Compression of pools whose settings differ from the store's own.
    pub pool_compression:
        parking_lot::RwLock<std::collections::HashMap<cairn_types::PoolId, Policy>>,
}

impl Inner {
    /// The store's own compression policy.
    pub fn compression(&self) -> Policy {
        let o = &self.opts;
        Policy {
            mode: o.compression_mode,
            algorithm: o.compression_algorithm,
            required_ratio: o.compression_required_ratio,
            min_blob_size: o.compression_min_blob_size,
            max_blob_size: o.compression_max_blob_size,
        }
    }

    /// The compression policy for an object of `pool`.
    pub fn compression_for(&self, pool: cairn_types::PoolId) -> Policy {
        let pool = self.pool_compression.read().get(&pool).copied();
        pool.unwrap_or_else(|| self.compression())
    }

    pub fn au(&self) -> u64 {
        self.sb.min_alloc_size
    }

    pub fn shard_size(&self) -> u64 {
        self.sb.shard_size
    }

    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// Wait until every acknowledged transaction's batch is in the
    /// key-value store, so that what is read from there (omap, PG logs,
    /// listings) includes every write acknowledged so far. Commits are
    /// acknowledged once their journal record is durable, before their
    /// batch is written; the commit thread keeps at most a few records
    /// acknowledged ahead of their batches (`commit::UNSETTLED`).
    pub fn wait_kv_current(&self) -> Result<(), StoreError> {
        let target = self.acked.load(Ordering::Acquire);
        if self.committed() >= target {
            return Ok(());
        }
        let mut guard = self.committed_lock.lock();
        while self.committed() < target {
            self.check_failed()?;
            // An event loop leaves the batches of the records it
            // acknowledged to write after its waiters have run: if this
            // is that loop's thread, a record thread must write them.
            crate::record::hand_unanswered(&self.records);
            // Bounded: `finish_group` notifies without the lock, so a
            // wakeup may be missed.
            self.committed_moved
                .wait_for(&mut guard, std::time::Duration::from_millis(1));
        }
        Ok(())
    }

    /// Fail the store: every later submit gets `Failed`.
    pub fn fail(&self, why: String) {
        if self.failed.set(why.clone()).is_ok() {
            tracing::error!("object store failed: {why}");
            // An event loop's task hands what is queued to the commit
            // thread, which answers it with the failure.
            if let Some(lc) = self.loop_commits.get() {
                lc.wake.notify_one();
            }
        }
    }

    /// Queue a built transaction (in sequence order: under the state
    /// lock) for whoever commits: an attached event loop's task, or the
    /// commit thread.
    pub fn queue_commit(&self, p: crate::pipeline::Prepared) {
        // Read under the queue's lock, which detaching takes to clear it:
        // either detaching finds this transaction queued, or this finds
        // the loop detached.
        let lc = self.loop_commits.get();
        let on_loop = self.pipeline.queue_then(p, || {
            lc.is_some_and(|lc| lc.attached.load(Ordering::Acquire))
        });
        match (on_loop, lc) {
            // The loop's task takes it once this turn of the loop ends.
            (Some(true), Some(lc)) => lc.wake.notify_one(),
            _ => {
                self.pipeline.commit_ready.notify_one();
            }
        }
    }

    pub fn check_failed(&self) -> Result<(), StoreError> {
        match self.failed.get() {
            Some(why) => Err(StoreError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    /// The object's onode, from the cache or the key-value store.
    pub fn onode(&self, st: &mut State, oid: &ObjectId) -> Result<Option<Arc<Onode>>, StoreError> {
        match st.onodes.lookup(oid) {
            Lookup::Present(o) => return Ok(Some(o)),
            Lookup::Absent => return Ok(None),
            Lookup::Unknown => {}
        }
        let Some(onode) = load_onode(self.kv.as_ref(), oid)? else {
            return Ok(None);
        };
        let onode = Arc::new(onode);
        st.onodes
            .insert_clean(oid.clone(), onode.clone(), self.committed());
        Ok(Some(onode))
    }
}

pub(crate) fn kv_error(e: cairn_kv::KvError) -> StoreError {
    StoreError::Io(std::io::Error::other(e.to_string()))
}

pub(crate) fn device_error(e: cairn_device::DeviceError) -> StoreError {
    let kind = e
        .raw_os_error()
        .map(|n| std::io::Error::from_raw_os_error(n).kind())
        .unwrap_or(std::io::ErrorKind::Other);
    StoreError::Io(std::io::Error::new(kind, e.to_string()))
}

fn corrupt(oid: &ObjectId, what: &str, e: String) -> StoreError {
    StoreError::Corrupt(format!("{oid}: {what}: {e}"))
}

impl Inner {
    /// Whether the object's onode (or its absence) is cached, or could be
    /// cached now from what the key-value store holds in memory (then it
    /// is). Never reads the device: for an event loop to ask before an op.
    pub fn onode_ready(&self, oid: &ObjectId) -> bool {
        let mut st = self.state.lock();
        if st.onodes.knows(oid) {
            return true;
        }
        match load_onode_in_memory(self.kv.as_ref(), oid) {
            Ok(Some(onode)) => {
                // Under the state lock no transaction changes it meanwhile.
                let stamp = st.onodes.stamp(oid);
                let committed = self.committed();
                st.onodes
                    .insert_loaded(oid.clone(), onode.map(Arc::new), stamp, committed)
            }
            // Read from the device off the loop; an error, again by the op.
            Ok(None) | Err(_) => false,
        }
    }

    /// Read the object's onode from the key-value store without holding
    /// the state lock, and cache it unless a transaction changed the object
    /// meanwhile (see [`crate::cache::OnodeCache::stamp`]). Blocking: for a
    /// thread that may wait on the device, never the event loop.
    pub fn load_onode_ahead(&self, oid: &ObjectId) -> Result<(), StoreError> {
        let stamp = {
            let st = self.state.lock();
            if st.onodes.knows(oid) {
                return Ok(());
            }
            st.onodes.stamp(oid)
        };
        let onode = load_onode(self.kv.as_ref(), oid)?.map(Arc::new);
        let committed = self.committed();
        let mut st = self.state.lock();
        st.onodes
            .insert_loaded(oid.clone(), onode, stamp, committed);
        Ok(())
    }
}

/// Read an onode (core and every shard) from the key-value store.
pub(crate) fn load_onode(kv: &dyn Kv, oid: &ObjectId) -> Result<Option<Onode>, StoreError> {
    let Some(value) = kv.get(&keys::onode(oid)).map_err(kv_error)? else {
        return Ok(None);
    };
    let core = decode_core(oid, &value)?;
    let (start, end) = keys::range_of(&keys::nid_prefix(keys::SHARD, core.nid));
    let shards = cairn_kv::scan_all(kv, &start, &end).map_err(kv_error)?;
    with_shards(oid, core, shards).map(Some)
}

/// [`load_onode`] from what the key-value store holds in memory: `None`
/// when that is not enough (it would read the device).
pub(crate) fn load_onode_in_memory(
    kv: &dyn Kv,
    oid: &ObjectId,
) -> Result<Option<Option<Onode>>, StoreError> {
    let value = match kv.get_in_memory(&keys::onode(oid)).map_err(kv_error)? {
        None => return Ok(None),
        Some(None) => return Ok(Some(None)),
        Some(Some(value)) => value,
    };
    let core = decode_core(oid, &value)?;
    let (start, end) = keys::range_of(&keys::nid_prefix(keys::SHARD, core.nid));
    match kv
        .scan_in_memory(&start, &end, usize::MAX)
        .map_err(kv_error)?
    {
        Some(shards) => with_shards(oid, core, shards).map(|o| Some(Some(o))),
        None => Ok(None),
    }
}

fn decode_core(oid: &ObjectId, value: &[u8]) -> Result<Core, StoreError> {
    decode(value).map_err(|e| corrupt(oid, "onode", e))
}

/// The onode of `core` with its shards' key-value entries.
fn with_shards(
    oid: &ObjectId,
    core: Core,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Onode, StoreError> {
    let mut shards = BTreeMap::new();
    for (key, value) in entries {
        let index =
            keys::decode_shard(&key).ok_or_else(|| corrupt(oid, "shard key", String::new()))?;
        let shard: Shard = decode(&value).map_err(|e| corrupt(oid, "extent shard", e))?;
        shards.insert(index, Arc::new(shard));
    }
    Ok(Onode::new(core, shards))
}
