//! Write paths: which writes go deferred (in place, through the WAL) and
//! which go direct (copy-on-write), and that unaligned writes of every shape
//! read back exactly, before and after a remount.

mod common;

use std::sync::Arc;

use cairn_store::ObjectStore;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// (deferred txns, direct shard-writes) so far.
fn paths(store: &cairn_bluestore::BlueStore) -> (u64, u64) {
    let p = store.perf();
    (p.deferred_writes, p.direct_writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_overwrite_goes_deferred_first_and_large_writes_direct() {
    let mut s = MemStores::new(64 * MIB);
    let store = s.open();
    let a = oid(C1, "a");
    let mut model = pattern(1, 128 * KIB as usize);

    // A first write has no space to overwrite: direct.
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    let (def0, dir0) = paths(&store);
    assert_eq!(def0, 0, "a first write is never deferred");
    assert!(dir0 >= 1, "a first write goes direct");

    // A 4 KiB aligned overwrite of written data: deferred.
    let block = pattern(2, 4096);
    model[8192..12288].copy_from_slice(&block);
    commit(&*store, tx(|t| t.write(&a, 8192, bytes(block.clone())))).await;
    assert_eq!(
        paths(&store),
        (def0 + 1, dir0),
        "4 KiB overwrite is deferred"
    );
    assert_bytes(&read_all(&*store, &a).await, &model, "object");

    // A small unaligned overwrite inside written data: deferred too (after
    // reading the rest of its blocks).
    let rmw_before = store.perf().rmw_reads;
    let small = pattern(3, 100);
    model[5000..5100].copy_from_slice(&small);
    commit(&*store, tx(|t| t.write(&a, 5000, bytes(small.clone())))).await;
    assert_eq!(paths(&store), (def0 + 2, dir0));
    assert!(
        store.perf().rmw_reads > rmw_before,
        "partial block is read first"
    );
    assert_bytes(
        &read(&*store, &a, 4096, 8192).await,
        &model[4096..12288],
        "blocks 1-2",
    );

    // Larger than deferred_max_bytes (64 KiB): direct.
    let large = pattern(4, 96 * KIB as usize);
    model[4096..4096 + large.len()].copy_from_slice(&large);
    commit(&*store, tx(|t| t.write(&a, 4096, bytes(large.clone())))).await;
    let (def, dir) = paths(&store);
    assert_eq!(def, def0 + 2, "a 96 KiB overwrite is not deferred");
    assert!(dir > dir0, "a 96 KiB overwrite goes direct");

    // One block over written data (deferred), one past the end (no space
    // to overwrite: direct).
    let tail = pattern(5, 8192);
    let end = 128 * KIB;
    model[end as usize - 4096..].copy_from_slice(&tail[..4096]);
    model.extend_from_slice(&tail[4096..]);
    commit(
        &*store,
        tx(|t| {
            t.write(&a, end - 4096, bytes(tail[..4096].to_vec())).write(
                &a,
                end,
                bytes(tail[4096..].to_vec()),
            )
        }),
    )
    .await;
    let (def2, dir2) = paths(&store);
    assert_eq!(def2, def0 + 3, "the overwrite half is deferred");
    assert!(dir2 > dir, "the hole half goes direct");
    assert_bytes(&read_all(&*store, &a).await, &model, "object");

    drop(store);
    let store = s.open();
    assert_eq!(store.replayed(), 0);
    assert_bytes(&read_all(&*store, &a).await, &model, "object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_deferred_with_deferred_max_bytes_zero() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.deferred_max_bytes = 0;
    let store = s.open();
    let a = oid(C1, "a");
    let mut model = pattern(1, 64 * KIB as usize);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    let mut rng = StdRng::seed_from_u64(7);
    for i in 0..20 {
        let off = rng.gen_range(0..60 * KIB) as usize;
        let len = rng.gen_range(1..4096usize);
        let data = pattern(100 + i, len);
        model[off..off + len].copy_from_slice(&data);
        commit(
            &*store,
            tx(|t| t.write(&a, off as u64, bytes(data.clone()))),
        )
        .await;
    }
    let p = store.perf();
    assert_eq!(p.deferred_writes, 0);
    assert_eq!(p.deferred_write_bytes, 0);
    assert!(p.direct_writes >= 21);
    assert_bytes(&read_all(&*store, &a).await, &model, "object");
    drop(store);
    let store = s.open();
    assert_bytes(&read_all(&*store, &a).await, &model, "object");
}

/// Writes of awkward shapes against a `Vec<u8>` model.
async fn unaligned_writes(s: &mut MemStores, seed: u64) {
    let store = s.open();
    let au = s.mkfs.min_alloc_size;
    let shard = s.mkfs.shard_size;
    let a = oid(C1, "unaligned");
    let mut model: Vec<u8> = Vec::new();
    let apply = |model: &mut Vec<u8>, off: u64, data: &[u8]| {
        let end = off as usize + data.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(data);
    };
    // Fixed cases: odd offsets and lengths crossing 4 KiB blocks, the
    // 256 KiB shard boundary and allocation units.
    let cases: Vec<(u64, usize)> = vec![
        (1, 1),
        (4095, 2),
        (4090, 8200),
        (shard - 3, 7),
        (shard - 5000, 10_000),
        (au - 1, 2),
        (au * 3 - 100, au as usize + 200),
        (2 * shard - 1, 3),
        (shard + 4096 + 17, 65_521),
        (12_345, 300_001),
        (7, 4089),
        (shard - 1, 1),
        (shard, 1),
    ];
    for (i, &(off, len)) in cases.iter().enumerate() {
        let data = pattern(seed * 1000 + i as u64, len);
        apply(&mut model, off, &data);
        commit(&*store, tx(|t| t.write(&a, off, bytes(data.clone())))).await;
        assert_bytes(
            &read_all(&*store, &a).await,
            &model,
            &format!("after writing {len} bytes at {off}"),
        );
    }
    // Random ones, several per transaction.
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..30u64 {
        let mut t = cairn_store::Transaction::new();
        for k in 0..rng.gen_range(1..4u64) {
            let off = rng.gen_range(0..3 * shard);
            let len = if rng.gen_bool(0.5) {
                rng.gen_range(1..9000usize)
            } else {
                rng.gen_range(1..200_000usize)
            };
            let data = pattern(seed * 100_000 + round * 10 + k, len);
            apply(&mut model, off, &data);
            t.write(&a, off, bytes(data));
        }
        commit(&*store, t).await;
        if round % 5 == 0 {
            // Reads at odd offsets too.
            let off = rng.gen_range(0..model.len() as u64);
            let len = rng.gen_range(1..100_000u64);
            let end = (off + len).min(model.len() as u64) as usize;
            assert_bytes(
                &read(&*store, &a, off, len).await,
                &model[off as usize..end],
                "partial read",
            );
        }
    }
    assert_bytes(&read_all(&*store, &a).await, &model, "object");
    let p = store.perf();
    assert!(p.deferred_writes > 0 && p.direct_writes > 0, "{p:?}");
    drop(store);

    let store = s.open();
    assert_eq!(store.stat(&a).unwrap().size, model.len() as u64);
    assert_bytes(&read_all(&*store, &a).await, &model, "after remount");
    let report = store.fsck(true, false).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_writes_read_back_exactly() {
    let mut s = MemStores::new(64 * MIB);
    unaligned_writes(&mut s, 11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_writes_read_back_exactly_with_64k_units() {
    let mut s = MemStores::new(64 * MIB);
    s.mkfs.min_alloc_size = 64 * KIB;
    unaligned_writes(&mut s, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_writes_read_back_exactly_everything_deferred() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.deferred_max_bytes = 64 * MIB;
    unaligned_writes(&mut s, 13).await;
}

/// Deferred writes reach the device before unmount completes: the next
/// mount has nothing to replay, and the device itself holds the bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_writes_are_applied_by_unmount() {
    let mut s = MemStores::new(64 * MIB);
    let a = oid(C1, "a");
    let store = s.open();
    let mut model = pattern(1, 64 * KIB as usize);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    let block = pattern(99, 4096);
    model[16384..20480].copy_from_slice(&block);
    commit(&*store, tx(|t| t.write(&a, 16384, bytes(block.clone())))).await;
    assert_eq!(store.perf().deferred_writes, 1);
    drop(store);
    assert!(
        find(&s.device.to_vec(), &block).is_some(),
        "the deferred block is on the device"
    );
    let store = s.open();
    assert_eq!(store.replayed(), 0, "nothing left to replay");
    assert_bytes(&read_all(&*store, &a).await, &model, "object");
}

/// Unmount right after submitting (commits still queued): it must still
/// wait for their deferred writes, not just for the commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmount_with_commits_in_flight_applies_their_deferred_writes() {
    let mut s = MemStores::new(64 * MIB);
    let objects: Vec<_> = (0..8).map(|i| oid(C1, &format!("o{i}"))).collect();
    let mut models: Vec<Vec<u8>> = Vec::new();
    {
        let store = s.open();
        for (i, o) in objects.iter().enumerate() {
            let data = pattern(i as u64, 64 * KIB as usize);
            commit(&*store, tx(|t| t.write(o, 0, bytes(data.clone())))).await;
            models.push(data);
        }
    }
    for round in 0..20u64 {
        let store = s.open();
        assert_eq!(
            store.replayed(),
            0,
            "round {round}: deferred writes were left behind"
        );
        let mut commits = Vec::new();
        for (i, o) in objects.iter().enumerate() {
            let off = ((round + i as u64) % 15) * 4096;
            let block = pattern(round * 100 + i as u64, 4096);
            models[i][off as usize..off as usize + 4096].copy_from_slice(&block);
            commits.push(store.submit(tx(|t| t.write(o, off, bytes(block)))).unwrap());
        }
        // Drop without waiting for anything.
        drop(store);
        for c in commits {
            c.await.expect("commit completes before unmount returns");
        }
    }
    let store = s.open();
    assert_eq!(store.replayed(), 0);
    for (o, m) in objects.iter().zip(&models) {
        assert_bytes(&read_all(&*store, o).await, m, "object after remount");
    }
}

/// A read planned before a deferred overwrite and run after it reached the
/// device returns the old or the new bytes, not a checksum error: the
/// overwrite changed the block in place under the read's plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_planned_before_an_in_place_overwrite() {
    let mut s = MemStores::new(64 * MIB);
    s.mount.cache.cache_size = 0; // blocks are not kept once written
    let store = s.open();
    let a = oid(C1, "a");
    let old = pattern(1, 64 * 1024);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(old.clone())))).await;
    let pending = store.read(&a, 0, 8192);
    let new = pattern(2, 4096);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(new.clone())))).await;
    assert_eq!(store.perf().deferred_writes, 1);
    wait_for("the deferred write applied", || {
        store.perf().deferred_applied >= 1
    })
    .await;
    let got = pending
        .await
        .expect("a read racing an overwrite is not corruption");
    assert!(
        got[..4096] == old[..4096] || got[..4096] == new[..],
        "neither old nor new bytes"
    );
    assert_bytes(&got[4096..], &old[4096..8192], "untouched block");
    assert_eq!(store.perf().checksum_errors, 0);
}

