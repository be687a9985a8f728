//! Conformance checks of moves: an object taking another id (a PG split
//! moves objects into a child PG's collection).

use super::util::*;

/// A move carries bytes, attributes and omap to the new id, replaces
/// what the target held, and leaves nothing under the old id.
pub async fn move_carries_everything_and_replaces_target(h: &mut dyn Harness) {
    let s = h.open();
    let (src, dst, other) = (oid(C1, "src"), oid(C2, "dst"), oid(C1, "other"));
    commit(
        &*s,
        txn(|t| {
            t.write(&src, 0, pattern(1, 100_000))
                .write(&src, 1 << 20, pattern(2, 4096))
                .set_attr(&src, "v", Bytes::from_static(b"src"))
                .omap_set(&src, vec![("a".into(), Bytes::from_static(b"1"))])
                .write(&dst, 0, pattern(3, 300_000))
                .set_attr(&dst, "old", Bytes::from_static(b"dst"))
                .omap_set(&dst, vec![("z".into(), Bytes::from_static(b"9"))])
                .write(&other, 0, pattern(4, 10));
        }),
    )
    .await;
    let before = ok(s.statfs(), "statfs").objects;
    commit(&*s, tx(|t| t.move_object(&src, &dst))).await;
    check_moved(&*s, &src, &dst, &other).await;
    assert_eq!(ok(s.statfs(), "statfs").objects, before - 1);
    // The old id is free: a new object there shares nothing with the moved one.
    commit(&*s, tx(|t| t.write(&src, 0, pattern(5, 10)))).await;
    assert_eq!(read(&*s, &src, 0, 10).await, pattern(5, 10));
    assert!(ok(s.get_attrs(&src), "attrs").is_empty());
    assert!(ok(s.omap_list(&src, None, 10), "omap").is_empty());
    commit(&*s, tx(|t| t.remove(&src))).await;
    check_moved(&*s, &src, &dst, &other).await;
    if h.durable() {
        drop(s);
        check_moved(&*h.open(), &src, &dst, &other).await;
    }
}

/// Moving an object that does not exist changes nothing; a move to
/// itself is refused; several moves and later ops in one transaction
/// apply in order.
pub async fn moves_in_one_transaction_apply_in_order(h: &mut dyn Harness) {
    let s = h.open();
    let names: Vec<ObjectId> = (0..20).map(|i| oid(C1, &format!("obj{i:02}"))).collect();
    commit(
        &*s,
        txn(|t| {
            for (i, o) in names.iter().enumerate() {
                t.write(o, 0, pattern(i as u8, 8192 + i));
            }
            t.write(&oid(C2, "keep"), 0, pattern(99, 10));
        }),
    )
    .await;
    commit(
        &*s,
        tx(|t| t.move_object(&oid(C1, "absent"), &oid(C2, "keep"))),
    )
    .await;
    assert_eq!(read(&*s, &oid(C2, "keep"), 0, 10).await, pattern(99, 10));
    let refused = s.submit(tx(|t| t.move_object(&names[0], &names[0])));
    assert!(matches!(refused, Err(StoreError::Invalid(_))));
    commit(
        &*s,
        txn(|t| {
            for o in names.iter().step_by(2) {
                t.move_object(o, &oid(C2, &o.name));
            }
            // After its move, the target may be changed in the same transaction.
            t.write(&oid(C2, "obj00"), 0, pattern(7, 4));
        }),
    )
    .await;
    check_in_order(&*s, &names).await;
    if h.durable() {
        drop(s);
        check_in_order(&*h.open(), &names).await;
    }
}

async fn check_moved(s: &dyn ObjectStore, src: &ObjectId, dst: &ObjectId, other: &ObjectId) {
    assert!(matches!(s.stat(src), Err(StoreError::NotFound(_))));
    assert_eq!(size(s, dst), (1 << 20) + 4096);
    assert_eq!(read(s, dst, 0, 100_000).await, pattern(1, 100_000));
    assert_eq!(
        read(s, dst, 100_000, 300_000).await,
        vec![0u8; 300_000],
        "the target's old bytes are gone"
    );
    assert_eq!(read(s, dst, 1 << 20, 4096).await, pattern(2, 4096));
    let attrs = ok(s.get_attrs(dst), "attrs");
    assert_eq!(attrs.keys().collect::<Vec<_>>(), ["v"]);
    assert_eq!(attrs["v"], b"src");
    assert_eq!(
        ok(s.omap_list(dst, None, 10), "omap"),
        vec![("a".to_string(), b"1".to_vec())]
    );
    assert_eq!(ok(s.list_objects(C1), "list"), ["other"]);
    assert_eq!(ok(s.list_objects(C2), "list"), ["dst"]);
    assert_eq!(read(s, other, 0, 10).await, pattern(4, 10));
}

