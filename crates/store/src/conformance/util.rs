//! Helpers shared by the conformance checks.

pub(super) use std::collections::BTreeMap;
use std::fmt::Debug;

pub(super) use bytes::Bytes;

pub(super) use super::{apply, dump, first_difference, Harness};
pub(super) use crate::{
    Collection, ObjectId, ObjectStore, PgId, StoreError, Transaction, Version, MAX_OBJECT_SIZE,
};

pub(super) const C1: Collection = PgId::new(1, 0x1a);
pub(super) const C2: Collection = PgId::new(2, 0);

pub(super) fn ok<T, E: Debug>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{what}: unexpected error {e:?}"),
    }
}

pub(super) fn oid(coll: Collection, name: &str) -> ObjectId {
    ObjectId::new(coll, name)
}

pub(super) fn txn(build: impl FnOnce(&mut Transaction)) -> Transaction {
    let mut t = Transaction::new();
    build(&mut t);
    t
}

/// A transaction built by one chain of builder calls.
pub(super) fn tx(build: impl FnOnce(&mut Transaction) -> &mut Transaction) -> Transaction {
    let mut t = Transaction::new();
    build(&mut t);
    t
}

pub(super) async fn commit(store: &dyn ObjectStore, t: Transaction) {
    ok(apply(store, t).await, "transaction");
}

pub(super) async fn read(store: &dyn ObjectStore, o: &ObjectId, offset: u64, len: u64) -> Vec<u8> {
    ok(
        store.read(o, offset, len).await.map(|b| b.to_vec()),
        &format!("read {o} {offset}+{len}"),
    )
}

pub(super) fn pattern(seed: u8, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| seed.wrapping_add((i % 251) as u8))
            .collect::<Vec<u8>>(),
    )
}

pub(super) fn size(store: &dyn ObjectStore, o: &ObjectId) -> u64 {
    ok(store.stat(o), &format!("stat {o}")).size
}

pub(super) fn keys(list: &[(String, Vec<u8>)]) -> Vec<&str> {
    list.iter().map(|(k, _)| k.as_str()).collect()
}
