//! Building a transaction: from [`TxOp`]s to a [`Prepared`] commit.
//!
//! Runs under the state lock, so transactions are built one at a time in
//! submission order, each seeing every earlier one. Onodes are changed in
//! working copies and installed in the cache only when the whole
//! transaction has been built: if an op fails (no space, corrupt
//! metadata), the copies are dropped, allocated space is given back, and
//! nothing is visible — a transaction applies whole or not at all.
//!
//! The data paths (deferred and copy-on-write writes, zeroing, truncation)
//! are in `write`.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cairn_device::AlignedBuf;
use cairn_kv::{successor, Batch};
use cairn_store::{Collection, ObjectId, StoreError, Transaction, TxOp};
use tokio::sync::oneshot;

use crate::keys;
use crate::onode::{encode, Onode, PExtent};
use crate::pipeline::{DeferredRecord, Prepared, Release};
use crate::state::{Inner, State, NID_BATCH};

/// An object as this transaction leaves it.
pub(crate) struct Work {
    /// `None`: absent (never existed, or removed by this transaction).
    pub onode: Option<Onode>,
    /// It existed before this transaction (in the cache or the store).
    pub existed: bool,
    pub core_dirty: bool,
    pub dirty_shards: BTreeSet<u32>,
}

pub(crate) struct Builder<'a> {
    pub inner: &'a Inner,
    pub st: &'a mut State,
    pub seq: u64,
    pub work: foldhash::HashMap<ObjectId, Work>,
    /// Objects in the order first touched (the batch is written in it).
    order: Vec<ObjectId>,
    /// Key-value changes other than onodes and shards, in op order.
    pub batch: Batch,
    /// New data for the device.
    pub writes: Vec<(u64, AlignedBuf)>,
    /// Every block this transaction writes, by device offset: what
    /// read-modify-write inside the transaction must see.
    pub staged: foldhash::HashMap<u64, Bytes>,
    /// Of those, the ones written in place after the commit (deferred).
    pub deferred: BTreeSet<u64>,
    /// Of those, blocks of large new blobs: not kept in the cache once
    /// written (large writes would push out what is more likely read).
    pub uncached: BTreeSet<u64>,
    /// Of those, blocks whose bytes are a buffer of their own, not a slice
    /// of a larger one: cached as they are once written, without a copy.
    pub own: foldhash::HashSet<u64>,
    pub allocated: Vec<PExtent>,
    pub released: Vec<PExtent>,
    colls: BTreeSet<Collection>,
    objects_delta: i64,
    /// `(next_nid, nid_limit)` before this transaction, restored if it
    /// fails (see `build`).
    nids_before: (u64, u64),
}

impl<'a> Builder<'a> {
    pub fn new(inner: &'a Inner, st: &'a mut State) -> Self {
        let seq = st.next_seq;
        let nids_before = (st.next_nid, st.nid_limit);
        Self {
            inner,
            st,
            seq,
            work: Default::default(),
            order: Vec::new(),
            batch: Batch::new(),
            writes: Vec::new(),
            staged: Default::default(),
            deferred: BTreeSet::new(),
            uncached: BTreeSet::new(),
            own: Default::default(),
            allocated: Vec::new(),
            released: Vec::new(),
            colls: BTreeSet::new(),
            objects_delta: 0,
            nids_before,
        }
    }

    /// `bytes` as the newest content of the block at `phys` in this
    /// transaction; `own` says they are a buffer of their own.
    pub fn stage(&mut self, phys: u64, bytes: Bytes, own: bool) {
        self.staged.insert(phys, bytes);
        if own {
            self.own.insert(phys);
        } else {
            self.own.remove(&phys);
        }
    }

