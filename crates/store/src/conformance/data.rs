//! Conformance checks of object data: reads, writes, holes, zero, truncate, remove, names.

use super::util::*;

/// Writes read back at their offsets, including ones that span earlier writes.
pub async fn write_read_round_trip(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "obj");
    let a = pattern(1, 10_000);
    let b = pattern(7, 5_000);
    commit(&*s, tx(|t| t.write(&o, 0, a.clone()))).await;
    commit(&*s, tx(|t| t.write(&o, 12_345, b.clone()))).await;
    assert_eq!(size(&*s, &o), 12_345 + 5_000);
    assert_eq!(read(&*s, &o, 0, 10_000).await, a);
    assert_eq!(read(&*s, &o, 12_345, 5_000).await, b);
    assert_eq!(read(&*s, &o, 100, 17).await, a[100..117]);
    assert_eq!(read(&*s, &o, 12_346, 4_000).await, b[1..4_001]);
    assert!(read(&*s, &o, 5, 0).await.is_empty());
}

/// Unwritten ranges inside an object read as zeros.
pub async fn holes_read_as_zeros(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "sparse");
    commit(&*s, tx(|t| t.write(&o, 0, pattern(3, 100)))).await;
    commit(&*s, tx(|t| t.write(&o, 1 << 20, pattern(4, 100)))).await;
    assert_eq!(size(&*s, &o), (1 << 20) + 100);
    let mid = read(&*s, &o, 50, (1 << 20) - 40).await;
    assert_eq!(mid[..50], pattern(3, 100)[50..]);
    assert!(
        mid[50..mid.len() - 10].iter().all(|b| *b == 0),
        "hole not zero"
    );
    assert_eq!(mid[mid.len() - 10..], pattern(4, 10)[..]);
    let fresh = oid(C1, "starts-late");
    commit(&*s, tx(|t| t.write(&fresh, 4096, pattern(5, 10)))).await;
    assert_eq!(read(&*s, &fresh, 0, 4096).await, vec![0u8; 4096]);
}

/// Reads are short only at the end of the object.
pub async fn short_read_at_end(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "short");
    commit(&*s, tx(|t| t.write(&o, 0, pattern(9, 1000)))).await;
    assert_eq!(read(&*s, &o, 900, 500).await, pattern(9, 1000)[900..]);
    assert!(read(&*s, &o, 1000, 10).await.is_empty());
    assert!(read(&*s, &o, 5000, 10).await.is_empty());
    let empty = oid(C1, "empty");
    commit(&*s, tx(|t| t.touch(&empty))).await;
    assert_eq!(size(&*s, &empty), 0);
    assert!(read(&*s, &empty, 0, 10).await.is_empty());
}

/// Every per-object query of a missing object fails with `NotFound`.
pub async fn missing_object_is_not_found(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "ghost");
    let nf = |r: &Result<(), StoreError>| matches!(r, Err(StoreError::NotFound(x)) if *x == o);
    assert!(nf(&s.read(&o, 0, 10).await.map(drop)), "read");
    assert!(nf(&s.stat(&o).map(drop)), "stat");
    assert!(nf(&s.get_attr(&o, "k").map(drop)), "get_attr");
    assert!(nf(&s.get_attrs(&o).map(drop)), "get_attrs");
    assert!(nf(&s.omap_get(&o, &["k".into()]).map(drop)), "omap_get");
    assert!(nf(&s.omap_list(&o, None, 10).map(drop)), "omap_list");
    assert!(ok(s.list_objects(C1), "list").is_empty());
    assert!(ok(s.read_log(C1), "read_log").is_empty());
    assert_eq!(ok(s.coll_get_attr(C1, "k"), "coll attr"), None);
}

/// A write replaces exactly the bytes it covers.
pub async fn overwrite_replaces_bytes(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "ow");
    commit(&*s, tx(|t| t.write(&o, 0, pattern(1, 8192)))).await;
    commit(&*s, tx(|t| t.write(&o, 4000, pattern(2, 100)))).await;
    let got = read(&*s, &o, 0, 8192).await;
    let mut want = pattern(1, 8192).to_vec();
    want[4000..4100].copy_from_slice(&pattern(2, 100));
    assert_eq!(got, want);
    assert_eq!(size(&*s, &o), 8192);
}

/// Zero clears a range, and extends the object past its end like a write.
pub async fn zero_reads_as_zeros_and_extends(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "z");
    let data = pattern(5, 200_000);
    commit(&*s, tx(|t| t.write(&o, 0, data.clone()))).await;
    commit(&*s, tx(|t| t.zero(&o, 1000, 150_000))).await;
    let got = read(&*s, &o, 0, 200_000).await;
    assert_eq!(got[..1000], data[..1000]);
    assert!(got[1000..151_000].iter().all(|b| *b == 0));
    assert_eq!(got[151_000..], data[151_000..]);
    commit(&*s, tx(|t| t.zero(&o, 199_000, 11_000))).await;
    assert_eq!(size(&*s, &o), 210_000);
    assert!(read(&*s, &o, 199_000, 11_000).await.iter().all(|b| *b == 0));
    let fresh = oid(C1, "z-new");
    commit(&*s, tx(|t| t.zero(&fresh, 10, 20))).await;
    assert_eq!(size(&*s, &fresh), 30);
    assert_eq!(read(&*s, &fresh, 0, 100).await, vec![0u8; 30]);
}

