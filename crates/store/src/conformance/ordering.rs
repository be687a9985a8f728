//! Conformance checks of transactions as a whole: atomicity, ordering, validation,
//! accounting, and persistence across a reopen.

use super::util::*;

/// Ops of one transaction apply in order and all together.
pub async fn transaction_applies_atomically_in_order(h: &mut dyn Harness) {
    let s = h.open();
    let (a, b, c) = (oid(C1, "a"), oid(C1, "b"), oid(C2, "c"));
    commit(&*s, tx(|t| t.write(&c, 0, pattern(1, 100)))).await;
    commit(
        &*s,
        txn(|t| {
            t.write(&a, 0, pattern(2, 4096))
                .truncate(&a, 10)
                .write(&a, 20, pattern(3, 10))
                .set_attr(&a, "x", Bytes::from_static(b"1"))
                .remove(&c)
                .write(&c, 5, pattern(4, 5))
                .omap_set(&b, vec![("k".into(), Bytes::from_static(b"1"))])
                .omap_rm(&b, vec!["k".into()])
                .log_append(C1, Version::new(1, 1), Bytes::from_static(b"e"));
        }),
    )
    .await;
    let want_a = [&pattern(2, 10)[..], &[0u8; 10], &pattern(3, 10)].concat();
    assert_eq!(read(&*s, &a, 0, 100).await, want_a);
    assert_eq!(
        read(&*s, &c, 0, 100).await,
        [&[0u8; 5][..], &pattern(4, 5)].concat()
    );
    assert!(ok(s.omap_list(&b, None, 10), "omap").is_empty());
    assert_eq!(size(&*s, &b), 0);
    assert_eq!(ok(s.read_log(C1), "log").len(), 1);
}

/// Many transactions in flight apply in submission order.
pub async fn submission_order_with_many_in_flight(h: &mut dyn Harness) {
    let s = h.open();
    let slots = oid(C1, "slots");
    let tmp = oid(C1, "tmp");
    let n = 1000u64;
    let mut commits = Vec::new();
    for i in 0..n {
        let t = txn(|t| {
            t.write(&slots, (i % 16) * 8, Bytes::from(i.to_le_bytes().to_vec()))
                .omap_set(
                    &slots,
                    vec![("last".into(), Bytes::from(i.to_le_bytes().to_vec()))],
                )
                .log_append(
                    C2,
                    Version::new(1, i + 1),
                    Bytes::from(i.to_le_bytes().to_vec()),
                );
            if i % 3 == 0 {
                t.remove(&tmp);
            } else {
                t.write(&tmp, i, Bytes::from_static(b"t"));
            }
        });
        commits.push(ok(s.submit(t), "submit"));
    }
    for c in commits {
        ok(c.await, "commit");
    }
    let got = read(&*s, &slots, 0, 128).await;
    for k in 0..16u64 {
        let last = (0..n).filter(|i| i % 16 == k).max().unwrap_or_default();
        let at = (k * 8) as usize;
        assert_eq!(got[at..at + 8], last.to_le_bytes(), "slot {k}");
    }
    let last = ok(s.omap_get(&slots, &["last".into()]), "omap");
    assert_eq!(last["last"], (n - 1).to_le_bytes());
    let log = ok(s.read_log(C2), "log");
    assert_eq!(log.len() as u64, n);
    assert!(log
        .iter()
        .enumerate()
        .all(|(i, (v, _))| v.counter == i as u64 + 1));
    // 999 % 3 == 0: the last transaction removed `tmp`.
    assert!(matches!(s.stat(&tmp), Err(StoreError::NotFound(_))));
}

/// An invalid op anywhere rejects the whole transaction at submit.
pub async fn invalid_transaction_changes_nothing(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "inv");
    let bad = [
        tx(|t| {
            t.write(&o, 0, pattern(1, 10))
                .write(&o, MAX_OBJECT_SIZE - 4, pattern(1, 10))
        }),
        tx(|t| t.touch(&o).zero(&o, u64::MAX - 5, 10)),
        tx(|t| t.touch(&o).truncate(&o, MAX_OBJECT_SIZE + 1)),
        tx(|t| t.touch(&o).touch(&oid(C1, ""))),
    ];
    for t in bad {
        assert!(matches!(s.submit(t), Err(StoreError::Invalid(_))));
    }
    assert!(matches!(s.stat(&o), Err(StoreError::NotFound(_))));
    assert!(ok(s.list_collections(), "colls").is_empty());
    commit(&*s, tx(|t| t.write(&o, 0, pattern(1, 10)))).await;
    assert_eq!(size(&*s, &o), 10, "store still works after rejections");
}