    /// Apply every op; on error, undo what was taken and return it.
    pub fn build(&mut self, txn: &Transaction) -> Result<(), StoreError> {
        for op in &txn.ops {
            if let Err(e) = self.op(op) {
                for p in self.allocated.drain(..) {
                    self.st.alloc.release(p);
                }
                // A raised reservation (`new_nid`) is written only by this
                // transaction's batch, which is dropped: keeping the raised
                // limit in memory would let later objects take ids that a
                // remount hands out again. The ids taken are unused.
                (self.st.next_nid, self.st.nid_limit) = self.nids_before;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The working copy of `oid`, loading it first; with `create`, an
    /// absent object is created (size 0, a new nid).
    pub fn object(
        &mut self,
        oid: &ObjectId,
        create: bool,
    ) -> Result<Option<&mut Work>, StoreError> {
        if !self.work.contains_key(oid) {
            let current = self.inner.onode(self.st, oid)?;
            self.order.push(oid.clone());
            self.work.insert(
                oid.clone(),
                Work {
                    existed: current.is_some(),
                    onode: current.map(|o| (*o).clone()),
                    core_dirty: false,
                    dirty_shards: BTreeSet::new(),
                },
            );
        }
        let needs_nid = create && self.work.get(oid).is_some_and(|w| w.onode.is_none());
        if needs_nid {
            let nid = self.new_nid();
            self.colls.insert(oid.coll);
            self.objects_delta += 1;
            if let Some(w) = self.work.get_mut(oid) {
                w.onode = Some(Onode::default());
                if let Some(o) = w.onode.as_mut() {
                    o.core.nid = nid;
                }
                w.core_dirty = true;
            }
        }
        Ok(self.work.get_mut(oid).filter(|w| w.onode.is_some()))
    }

    fn new_nid(&mut self) -> u64 {
        let nid = self.st.next_nid;
        self.st.next_nid += 1;
        if self.st.next_nid > self.st.nid_limit {
            self.st.nid_limit = self.st.next_nid + NID_BATCH;
            self.batch.put(
                keys::NID_KEY.to_vec(),
                self.st.nid_limit.to_be_bytes().to_vec(),
            );
        }
        nid
    }

    fn op(&mut self, op: &TxOp) -> Result<(), StoreError> {
        match op {
            TxOp::Touch { oid } => {
                self.object(oid, true)?;
            }
            TxOp::Write { oid, offset, data } => self.write(oid, *offset, data)?,
            TxOp::Zero { oid, offset, len } => self.zero(oid, *offset, *len)?,
            TxOp::Truncate { oid, size } => self.truncate(oid, *size)?,
            TxOp::Remove { oid } => self.remove(oid)?,
            TxOp::SetAttr { oid, key, value } => {
                if let Some(w) = self.object(oid, true)? {
                    if let Some(o) = w.onode.as_mut() {
                        o.core.attrs.insert(key.clone(), value.clone());
                    }
                    w.core_dirty = true;
                }
            }
            TxOp::RmAttr { oid, key } => {
                if let Some(w) = self.object(oid, false)? {
                    if let Some(o) = w.onode.as_mut() {
                        w.core_dirty |= o.core.attrs.remove(key).is_some();
                    }
                }
            }
            TxOp::OmapSet { oid, entries } => {
                let nid = self.nid(oid, true)?;
                for (k, v) in entries {
                    self.batch.put(keys::omap(nid, k), v.to_vec());
                }
            }
            TxOp::OmapRm { oid, keys: names } => {
                if let Some(nid) = self.nid_if_exists(oid)? {
                    for k in names {
                        self.batch.delete(keys::omap(nid, k));
                    }
                }
            }
            TxOp::OmapClear { oid } => {
                if let Some(nid) = self.nid_if_exists(oid)? {
                    let (start, end) = keys::range_of(&keys::nid_prefix(keys::OMAP, nid));
                    self.batch.delete_range(start, end);
                }
            }
            TxOp::LogAppend {
                coll,
                version,
                entry,
            } => {
                self.colls.insert(*coll);
                self.batch.put(keys::log(*coll, *version), entry.to_vec());
            }
            TxOp::LogTrim { coll, up_to } => {
                let start = keys::coll_prefix(keys::LOG, *coll);
                self.batch
                    .delete_range(start, successor(&keys::log(*coll, *up_to)));
            }
            TxOp::CollSetAttr { coll, key, value } => {
                self.colls.insert(*coll);
                self.batch.put(keys::coll_attr(*coll, key), value.to_vec());
            }
            TxOp::RemoveCollection { coll } => self.remove_collection(*coll)?,
            TxOp::Move { from, to } => self.move_object(from, to)?,
            TxOp::SplitCollection { coll, pg_num } => self.split_collection(*coll, *pg_num)?,
        }
        Ok(())
    }

    fn nid(&mut self, oid: &ObjectId, create: bool) -> Result<u64, StoreError> {
        match self.object(oid, create)? {
            Some(w) => Ok(w.onode.as_ref().map(|o| o.core.nid).unwrap_or_default()),
            None => Err(StoreError::NotFound(oid.clone())),
        }
    }

    fn nid_if_exists(&mut self, oid: &ObjectId) -> Result<Option<u64>, StoreError> {
        Ok(self
            .object(oid, false)?
            .and_then(|w| w.onode.as_ref())
            .map(|o| o.core.nid))
    }

    fn remove(&mut self, oid: &ObjectId) -> Result<(), StoreError> {
        let Some(w) = self.object(oid, false)? else {
            return Ok(());
        };
        let Some(onode) = w.onode.take() else {
            return Ok(());
        };
        w.dirty_shards.clear();
        w.core_dirty = true;
        for shard in onode.shards.values() {
            self.released.extend(shard.live_space());
        }
        let nid = onode.core.nid;
        for prefix in [keys::SHARD, keys::OMAP] {
            let (start, end) = keys::range_of(&keys::nid_prefix(prefix, nid));
            self.batch.delete_range(start, end);
        }
        self.objects_delta -= 1;
        Ok(())
    }

    /// `from`'s onode under the name `to`: data, attributes and omap are
    /// keyed by its nid, so nothing but the onode key changes.
    fn move_object(&mut self, from: &ObjectId, to: &ObjectId) -> Result<(), StoreError> {
        let Some(w) = self.object(from, false)? else {
            return Ok(());
        };
        let Some(onode) = w.onode.take() else {
            return Ok(());
        };
        let dirty_shards = std::mem::take(&mut w.dirty_shards);
        w.core_dirty = true;
        self.remove(to)?;
        self.object(to, false)?;
        let Some(target) = self.work.get_mut(to) else {
            return Err(StoreError::Corrupt(format!(
                "moving {from} to {to}: the target was not loaded"
            )));
        };
        target.onode = Some(onode);
        target.core_dirty = true;
        target.dirty_shards = dirty_shards;
        self.colls.insert(to.coll);
        Ok(())
    }

    /// Names of the objects of `coll` as this transaction sees them.
    fn names_in(&mut self, coll: Collection) -> Result<BTreeSet<String>, StoreError> {
        let mut names: BTreeSet<String> = BTreeSet::new();
        // Read before the scan: a transaction counted committed after it
        // may have been acknowledged but missing from the scan, and must
        // then still count as dirty below. (Entries dirty now stay cached
        // while this holds the state lock.)
        let committed = self.inner.committed();
        let (start, end) = keys::range_of(&keys::coll_prefix(keys::ONODE, coll));
        for (key, _) in cairn_kv::scan_all(self.inner.kv.as_ref(), &start, &end)
            .map_err(crate::state::kv_error)?
        {
            if let Some(oid) = keys::decode_onode(&key) {
                names.insert(oid.name);
            }
        }
        for (oid, present) in self.st.onodes.dirty_in(coll, committed) {
            if present {
                names.insert(oid.name);
            } else {
                names.remove(&oid.name);
            }
        }
        for (oid, w) in &self.work {
            if oid.coll == coll {
                if w.onode.is_some() {
                    names.insert(oid.name.clone());
                } else {
                    names.remove(&oid.name);
                }
            }
        }
        Ok(names)
    }

    /// Move every object `split_destination` sends elsewhere.
    fn split_collection(&mut self, coll: Collection, pg_num: u32) -> Result<(), StoreError> {
        for name in self.names_in(coll)? {
            if let Some(to) = cairn_store::split_destination(coll, pg_num, &name) {
                let from = ObjectId::new(coll, name);
                let to = ObjectId::new(to, from.name.clone());
                self.move_object(&from, &to)?;
            }
        }
        Ok(())
    }

    fn remove_collection(&mut self, coll: Collection) -> Result<(), StoreError> {
        for name in self.names_in(coll)? {
            self.remove(&ObjectId::new(coll, name))?;
        }
        for prefix in [keys::LOG, keys::COLL_ATTR] {
            let (start, end) = keys::range_of(&keys::coll_prefix(prefix, coll));
            self.batch.delete_range(start, end);
        }
        Ok(())
    }

    /// Emit the onode changes: the transaction, ready to commit.
    pub fn finish(mut self, done: oneshot::Sender<Result<(), StoreError>>) -> Prepared {
        let inner = self.inner;
        let committed = inner.committed();
        let mut batch = std::mem::take(&mut self.batch);
        for oid in std::mem::take(&mut self.order) {
            let Some(mut w) = self.work.remove(&oid) else {
                continue;
            };
            if let Some(o) = w.onode.as_mut() {
                // The changed shards, counted out by `shard_mut`, back in.
                for index in &w.dirty_shards {
                    o.shard_bytes += o.shards.get(index).map_or(0, |s| s.approx_bytes());
                }
                debug_assert_eq!(o.shard_bytes, o.recount_shard_bytes(), "{oid}");
            }
            match &w.onode {
                Some(o) => {
                    if w.core_dirty {
                        batch.put(keys::onode(&oid), encode(&o.core));
                    }
                    for &index in &w.dirty_shards {
                        match o.shards.get(&index) {
                            Some(shard) => {
                                batch.put(keys::shard(o.core.nid, index), encode(&**shard))
                            }
                            None => batch.delete(keys::shard(o.core.nid, index)),
                        }
                    }
                }
                None if w.existed => batch.delete(keys::onode(&oid)),
                None => {}
            }
            if w.existed || w.onode.is_some() {
                let onode = w.onode.map(Arc::new);
                self.st.onodes.update(oid, onode, self.seq, committed);
            }
        }
        for &p in &self.allocated {
            self.st.freelist.allocate(p, &mut batch);
        }
        for &p in &self.released {
            self.st.freelist.release(p, &mut batch);
        }
        self.st.colls.extend(self.colls.iter().copied());
        self.st.objects = self.st.objects.saturating_add_signed(self.objects_delta);
        self.st.next_seq += 1;

        let deferred = self.deferred_record();
        let data_pins: Vec<(u64, u64, bool)> = self
            .staged
            .iter()
            .filter(|(phys, _)| !self.deferred.contains(phys))
            .map(|(&phys, data)| {
                let pin = inner.cache.new_pin();
                inner
                    .cache
                    .pin(phys, data.clone(), pin, self.own.contains(&phys));
                (phys, pin, !self.uncached.contains(&phys))
            })
            .collect();
        let data = (!self.writes.is_empty())
            .then(|| inner.device.write_many(std::mem::take(&mut self.writes)));
        let release = (!self.released.is_empty()).then(|| {
            self.st.read_gen += 1;
            Release {
                seq: self.seq,
                gen: self.st.read_gen,
                extents: std::mem::take(&mut self.released),
            }
        });
        inner.perf.transactions.fetch_add(1, Ordering::Relaxed);
        Prepared {
            seq: self.seq,
            batch,
            data,
            data_pins,
            deferred,
            release,
            retires: Vec::new(),
            done: Some(done),
        }
    }

    /// The record of this transaction's in-place writes (the commit thread
    /// puts it in the journal record), pinned in the cache until applied.
    fn deferred_record(&mut self) -> Option<DeferredRecord> {
        if self.deferred.is_empty() {
            return None;
        }
        let inner = self.inner;
        let mut writes = Vec::with_capacity(self.deferred.len());
        for &phys in &self.deferred {
            let Some(data) = self.staged.get(&phys) else {
                continue;
            };
            let pin = inner.cache.new_pin();
            inner
                .cache
                .pin(phys, data.clone(), pin, self.own.contains(&phys));
            writes.push((phys, data.clone(), pin));
        }
        let bytes = writes.len() as u64 * crate::onode::BLOCK;
        inner.deferred_backlog.fetch_add(bytes, Ordering::Relaxed);
        inner.perf.deferred_writes.fetch_add(1, Ordering::Relaxed);
        inner
            .perf
            .deferred_write_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Some(DeferredRecord {
            seq: self.seq,
            writes,
            record: None,
        })
    }
}
