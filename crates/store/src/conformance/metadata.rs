//! Conformance checks of metadata: attributes, omaps, logs, collection attributes, listing.

use super::util::*;

/// Attributes are set, replaced, listed and removed per object.
pub async fn attrs_set_get_rm(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "attrs");
    commit(
        &*s,
        txn(|t| {
            t.set_attr(&o, "b", Bytes::from_static(b"2"))
                .set_attr(&o, "a", Bytes::from_static(b"1"))
                .set_attr(&o, "a", Bytes::from_static(b"one"));
        }),
    )
    .await;
    assert_eq!(size(&*s, &o), 0, "set_attr creates the object");
    assert_eq!(ok(s.get_attr(&o, "a"), "get"), Some(b"one".to_vec()));
    assert_eq!(ok(s.get_attr(&o, "zz"), "get"), None);
    let all = ok(s.get_attrs(&o), "get_attrs");
    assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "b"]);
    commit(&*s, tx(|t| t.rm_attr(&o, "a").rm_attr(&o, "none"))).await;
    assert_eq!(ok(s.get_attr(&o, "a"), "get"), None);
    assert_eq!(ok(s.get_attrs(&o), "get_attrs").len(), 1);
    assert!(matches!(
        s.get_attr(&oid(C1, "other"), "b"),
        Err(StoreError::NotFound(_))
    ));
}

/// Omap entries: set, get, paged listing, remove and clear.
pub async fn omap_set_get_list_rm_clear(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "omap");
    let entries: Vec<(String, Bytes)> = (0..50)
        .map(|i| (format!("key{i:03}"), Bytes::from(format!("val{i}"))))
        .collect();
    commit(&*s, tx(|t| t.omap_set(&o, entries.clone()))).await;
    let got = ok(s.omap_get(&o, &["key007".into(), "nope".into()]), "get");
    assert_eq!(
        got,
        BTreeMap::from([("key007".to_string(), b"val7".to_vec())])
    );
    let first = ok(s.omap_list(&o, None, 10), "list");
    assert_eq!(first.len(), 10);
    assert_eq!(first[0], ("key000".to_string(), b"val0".to_vec()));
    let next = ok(s.omap_list(&o, Some("key009"), 3), "list");
    assert_eq!(keys(&next), ["key010", "key011", "key012"]);
    let between = ok(s.omap_list(&o, Some("key0095"), 1), "list");
    assert_eq!(keys(&between), ["key010"]);
    assert!(ok(s.omap_list(&o, Some("key049"), 10), "list").is_empty());
    assert_eq!(ok(s.omap_list(&o, None, 1000), "list").len(), 50);
    commit(
        &*s,
        txn(|t| {
            t.omap_rm(&o, vec!["key000".into(), "key001".into(), "nope".into()])
                .omap_set(&o, vec![("key002".into(), Bytes::from_static(b"new"))]);
        }),
    )
    .await;
    let first = ok(s.omap_list(&o, None, 1), "list");
    assert_eq!(first, vec![("key002".to_string(), b"new".to_vec())]);
    commit(&*s, tx(|t| t.omap_clear(&o))).await;
    assert!(ok(s.omap_list(&o, None, 100), "list").is_empty());
    assert_eq!(size(&*s, &o), 0, "object survives omap_clear");
}

/// Log entries come back in version order; append replaces; trim drops <= up_to.
pub async fn log_append_read_trim(h: &mut dyn Harness) {
    let s = h.open();
    let v = |e, c| Version::new(e, c);
    commit(
        &*s,
        txn(|t| {
            t.log_append(C1, v(2, 5), Bytes::from_static(b"c"))
                .log_append(C1, v(1, 9), Bytes::from_static(b"b"))
                .log_append(C1, v(1, 3), Bytes::from_static(b"a"))
                .log_append(C1, v(3, 1), Bytes::from_static(b"d"));
        }),
    )
    .await;
    let versions = |s: &dyn ObjectStore| -> Vec<Version> {
        ok(s.read_log(C1), "log")
            .into_iter()
            .map(|(v, _)| v)
            .collect()
    };
    assert_eq!(versions(&*s), [v(1, 3), v(1, 9), v(2, 5), v(3, 1)]);
    commit(
        &*s,
        tx(|t| t.log_append(C1, v(1, 9), Bytes::from_static(b"B"))),
    )
    .await;
    assert_eq!(ok(s.read_log(C1), "log")[1], (v(1, 9), b"B".to_vec()));
    commit(&*s, tx(|t| t.log_trim(C1, v(2, 5)))).await;
    assert_eq!(versions(&*s), [v(3, 1)]);
    commit(&*s, tx(|t| t.log_trim(C1, v(9, u64::MAX)))).await;
    assert!(versions(&*s).is_empty());
    assert!(
        ok(s.list_collections(), "colls").is_empty(),
        "empty collection lingers"
    );
}

