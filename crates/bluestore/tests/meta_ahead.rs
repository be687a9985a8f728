//! An object's onode read ahead of an op (`ObjectStore::load_meta`), on a
//! thread of the caller's choosing and without the store's state lock: the
//! op then finds it in memory, an absent object is remembered as absent,
//! and an onode changed by a transaction while it was being read is never
//! cached stale.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cairn_device::{BlockDevice, MemDevice};
use cairn_kv::{Batch, Kv, MemKv};
use cairn_store::{ObjectStore, StoreError};
use common::*;
use parking_lot::{Condvar, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    Open,
    /// The next scan waits until released.
    HoldNext,
    /// A scan is waiting.
    Holding,
}

/// A key-value store whose next scan can be held, between an onode's core
/// (a get) and its extent-map shards (a scan) being read.
struct ScanGate {
    inner: MemKv,
    gate: Mutex<Gate>,
    moved: Condvar,
}

impl ScanGate {
    fn hold_next(&self) {
        *self.gate.lock() = Gate::HoldNext;
    }

    fn wait_holding(&self) {
        let mut gate = self.gate.lock();
        while *gate != Gate::Holding {
            let timed_out = self
                .moved
                .wait_for(&mut gate, Duration::from_secs(10))
                .timed_out();
            assert!(!timed_out, "no scan came to the gate");
        }
    }

    fn release(&self) {
        *self.gate.lock() = Gate::Open;
        self.moved.notify_all();
    }
}

impl Kv for ScanGate {
    fn get(&self, key: &[u8]) -> cairn_kv::Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> cairn_kv::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut gate = self.gate.lock();
        if *gate == Gate::HoldNext {
            *gate = Gate::Holding;
            self.moved.notify_all();
            while *gate == Gate::Holding {
                self.moved.wait(&mut gate);
            }
        }
        drop(gate);
        self.inner.scan(start, end, limit)
    }
    fn write(&self, batch: Batch, sync: bool) -> cairn_kv::Result<()> {
        self.inner.write(batch, sync)
    }
    fn sync(&self) -> cairn_kv::Result<()> {
        self.inner.sync()
    }
}

const CACHE: u64 = 64 * MIB;

/// A new store in memory over `kv`, with caches of `CACHE` bytes.
fn store_over(kv: Arc<dyn Kv>) -> Arc<cairn_bluestore::BlueStore> {
    let device: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * MIB));
    cairn_bluestore::mkfs(device.as_ref(), kv.as_ref(), &Default::default()).unwrap();
    let store = cairn_bluestore::BlueStore::mount(device, kv, Default::default()).unwrap();
    store.resize_caches(CACHE);
    store
}

fn gated_store() -> (Arc<cairn_bluestore::BlueStore>, Arc<ScanGate>) {
    let kv = Arc::new(ScanGate {
        inner: MemKv::new(),
        gate: Mutex::new(Gate::Open),
        moved: Condvar::new(),
    });
    (store_over(kv.clone()), kv)
}

/// Drop every clean onode from memory: once the key-value store holds
/// every committed batch, shrink the caches to nothing and back.
fn evict_all(store: &cairn_bluestore::BlueStore) {
    store.list_objects(C1).unwrap();
    store.resize_caches(0);
    store.resize_caches(CACHE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_onode_read_ahead_is_found_in_memory() {
    let (store, _kv) = gated_store();
    let o = oid(C1, "o");
    commit(&*store, tx(|t| t.write(&o, 0, bytes(pattern(1, 8192))))).await;
    evict_all(&store);
    assert!(!store.meta_ready(&o), "{o} still cached");

    store.load_meta(&o).unwrap();
    assert!(store.meta_ready(&o));
    let before = store.perf();
    assert_eq!(before.onode_cache_loaded_ahead, 1);
    assert_eq!(read(&*store, &o, 0, 8192).await, pattern(1, 8192));
    assert_eq!(store.stat(&o).unwrap().size, 8192);
    assert_eq!(
        store.perf().onode_cache_misses,
        before.onode_cache_misses,
        "the op read the onode again"
    );

    // An object that does not exist is remembered as absent.
    let absent = oid(C1, "absent");
    store.load_meta(&absent).unwrap();
    assert!(store.meta_ready(&absent));
    assert!(matches!(store.stat(&absent), Err(StoreError::NotFound(_))));
    // And created as any other.
    commit(
        &*store,
        tx(|t| t.write(&absent, 0, bytes(pattern(2, 4096)))),
    )
    .await;
    assert_eq!(read(&*store, &absent, 0, 4096).await, pattern(2, 4096));
    assert_eq!(store.perf().onode_cache_loaded_ahead, 2);
    assert!(store.fsck(true, false).unwrap().is_clean());
}

/// The read-ahead takes the onode's core, then waits before its shards;
/// meanwhile a transaction grows the object and its onode leaves the cache
/// again. What the read-ahead then holds (the old core with the new
/// shards) must not be cached: the object reads back as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_onode_changed_while_read_ahead_is_not_cached() {
    let (store, kv) = gated_store();
    let o = oid(C1, "o");
    commit(&*store, tx(|t| t.write(&o, 0, bytes(pattern(1, 8192))))).await;
    evict_all(&store);

    kv.hold_next();
    let ahead = {
        let (store, o) = (store.clone(), o.clone());
        std::thread::spawn(move || store.load_meta(&o))
    };
    kv.wait_holding();
    commit(&*store, tx(|t| t.write(&o, 8192, bytes(pattern(2, 4096))))).await;
    evict_all(&store);
    assert!(!store.meta_ready(&o));
    kv.release();
    ahead.join().expect("the read-ahead").unwrap();

    assert!(
        !store.meta_ready(&o),
        "an onode read across a change to it was cached"
    );
    assert_eq!(store.perf().onode_cache_loaded_ahead, 0);
    assert_eq!(store.stat(&o).unwrap().size, 12288);
    let mut want = pattern(1, 8192);
    want.extend_from_slice(&pattern(2, 4096));
    assert_eq!(read(&*store, &o, 0, 12288).await, want);
}

/// Metadata the key-value store holds in memory is taken from there at
/// once when asked whether an op is ready: no read ahead is needed, and
/// the op finds the onode cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_onode_the_key_value_store_holds_in_memory_is_ready_at_once() {
    let store = store_over(Arc::new(MemKv::new()));
    let o = oid(C1, "o");
    commit(&*store, tx(|t| t.write(&o, 0, bytes(pattern(3, 8192))))).await;
    evict_all(&store);
    let before = store.perf();
    assert!(store.meta_ready(&o), "MemKv holds everything in memory");
    assert_eq!(
        store.perf().onode_cache_loaded_ahead,
        before.onode_cache_loaded_ahead + 1
    );
    assert_eq!(read(&*store, &o, 0, 8192).await, pattern(3, 8192));
    assert_eq!(store.perf().onode_cache_misses, before.onode_cache_misses);
}