/// Overwrites of one block committed as a group by a record thread, and one
/// more right behind them committed alone, inline on the commit thread: the
/// deferred writes must reach the device in commit order. Once the lone
/// commit's group could settle before the earlier group, so a round
/// applied the older data last; only a remount showed it (reads come from
/// the cache until then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_overwrites_from_grouped_and_lone_commits_apply_in_order() {
    let mut s = MemStores::new(64 * MIB);
    let store = s.open();
    let a = oid(C1, "a");
    const BLOCKS: usize = 64;
    let mut model = pattern(7, BLOCKS * 4096);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    let mut rng = StdRng::seed_from_u64(11);
    for i in 0..12000usize {
        let at = (i % BLOCKS) * 4096;
        let mut commits = Vec::new();
        for k in 0..rng.gen_range(1..=4u8) {
            let data = vec![(i as u8).wrapping_mul(5).wrapping_add(k); 4096];
            commits.push(store.submit(tx(|t| t.write(&a, at as u64, bytes(data)))));
        }
        for _ in 0..rng.gen_range(0..3) {
            tokio::task::yield_now().await;
        }
        let last = vec![(i as u8) ^ 0xa5; 4096];
        commits.push(store.submit(tx(|t| t.write(&a, at as u64, bytes(last.clone())))));
        model[at..at + 4096].copy_from_slice(&last);
        for c in commits {
            c.expect("submit").await.expect("commit");
        }
    }
    assert!(paths(&store).0 >= 12000, "the overwrites went deferred");
    drop(store);
    let store = s.open();
    assert_bytes(&read_all(&*store, &a).await, &model, "after remount");
}