/// Collection attributes are set, replaced and read back.
pub async fn collection_attrs(h: &mut dyn Harness) {
    let s = h.open();
    commit(
        &*s,
        tx(|t| t.coll_set_attr(C1, "last_update", Bytes::from_static(b"1"))),
    )
    .await;
    commit(
        &*s,
        tx(|t| t.coll_set_attr(C1, "last_update", Bytes::from_static(b"2"))),
    )
    .await;
    assert_eq!(
        ok(s.coll_get_attr(C1, "last_update"), "get"),
        Some(b"2".to_vec())
    );
    assert_eq!(ok(s.coll_get_attr(C1, "other"), "get"), None);
    assert_eq!(ok(s.coll_get_attr(C2, "last_update"), "get"), None);
    assert_eq!(
        ok(s.list_collections(), "colls"),
        [C1],
        "attributes make a collection"
    );
}

/// Objects and collections list sorted; collections exist while non-empty.
pub async fn listing_objects_and_collections(h: &mut dyn Harness) {
    let s = h.open();
    let names = ["b", "a", "c/d", "A", "aa"];
    commit(
        &*s,
        txn(|t| {
            for n in names {
                t.touch(&oid(C2, n));
            }
            t.write(&oid(C1, "x"), 0, pattern(1, 10));
        }),
    )
    .await;
    let mut sorted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    sorted.sort();
    assert_eq!(ok(s.list_objects(C2), "list"), sorted);
    assert_eq!(ok(s.list_collections(), "colls"), [C1, C2]);
    assert!(ok(s.list_objects(PgId::new(9, 9)), "list").is_empty());
    commit(&*s, tx(|t| t.remove(&oid(C1, "x")))).await;
    assert_eq!(ok(s.list_collections(), "colls"), [C2]);
}

/// RemoveCollection drops objects, log and attributes, and nothing else.
pub async fn remove_collection_removes_everything(h: &mut dyn Harness) {
    let s = h.open();
    let (a, b) = (oid(C1, "a"), oid(C2, "b"));
    commit(
        &*s,
        txn(|t| {
            t.write(&a, 0, pattern(1, 5000))
                .omap_set(&a, vec![("k".into(), Bytes::from_static(b"v"))])
                .log_append(C1, Version::new(1, 1), Bytes::from_static(b"e"))
                .coll_set_attr(C1, "k", Bytes::from_static(b"v"))
                .write(&b, 0, pattern(2, 10));
        }),
    )
    .await;
    commit(&*s, tx(|t| t.remove_collection(C1))).await;
    assert_eq!(ok(s.list_collections(), "colls"), [C2]);
    assert!(ok(s.list_objects(C1), "list").is_empty());
    assert!(ok(s.read_log(C1), "log").is_empty());
    assert_eq!(ok(s.coll_get_attr(C1, "k"), "attr"), None);
    assert!(matches!(s.stat(&a), Err(StoreError::NotFound(_))));
    assert_eq!(read(&*s, &b, 0, 10).await, pattern(2, 10));
    commit(&*s, tx(|t| t.write(&a, 10, pattern(3, 5)))).await;
    assert_eq!(
        read(&*s, &a, 0, 100).await,
        [&[0u8; 10][..], &pattern(3, 5)].concat()
    );
    commit(&*s, tx(|t| t.remove_collection(PgId::new(7, 7)))).await;
}
