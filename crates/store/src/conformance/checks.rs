//! The conformance checks. Each opens a fresh store from its harness and
//! panics with a message naming the deviation.

use std::collections::BTreeMap;
use std::fmt::Debug;

use bytes::Bytes;

use super::{apply, dump, first_difference, Harness};
use crate::{
    Collection, ObjectId, ObjectStore, PgId, StoreError, Transaction, Version, MAX_OBJECT_SIZE,
};

const C1: Collection = PgId::new(1, 0x1a);
const C2: Collection = PgId::new(2, 0);

fn ok<T, E: Debug>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{what}: unexpected error {e:?}"),
    }
}

fn oid(coll: Collection, name: &str) -> ObjectId {
    ObjectId::new(coll, name)
}

fn txn(build: impl FnOnce(&mut Transaction)) -> Transaction {
    let mut t = Transaction::new();
    build(&mut t);
    t
}

/// A transaction built by one chain of builder calls.
fn tx(build: impl FnOnce(&mut Transaction) -> &mut Transaction) -> Transaction {
    let mut t = Transaction::new();
    build(&mut t);
    t
}

async fn commit(store: &dyn ObjectStore, t: Transaction) {
    ok(apply(store, t).await, "transaction");
}

async fn read(store: &dyn ObjectStore, o: &ObjectId, offset: u64, len: u64) -> Vec<u8> {
    ok(
        store.read(o, offset, len).await,
        &format!("read {o} {offset}+{len}"),
    )
}

fn pattern(seed: u8, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| seed.wrapping_add((i % 251) as u8))
            .collect::<Vec<u8>>(),
    )
}

fn size(store: &dyn ObjectStore, o: &ObjectId) -> u64 {
    ok(store.stat(o), &format!("stat {o}")).size
}

fn keys(list: &[(String, Vec<u8>)]) -> Vec<&str> {
    list.iter().map(|(k, _)| k.as_str()).collect()
}

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
    assert!(after.used_bytes >= before.used_bytes + 50_000);
    assert!(after.total_bytes >= after.used_bytes);
    commit(&*s, tx(|t| t.remove(&oid(C1, "o0")).remove_collection(C2))).await;
    let last = ok(s.statfs(), "statfs");
    assert_eq!(last.objects, 4);
    assert!(last.used_bytes < after.used_bytes);
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
