//! The onode cache and the data buffer cache.
//!
//! **Onodes** are cached by object id, least recently used first out. An
//! entry changed by a transaction that has not committed yet is *dirty*
//! (it is newer than the key-value store) and is never evicted; an object
//! removed by such a transaction is cached as a tombstone until then, and
//! an object found absent is cached as a clean one.
//! An onode may also be read ahead, off the event loop and without the
//! store's state lock, and cached clean if no transaction changed an
//! object of its bucket in the meantime (see [`OnodeCache::stamp`]); an
//! object found absent is cached as a clean tombstone.
//!
//! **Data** is cached by physical block (4 KiB of device space). A block
//! whose newest content is not on the device yet — written by a transaction
//! in flight, or by a deferred write not yet applied — is *pinned*: it is
//! served from memory and never evicted until the write that carries it
//! completes. Other blocks are clean copies of the device, kept LRU within
//! the data cache's size. Sharded by block number so readers and writers
//! rarely meet on one lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use cairn_store::ObjectId;
use lru::LruCache;
use parking_lot::Mutex;

use crate::onode::{Onode, BLOCK};

const SHARDS: usize = 16;

struct Pinned {
    data: Bytes,
    /// Which write pinned it; only that write's completion unpins it.
    pin: u64,
    /// `data` is a buffer of its own (see `put_clean`).
    own: bool,
}

struct BufferShard {
    pinned: foldhash::HashMap<u64, Pinned>,
    clean: LruCache<u64, Bytes>,
    capacity: usize,
    /// Pins and forgets so far, per bucket of this shard's blocks: a read
    /// from the device caches what it read only if its block's count did
    /// not move while it ran (see [`BufferCache::epoch`]).
    changes: Box<[u64]>,
}

/// Buckets of [`BufferShard::changes`] per shard.
const CHANGE_BUCKETS: u64 = 256;

impl BufferShard {
    fn changes_of(&mut self, block: u64) -> &mut u64 {
        &mut self.changes[((block / SHARDS as u64) % CHANGE_BUCKETS) as usize]
    }
}

