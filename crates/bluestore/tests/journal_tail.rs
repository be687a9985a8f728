//! Deferred writes live in the commit journal only: their data never enters
//! the key-value store, the journal keeps every record from its tail (the
//! oldest with deferred writes not applied yet) on, a full journal waits
//! for the deferred thread rather than dropping them, and after a power
//! loss mount applies them from the records.

mod common;

use cairn_bluestore::MkfsOptions;
use cairn_device::CrashPolicy;
use cairn_kv::Kv;
use cairn_store::ObjectStore;
use common::*;

/// Keys in `kv` under the deferred-record prefix.
fn deferred_keys(kv: &dyn Kv) -> usize {
    kv.scan(b"D", b"E", usize::MAX).expect("scan").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_data_never_enters_the_key_value_store() {
    let mut s = MemStores::new(64 * MIB);
    let store = s.open();
    let a = oid(C1, "a");
    let mut model = pattern(1, 64 * KIB as usize);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
    for i in 0..200u64 {
        let at = (i as usize * 7 % 16) * 4096;
        let block = pattern(100 + i, 4096);
        model[at..at + 4096].copy_from_slice(&block);
        commit(
            &*store,
            tx(|t| t.write(&a, at as u64, bytes(block.clone()))),
        )
        .await;
        assert_eq!(deferred_keys(s.kv.as_ref()), 0, "overwrite {i}");
    }
    assert_eq!(
        store.perf().deferred_writes,
        200,
        "the overwrites went deferred"
    );
    assert_bytes(&read_all(&*store, &a).await, &model, "object");
    drop(store);
    let store = s.open();
    assert_bytes(&read_all(&*store, &a).await, &model, "after remount");
}

/// A 1 MiB journal fills with records of deferred writes long before the
/// deferred thread's batch is due: the commit thread must wait for the
/// tail to move, and nothing may be lost or stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_journal_waits_for_its_deferred_writes() {
    let mut s = MemStores::new(64 * MIB);
    s.mkfs = MkfsOptions {
        journal_size: 1 << 20,
        ..MkfsOptions::default()
    };
    // 64 KiB overwrites stay deferred with eight in flight.
    s.mount.deferred_busy_max_bytes = 64 * KIB;
    let store = s.open();
    let objects: Vec<_> = (0..8).map(|i| oid(C1, &format!("o{i}"))).collect();
    let mut models = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let data = pattern(i as u64, 256 * KIB as usize);
        commit(&*store, tx(|t| t.write(o, 0, bytes(data.clone())))).await;
        models.push(data);
    }
    // 64 KiB overwrites (deferred: at the threshold), 8 in flight: each
    // record takes 64 KiB of the journal.
    let mut pending = std::collections::VecDeque::new();
    for i in 0..600u64 {
        let k = (i % 8) as usize;
        let at = (i as usize * 5 % 4) * 64 * KIB as usize;
        let data = pattern(1000 + i, 64 * KIB as usize);
        models[k][at..at + data.len()].copy_from_slice(&data);
        let t = tx(|t| t.write(&objects[k], at as u64, bytes(data)));
        pending.push_back(store.submit(t).expect("submit"));
        if pending.len() == 8 {
            pending.pop_front().unwrap().await.expect("commit");
        }
    }
    for c in pending {
        c.await.expect("commit");
    }
    let perf = store.perf();
    assert!(perf.deferred_writes >= 600, "the overwrites went deferred");
    assert!(
        perf.journal_tail_waits > 0,
        "the journal never waited for its tail: {perf:?}"
    );
    // Groups are cut to fit a record, deferred data included: none had to
    // go to the key-value store instead.
    assert_eq!(
        perf.kv_commits, perf.journal_records,
        "groups too large for a record: {perf:?}"
    );
    assert_eq!(deferred_keys(s.kv.as_ref()), 0);
    for (o, model) in objects.iter().zip(&models) {
        assert_bytes(&read_all(&*store, o).await, model, "object");
    }
    assert!(store.fsck(true, false).expect("fsck").is_clean());
    drop(store);
    let store = s.open();
    assert_eq!(store.replayed(), 0, "a clean unmount applied everything");
    for (o, model) in objects.iter().zip(&models) {
        assert_bytes(&read_all(&*store, o).await, model, "after remount");
    }
}

/// Power is lost right after deferred overwrites were acknowledged, before
/// the deferred thread (which waits to gather a batch) applied them and
/// before any key-value sync: the data is in journal records only, and
/// mount must apply it from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_before_deferred_writes_are_applied() {
    for (seed, policy) in [
        (1, CrashPolicy::DropAll),
        (2, CrashPolicy::Torn),
        (3, CrashPolicy::KeepAll),
    ] {
        let stores = CrashStores::new(32 * MIB);
        let store = stores.open().expect("mount");
        let a = oid(C1, "a");
        let mut model = pattern(seed, 128 * KIB as usize);
        commit(&*store, tx(|t| t.write(&a, 0, bytes(model.clone())))).await;
        for i in 0..20u64 {
            let at = (i as usize * 3 % 32) * 4096;
            let block = pattern(seed * 100 + i, 4096);
            model[at..at + 4096].copy_from_slice(&block);
            commit(
                &*store,
                tx(|t| t.write(&a, at as u64, bytes(block.clone()))),
            )
            .await;
        }
        let perf = store.perf();
        // The deferred thread gathers for 10 ms before it applies anything:
        // this runs well inside that.
        let unapplied = perf.deferred_writes > perf.deferred_applied;
        let (device, kv) = stores.crash(seed, policy);
        drop(store);
        let stores = CrashStores::from_images(device, kv);
        let store = stores.open().expect("mount after power loss");
        if unapplied {
            assert!(
                store.replayed() > 0,
                "{policy:?}: mount applied no deferred writes"
            );
        }
        assert_bytes(
            &read_all(&*store, &a).await,
            &model,
            &format!("{policy:?}: after power loss"),
        );
        assert!(store.fsck(true, false).expect("fsck").is_clean());
    }
}
