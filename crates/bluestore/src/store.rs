//! [`BlueStore`]: the mounted store behind the [`ObjectStore`] trait.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use bytes::Bytes;
use cairn_device::BlockDevice;
use cairn_kv::{scan_all, Kv};
use cairn_store::{
    BoxFuture, Collection, Commit, ObjectId, ObjectStat, ObjectStore, Result, StoreError,
    StoreStats, Transaction, Version,
};
use parking_lot::Mutex;

use crate::allocator::{Allocator, Freelist};
use crate::builder::Builder;
use crate::cache::{BufferCache, OnodeCache};
use crate::commit::{commit_loop, try_inline, CommitState};
use crate::deferred::deferred_loop;
use crate::journal::Journal;
use crate::keys;
use crate::kvsync::sync_loop;
use crate::label::Superblock;
use crate::loop_commit;
use crate::mount::mount;
use crate::options::MountOptions;
use crate::perf::{Perf, PerfSnapshot};
use crate::pipeline::{try_release, Pipeline};
use crate::read::{self, Sources};
use crate::record;
use crate::state::{kv_error, Inner, ReadTracker, State};

/// What one of the store's threads runs.
type ThreadBody = Box<dyn FnOnce(Arc<Inner>) + Send>;

/// A mounted BlueStore-class object store. Dropping it waits for every
/// queued commit and deferred write, then stops its threads.
pub struct BlueStore {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Deferred records replayed by mount.
    replayed: u64,
}

impl BlueStore {
    /// Mount the store on `device` with metadata in `kv` (see `mount`).
    pub fn mount(
        device: Arc<dyn BlockDevice>,
        kv: Arc<dyn Kv>,
        opts: MountOptions,
    ) -> Result<Arc<Self>> {
        let m = mount(device.as_ref(), kv.as_ref())?;
        let au = m.sb.min_alloc_size;
        let cache = &opts.cache;
        let state = State {
            onodes: OnodeCache::new(cache.meta_bytes()),
            alloc: Allocator::new(m.free.clone(), au),
            freelist: Freelist::new(m.free),
            next_nid: m.nid_limit,
            nid_limit: m.nid_limit,
            next_seq: m.next_seq,
            colls: m.colls,
            objects: m.objects,
            read_gen: 0,
        };
        let journal = Journal::new(
            m.sb.journal_id(),
            (m.sb.journal_start, m.sb.journal_len),
            m.journal,
        );
        let inner = Arc::new(Inner {
            device,
            kv,
            sb: m.sb,
            cache: BufferCache::new(cache.data_bytes()),
            opts,
            perf: Perf::default(),
            state: Mutex::new(state),
            pipeline: Pipeline::default(),
            commit: Mutex::new(CommitState::new(journal)),
            records: record::Shared::new(m.journal.seq - 1),
            loop_commits: OnceLock::new(),
            loop_reader: OnceLock::new(),
            reads: ReadTracker::default(),
            failed: OnceLock::new(),
            committed: AtomicU64::new(m.next_seq - 1),
            acked: AtomicU64::new(m.next_seq - 1),
            committed_moved: parking_lot::Condvar::new(),
            committed_lock: parking_lot::Mutex::new(()),
            deferred_backlog: AtomicU64::new(0),
            journal_written: AtomicU64::new(m.journal.seq - 1),
            journal_synced: AtomicU64::new(m.journal.seq - 1),
            jdef_written: AtomicU64::new(m.journal.seq),
            jdef_synced: AtomicU64::new(m.journal.seq),
            pool_compression: Default::default(),
        });
        let bodies: Vec<(&str, ThreadBody)> = vec![
            ("cairn-bs-commit", Box::new(commit_loop)),
            ("cairn-bs-deferred", Box::new(deferred_loop)),
            ("cairn-bs-kvsync", Box::new(sync_loop)),
        ];
        let mut threads = Vec::new();
        for (name, body) in bodies {
            let thread_inner = inner.clone();
            let spawned = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let _guard = DiesLoudly(&thread_inner, name);
                    body(thread_inner.clone())
                });
            match spawned {
                Ok(handle) => threads.push(handle),
                Err(e) => {
                    // Stop what started (each thread stops the next).
                    inner.pipeline.shutdown();
                    inner.pipeline.shutdown_deferred();
                    inner.pipeline.shutdown_sync();
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(StoreError::Io(e));
                }
            }
        }
        Ok(Arc::new(Self {
            inner,
            threads: Mutex::new(threads),
            replayed: m.replayed,
        }))
    }

    pub fn superblock(&self) -> &Superblock {
        &self.inner.sb
    }

    /// Deferred write records mount found and replayed.
    pub fn replayed(&self) -> u64 {
        self.replayed
    }

    /// Counters, with cache statistics.
    pub fn perf(&self) -> PerfSnapshot {
        let inner = &self.inner;
        // Counters of a group move once its batch is written, just after
        // its commits are acknowledged: count every acknowledged one. (A
        // failed store counts what it did.)
        let _ = inner.wait_kv_current();
        let mut p = inner.perf.snapshot();
        {
            let st = inner.state.lock();
            p.onode_cache_hits = st.onodes.hits;
            p.onode_cache_misses = st.onodes.misses;
            p.onode_cache_loaded_ahead = st.onodes.loaded_ahead;
            p.onode_cache_entries = st.onodes.len() as u64;
            p.onode_cache_bytes = st.onodes.bytes();
            p.free_bytes = st.freelist.total();
            p.allocatable_bytes = st.alloc.free_bytes();
        }
        p.data_cache_hits = inner.cache.hits.load(Ordering::Relaxed);
        p.data_cache_misses = inner.cache.misses.load(Ordering::Relaxed);
        (p.data_cache_bytes, p.data_pinned_bytes) = inner.cache.usage();
        p.kv_cache_bytes = inner.kv.cache_usage();
        p
    }

    /// Resize the onode and data caches to a new total (the key-value
    /// cache keeps the size it was opened with).
    pub fn resize_caches(&self, cache_size: u64) {
        let mut c = self.inner.opts.cache.clone();
        c.cache_size = cache_size;
        self.inner.cache.set_capacity(c.data_bytes());
        let mut st = self.inner.state.lock();
        st.onodes.set_capacity(c.meta_bytes());
        let committed = self.inner.committed();
        st.onodes.trim(committed);
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    fn onode(&self, oid: &ObjectId) -> Result<Arc<crate::onode::Onode>> {
        let mut st = self.inner.state.lock();
        self.inner
            .onode(&mut st, oid)?
            .ok_or_else(|| StoreError::NotFound(oid.clone()))
    }

    fn scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.wait_kv_current()?;
        let (start, end) = keys::range_of(prefix);
        scan_all(self.inner.kv.as_ref(), &start, &end).map_err(kv_error)
    }
}

