//! A commit is acknowledged once its journal record is durable, before its
//! batch reaches the key-value store; whatever is read from the key-value
//! store (omap, collection attributes, PG logs, listings, fsck) still
//! includes every acknowledged write. A key-value store whose writes can be
//! held shows both: the commit returns while its write is held, and the
//! reads wait for it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cairn_device::{BlockDevice, MemDevice};
use cairn_kv::{Batch, Kv, MemKv};
use cairn_store::{ObjectStore, Transaction, Version};
use common::*;
use parking_lot::{Condvar, Mutex};

/// A key-value store whose writes wait while `held`.
struct HeldKv {
    inner: MemKv,
    held: Mutex<bool>,
    opened: Condvar,
}

/// Releases the key-value store's writes when dropped, so that a failing
/// test unwinds instead of hanging in unmount.
struct Held(Arc<HeldKv>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl HeldKv {
    fn hold(self: &Arc<Self>) -> Held {
        *self.held.lock() = true;
        Held(self.clone())
    }

    fn release(&self) {
        *self.held.lock() = false;
        self.opened.notify_all();
    }
}

impl Kv for HeldKv {
    fn get(&self, key: &[u8]) -> cairn_kv::Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> cairn_kv::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.scan(start, end, limit)
    }
    fn write(&self, batch: Batch, sync: bool) -> cairn_kv::Result<()> {
        let mut held = self.held.lock();
        while *held {
            self.opened.wait(&mut held);
        }
        drop(held);
        self.inner.write(batch, sync)
    }
    fn sync(&self) -> cairn_kv::Result<()> {
        self.inner.sync()
    }
}

/// A store in memory over a [`HeldKv`].
fn gated_store() -> (Arc<cairn_bluestore::BlueStore>, Arc<HeldKv>) {
    let device: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * MIB));
    let kv = Arc::new(HeldKv {
        inner: MemKv::new(),
        held: Mutex::new(false),
        opened: Condvar::new(),
    });
    cairn_bluestore::mkfs(device.as_ref(), kv.as_ref(), &Default::default()).unwrap();
    let k: Arc<dyn Kv> = kv.clone();
    let store = cairn_bluestore::BlueStore::mount(device, k, Default::default()).unwrap();
    (store, kv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_before_the_metadata_write_and_read_after_it() {
    let (store, kv) = gated_store();
    let o = oid(C1, "o");
    commit(&*store, tx(|t| t.write(&o, 0, bytes(pattern(1, 8192))))).await;
    // Its batch too is in the key-value store once a listing returns.
    assert_eq!(store.list_objects(C1).unwrap(), vec!["o".to_string()]);

    // With key-value writes held, a commit (a deferred overwrite, omap,
    // a collection attribute, a log entry, a new object) is acknowledged:
    // its journal record is durable.
    let held = kv.hold();
    let mut t = Transaction::new();
    t.write(&o, 4096, bytes(pattern(2, 4096)));
    t.omap_set(&o, vec![("k".into(), Bytes::from_static(b"v"))]);
    t.coll_set_attr(C1, "last_update", Bytes::from_static(b"7"));
    t.log_append(C1, Version::new(1, 7), Bytes::from_static(b"entry"));
    t.touch(&oid(C1, "new"));
    let c = store.submit(t).unwrap();
    tokio::time::timeout(Duration::from_secs(10), c)
        .await
        .expect("the commit waited for its key-value write")
        .unwrap();

    // Data and object metadata come from memory at once.
    let mut want = pattern(1, 8192);
    want[4096..].copy_from_slice(&pattern(2, 4096));
    assert_eq!(read(&*store, &o, 0, 8192).await, want);

    // What is read from the key-value store waits for the write.
    let released = Arc::new(AtomicBool::new(false));
    let reader = {
        let (store, o, released) = (store.clone(), o.clone(), released.clone());
        std::thread::spawn(move || {
            let omap = store.omap_get(&o, &["k".to_string()]).unwrap();
            assert!(released.load(SeqCst), "omap read before its write");
            assert_eq!(omap.get("k").map(|v| v.as_slice()), Some(&b"v"[..]));
            assert_eq!(
                store.coll_get_attr(C1, "last_update").unwrap(),
                Some(b"7".to_vec())
            );
            let log = store.read_log(C1).unwrap();
            assert_eq!(log, vec![(Version::new(1, 7), b"entry".to_vec())]);
            let mut names = store.list_objects(C1).unwrap();
            names.sort();
            assert_eq!(names, vec!["new".to_string(), "o".to_string()]);
            assert!(store.list_collections().unwrap().contains(&C1));
            assert_eq!(store.omap_list(&o, None, 10).unwrap().len(), 1);
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    released.store(true, SeqCst);
    drop(held);
    reader.join().expect("reads after the acknowledgement");
    assert!(store.fsck(true, false).unwrap().is_clean());
}

/// Removing a collection right after an acknowledged create in it, whose
/// batch is not in the key-value store yet, removes that object too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_removed_after_an_acknowledged_create_takes_the_object() {
    let (store, kv) = gated_store();
    commit(
        &*store,
        tx(|t| t.write(&oid(C1, "a"), 0, bytes(pattern(1, 4096)))),
    )
    .await;
    assert_eq!(store.list_objects(C1).unwrap(), vec!["a".to_string()]);

    // The create is acknowledged while its batch is held; the commit
    // thread, which wrote its record itself (a lone commit), waits in the
    // key-value write. The removal is built meanwhile: its scan of the
    // key-value store cannot see the object.
    let held = kv.hold();
    let x = oid(C1, "x");
    let c = store
        .submit(tx(|t| t.write(&x, 0, bytes(pattern(2, 4096)))))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), c)
        .await
        .expect("the commit waited for its key-value write")
        .unwrap();
    let removal = store.submit(tx(|t| t.remove_collection(C1))).unwrap();
    drop(held);
    removal.await.unwrap();
    assert!(store.list_objects(C1).unwrap().is_empty());
    assert!(!store.list_collections().unwrap().contains(&C1));
    assert!(store.stat(&x).is_err(), "{x} outlived its collection");
    assert!(store.fsck(true, false).unwrap().is_clean());
}

/// Records acknowledged ahead of their key-value writes are bounded: each
/// holds the space its transactions released and dirty onodes in memory,
/// so with the key-value store's writes held, acknowledgements stop after
/// a few records instead of running on until the device is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_ahead_of_the_metadata_store_are_bounded() {
    let (store, kv) = gated_store();
    let held = kv.hold();
    // Waves of two commits, so that none is a lone commit (which the
    // commit thread would answer itself, stopping at the held write).
    let mut commits = Vec::new();
    for wave in 0..20u64 {
        for i in 0..2u64 {
            let o = oid(C1, &format!("o{wave}-{i}"));
            let t = tx(|t| t.write(&o, 0, bytes(pattern(wave * 2 + i, 4096))));
            commits.push(store.submit(t).unwrap());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut acked = 0;
    let mut pending = Vec::new();
    for mut c in commits {
        match tokio::time::timeout(Duration::from_millis(1), &mut c).await {
            Ok(r) => {
                r.unwrap();
                acked += 1;
            }
            Err(_) => pending.push(c),
        }
    }
    assert!(
        acked <= 2 * 8,
        "{acked} commits acknowledged with every key-value write held"
    );
    drop(held);
    for c in pending {
        c.await.unwrap();
    }
    assert_eq!(store.list_objects(C1).unwrap().len(), 40);
    assert!(store.fsck(true, false).unwrap().is_clean());
}
