//! Running out of space: the transaction that does not fit fails at submit
//! with `NoSpace` and changes nothing; earlier data is intact; removing
//! objects makes room again.
//!
//! What we found about *when* freed space can be reused: `statfs` counts a
//! removal as soon as it is submitted (it reports the durable free list as
//! it will stand), but the allocator gets the space back only once (a) the
//! freeing transaction committed, (b) every deferred write of it and of
//! earlier transactions is on the device, and (c) no read planned before
//! the removal is still running. The commit is acknowledged just before
//! the space is handed back, so a retry right after awaiting the removal
//! may still fail; after one more commit (the commit thread finishes one
//! group before starting the next) it cannot, provided (b) and (c) hold.

mod common;

use cairn_store::{ObjectStore, StoreError};
use common::*;

fn no_space<T>(r: cairn_store::Result<T>, what: &str) {
    match r {
        Err(StoreError::NoSpace) => {}
        Err(e) => panic!("{what}: expected NoSpace, got {e:?}"),
        Ok(_) => panic!("{what}: expected NoSpace, got Ok"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_store_refuses_whole_transactions_and_recovers_after_removes() {
    let mut s = MemStores::new(20 * MIB);
    let store = s.open();
    let total = store.statfs().unwrap().total_bytes;
    let mut objects: Vec<(cairn_store::ObjectId, Vec<u8>)> = Vec::new();

    // Fill with 1 MiB objects, then 64 KiB, then 4 KiB ones, until
    // nothing fits.
    for (size, prefix) in [(MIB, "big"), (64 * KIB, "mid"), (4 * KIB, "small")] {
        for i in 0.. {
            let o = oid(C1, &format!("{prefix}{i}"));
            let data = pattern(objects.len() as u64, size as usize);
            let before = store.statfs().unwrap();
            match store.submit(tx(|t| t.write(&o, 0, bytes(data.clone())))) {
                Ok(c) => {
                    c.await.unwrap();
                    objects.push((o, data));
                }
                Err(StoreError::NoSpace) => {
                    // Nothing of it happened.
                    assert_eq!(store.statfs().unwrap(), before, "statfs changed");
                    assert!(matches!(store.stat(&o), Err(StoreError::NotFound(_))));
                    break;
                }
                Err(e) => panic!("unexpected {e:?}"),
            }
            assert!(i < 1000);
        }
    }
    let st = store.statfs().unwrap();
    assert_eq!(st.used_bytes, total, "the store is full");
    assert_eq!(st.objects, objects.len() as u64);
    assert!(objects.len() >= 19);

    // A transaction that would change an existing object and then needs
    // space changes nothing at all.
    let (first, first_data) = objects[0].clone();
    no_space(
        store.submit(tx(|t| {
            t.set_attr(&first, "x", bytes(b"y".to_vec()))
                .write(&first, 0, bytes(vec![7; 10]))
                .write(&oid(C1, "new"), 0, bytes(vec![1; 8192]))
        })),
        "mixed transaction",
    );
    assert_eq!(store.get_attr(&first, "x").unwrap(), None);
    assert_bytes(
        &read_all(&*store, &first).await,
        &first_data,
        "first object",
    );
    assert!(matches!(
        store.stat(&oid(C1, "new")),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.statfs().unwrap(), st);

    // Overwrites: copy-on-write needs new space first, so a large one
    // fails even on the object's own space; a small one goes in place
    // through the WAL and needs none.
    no_space(
        store.submit(tx(|t| t.write(&first, 0, bytes(vec![3; 256 * 1024])))),
        "large overwrite",
    );
    let block = pattern(77, 4096);
    commit(&*store, tx(|t| t.write(&first, 8192, bytes(block.clone())))).await;
    objects[0].1[8192..12288].copy_from_slice(&block);
    assert!(store.perf().deferred_writes >= 1);

    // Earlier data intact.
    for (o, d) in &objects {
        assert_bytes(&read_all(&*store, o).await, d, &o.to_string());
    }

    // Remove three 1 MiB objects. The deferred write above must reach the
    // device before the space comes back (condition (b)).
    let deferred = store.perf().deferred_writes;
    wait_for("deferred writes applied", || {
        store.perf().deferred_applied >= deferred
    })
    .await;
    let gone: Vec<_> = objects.drain(1..4).collect();
    let allocatable = store.perf().allocatable_bytes;
    commit(
        &*store,
        tx(|t| {
            for (o, _) in &gone {
                t.remove(o);
            }
            t
        }),
    )
    .await;
    assert_eq!(store.statfs().unwrap().used_bytes, total - 3 * MIB);
    // One more commit: by its acknowledgement the removal's space is back.
    commit(&*store, tx(|t| t.set_attr(&first, "tick", bytes(vec![1])))).await;
    assert_eq!(store.perf().allocatable_bytes, allocatable + 3 * MIB);

    let again = oid(C2, "again");
    let data = pattern(1234, 3 * MIB as usize);
    commit(&*store, tx(|t| t.write(&again, 0, bytes(data.clone())))).await;
    objects.push((again, data));
    no_space(
        store.submit(tx(|t| t.write(&oid(C2, "more"), 0, bytes(vec![1; 4096])))),
        "full again",
    );

    drop(store);
    let store = s.open();
    for (o, d) in &objects {
        assert_bytes(&read_all(&*store, o).await, d, &o.to_string());
    }
    for (o, _) in &gone {
        assert!(matches!(store.stat(o), Err(StoreError::NotFound(_))));
    }
    let report = store.fsck(true, false).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.used_bytes + report.free_bytes, total);
}

/// A failed transaction must not consume the durable object-id
/// reservation: ids handed out later must still be unique after a remount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_transaction_does_not_break_object_id_reservation() {
    let mut s = MemStores::new(20 * MIB);
    let b = oid(C1, "b");
    let db = pattern(2, 8192);
    {
        let store = s.open();
        // The very first object of the store reserves object ids; the
        // transaction fails, so that reservation was never written.
        no_space(
            store.submit(tx(|t| t.write(&oid(C1, "a"), 0, bytes(vec![1; 32 << 20])))),
            "too big",
        );
        commit(
            &*store,
            tx(|t| {
                t.write(&b, 0, bytes(db.clone()))
                    .omap_set(&b, vec![("k".into(), bytes(b"b".to_vec()))])
            }),
        )
        .await;
    }
    let store = s.open();
    let mut others = Vec::new();
    for i in 0..4u64 {
        let o = oid(C1, &format!("o{i}"));
        let d = pattern(10 + i, 4096);
        commit(
            &*store,
            tx(|t| {
                t.write(&o, 0, bytes(d.clone()))
                    .omap_set(&o, vec![("k".into(), bytes(vec![i as u8]))])
            }),
        )
        .await;
        others.push((o, d));
    }
    assert_bytes(&read_all(&*store, &b).await, &db, "b");
    assert_eq!(
        store.omap_get(&b, &["k".to_string()]).unwrap().get("k"),
        Some(&b"b".to_vec()),
        "b's omap"
    );
    for (o, d) in &others {
        assert_bytes(&read_all(&*store, o).await, d, &o.to_string());
    }
    let report = store.fsck(true, false).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

/// Space freed while a read planned before the removal may still use it is
/// not reused until that read is done, so the read returns the old data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn space_read_by_a_pending_read_is_not_reused() {
    let mut s = MemStores::new(20 * MIB);
    s.mount.cache.cache_size = 0; // every read goes to the device
    let store = s.open();
    let total = store.statfs().unwrap().total_bytes;
    let a = oid(C1, "a");
    let da = pattern(1, 12 * MIB as usize);
    commit(&*store, tx(|t| t.write(&a, 0, bytes(da.clone())))).await;
    let pending = store.read(&a, 0, da.len() as u64); // planned, not yet run
    commit(&*store, tx(|t| t.remove(&a))).await;
    commit(&*store, tx(|t| t.touch(&oid(C1, "tick")))).await;
    assert!(
        store.perf().allocatable_bytes <= total - 12 * MIB,
        "space still read is held back"
    );
    let b = oid(C1, "b");
    no_space(
        store.submit(tx(|t| t.write(&b, 0, bytes(vec![9; 12 << 20])))),
        "space still read",
    );
    assert_bytes(
        &pending.await.unwrap(),
        &da,
        "read planned before the removal",
    );
    // The read is done: the space is back.
    assert!(store.perf().allocatable_bytes >= total - MIB);
    commit(&*store, tx(|t| t.write(&b, 0, bytes(vec![9; 12 << 20])))).await;
}

/// A read future dropped without being run must not hold space back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_read_does_not_hold_space_back() {
    let mut s = MemStores::new(20 * MIB);
    let store = s.open();
    let a = oid(C1, "a");
    commit(&*store, tx(|t| t.write(&a, 0, bytes(vec![5; 12 << 20])))).await;
    drop(store.read(&a, 0, 4096)); // e.g. a request cancelled by a timeout
    commit(&*store, tx(|t| t.remove(&a))).await;
    commit(&*store, tx(|t| t.touch(&oid(C1, "tick")))).await;
    let b = oid(C1, "b");
    let db = pattern(3, 12 * MIB as usize);
    commit(&*store, tx(|t| t.write(&b, 0, bytes(db.clone())))).await;
    assert_bytes(&read_all(&*store, &b).await, &db, "b");
}