/// Fails the store if the pipeline thread it lives on panics (see
/// `pipeline::thread_died`).
struct DiesLoudly<'a>(&'a Arc<Inner>, &'static str);

impl Drop for DiesLoudly<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            crate::pipeline::thread_died(self.0, self.1);
        }
    }
}

impl Drop for BlueStore {
    fn drop(&mut self) {
        // Records an event loop has in flight are reaped here: the loop
        // may be gone, or be this very thread.
        loop_commit::detach(&self.inner);
        // The commit thread first (it is `threads[0]`): until it has
        // drained its queue, commits keep handing deferred writes to the
        // deferred thread, which must not stop before that. It stops the
        // deferred thread as it ends; stopping it here again after the join
        // also covers a commit thread that panicked.
        self.inner.pipeline.shutdown();
        let threads: Vec<JoinHandle<()>> = self.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
            self.inner.pipeline.shutdown_deferred();
            self.inner.pipeline.shutdown_sync();
        }
    }
}

/// Times a read plans again after a checksum mismatch while the object
/// keeps changing under it (see `read`).
const MAX_REPLANS: u32 = 3;

/// Plan a read of `[offset, offset + len)` of `onode`, cut at its size:
/// the plan, the onode it was made from, and the length to be read.
fn plan_read(
    inner: &Inner,
    oid: &ObjectId,
    onode: Arc<crate::onode::Onode>,
    offset: u64,
    len: u64,
) -> Result<(read::Plan, Arc<crate::onode::Onode>, u64)> {
    let len = onode.core.size.saturating_sub(offset).min(len);
    let plan = read::plan(oid, &onode, offset, len, inner.shard_size())?;
    Ok((plan, onode, len))
}

/// Leaves the read tracker when a read ends, however it ends.
struct ReadGuard {
    inner: Arc<Inner>,
    gen: u64,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        self.inner.reads.leave(self.gen);
        if self.inner.pipeline.has_waiting_releases() {
            try_release(&self.inner);
        }
    }
}