/// Small overwrites one at a time, on an idle store: after a few lone
/// commits through the commit thread, each submitter writes its record
/// itself and the commit is complete when `submit` returns. Switched off,
/// none is; either way every write reads back, before and after a remount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_small_overwrites_commit_on_their_submitters_thread() {
    for inline in [true, false] {
        let mut s = MemStores::new(64 * MIB);
        s.mount.inline_commits = inline;
        let store = s.open();
        let a = oid(C1, "a");
        let mut model = pattern(1, 64 * KIB as usize);
        commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
        for i in 0..12u64 {
            let at = (i as usize * 5000) % (60 * KIB as usize);
            let data = pattern(100 + i, 3000);
            model[at..at + data.len()].copy_from_slice(&data);
            // Let the commit thread finish the previous commit (its
            // key-value write comes after the acknowledgement) and let go
            // of the commit state: a submitter finding it held queues its
            // transaction instead, as it should, and on a loaded machine
            // it could find it held every time (seen once in CI).
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            let before = store.perf().inline_commits;
            let mut c = store
                .submit(tx(|t| t.write(&a, at as u64, bytes(data.clone()))))
                .expect("submit");
            let inlined = store.perf().inline_commits > before;
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            match std::future::Future::poll(std::pin::Pin::new(&mut c), &mut cx) {
                std::task::Poll::Ready(r) => r.expect("commit"),
                std::task::Poll::Pending => {
                    assert!(!inlined, "an inline commit is complete when submit returns");
                    c.await.expect("commit");
                }
            }
        }
        let p = store.perf();
        if inline {
            assert!(p.inline_commits >= 4, "inline commits: {p:?}");
        } else {
            assert_eq!(p.inline_commits, 0);
        }
        assert_bytes(&read_all(&*store, &a).await, &model, "object");
        drop(store);
        let store = s.open();
        assert_bytes(&read_all(&*store, &a).await, &model, "after remount");
    }
}

