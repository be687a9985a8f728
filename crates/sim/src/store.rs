//! A simulated disk under an OSD: an in-memory store whose transactions
//! become durable only when the simulation says their commit completed.
//!
//! Reads follow the store contract at its most adversarial: the core's
//! synchronous calls see every transaction submitted, but an asynchronous
//! read (a client read, a copy for recovery, backfill or scrub), which the
//! daemon runs as a separate task, sees only committed transactions
//! ([`SimStore::reading_committed`]). The contract allows both.
//!
//! Fault model: a crash drops every transaction not yet durable (the
//! store comes back as the durable ones left it); bit rot makes reads of
//! one object's copy fail their checksum until the copy is rewritten whole
//! (removed, or truncated to nothing); nothing else (no torn transactions: the real stores guarantee
//! atomicity, and their own tests cover that).
//!
//! A test may give the disk a capacity ([`SimStore::set_capacity`]): its
//! `statfs` then reports that total against the bytes it holds, so the
//! OSD's heartbeats tell the monitor how full it is (the store itself
//! never refuses a write: the full ratios must stop writes first).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use cairn_store::memstore::MemStore;
use cairn_store::{
    split_destination, BoxFuture, Collection, Commit, ObjectId, ObjectStat, ObjectStore, Result,
    StoreError, StoreStats, Transaction, TxOp, Version,
};

/// A PG's client objects on one disk: name → (data, encoded version).
pub type Snapshot = BTreeMap<String, (Vec<u8>, Vec<u8>)>;

pub struct SimStore {
    visible: MemStore,
    /// The state as of the durable transactions only.
    committed: MemStore,
    /// Reads go to `committed` (set around an asynchronous read).
    read_committed: AtomicBool,
    durable: Vec<Transaction>,
    pending: VecDeque<(u64, Transaction)>,
    next_seq: u64,
    /// Object copies that cannot be read back, and how they fail.
    corrupt: BTreeMap<ObjectId, Damage>,
    /// The total `statfs` reports (`None`: unlimited).
    capacity: Option<u64>,
}

impl Default for SimStore {
    fn default() -> Self {
        Self::new()
    }
}

/// How a damaged copy fails when read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// Bit rot: the data fails its checksum.
    Rot,
    /// The device returns EIO.
    MediaError,
}

impl SimStore {
    pub fn new() -> Self {
        SimStore {
            visible: MemStore::new(),
            committed: MemStore::new(),
            read_committed: AtomicBool::new(false),
            durable: Vec::new(),
            pending: VecDeque::new(),
            next_seq: 0,
            corrupt: BTreeMap::new(),
            capacity: None,
        }
    }

    /// Report `bytes` as the disk's capacity (`None`: unlimited).
    pub fn set_capacity(&mut self, bytes: Option<u64>) {
        self.capacity = bytes;
    }

    /// Bytes the disk holds now (data, attributes, omap, logs).
    pub fn used_bytes(&self) -> u64 {
        self.visible.statfs().map_or(0, |s| s.used_bytes)
    }