impl ObjectStore for BlueStore {
    fn set_pool_compression(
        &self,
        pool: cairn_types::PoolId,
        settings: Option<&cairn_types::compression::PoolCompression>,
    ) {
        let mut pools = self.inner.pool_compression.write();
        match settings.filter(|s| !s.is_empty()) {
            Some(s) => {
                let policy = self.inner.compression().with_pool(s);
                if pools.insert(pool, policy) != Some(policy) {
                    tracing::info!("pool {pool}: compression {policy:?}");
                }
            }
            None => {
                if pools.remove(&pool).is_some() {
                    tracing::info!("pool {pool}: compression back to the store's settings");
                }
            }
        }
    }

    /// Journal records written through a ring of the loop's own and
    /// acknowledged on the loop (see `loop_commit`). `Ok(false)` where the
    /// device offers no such ring: the commit thread then does everything.
    fn attach_to_loop(&self) -> Result<bool> {
        loop_commit::attach(&self.inner).map_err(StoreError::Failed)
    }

    fn submit(&self, txn: Transaction) -> Result<Commit> {
        txn.validate()?;
        self.inner.check_failed()?;
        let mut st = self.inner.state.lock();
        let mut builder = Builder::new(&self.inner, &mut st);
        builder.build(&txn)?;
        let (done, commit) = Commit::pending();
        let prepared = builder.finish(done);
        match try_inline(&self.inner, &prepared) {
            Some(inline) => {
                drop(st);
                inline.commit(prepared);
            }
            None => self.inner.queue_commit(prepared),
        }
        Ok(commit)
    }

    fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> BoxFuture<Result<Bytes>> {
        let inner = self.inner.clone();
        let oid = oid.clone();
        let wanted = len;
        let planned = (|| -> Result<_> {
            let mut st = inner.state.lock();
            let onode = inner
                .onode(&mut st, &oid)?
                .ok_or_else(|| StoreError::NotFound(oid.clone()))?;
            let planned = plan_read(&inner, &oid, onode, offset, len)?;
            let gen = st.read_gen;
            inner.reads.enter(gen);
            // Made here, not in the future: a future dropped before it
            // ever runs must leave the tracker too, or space released
            // after it was planned would never be reused.
            let guard = ReadGuard {
                inner: inner.clone(),
                gen,
            };
            Ok((planned, guard))
        })();
        Box::pin(async move {
            let ((mut plan, mut planned_from, mut len), _guard) = planned?;
            let src = Sources {
                device: &inner.device,
                cache: &inner.cache,
                staged: None,
                perf: &inner.perf,
                loop_reader: inner.loop_reader.get(),
            };
            let mut replans = 0;
            let out = loop {
                let e = match read::fetch_bytes(&oid, &plan, &src, len).await {
                    Ok(out) => break out,
                    Err(e) => e,
                };
                // A deferred write rewrites blocks in place: one that
                // reached the device after this read was planned fails the
                // checksums the plan took from the older onode. If the
                // object changed since, plan again from its current onode
                // (space that plan uses stays protected: released later,
                // it waits for this read's older generation).
                if matches!(e, StoreError::Checksum { .. }) && replans < MAX_REPLANS {
                    let current = {
                        let mut st = inner.state.lock();
                        inner
                            .onode(&mut st, &oid)?
                            .ok_or_else(|| StoreError::NotFound(oid.clone()))?
                    };
                    if !Arc::ptr_eq(&current, &planned_from) {
                        (plan, planned_from, len) =
                            plan_read(&inner, &oid, current, offset, wanted)?;
                        replans += 1;
                        continue;
                    }
                }
                read::note_checksum_error(&inner.perf, &e);
                return Err(e);
            };
            inner.perf.reads.fetch_add(1, Ordering::Relaxed);
            inner.perf.read_bytes.fetch_add(len, Ordering::Relaxed);
            Ok(out)
        })
    }

    fn meta_ready(&self, oid: &ObjectId) -> bool {
        self.inner.onode_ready(oid)
    }

    fn load_meta(&self, oid: &ObjectId) -> Result<()> {
        self.inner.load_onode_ahead(oid)
    }

    fn rewrite_unit(&self) -> u64 {
        // Deferred writes rewrite whole blocks, direct ones whole
        // allocation units.
        self.inner.au().max(crate::onode::BLOCK)
    }

    fn stat(&self, oid: &ObjectId) -> Result<ObjectStat> {
        Ok(ObjectStat {
            size: self.onode(oid)?.core.size,
        })
    }

