//! Device faults: a read error is an error for that read only; a failed
//! data write or flush fails the store (that commit and every later submit
//! return errors), never acknowledges what is not durable, and a remount
//! shows every acknowledged transaction and nothing else.

mod common;

use std::sync::Arc;

use cairn_device::{BlockDevice, CrashPolicy, FaultDevice, FaultOn};
use cairn_store::memstore::MemStore;
use cairn_store::{ObjectStore, StoreError, Transaction};
use common::*;

fn failed<T>(r: cairn_store::Result<T>, what: &str) {
    match r {
        Err(StoreError::Failed(_)) => {}
        Err(e) => panic!("{what}: expected Failed, got {e:?}"),
        Ok(_) => panic!("{what}: expected Failed, got Ok"),
    }
}

/// Where `needle` is on the device now.
fn locate(dev: &FaultDevice, needle: &[u8]) -> u64 {
    find(&dev.current_image().to_vec(), needle).expect("data is on the device") as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_error_fails_that_read_only() {
    let mut s = FaultStores::new(64 * MIB);
    let (a, b) = (oid(C1, "a"), oid(C1, "b"));
    let (da, db) = (pattern(1, 64 * 1024), pattern(2, 64 * 1024));
    {
        let store = s.open();
        commit(
            &*store,
            tx(|t| {
                t.write(&a, 0, bytes(da.clone()))
                    .write(&b, 0, bytes(db.clone()))
            }),
        )
        .await;
    }
    // Remounted: nothing is cached, every read goes to the device.
    let store = s.open();
    let bad = locate(&s.device, &da[8192..8192 + 64]);
    s.device.inject_eio(bad..bad + 4096, FaultOn::Reads);

    match store.read(&a, 0, da.len() as u64).await {
        Err(StoreError::Io(_)) => {}
        other => panic!("expected an I/O error, got {:?}", other.map(|v| v.len())),
    }
    assert!(s.device.injected_errors() >= 1);
    // Around the bad block, other objects, and writes: all fine.
    assert_bytes(&read(&*store, &a, 0, 8192).await, &da[..8192], "a before");
    assert_bytes(
        &read(&*store, &a, 12288, 4096).await,
        &da[12288..16384],
        "a after",
    );
    assert_bytes(&read_all(&*store, &b).await, &db, "b");
    let c = oid(C2, "c");
    commit(&*store, tx(|t| t.write(&c, 0, bytes(vec![3; 5000])))).await;
    assert_eq!(read_all(&*store, &c).await, vec![3; 5000]);

    // A write that must read the bad block first fails, changes nothing,
    // and does not fail the store.
    let r = store.submit(tx(|t| t.write(&a, 8192 + 100, bytes(vec![9; 10]))));
    assert!(matches!(r, Err(StoreError::Io(_))), "{:?}", r.map(|_| ()));
    commit(
        &*store,
        tx(|t| t.set_attr(&c, "still", bytes(b"working".to_vec()))),
    )
    .await;

    s.device.clear_faults();
    assert_bytes(
        &read_all(&*store, &a).await,
        &da,
        "a after clearing the fault",
    );
}

/// Acknowledged transactions on `store` and in `model`.
async fn populate(store: &dyn ObjectStore, model: &MemStore, seed: u64) {
    let mut w = Workload::new(seed, Workload::objects(4), 256 * 1024, 128 * 1024);
    for _ in 0..25 {
        let t = w.next_txn();
        model.submit(t.clone()).unwrap().await.unwrap();
        commit(store, t).await;
    }
    // Ensure both write paths are among the acknowledged ones.
    let o = oid(C1, "fixed");
    let t = tx(|t| t.write(&o, 0, bytes(pattern(5, 64 * 1024))));
    model.submit(t.clone()).unwrap().await.unwrap();
    commit(store, t).await;
    let t = tx(|t| t.write(&o, 4096, bytes(pattern(6, 4096))));
    model.submit(t.clone()).unwrap().await.unwrap();
    commit(store, t).await;
}

/// After the store failed: every way of coming back shows exactly the
/// acknowledged state.
async fn remounts_show_acknowledged(s: &mut FaultStores, model: &MemStore) {
    let want = dump_of(model).await;
    let failed_dev = s.device.clone();
    let failed_kv = s.kv.clone();
    // Power loss right after the failure (unflushed writes lost).
    for (seed, policy) in [
        (1, CrashPolicy::DropAll),
        (2, CrashPolicy::Torn),
        (3, CrashPolicy::KeepAll),
    ] {
        s.replace(
            FaultDevice::from_image(failed_dev.crash_image(seed, policy)),
            failed_kv.crash_image(),
        );
        let store = s.open();
        assert_same(
            &dump_of(&*store).await,
            &want,
            &format!("after power loss ({policy:?})"),
        );
        let r = store.fsck(true, false).unwrap();
        assert!(r.is_clean(), "{policy:?}: {r:?}");
    }
    // A restart without power loss, on a copy of the device as it is.
    s.device = Arc::new(FaultDevice::from_image(failed_dev.current_image()));
    s.kv = failed_kv.clone();
    let store = s.open();
    assert_same(&dump_of(&*store).await, &want, "after restart");
    drop(store);
    // The same device, faults cleared.
    failed_dev.clear_faults();
    s.device = failed_dev;
    s.kv = failed_kv;
    let store = s.open();
    assert_same(&dump_of(&*store).await, &want, "on the same device");
    assert!(store.fsck(true, false).unwrap().is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_data_write_fails_the_store() {
    let mut s = FaultStores::new(64 * MIB);
    let model = MemStore::new();
    let store = s.open();
    populate(&*store, &model, 1).await;
    let size = s.device.size();
    // Wait for deferred writes so that the data write below is the first
    // write to fail.
    let d = store.perf().deferred_writes;
    wait_for("deferred writes applied", || {
        store.perf().deferred_applied >= d
    })
    .await;

    s.device.inject_eio(4096..size, FaultOn::Writes);
    let lost = oid(C2, "lost");
    // The store's own background journal writes (after the deferred
    // writes above) may meet the fault first: then this submit is refused
    // at once, as any submit to a failed store.
    match store.submit(tx(|t| t.write(&lost, 0, bytes(pattern(9, 100_000))))) {
        Ok(c) => failed(c.await, "the commit whose data write failed"),
        Err(e) => failed(Err::<(), _>(e), "a submit after a background write failed"),
    }
    failed(
        store.submit(tx(|t| t.touch(&oid(C2, "later")))),
        "a later submit",
    );
    failed(store.submit(Transaction::new()), "an empty submit");
    // Reads of acknowledged data still work.
    assert_same(
        &dump_of(&*store).await,
        &dump_of(&model).await,
        "failed store reads",
    );
    drop(store);
    remounts_show_acknowledged(&mut s, &model).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_flush_fails_the_store() {
    let mut s = FaultStores::new(64 * MIB);
    let model = MemStore::new();
    let store = s.open();
    populate(&*store, &model, 2).await;
    let d = store.perf().deferred_writes;
    wait_for("deferred writes applied", || {
        store.perf().deferred_applied >= d
    })
    .await;

    s.device.fail_flush_once();
    let lost = oid(C2, "lost");
    // Several in flight: the failing group and every later one fail; a
    // submit after the failure is refused at once. (The store's own
    // background work may meet the failing flush first: then even the
    // first submit is refused.)
    let mut commits = Vec::new();
    for i in 0..4u64 {
        match store.submit(tx(|t| {
            t.write(&lost, i * 70_000, bytes(pattern(i, 70_000)))
        })) {
            Ok(c) => commits.push(c),
            Err(e) => failed(Err::<(), _>(e), "a submit after the failure"),
        }
    }
    for c in commits {
        failed(c.await, "a commit at or after the failed flush");
    }
    failed(store.submit(tx(|t| t.touch(&lost))), "a later submit");
    drop(store);
    remounts_show_acknowledged(&mut s, &model).await;
}

/// A small overwrite commits through the journal; applying it in place
/// later fails (the data region refuses writes), which fails the store; the
/// write, acknowledged, survives a power loss through replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_deferred_apply_fails_the_store_and_replay_recovers() {
    let mut s = FaultStores::new(64 * MIB);
    let a = oid(C1, "a");
    let mut da = pattern(1, 64 * 1024);
    let store = s.open();
    commit(&*store, tx(|t| t.write(&a, 0, bytes(da.clone())))).await;

    let injected = s.device.injected_errors();
    // The journal lies before the data space: commits still work.
    let data_start = store.superblock().data_start;
    s.device.inject_eio(data_start..64 * MIB, FaultOn::Writes);
    let block = pattern(2, 4096);
    commit(&*store, tx(|t| t.write(&a, 16384, bytes(block.clone())))).await;
    da[16384..20480].copy_from_slice(&block);
    assert_eq!(store.perf().deferred_writes, 1);
    wait_for("the deferred write to fail", || {
        s.device.injected_errors() > injected
    })
    .await;
    wait_for("the store to fail", || {
        matches!(store.submit(Transaction::new()), Err(StoreError::Failed(_)))
    })
    .await;
    // The acknowledged write is still what reads see.
    assert_bytes(&read_all(&*store, &a).await, &da, "failed store reads");
    drop(store);

    s.device.clear_faults();
    s.replace(
        FaultDevice::from_image(s.device.crash_image(7, CrashPolicy::DropAll)),
        s.kv.crash_image(),
    );
    let store = s.open();
    assert!(store.replayed() >= 1, "the deferred write is replayed");
    assert_bytes(&read_all(&*store, &a).await, &da, "after power loss");
    assert!(store.fsck(true, false).unwrap().is_clean());
}

/// A failed flush of a small overwrite's journal record fails that commit
/// and the store; after a power loss the object holds the old data (or, if
/// the unflushed record happened to survive, the new data): never a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_journal_flush_fails_the_commit() {
    for policy in [CrashPolicy::DropAll, CrashPolicy::KeepAll] {
        let mut s = FaultStores::new(64 * MIB);
        let a = oid(C1, "a");
        let old = pattern(1, 64 * 1024);
        let store = s.open();
        commit(&*store, tx(|t| t.write(&a, 0, bytes(old.clone())))).await;
        s.device.fail_flush_once();
        let block = pattern(2, 4096);
        let t = tx(|t| t.write(&a, 16384, bytes(block.clone())));
        let r = store.submit(t).unwrap().await;
        assert!(matches!(r, Err(StoreError::Failed(_))), "{r:?}");
        assert!(matches!(
            store.submit(Transaction::new()),
            Err(StoreError::Failed(_))
        ));
        drop(store);
        s.replace(
            FaultDevice::from_image(s.device.crash_image(3, policy)),
            s.kv.crash_image(),
        );
        let store = s.open();
        let got = read_all(&*store, &a).await;
        let mut new = old.clone();
        new[16384..20480].copy_from_slice(&block);
        assert!(
            got == old || got == new,
            "{policy:?}: neither old nor new data"
        );
        if policy == CrashPolicy::DropAll {
            assert_bytes(&got, &old, "an unflushed record is lost with the power");
        }
        assert!(store.fsck(true, false).unwrap().is_clean());
    }
}

/// A [`MemKv`] whose writes fail once `failing` is set, counting every
/// write and sync attempted after the first failure.
struct FailingKv {
    inner: cairn_kv::MemKv,
    failing: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicBool,
    after_failure: std::sync::atomic::AtomicU64,
}

impl cairn_kv::Kv for FailingKv {
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
    fn write(&self, batch: cairn_kv::Batch, sync: bool) -> cairn_kv::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.failed.load(SeqCst) {
            self.after_failure.fetch_add(1, SeqCst);
        }
        if self.failing.load(SeqCst) {
            self.failed.store(true, SeqCst);
            return Err(cairn_kv::KvError::Backend("injected write error".into()));
        }
        self.inner.write(batch, sync)
    }
    fn sync(&self) -> cairn_kv::Result<()> {
        if self.failed.load(std::sync::atomic::Ordering::SeqCst) {
            self.after_failure
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.sync()
    }
}

/// A failed key-value write fails the store and every commit not yet
/// acknowledged (commits whose journal record was durable may already be:
/// the journal replays them); nothing more is written to the key-value
/// store after it (a later batch must never land without an earlier one),
/// and a remount shows every acknowledged transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_metadata_write_fails_the_store_and_writes_nothing_after() {
    use std::sync::atomic::Ordering::SeqCst;
    let device = Arc::new(cairn_device::MemDevice::new(64 * MIB));
    let kv = Arc::new(FailingKv {
        inner: cairn_kv::MemKv::new(),
        failing: false.into(),
        failed: false.into(),
        after_failure: 0.into(),
    });
    cairn_bluestore::mkfs(device.as_ref(), kv.as_ref(), &Default::default()).unwrap();
    let mount = |device: &Arc<cairn_device::MemDevice>, kv: &Arc<FailingKv>| {
        let d: Arc<dyn BlockDevice> = device.clone();
        let k: Arc<dyn cairn_kv::Kv> = kv.clone();
        cairn_bluestore::BlueStore::mount(d, k, Default::default()).unwrap()
    };
    let store = mount(&device, &kv);
    let model = MemStore::new();
    populate(&*store, &model, 3).await;

    // Many commits in flight (several journal records), then the failure.
    let objects: Vec<_> = (0..8).map(|i| oid(C1, &format!("o{i}"))).collect();
    let mut waits = Vec::new();
    for round in 0..16u64 {
        if round == 4 {
            kv.failing.store(true, SeqCst);
        }
        for (i, o) in objects.iter().enumerate() {
            let t = tx(|t| t.write(o, 0, bytes(pattern(round * 100 + i as u64, 4096))));
            match store.submit(t) {
                Ok(c) => waits.push((round, i, c)),
                Err(e) => assert!(matches!(e, StoreError::Failed(_)), "{e:?}"),
            }
        }
    }
    let mut acked = Vec::new();
    for (round, i, c) in waits {
        match c.await {
            Ok(()) => acked.push((round, i)),
            Err(StoreError::Failed(_)) => {}
            Err(e) => panic!("expected Failed, got {e:?}"),
        }
    }
    // Commits whose journal record was durable before the failed write may
    // be acknowledged (they are acknowledged before their key-value write,
    // and the journal replays them: checked below), so all of these may
    // have been, and the failure may come after the last one.
    wait_for("the store to fail", || {
        store.submit(Transaction::new()).is_err()
    })
    .await;
    assert!(
        kv.failed.load(SeqCst),
        "the store never wrote after injection"
    );
    failed(
        store.submit(Transaction::new()),
        "a submit after the failure",
    );
    drop(store);
    assert_eq!(
        kv.after_failure.load(SeqCst),
        0,
        "key-value writes or syncs after the failed write"
    );

    // Remount on the same device and key-value store (writes work again):
    // each acknowledged write is there (the last one acknowledged per
    // object, or a later unacknowledged one, never older data).
    kv.failing.store(false, SeqCst);
    let store = mount(&device, &kv);
    for (i, o) in objects.iter().enumerate() {
        let Some(last) = acked.iter().filter(|(_, j)| *j == i).map(|(r, _)| *r).max() else {
            continue;
        };
        let got = read(&*store, o, 0, 4096).await;
        let round = (last..16)
            .find(|r| got == pattern(r * 100 + i as u64, 4096))
            .unwrap_or_else(|| panic!("{o}: not the data of round {last} or later"));
        assert!(round >= last);
    }
    assert!(store.fsck(true, false).unwrap().is_clean());
}