/// statfs counts objects and grows with data.
pub async fn statfs_counts_objects(h: &mut dyn Harness) {
    let s = h.open();
    let before = ok(s.statfs(), "statfs");
    assert_eq!(before.objects, 0);
    commit(
        &*s,
        txn(|t| {
            for i in 0..5 {
                t.write(&oid(C1, &format!("o{i}")), 0, pattern(1, 10_000));
            }
            t.touch(&oid(C2, "empty"));
        }),
    )
    .await;
    let after = ok(s.statfs(), "statfs");
    assert_eq!(after.objects, 6);
    // Grows (a compressing backend may use less than the 50,000 bytes written).
    assert!(after.used_bytes > before.used_bytes);
    assert!(after.total_bytes >= after.used_bytes);
    commit(&*s, tx(|t| t.remove(&oid(C1, "o0")).remove_collection(C2))).await;
    let last = ok(s.statfs(), "statfs");
    assert_eq!(last.objects, 4);
    assert!(last.used_bytes < after.used_bytes);
}

/// A durable store shows the same state after a reopen.
pub async fn reopen_preserves_state(h: &mut dyn Harness) {
    if !h.durable() {
        return;
    }
    let s = h.open();
    let (a, b, c) = (oid(C1, "a"), oid(C1, "dir/b"), oid(C2, "c"));
    commit(
        &*s,
        txn(|t| {
            t.write(&a, 0, pattern(1, 70_000))
                .zero(&a, 100, 65_536)
                .set_attr(&a, "x", Bytes::from_static(b"1"))
                .omap_set(&b, vec![("k".into(), Bytes::from_static(b"v"))])
                .truncate(&b, 5000)
                .write(&c, 1 << 20, pattern(2, 10))
                .log_append(C1, Version::new(1, 1), Bytes::from_static(b"e1"))
                .log_append(C1, Version::new(1, 2), Bytes::from_static(b"e2"))
                .coll_set_attr(C1, "k", Bytes::from_static(b"v"));
        }),
    )
    .await;
    commit(&*s, tx(|t| t.remove(&c).log_trim(C1, Version::new(1, 1)))).await;
    commit(
        &*s,
        tx(|t| t.write(&c, 0, pattern(3, 10)).truncate(&a, 60_000)),
    )
    .await;
    let before = ok(dump(&*s, &["k"]).await, "dump");
    drop(s);
    let s = h.open();
    let after = ok(dump(&*s, &["k"]).await, "dump");
    assert_eq!(first_difference(&before, &after), None);
    commit(&*s, tx(|t| t.write(&a, 0, pattern(4, 10)))).await;
    drop(s);
    let s = h.open();
    assert_eq!(read(&*s, &a, 0, 10).await, pattern(4, 10));
    assert_eq!(ok(s.statfs(), "statfs").objects, 3);
}

/// A durable store reopens to the same state after a long mixed workload.
pub async fn reopen_after_many_transactions(h: &mut dyn Harness) {
    if !h.durable() {
        return;
    }
    let s = h.open();
    let mut commits = Vec::new();
    for i in 0..600u64 {
        let o = oid(if i % 2 == 0 { C1 } else { C2 }, &format!("obj{}", i % 13));
        let t = txn(|t| {
            let t = match i % 7 {
                0 => t.truncate(&o, (i * 37) % 20_000),
                1 => t.remove(&o),
                2 => t.zero(&o, (i * 11) % 9000, 3000),
                3 => t.omap_set(
                    &o,
                    vec![(format!("k{}", i % 5), Bytes::from(vec![i as u8; 9]))],
                ),
                _ => t.write(
                    &o,
                    (i * 101) % 16_000,
                    pattern(i as u8, 2000 + (i as usize % 3000)),
                ),
            };
            t.log_append(C1, Version::new(1, i), Bytes::from(vec![1; 3]));
            if i % 50 == 0 {
                t.log_trim(C1, Version::new(1, i.saturating_sub(20)));
            }
        });
        commits.push(ok(s.submit(t), "submit"));
    }
    for c in commits {
        ok(c.await, "commit");
    }
    let before = ok(dump(&*s, &[]).await, "dump");
    drop(s);
    let s = h.open();
    let after = ok(dump(&*s, &[]).await, "dump");
    assert_eq!(first_difference(&before, &after), None);
}