    fn get_attr(&self, oid: &ObjectId, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.onode(oid)?.core.attrs.get(key).map(|v| v.to_vec()))
    }

    fn get_attrs(&self, oid: &ObjectId) -> Result<BTreeMap<String, Vec<u8>>> {
        let onode = self.onode(oid)?;
        Ok(onode
            .core
            .attrs
            .iter()
            .map(|(k, v)| (k.clone(), v.to_vec()))
            .collect())
    }

    fn omap_get(
        &self,
        oid: &ObjectId,
        keys_wanted: &[String],
    ) -> Result<BTreeMap<String, Vec<u8>>> {
        let nid = self.onode(oid)?.core.nid;
        self.inner.wait_kv_current()?;
        let mut out = BTreeMap::new();
        for k in keys_wanted {
            if let Some(v) = self.inner.kv.get(&keys::omap(nid, k)).map_err(kv_error)? {
                out.insert(k.clone(), v);
            }
        }
        Ok(out)
    }

    fn omap_list(
        &self,
        oid: &ObjectId,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        let nid = self.onode(oid)?.core.nid;
        self.inner.wait_kv_current()?;
        let prefix = keys::nid_prefix(keys::OMAP, nid);
        let (mut start, end) = keys::range_of(&prefix);
        if let Some(after) = start_after {
            start = cairn_kv::successor(&keys::omap(nid, after));
        }
        let entries = self.inner.kv.scan(&start, &end, max).map_err(kv_error)?;
        entries
            .into_iter()
            .map(|(k, v)| {
                let name = keys::decode_omap(&k)
                    .ok_or_else(|| StoreError::Corrupt(format!("{oid}: bad omap key")))?;
                Ok((name, v))
            })
            .collect()
    }

    fn list_objects(&self, coll: Collection) -> Result<Vec<String>> {
        self.scan(&keys::coll_prefix(keys::ONODE, coll))?
            .into_iter()
            .map(|(k, _)| {
                keys::decode_onode(&k)
                    .map(|oid| oid.name)
                    .ok_or_else(|| StoreError::Corrupt("bad onode key".into()))
            })
            .collect()
    }

    fn list_collections(&self) -> Result<Vec<Collection>> {
        self.inner.wait_kv_current()?;
        // Read before the scans: a commit counted after them may have put
        // an object in a collection they found empty (see below).
        let committed = self.inner.committed();
        let candidates: Vec<Collection> = self.inner.state.lock().colls.iter().copied().collect();
        let kv = self.inner.kv.as_ref();
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for coll in candidates {
            let mut present = false;
            for prefix in [keys::ONODE, keys::LOG, keys::COLL_ATTR] {
                let (start, end) = keys::range_of(&keys::coll_prefix(prefix, coll));
                if !kv.scan(&start, &end, 1).map_err(kv_error)?.is_empty() {
                    present = true;
                    break;
                }
            }
            if present {
                out.push(coll);
            } else {
                gone.push(coll);
            }
        }
        // Forget collections that are empty and have nothing in flight.
        let mut st = self.inner.state.lock();
        for coll in gone {
            if st.onodes.dirty_in(coll, committed).is_empty() && committed + 1 == st.next_seq {
                st.colls.remove(&coll);
            }
        }
        Ok(out)
    }

    fn read_log(&self, coll: Collection) -> Result<Vec<(Version, Vec<u8>)>> {
        self.scan(&keys::coll_prefix(keys::LOG, coll))?
            .into_iter()
            .map(|(k, v)| {
                keys::decode_log(&k)
                    .map(|ver| (ver, v))
                    .ok_or_else(|| StoreError::Corrupt("bad log key".into()))
            })
            .collect()
    }

    fn coll_get_attr(&self, coll: Collection, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.wait_kv_current()?;
        self.inner
            .kv
            .get(&keys::coll_attr(coll, key))
            .map_err(kv_error)
    }

    fn perf_dump(&self) -> String {
        let mut value = serde_json::to_value(self.perf()).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.insert("backend".into(), "bluestore".into());
        }
        value.to_string()
    }

    fn statfs(&self) -> Result<StoreStats> {
        let st = self.inner.state.lock();
        let sb = &self.inner.sb;
        let total = sb.device_size / sb.min_alloc_size * sb.min_alloc_size - sb.data_start;
        Ok(StoreStats {
            total_bytes: total,
            used_bytes: total - st.freelist.total(),
            objects: st.objects,
        })
    }
}