/// Truncate drops data past the new size and grows with zeros; data cut off
/// never reappears when the object grows again.
pub async fn truncate_shrinks_and_grows(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "t");
    commit(&*s, tx(|t| t.write(&o, 0, pattern(6, 10_000)))).await;
    commit(&*s, tx(|t| t.truncate(&o, 3_000))).await;
    assert_eq!(size(&*s, &o), 3_000);
    assert_eq!(read(&*s, &o, 0, 10_000).await, pattern(6, 3_000));
    commit(&*s, tx(|t| t.truncate(&o, 9_000))).await;
    assert_eq!(size(&*s, &o), 9_000);
    let got = read(&*s, &o, 0, 10_000).await;
    assert_eq!(got.len(), 9_000);
    assert_eq!(got[..3_000], pattern(6, 3_000)[..]);
    assert!(
        got[3_000..].iter().all(|b| *b == 0),
        "grown region not zero"
    );
    commit(&*s, tx(|t| t.truncate(&o, 0))).await;
    assert_eq!(size(&*s, &o), 0);
    let fresh = oid(C1, "t-new");
    commit(&*s, tx(|t| t.truncate(&fresh, 77))).await;
    assert_eq!(read(&*s, &fresh, 0, 100).await, vec![0u8; 77]);
}

/// Remove drops data, attributes and omap; removing a missing object is fine.
pub async fn remove_drops_everything(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "r");
    commit(
        &*s,
        txn(|t| {
            t.write(&o, 0, pattern(1, 5000))
                .set_attr(&o, "a", Bytes::from_static(b"1"))
                .omap_set(&o, vec![("k".into(), Bytes::from_static(b"v"))]);
        }),
    )
    .await;
    commit(&*s, tx(|t| t.remove(&o))).await;
    assert!(matches!(s.stat(&o), Err(StoreError::NotFound(_))));
    assert!(matches!(
        s.read(&o, 0, 1).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(ok(s.list_objects(C1), "list").is_empty());
    commit(&*s, tx(|t| t.remove(&o))).await;
    commit(&*s, tx(|t| t.touch(&o))).await;
    assert_eq!(size(&*s, &o), 0);
    assert!(ok(s.get_attrs(&o), "attrs").is_empty());
    assert!(ok(s.omap_list(&o, None, 10), "omap").is_empty());
    commit(&*s, tx(|t| t.write(&o, 100, pattern(2, 10)))).await;
    assert_eq!(read(&*s, &o, 0, 100).await, vec![0u8; 100]);
}

/// Names with separators, dots, escapes, non-ASCII and great length work.
pub async fn awkward_names_round_trip(h: &mut dyn Harness) {
    let s = h.open();
    let long_a = "n".repeat(1000);
    let long_b = format!("{}m", "n".repeat(999));
    let names: Vec<String> = [
        "a/b",
        "../up",
        ".",
        "..",
        "with space",
        "ünï∂",
        "%41",
        "~x",
        "A",
    ]
    .iter()
    .map(|n| n.to_string())
    .chain([long_a, long_b])
    .collect();
    commit(
        &*s,
        txn(|t| {
            for (i, n) in names.iter().enumerate() {
                t.write(&oid(C1, n), 0, pattern(i as u8, 100 + i));
            }
        }),
    )
    .await;
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            read(&*s, &oid(C1, n), 0, 1000).await,
            pattern(i as u8, 100 + i),
            "{n}"
        );
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(ok(s.list_objects(C1), "list"), sorted);
    commit(&*s, tx(|t| t.remove(&oid(C1, "a/b")))).await;
    assert_eq!(read(&*s, &oid(C1, "A"), 0, 1000).await, pattern(8, 108));
}

/// Objects may be sparse up to MAX_OBJECT_SIZE without storing the holes.
pub async fn huge_sparse_object(h: &mut dyn Harness) {
    let s = h.open();
    let o = oid(C1, "huge");
    commit(&*s, tx(|t| t.truncate(&o, MAX_OBJECT_SIZE))).await;
    assert_eq!(size(&*s, &o), MAX_OBJECT_SIZE);
    assert_eq!(read(&*s, &o, MAX_OBJECT_SIZE / 2, 64).await, vec![0u8; 64]);
    commit(&*s, tx(|t| t.write(&o, MAX_OBJECT_SIZE - 4, pattern(1, 4)))).await;
    assert_eq!(
        read(&*s, &o, MAX_OBJECT_SIZE - 8, 100).await,
        [&[0u8; 4][..], &pattern(1, 4)].concat()
    );
    commit(&*s, tx(|t| t.remove(&o))).await;
}