/// Holds durable (journal) writes while `held` (the hook of a
/// [`HookedDevice`]).
#[derive(Default)]
struct HeldJournal {
    held: parking_lot::Mutex<bool>,
    released: parking_lot::Condvar,
}

impl HeldJournal {
    fn set(&self, held: bool) {
        *self.held.lock() = held;
        self.released.notify_all();
    }
}

impl WriteHook for HeldJournal {
    fn before(&self, call: WriteCall) {
        if call == WriteCall::WriteDurable {
            let mut held = self.held.lock();
            while *held {
                self.released.wait(&mut held);
            }
        }
    }
}

/// 64 KiB overwrites (above `deferred_busy_max_bytes`, within
/// `deferred_max_bytes`) are deferred while the store is idle, and go to
/// new space once four or more transactions wait for their commit; 4 KiB
/// ones stay deferred either way. All of them read back, before and after
/// a remount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_overwrites_are_deferred_only_while_the_store_is_idle() {
    let mut s = MemStores::new(64 * MIB);
    // Each transaction goes to the commit thread (none is committed on its
    // submitter's thread before `submit` returns), so a burst queues.
    s.mount.inline_commits = false;
    let mut mount = s.mount.clone();
    s.open(); // mkfs
    let device = Arc::new(HookedDevice {
        inner: s.device.clone(),
        hook: HeldJournal::default(),
    });
    let kv: Arc<dyn cairn_kv::Kv> = s.kv.clone();
    mount.deferred_busy_max_bytes = 32 * KIB;
    let store = cairn_bluestore::BlueStore::mount(device.clone(), kv.clone(), mount.clone())
        .expect("mount");
    let unit = 64 * KIB as usize;
    let objects: Vec<_> = (0..8).map(|i| oid(C1, &format!("o{i}"))).collect();
    let mut models: Vec<Vec<u8>> = (0..8).map(|i| pattern(i, unit)).collect();
    for (o, m) in objects.iter().zip(&models) {
        commit(&*store, tx(|t| t.write(o, 0, bytes(m.clone())))).await;
    }

    // Alone: deferred.
    let (def0, dir0) = paths(&store);
    models[0] = pattern(50, unit);
    commit(
        &*store,
        tx(|t| t.write(&objects[0], 0, bytes(models[0].clone()))),
    )
    .await;
    assert_eq!(paths(&store), (def0 + 1, dir0), "a lone 64 KiB overwrite");

    // Eight at once while the journal holds the first record: the first
    // sees none waiting and is deferred, and from the fifth on at least
    // four wait, so they go to new space.
    device.hook.set(true);
    let (def1, dir1) = paths(&store);
    let mut pending = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        models[i] = pattern(60 + i as u64, unit);
        let data = bytes(models[i].clone());
        pending.push(store.submit(tx(|t| t.write(o, 0, data))).expect("submit"));
    }
    let (def2, dir2) = paths(&store);
    device.hook.set(false);
    for c in pending {
        c.await.expect("commit");
    }
    // (A transaction of the store's own, retiring applied deferred writes,
    // may join the queue too and make one fewer deferred.)
    let (deferred, direct) = (def2 - def1, dir2 - dir1);
    assert_eq!(deferred + direct, 8, "one path per overwrite");
    assert!(
        (1..=4).contains(&deferred),
        "deferred while fewer than four waited: {deferred}"
    );

    // 4 KiB overwrites in a burst stay deferred.
    device.hook.set(true);
    let (def3, dir3) = paths(&store);
    let mut pending = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let small = pattern(90 + i as u64, 4096);
        models[i][8192..12288].copy_from_slice(&small);
        pending.push(
            store
                .submit(tx(|t| t.write(o, 8192, bytes(small.clone()))))
                .expect("submit"),
        );
    }
    assert_eq!(paths(&store), (def3 + 8, dir3), "4 KiB overwrites");
    device.hook.set(false);
    for c in pending {
        c.await.expect("commit");
    }

    for (o, m) in objects.iter().zip(&models) {
        assert_bytes(&read_all(&*store, o).await, m, "object");
    }
    drop(store);
    let store = cairn_bluestore::BlueStore::mount(device, kv, mount).expect("remount");
    for (o, m) in objects.iter().zip(&models) {
        assert_bytes(&read_all(&*store, o).await, m, "after remount");
    }
}