    /// Apply `txn` (visible at once) and return its sequence number; it is
    /// durable once [`SimStore::make_durable`] reaches that number.
    pub fn apply(&mut self, txn: Transaction) -> Result<u64> {
        txn.validate()?;
        for op in &txn.ops {
            match op {
                // Rewritten whole: new data, good checksums.
                TxOp::Remove { oid } | TxOp::Truncate { oid, size: 0 } => {
                    self.corrupt.remove(oid);
                }
                TxOp::RemoveCollection { coll } => self.corrupt.retain(|o, _| o.coll != *coll),
                // The rot goes with the object.
                TxOp::Move { from, to } => {
                    self.corrupt.remove(to);
                    if let Some(damage) = self.corrupt.remove(from) {
                        self.corrupt.insert(to.clone(), damage);
                    }
                }
                TxOp::SplitCollection { coll, pg_num } => {
                    let moving: Vec<ObjectId> = self
                        .corrupt
                        .keys()
                        .filter(|o| o.coll == *coll)
                        .cloned()
                        .collect();
                    for oid in moving {
                        if let Some(dest) = split_destination(*coll, *pg_num, &oid.name) {
                            if let Some(damage) = self.corrupt.remove(&oid) {
                                self.corrupt.insert(ObjectId::new(dest, oid.name), damage);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.visible.submit(txn.clone())?;
        self.next_seq += 1;
        self.pending.push_back((self.next_seq, txn));
        Ok(self.next_seq)
    }

    /// Everything up to `seq` is durable.
    pub fn make_durable(&mut self, seq: u64) {
        while self.pending.front().is_some_and(|(s, _)| *s <= seq) {
            if let Some((_, txn)) = self.pending.pop_front() {
                if let Err(e) = self.committed.submit(txn.clone()) {
                    panic!("applying a durable transaction to the committed view failed: {e}");
                }
                self.durable.push(txn);
            }
        }
    }

    /// Transactions applied but not durable yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Power loss: what was not durable is gone.
    pub fn crash(&mut self) {
        self.pending.clear();
        self.visible = MemStore::new();
        for txn in &self.durable {
            // Durable transactions applied once already; they apply again.
            if let Err(e) = self.visible.submit(txn.clone()) {
                panic!("replaying a durable transaction failed: {e}");
            }
        }
        // Damage to a copy that was never durable went with it.
        let visible = &self.visible;
        self.corrupt.retain(|oid, _| visible.stat(oid).is_ok());
    }

    /// Run `f` with object reads seeing only committed transactions, as
    /// an asynchronous read may in the daemon.
    pub fn reading_committed<T>(&self, f: impl FnOnce(&Self) -> T) -> T {
        self.read_committed.store(true, Ordering::Relaxed);
        let out = f(self);
        self.read_committed.store(false, Ordering::Relaxed);
        out
    }

    /// What object reads see now.
    fn view(&self) -> &MemStore {
        if self.read_committed.load(Ordering::Relaxed) {
            &self.committed
        } else {
            &self.visible
        }
    }

    /// Bit rot in one object's copy, or a media error under it (reads of
    /// it fail with EIO until it is rewritten). Only a copy this store
    /// holds can be damaged (an OSD that was down through a split still
    /// holds the object in the parent PG): returns whether it was.
    pub fn damage(&mut self, oid: ObjectId, damage: Damage) -> bool {
        if self.visible.stat(&oid).is_err() {
            return false;
        }
        self.corrupt.insert(oid, damage);
        true
    }

    pub fn is_corrupt(&self, oid: &ObjectId) -> bool {
        self.corrupt.contains_key(oid)
    }

    /// Every client object of `coll` with its data and version, for
    /// comparing copies.
    pub fn snapshot(&self, coll: Collection) -> Snapshot {
        let mut out = BTreeMap::new();
        for name in self.visible.list_objects(coll).unwrap_or_default() {
            if name.starts_with('\u{1}') {
                continue;
            }
            let oid = ObjectId::new(coll, name.clone());
            let size = self.visible.stat(&oid).map(|s| s.size).unwrap_or(0);
            let data = poll_now(self.visible.read(&oid, 0, size))
                .map(|b| b.to_vec())
                .unwrap_or_default();
            let version = self
                .visible
                .get_attr(&oid, "_v")
                .ok()
                .flatten()
                .unwrap_or_default();
            out.insert(name, (data, version));
        }
        out
    }
}

/// Run a future that the in-memory store completes at once.
pub fn poll_now<T>(fut: BoxFuture<T>) -> T {
    let mut fut = fut;
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("an in-memory store operation did not complete at once"),
    }
}

impl ObjectStore for SimStore {
    fn submit(&self, _txn: Transaction) -> Result<Commit> {
        Err(StoreError::Invalid(
            "the simulation submits through SimStore::apply".into(),
        ))
    }

    fn read(&self, oid: &ObjectId, offset: u64, len: u64) -> BoxFuture<Result<Bytes>> {
        if let Some(damage) = self.corrupt.get(oid) {
            let err = match damage {
                Damage::Rot => StoreError::Checksum {
                    oid: oid.clone(),
                    offset,
                    device_offset: 0,
                },
                Damage::MediaError => StoreError::Io(std::io::Error::other(format!(
                    "simulated media error reading {oid}"
                ))),
            };
            return Box::pin(async move { Err(err) });
        }
        self.view().read(oid, offset, len)
    }

    fn stat(&self, oid: &ObjectId) -> Result<ObjectStat> {
        self.view().stat(oid)
    }

    fn get_attr(&self, oid: &ObjectId, key: &str) -> Result<Option<Vec<u8>>> {
        self.view().get_attr(oid, key)
    }

    fn get_attrs(&self, oid: &ObjectId) -> Result<BTreeMap<String, Vec<u8>>> {
        self.view().get_attrs(oid)
    }

    fn omap_get(&self, oid: &ObjectId, keys: &[String]) -> Result<BTreeMap<String, Vec<u8>>> {
        self.view().omap_get(oid, keys)
    }

    fn omap_list(
        &self,
        oid: &ObjectId,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        self.view().omap_list(oid, start_after, max)
    }

    fn list_objects(&self, coll: Collection) -> Result<Vec<String>> {
        self.visible.list_objects(coll)
    }

    fn list_collections(&self) -> Result<Vec<Collection>> {
        self.visible.list_collections()
    }

    fn read_log(&self, coll: Collection) -> Result<Vec<(Version, Vec<u8>)>> {
        self.visible.read_log(coll)
    }

    fn coll_get_attr(&self, coll: Collection, key: &str) -> Result<Option<Vec<u8>>> {
        self.visible.coll_get_attr(coll, key)
    }

    fn statfs(&self) -> Result<StoreStats> {
        let mut stats = self.visible.statfs()?;
        if let Some(capacity) = self.capacity {
            stats.total_bytes = capacity;
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_types::PgId;

    #[test]
    fn a_crash_keeps_exactly_the_durable_prefix() {
        let pg = PgId::new(1, 0);
        let oid = |n: &str| ObjectId::new(pg, n);
        let mut store = SimStore::new();
        let mut txn = Transaction::new();
        txn.write(&oid("a"), 0, Bytes::from_static(b"one"));
        let first = store.apply(txn).unwrap();
        let mut txn = Transaction::new();
        txn.write(&oid("b"), 0, Bytes::from_static(b"two"));
        store.apply(txn).unwrap();
        store.make_durable(first);
        assert!(store.stat(&oid("b")).is_ok(), "visible before durable");
        store.crash();
        assert!(store.stat(&oid("a")).is_ok());
        assert!(store.stat(&oid("b")).is_err(), "not durable: gone");
        assert!(store.damage(oid("a"), Damage::Rot));
        assert!(matches!(
            poll_now(store.read(&oid("a"), 0, 3)),
            Err(StoreError::Checksum { .. })
        ));
        let mut txn = Transaction::new();
        txn.remove(&oid("a"));
        store.apply(txn).unwrap();
        assert!(!store.is_corrupt(&oid("a")));
    }

    #[test]
    fn asynchronous_reads_see_only_committed_transactions() {
        let oid = ObjectId::new(PgId::new(1, 0), "a");
        let mut store = SimStore::new();
        let mut txn = Transaction::new();
        txn.write(&oid, 0, Bytes::from_static(b"old"));
        let first = store.apply(txn).unwrap();
        store.make_durable(first);
        let mut txn = Transaction::new();
        txn.write(&oid, 0, Bytes::from_static(b"new"));
        let second = store.apply(txn).unwrap();
        let read = |s: &SimStore| poll_now(s.read(&oid, 0, 3)).unwrap();
        assert_eq!(&read(&store)[..], b"new", "the core sees what it submitted");
        let seen = store.reading_committed(read);
        assert_eq!(&seen[..], b"old", "an asynchronous read may not");
        assert_eq!(&read(&store)[..], b"new", "the view is restored after");
        store.make_durable(second);
        assert_eq!(&store.reading_committed(read)[..], b"new");
    }
}
