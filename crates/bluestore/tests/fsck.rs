//! fsck: clean after a random workload with remounts (and the store equal
//! to a model); finds and repairs leaked space; reports space that is both
//! free and used.

mod common;

use std::sync::Arc;

use cairn_bluestore::{BlueStore, CompressionMode};
use cairn_kv::{Batch, Kv};
use cairn_store::memstore::MemStore;
use cairn_store::ObjectStore;
use common::*;

/// Both fsck depths are clean and the space adds up.
#[track_caller]
fn check_clean(store: &BlueStore, what: &str) {
    let total = store.statfs().unwrap().total_bytes;
    for deep in [false, true] {
        let r = store.fsck(deep, false).unwrap();
        assert!(r.is_clean(), "{what}: fsck(deep={deep}): {r:?}");
        assert_eq!(r.used_bytes + r.free_bytes, total, "{what}: used + free");
        assert_eq!(
            store.statfs().unwrap().used_bytes,
            r.used_bytes,
            "{what}: statfs and fsck agree on used space"
        );
    }
}

async fn workload_stays_consistent(mut s: MemStores, seed: u64) {
    let model = MemStore::new();
    let mut w = Workload::new(seed, Workload::objects(6), 384 * 1024, 300 * 1024);
    let (mut deferred, mut direct) = (0, 0);
    for remount in 0..4 {
        let store = s.open();
        if remount > 0 {
            assert_same(
                &dump_of(&*store).await,
                &dump_of(&model).await,
                "after remount",
            );
            check_clean(&store, &format!("after remount {remount}"));
        }
        let mut commits = Vec::new();
        for _ in 0..40 {
            let t = w.next_txn();
            model.submit(t.clone()).unwrap().await.unwrap();
            commits.push(store.submit(t).expect("submit"));
            if commits.len() >= 8 {
                for c in commits.drain(..) {
                    c.await.expect("commit");
                }
            }
        }
        for c in commits.drain(..) {
            c.await.expect("commit");
        }
        assert_same(
            &dump_of(&*store).await,
            &dump_of(&model).await,
            "before remount",
        );
        check_clean(&store, &format!("mounted, round {remount}"));
        deferred += store.perf().deferred_writes;
        direct += store.perf().direct_writes;
    }
    assert!(
        deferred > 0 && direct > 0,
        "both paths ran: {deferred} {direct}"
    );
    let store = s.open();
    check_clean(&store, "at the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_is_clean_after_a_random_workload() {
    workload_stays_consistent(MemStores::new(64 * MIB), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_is_clean_after_a_random_workload_64k_units() {
    let mut s = MemStores::new(64 * MIB);
    s.mkfs.min_alloc_size = 64 * KIB;
    workload_stays_consistent(s, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_is_clean_after_a_random_compressed_workload() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.compression_mode = CompressionMode::Force;
    s.mount.compression_min_blob_size = 4096;
    workload_stays_consistent(s, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_is_clean_after_a_random_workload_tiny_cache() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.cache.cache_size = 256 * KIB; // blocks are evicted at once
    workload_stays_consistent(s, 4).await;
}

/// A store with some objects, unmounted.
async fn populated() -> MemStores {
    let mut s = MemStores::new(64 * MIB);
    let store = s.open();
    let mut w = Workload::new(9, Workload::objects(4), 256 * 1024, 128 * 1024);
    for _ in 0..30 {
        commit(&*store, w.next_txn()).await;
    }
    commit(
        &*store,
        tx(|t| t.write(&oid(C1, "anchor"), 0, bytes(pattern(1, 64 * 1024)))),
    )
    .await;
    s
}

/// The free list in the database: (offset, len).
fn free_list(kv: &dyn Kv) -> Vec<(u64, u64)> {
    kv.scan(b"F", b"G", usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            (
                u64::from_be_bytes(k[1..9].try_into().unwrap()),
                u64::from_be_bytes(v[..].try_into().unwrap()),
            )
        })
        .collect()
}

fn free_key(offset: u64) -> Vec<u8> {
    let mut k = vec![b'F'];
    k.extend_from_slice(&offset.to_be_bytes());
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_finds_and_repairs_leaked_space() {
    let mut s = populated().await;
    let au = s.mkfs.min_alloc_size;
    // Leak one unit: shrink a free extent from its front.
    let (o, l) = free_list(&*s.kv)
        .into_iter()
        .find(|&(_, l)| l >= 2 * au)
        .expect("a free extent of two units");
    let mut b = Batch::new();
    b.delete(free_key(o));
    b.put(free_key(o + au), (l - au).to_be_bytes().to_vec());
    s.kv.write(b, true).unwrap();

    let store = s.open();
    let total = store.statfs().unwrap().total_bytes;
    let r = store.fsck(false, false).unwrap();
    assert_eq!(r.leaked_bytes, au, "{r:?}");
    assert!(r.errors.is_empty(), "{r:?}");
    assert!(!r.is_clean());
    assert_eq!(r.used_bytes + r.free_bytes + r.leaked_bytes, total);
    let free_before = store.perf().free_bytes;

    let r = store.fsck(false, true).unwrap();
    assert_eq!(r.repaired_bytes, au, "{r:?}");
    assert_eq!(store.perf().free_bytes, free_before + au);
    check_clean(&store, "after repair");
    let want = dump_of(&*store).await;
    drop(store);

    let store = s.open();
    check_clean(&store, "after repair and remount");
    assert_same(&dump_of(&*store).await, &want, "data after repair");
    // The repaired unit is usable: fill the store completely.
    let free = store.statfs().unwrap();
    let fill = oid(C2, "fill");
    let len = free.total_bytes - free.used_bytes;
    commit(
        &*store,
        tx(|t| t.write(&fill, 0, bytes(vec![7; len as usize]))),
    )
    .await;
    assert_eq!(store.statfs().unwrap().used_bytes, total);
    check_clean(&store, "full");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_reports_space_both_free_and_used() {
    let s = populated().await;
    // Mark the first used unit free (not touching any free extent, so the
    // free list still loads).
    let au = s.mkfs.min_alloc_size;
    let free = free_list(&*s.kv);
    let data_start = match cairn_bluestore::read_label(&*s.device).unwrap() {
        cairn_bluestore::Label::Store(sb) => sb.data_start,
        other => panic!("{other:?}"),
    };
    let used_unit = (data_start / au..)
        .map(|k| k * au)
        .find(|&u| free.iter().all(|&(o, l)| u + au < o || u > o + l))
        .unwrap();
    let mut b = Batch::new();
    b.put(free_key(used_unit), au.to_be_bytes().to_vec());
    s.kv.write(b, true).unwrap();

    let dev: Arc<dyn cairn_device::BlockDevice> = s.device.clone();
    let kv: Arc<dyn Kv> = s.kv.clone();
    let store = BlueStore::mount(dev, kv, s.mount.clone()).unwrap();
    let r = store.fsck(false, false).unwrap();
    assert!(
        r.errors.iter().any(|e| e.contains("is in use")),
        "double use not reported: {r:?}"
    );
    // Repair does not touch a store with errors.
    let r = store.fsck(false, true).unwrap();
    assert_eq!(r.repaired_bytes, 0);
}

/// Deep fsck right after deferred overwrites are acknowledged, while their
/// in-place writes may still be on their way to the device: committed data
/// is not corruption.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_fsck_right_after_deferred_overwrites() {
    let mut s = MemStores::new(64 * MIB);
    let store = s.open();
    let objects: Vec<_> = (0..4).map(|i| oid(C1, &format!("o{i}"))).collect();
    for (i, o) in objects.iter().enumerate() {
        commit(
            &*store,
            tx(|t| t.write(o, 0, bytes(pattern(i as u64, 256 * 1024)))),
        )
        .await;
    }
    for round in 0..200u64 {
        let mut t = cairn_store::Transaction::new();
        for (i, o) in objects.iter().enumerate() {
            t.write(
                o,
                ((round + i as u64) % 60) * 4096,
                bytes(pattern(round * 10 + i as u64, 4096)),
            );
        }
        commit(&*store, t).await;
        let r = store.fsck(true, false).unwrap();
        assert!(r.is_clean(), "round {round}: {r:?}");
    }
    assert!(store.perf().deferred_writes >= 200);
}