async fn check_in_order(s: &dyn ObjectStore, names: &[ObjectId]) {
    for (i, o) in names.iter().enumerate() {
        let len = 8192 + i as u64;
        let moved = oid(C2, &o.name);
        let (here, gone) = if i % 2 == 0 { (&moved, o) } else { (o, &moved) };
        assert!(
            matches!(s.stat(gone), Err(StoreError::NotFound(_))),
            "{gone}"
        );
        let mut want = pattern(i as u8, len as usize).to_vec();
        if i == 0 {
            want[..4].copy_from_slice(&pattern(7, 4));
        }
        assert_eq!(read(s, here, 0, len).await, want, "{here}");
    }
    assert_eq!(ok(s.list_objects(C1), "list").len(), 10);
    assert_eq!(ok(s.list_objects(C2), "list").len(), 11);
}

/// A split moves each client object to the collection its placement
/// hash picks under the new pg_num, objects written by earlier
/// transactions still in flight included; metadata objects, the log and
/// the attributes stay.
pub async fn split_moves_objects_to_their_pgs(h: &mut dyn Harness) {
    let s = h.open();
    let parent = PgId::new(3, 1);
    // Objects of PG 3.1 while the pool has 2 PGs.
    let names: Vec<String> = (0..400)
        .map(|i| format!("rbd_data.{i:04}"))
        .filter(|n| crate::split_destination(parent, 2, n).is_none())
        .take(60)
        .collect();
    assert_eq!(names.len(), 60);
    let meta = oid(parent, "\u{1}meta");
    commit(
        &*s,
        txn(|t| {
            t.omap_set(&meta, vec![("k".into(), Bytes::from_static(b"v"))])
                .log_append(parent, Version::new(1, 1), Bytes::from_static(b"e"))
                .coll_set_attr(parent, "info", Bytes::from_static(b"i"));
        }),
    )
    .await;
    // Submitted, not waited for: the split must still see them.
    let mut pending = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let t = txn(|t| {
            t.write(&oid(parent, name), 0, pattern(i as u8, 5000 + i))
                .set_attr(&oid(parent, name), "_v", Bytes::from(name.clone()));
        });
        pending.push(ok(s.submit(t), "submit"));
    }
    let refused = s.submit(tx(|t| t.split_collection(parent, 3)));
    assert!(matches!(refused, Err(StoreError::Invalid(_))), "pg_num 3");
    let refused = s.submit(tx(|t| t.split_collection(PgId::new(3, 9), 8)));
    assert!(
        matches!(refused, Err(StoreError::Invalid(_))),
        "seed 9 of 8"
    );
    commit(&*s, tx(|t| t.split_collection(parent, 8))).await;
    for p in pending {
        ok(p.await, "write");
    }
    check_split(&*s, parent, &names).await;
    if h.durable() {
        drop(s);
        check_split(&*h.open(), parent, &names).await;
    }
}

async fn check_split(s: &dyn ObjectStore, parent: PgId, names: &[String]) {
    let mut seen = std::collections::BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        let home = crate::split_destination(parent, 8, name).unwrap_or(parent);
        assert_eq!(home.seed, cairn_placement::pg_seed(name, 8), "{name}");
        seen.insert(home.seed);
        for c in [1, 3, 5, 7] {
            let here = oid(PgId::new(3, c), name);
            if c == home.seed {
                assert_eq!(read(s, &here, 0, 1 << 20).await, pattern(i as u8, 5000 + i));
                assert_eq!(
                    ok(s.get_attr(&here, "_v"), "attr"),
                    Some(name.as_bytes().to_vec())
                );
            } else {
                assert!(
                    matches!(s.stat(&here), Err(StoreError::NotFound(_))),
                    "{here}"
                );
            }
        }
    }
    assert_eq!(seen.len(), 4, "60 objects land in all four PGs");
    let in_parent = ok(s.list_objects(parent), "list");
    assert!(in_parent.contains(&"\u{1}meta".to_string()));
    assert_eq!(
        ok(s.omap_list(&oid(parent, "\u{1}meta"), None, 9), "omap").len(),
        1
    );
    assert_eq!(ok(s.read_log(parent), "log").len(), 1);
    assert_eq!(
        ok(s.coll_get_attr(parent, "info"), "attr"),
        Some(b"i".to_vec())
    );
    let total: usize = [1, 3, 5, 7]
        .iter()
        .map(|&c| ok(s.list_objects(PgId::new(3, c)), "list").len())
        .sum();
    assert_eq!(total, names.len() + 1);
}