/// Physical blocks in memory. See the module docs.
pub(crate) struct BufferCache {
    shards: Vec<Mutex<BufferShard>>,
    next_pin: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl BufferCache {
    pub fn new(bytes: u64) -> Self {
        let per = Self::blocks_per_shard(bytes);
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(BufferShard {
                    pinned: Default::default(),
                    clean: LruCache::unbounded(),
                    capacity: per,
                    changes: vec![0; CHANGE_BUCKETS as usize].into_boxed_slice(),
                })
            })
            .collect();
        Self {
            shards,
            next_pin: AtomicU64::new(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn blocks_per_shard(bytes: u64) -> usize {
        (bytes / BLOCK) as usize / SHARDS
    }

    fn shard(&self, block: u64) -> &Mutex<BufferShard> {
        &self.shards[(block as usize) % SHARDS]
    }

    /// Resize the clean part (autotuning).
    pub fn set_capacity(&self, bytes: u64) {
        let per = Self::blocks_per_shard(bytes);
        for s in &self.shards {
            let mut s = s.lock();
            s.capacity = per;
            while s.clean.len() > per {
                s.clean.pop_lru();
            }
        }
    }

    /// The block at device offset `phys`, if cached.
    pub fn get(&self, phys: u64) -> Option<Bytes> {
        let block = phys / BLOCK;
        let mut s = self.shard(block).lock();
        let found = match s.pinned.get(&block) {
            Some(p) => Some(p.data.clone()),
            None => s.clean.get(&block).cloned(),
        };
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// A new pin id for [`pin`](Self::pin).
    pub fn new_pin(&self) -> u64 {
        self.next_pin.fetch_add(1, Ordering::Relaxed)
    }

    /// Hold `data` as the newest content of the block at `phys` until
    /// [`unpin`](Self::unpin) with the same `pin`.
    /// `own` says `data` is a buffer of its own, which the cache may keep
    /// without a copy once unpinned (see `put_clean`).
    pub fn pin(&self, phys: u64, data: Bytes, pin: u64, own: bool) {
        debug_assert_eq!(data.len() as u64, BLOCK);
        let block = phys / BLOCK;
        let mut s = self.shard(block).lock();
        *s.changes_of(block) += 1;
        s.clean.pop(&block);
        s.pinned.insert(block, Pinned { data, pin, own });
    }

    /// The write `pin` reached the device: the block becomes a clean copy
    /// (or, without `keep`, leaves the cache), unless a later write pinned
    /// it again.
    pub fn unpin(&self, phys: u64, pin: u64, keep: bool) {
        let block = phys / BLOCK;
        let mut s = self.shard(block).lock();
        if s.pinned.get(&block).is_some_and(|p| p.pin == pin) {
            if let Some(p) = s.pinned.remove(&block) {
                if keep {
                    Self::put_clean(&mut s, block, p.data, p.own);
                }
            }
        }
    }

    /// Taken before the block at `phys` is looked up and read from the
    /// device, and given back to [`insert_clean`](Self::insert_clean).
    ///
    /// A read may finish long after its device read did (its task runs
    /// later): meanwhile a deferred write may have pinned the block,
    /// rewritten it in place and unpinned it, leaving the new content
    /// cached clean. What the read holds is then older than that, and must
    /// not replace it. Counted per bucket of blocks: now and then a read is
    /// not cached for a change to another block of its bucket.
    pub fn epoch(&self, phys: u64) -> u64 {
        let block = phys / BLOCK;
        *self.shard(block).lock().changes_of(block)
    }

    /// A clean copy read from the device, by a read that took `epoch`
    /// before it looked the block up; dropped if a write pinned a block of
    /// its bucket since. `own` says `data` is a buffer of its own, not a
    /// slice of a larger one (see `put_clean`).
    pub fn insert_clean(&self, phys: u64, data: Bytes, own: bool, epoch: u64) {
        let block = phys / BLOCK;
        let mut s = self.shard(block).lock();
        if *s.changes_of(block) == epoch && !s.pinned.contains_key(&block) {
            Self::put_clean(&mut s, block, data, own);
        }
    }

    fn put_clean(s: &mut BufferShard, block: u64, data: Bytes, own: bool) {
        if s.capacity == 0 {
            return;
        }
        // A block of a larger write or read is a slice of that buffer: keep
        // a copy of its own, or the whole buffer would stay in memory
        // unaccounted for as long as this block is cached.
        let data = if own {
            data
        } else {
            Bytes::copy_from_slice(&data)
        };
        s.clean.put(block, data);
        while s.clean.len() > s.capacity {
            s.clean.pop_lru();
        }
    }

    /// Forget clean copies of `[phys, phys + len)` (space released).
    pub fn forget(&self, phys: u64, len: u64) {
        for block in phys / BLOCK..(phys + len).div_ceil(BLOCK) {
            let mut s = self.shard(block).lock();
            *s.changes_of(block) += 1;
            s.clean.pop(&block);
        }
    }

    /// Bytes held: (clean, pinned).
    pub fn usage(&self) -> (u64, u64) {
        let mut clean = 0;
        let mut pinned = 0;
        for s in &self.shards {
            let s = s.lock();
            clean += s.clean.len() as u64 * BLOCK;
            pinned += s.pinned.len() as u64 * BLOCK;
        }
        (clean, pinned)
    }
}

/// A cached onode: `None` is a tombstone, the object does not exist
/// (removed by a transaction, committed or not, or found absent).
struct Cached {
    onode: Option<Arc<Onode>>,
    /// Sequence number of the last transaction that changed it.
    dirty_seq: u64,
    /// Memory it takes (estimated), with its key.
    bytes: u64,
}

impl Cached {
    fn new(oid: &ObjectId, onode: Option<Arc<Onode>>, dirty_seq: u64) -> Self {
        let bytes = 96 + oid.name.len() as u64 + onode.as_deref().map_or(0, Onode::approx_bytes);
        Self {
            onode,
            dirty_seq,
            bytes,
        }
    }
}

/// Buckets of [`OnodeCache::stamp`]: objects hashing to one bucket share
/// one count of updates, so a read-ahead is refused now and then for a
/// change to another object of its bucket, never accepted after a change
/// to its own.
const UPDATE_BUCKETS: usize = 1024;

/// Onodes by object id. See the module docs. Used under the store's state
/// lock, so it has no lock of its own.
pub(crate) struct OnodeCache {
    entries: LruCache<ObjectId, Cached>,
    /// Updates recorded so far, per bucket of object ids.
    updates: Box<[u64]>,
    hasher: foldhash::fast::FixedState,
    /// Onodes (and absences) read ahead and cached.
    pub loaded_ahead: u64,
    /// Bytes the cache may hold (dirty entries may exceed it for a while).
    capacity: u64,
    /// Bytes it holds.
    bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

/// What the onode cache knows of an object.
pub(crate) enum Lookup {
    Present(Arc<Onode>),
    /// Known not to exist.
    Absent,
    Unknown,
}

impl OnodeCache {
    pub fn new(capacity: u64) -> Self {
        Self {
            entries: LruCache::unbounded(),
            updates: vec![0; UPDATE_BUCKETS].into_boxed_slice(),
            hasher: foldhash::fast::FixedState::default(),
            loaded_ahead: 0,
            capacity,
            bytes: 0,
            hits: 0,
            misses: 0,
        }
    }

    fn bucket(&self, oid: &ObjectId) -> usize {
        use std::hash::BuildHasher;
        (self.hasher.hash_one(oid) % UPDATE_BUCKETS as u64) as usize
    }

    /// Whether the cache holds the object (present or a tombstone), without
    /// counting a hit or a miss or making it recently used.
    pub fn knows(&self, oid: &ObjectId) -> bool {
        self.entries.contains(oid)
    }

    /// The count of updates to objects of `oid`'s bucket: taken before an
    /// onode is read from the key-value store without the state lock, and
    /// given back to [`Self::insert_loaded`].
    ///
    /// Why that is enough: an entry is evicted only once clean, when the
    /// key-value store already holds its state. So if the object is not
    /// cached when the stamp is taken, the store has every change to it
    /// made so far, and any later change goes through [`Self::update`],
    /// which moves the stamp on.
    pub fn stamp(&self, oid: &ObjectId) -> u64 {
        self.updates[self.bucket(oid)]
    }

    /// Cache what a read-ahead found for `oid` (`None`: no such object),
    /// clean, unless the object is cached by now or an update reached its
    /// bucket since `stamp` was taken: then the read may be stale, and the
    /// cache is left as it is. Whether it was cached.
    pub fn insert_loaded(
        &mut self,
        oid: ObjectId,
        onode: Option<Arc<Onode>>,
        stamp: u64,
        committed: u64,
    ) -> bool {
        if self.knows(&oid) || self.stamp(&oid) != stamp {
            return false;
        }
        self.loaded_ahead += 1;
        self.put(oid.clone(), Cached::new(&oid, onode, 0));
        self.trim(committed);
        true
    }

    pub fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Estimated bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn put(&mut self, oid: ObjectId, cached: Cached) {
        self.bytes += cached.bytes;
        if let Some(old) = self.entries.put(oid, cached) {
            self.bytes -= old.bytes;
        }
    }

    pub fn lookup(&mut self, oid: &ObjectId) -> Lookup {
        match self.entries.get(oid) {
            Some(c) => {
                self.hits += 1;
                match &c.onode {
                    Some(o) => Lookup::Present(o.clone()),
                    None => Lookup::Absent,
                }
            }
            None => {
                self.misses += 1;
                Lookup::Unknown
            }
        }
    }

    /// Cache an onode read from the key-value store (clean).
    pub fn insert_clean(&mut self, oid: ObjectId, onode: Arc<Onode>, committed: u64) {
        let cached = Cached::new(&oid, Some(onode), 0);
        self.put(oid, cached);
        self.trim(committed);
    }

    /// Record the state transaction `seq` left the object in.
    pub fn update(&mut self, oid: ObjectId, onode: Option<Arc<Onode>>, seq: u64, committed: u64) {
        let bucket = self.bucket(&oid);
        self.updates[bucket] += 1;
        let cached = Cached::new(&oid, onode, seq);
        self.put(oid, cached);
        self.trim(committed);
    }

    /// Cached objects of `coll` (present or removed) that are dirty: newer
    /// than what the key-value store lists.
    pub fn dirty_in(&self, coll: cairn_store::Collection, committed: u64) -> Vec<(ObjectId, bool)> {
        self.entries
            .iter()
            .filter(|(oid, c)| oid.coll == coll && c.dirty_seq > committed)
            .map(|(oid, c)| (oid.clone(), c.onode.is_some()))
            .collect()
    }

    /// Evict clean entries beyond the capacity, oldest first; dirty ones
    /// stay (they are newer than the key-value store).
    pub fn trim(&mut self, committed: u64) {
        let mut skipped = Vec::new();
        let mut looked = 0;
        while self.bytes > self.capacity && looked < self.entries.len() {
            let Some((oid, c)) = self.entries.pop_lru() else {
                break;
            };
            looked += 1;
            self.bytes -= c.bytes;
            if c.dirty_seq > committed {
                skipped.push((oid, c));
            }
        }
        // Put dirty entries back as most recently used.
        for (oid, c) in skipped {
            self.put(oid, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::Collection;

    #[test]
    fn pinned_blocks_stay_until_their_write_unpins() {
        let c = BufferCache::new(SHARDS as u64 * BLOCK); // one clean block per shard
        let a = Bytes::from(vec![1u8; BLOCK as usize]);
        let b = Bytes::from(vec![2u8; BLOCK as usize]);
        let p1 = c.new_pin();
        c.pin(0, a.clone(), p1, false);
        let p2 = c.new_pin();
        c.pin(0, b.clone(), p2, false);
        c.unpin(0, p1, true); // an older write finishing does not unpin the newer
        assert_eq!(c.get(0), Some(b.clone()));
        assert_eq!(c.usage(), (0, BLOCK));
        c.unpin(0, p2, true);
        assert_eq!(c.usage(), (BLOCK, 0));
        // A clean block is evicted by another clean block of its shard.
        let epoch = c.epoch(SHARDS as u64 * BLOCK);
        c.insert_clean(SHARDS as u64 * BLOCK, a, false, epoch);
        assert_eq!(c.get(0), None);
        c.forget(SHARDS as u64 * BLOCK, BLOCK);
        assert_eq!(c.usage(), (0, 0));
    }

    /// A read that began before a write pinned, rewrote and unpinned the
    /// block holds older content than the cache: it is not cached over it.
    #[test]
    fn a_read_older_than_a_write_to_its_block_is_not_cached() {
        let c = BufferCache::new(SHARDS as u64 * BLOCK * 4);
        let old = Bytes::from(vec![1u8; BLOCK as usize]);
        let new = Bytes::from(vec![2u8; BLOCK as usize]);
        let epoch = c.epoch(0); // the read starts: not cached
        assert_eq!(c.get(0), None);
        let pin = c.new_pin();
        c.pin(0, new.clone(), pin, true);
        c.unpin(0, pin, true);
        c.insert_clean(0, old.clone(), true, epoch); // the read ends
        assert_eq!(c.get(0), Some(new));
        // A read that began after it is cached.
        c.forget(0, BLOCK);
        let epoch = c.epoch(0);
        c.insert_clean(0, old.clone(), true, epoch);
        assert_eq!(c.get(0), Some(old));
    }

    #[test]
    fn unpinned_blocks_are_copied_unless_their_own() {
        let c = BufferCache::new(SHARDS as u64 * BLOCK * 4);
        // A block sliced from a larger buffer is copied when it turns
        // clean, so the larger buffer is not held; a buffer of its own is
        // kept as it is.
        let big = Bytes::from(vec![3u8; 2 * BLOCK as usize]);
        let sliced = big.slice(0..BLOCK as usize);
        let own = Bytes::from(vec![4u8; BLOCK as usize]);
        let (p1, p2) = (c.new_pin(), c.new_pin());
        c.pin(0, sliced.clone(), p1, false);
        c.pin(BLOCK, own.clone(), p2, true);
        c.unpin(0, p1, true);
        c.unpin(BLOCK, p2, true);
        let (a, b) = (c.get(0).unwrap(), c.get(BLOCK).unwrap());
        assert_eq!((a.as_ref(), b.as_ref()), (sliced.as_ref(), own.as_ref()));
        assert_ne!(a.as_ptr(), sliced.as_ptr(), "a slice was cached uncopied");
        assert_eq!(b.as_ptr(), own.as_ptr(), "a block of its own was copied");
    }

    #[test]
    fn dirty_onodes_are_not_evicted() {
        let some = Some(Arc::new(Onode::default()));
        let one = Cached::new(&ObjectId::new(Collection::new(1, 1), "o10"), some, 0).bytes;
        let mut c = OnodeCache::new(16 * one);
        let coll = Collection::new(1, 1);
        for i in 0..40u64 {
            let oid = ObjectId::new(coll, format!("o{i}"));
            c.update(oid, Some(Arc::new(Onode::default())), i + 1, 10);
        }
        // 30 entries are dirty (seq > 10): all stay; clean ones go.
        assert_eq!(c.len(), 30);
        assert_eq!(c.dirty_in(coll, 10).len(), 30);
        c.trim(40);
        assert_eq!(c.len(), 16);
        assert!(matches!(
            c.lookup(&ObjectId::new(coll, "o39")),
            Lookup::Present(_)
        ));
        c.update(ObjectId::new(coll, "gone"), None, 41, 40);
        assert!(matches!(
            c.lookup(&ObjectId::new(coll, "gone")),
            Lookup::Absent
        ));
    }
}
