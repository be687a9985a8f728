//! A deterministic random workload shared by the FileStore tests, and a
//! model of its effect built on MemStore.
#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use cairn_store::conformance::{dump, first_difference};
use cairn_store::memstore::MemStore;
use cairn_store::{Collection, ObjectId, ObjectStore, PgId, Transaction, Version};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Collection whose attribute `seq` records the index of the last transaction.
pub const META: Collection = PgId::new(0, 0);
pub const SEQ_KEY: &str = "seq";
const COLLS: [Collection; 2] = [PgId::new(1, 0), PgId::new(1, 0x1f)];
const NAMES: [&str; 6] = ["a", "b", "dir/c", "..", "rbd_data.1.000", "e"];

/// The transactions of a workload, in order.
pub struct Workload {
    rng: SmallRng,
    next: u64,
}

impl Workload {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: SmallRng::seed_from_u64(seed),
            next: 0,
        }
    }

    /// Index of the transaction `next_txn` returns next.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// The next transaction: one to three random ops on a few small objects,
    /// plus `seq` = its index in META.
    pub fn next_txn(&mut self) -> Transaction {
        let i = self.next;
        self.next += 1;
        let rng = &mut self.rng;
        let mut t = Transaction::new();
        for _ in 0..rng.gen_range(1..=3) {
            let coll = COLLS[rng.gen_range(0..COLLS.len())];
            let oid = ObjectId::new(coll, NAMES[rng.gen_range(0..NAMES.len())]);
            match rng.gen_range(0..100) {
                0..=44 => {
                    let len = rng.gen_range(1..8192usize);
                    let fill = rng.gen::<u8>();
                    let data: Vec<u8> = (0..len).map(|j| fill.wrapping_add(j as u8)).collect();
                    t.write(&oid, rng.gen_range(0..48 * 1024), Bytes::from(data));
                }
                45..=54 => {
                    t.truncate(&oid, rng.gen_range(0..64 * 1024));
                }
                55..=61 => {
                    t.zero(
                        &oid,
                        rng.gen_range(0..48 * 1024),
                        rng.gen_range(1..16 * 1024),
                    );
                }
                62..=67 => {
                    t.remove(&oid);
                }
                68..=79 => {
                    let key = format!("k{}", rng.gen_range(0..8));
                    t.omap_set(&oid, vec![(key, Bytes::from(i.to_le_bytes().to_vec()))]);
                }
                80..=84 => {
                    t.omap_rm(&oid, vec![format!("k{}", rng.gen_range(0..8))]);
                }
                85..=89 => {
                    t.set_attr(&oid, "_", Bytes::from(vec![rng.gen(); 20]));
                }
                90..=96 => {
                    t.log_append(coll, Version::new(1, i), Bytes::from(vec![7; 30]));
                }
                _ => {
                    t.log_trim(coll, Version::new(1, i.saturating_sub(50)));
                }
            }
        }
        t.coll_set_attr(META, SEQ_KEY, Bytes::from(i.to_le_bytes().to_vec()));
        t
    }
}

/// How many workload transactions a store holds, from its `seq` attribute.
pub fn applied_count(store: &dyn ObjectStore) -> u64 {
    match store.coll_get_attr(META, SEQ_KEY) {
        Ok(Some(v)) => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&v);
            u64::from_le_bytes(b) + 1
        }
        Ok(None) => 0,
        Err(e) => panic!("reading seq: {e}"),
    }
}

/// A MemStore holding the first `count` transactions of the workload `seed`.
pub fn model(seed: u64, count: u64) -> Arc<MemStore> {
    let store = Arc::new(MemStore::new());
    let mut w = Workload::new(seed);
    for _ in 0..count {
        if let Err(e) = store.submit(w.next_txn()) {
            panic!("model submit: {e}");
        }
    }
    store
}

/// Panic unless `store` holds exactly the first `count` workload transactions.
pub async fn assert_matches_model(store: &dyn ObjectStore, seed: u64, count: u64) {
    let want = model(seed, count);
    let got = dump(store, &[SEQ_KEY])
        .await
        .unwrap_or_else(|e| panic!("dump: {e}"));
    let want = dump(&*want, &[SEQ_KEY])
        .await
        .unwrap_or_else(|e| panic!("dump: {e}"));
    if let Some(diff) = first_difference(&want, &got) {
        panic!("store differs from the model after {count} transactions: {diff}");
    }
}
